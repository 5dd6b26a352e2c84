package main

import (
	"fmt"
	"image/color"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series groups samples by process (component/name), in the order first seen.
func series(samples []sample) (keys []string, by map[string][]sample) {
	by = map[string][]sample{}
	for _, s := range samples {
		k := s.component + "/" + s.name
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], s)
	}
	return keys, by
}

// plotSamples draws resident memory, goroutines and open file descriptors of every process over
// time (minutes since start), one panel each, one line per process, into a PNG.
func plotSamples(path string, samples []sample, start time.Time) error {
	keys, by := series(samples)
	panels := []struct {
		title string
		value func(sample) float64
	}{
		{"resident memory (MiB)", func(s sample) float64 { return s.rssMiB }},
		{"goroutines", func(s sample) float64 { return s.goroutines }},
		{"open file descriptors", func(s sample) float64 { return s.fds }},
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minutes since the start"
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(7)
		for j, k := range keys {
			var xys plotter.XYs
			for _, s := range by[k] {
				if v := pn.value(s); v >= 0 {
					xys = append(xys, plotter.XY{X: s.at.Sub(start).Minutes(), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(j)
			l.Dashes = plotutil.Dashes(j / len(plotutil.DefaultColors))
			p.Add(l)
			p.Legend.Add(shortName(k), l)
		}
		p.Add(plotter.NewGrid())
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.New(vg.Points(900), vg.Points(1100))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	canvases := plot.Align(plots, draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

// shortName drops the pod-template hash from a pod name: "interceptor/httpscale-interceptor-6d4-xk2"
// becomes "interceptor …xk2".
func shortName(key string) string {
	comp, name, _ := strings.Cut(key, "/")
	if i := strings.LastIndexByte(name, '-'); i >= 0 && comp != name {
		return comp + " …" + name[i+1:]
	}
	return comp
}

// summarize reports the requests and, per process, its figures after the warm-up: first, last and
// largest, and the resident memory's least-squares slope.
func summarize(samples []sample, r results, warmup time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %s from %s to %s UTC\n", r.end.Sub(r.start).Round(time.Second), r.start.UTC().Format("15:04"), r.end.UTC().Format("15:04"))
	kinds := map[string][2]int{}
	var names []string
	for _, q := range r.reqs {
		c, ok := kinds[q.kind]
		if !ok {
			names = append(names, q.kind)
		}
		c[0]++
		if !q.ok() {
			c[1]++
		}
		kinds[q.kind] = c
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "requests %-7s %7d, failed %d\n", k, kinds[k][0], kinds[k][1])
	}
	keys, by := series(samples)
	fmt.Fprintf(&b, "%-34s %7s %7s %7s %9s  %-17s %-17s %s\n", "process (after the warm-up)", "RSS MiB", "last", "max", "MiB/hour", "goroutines f/l/max", "fds f/l/max", "restarts, table versions")
	for _, k := range keys {
		var kept []sample
		for _, s := range by[k] {
			if s.at.Sub(r.start) >= warmup {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			continue
		}
		first, last := kept[0], kept[len(kept)-1]
		maxRSS, maxG, maxF := 0.0, 0.0, 0.0
		versions := map[string]bool{}
		for _, s := range kept {
			maxRSS, maxG, maxF = max(maxRSS, s.rssMiB), max(maxG, s.goroutines), max(maxF, s.fds)
			if s.table != "" {
				versions[s.table] = true
			}
		}
		g := "-"
		if first.goroutines >= 0 {
			g = fmt.Sprintf("%.0f/%.0f/%.0f", first.goroutines, last.goroutines, maxG)
		}
		fmt.Fprintf(&b, "%-34s %7.1f %7.1f %7.1f %9.2f  %-17s %-17s %d, %d\n", shortName(k), first.rssMiB, last.rssMiB, maxRSS, slope(kept),
			g, fmt.Sprintf("%.0f/%.0f/%.0f", first.fds, last.fds, maxF), last.restarts-first.restarts, len(versions))
	}
	return b.String()
}

// slope is the least-squares slope of resident memory against time, in MiB per hour.
func slope(s []sample) float64 {
	if len(s) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	n := float64(len(s))
	for _, p := range s {
		x := p.at.Sub(s[0].at).Hours()
		sx, sy, sxx, sxy = sx+x, sy+p.rssMiB, sxx+x*x, sxy+x*p.rssMiB
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}
