package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a binary this bench started; it is stopped by its PID only.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startProc(name, bin string, args []string) (*proc, error) {
	f, err := os.Create(filepath.Join(os.TempDir(), fmt.Sprintf("propagation-%s-%d.log", name, os.Getpid())))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, log: f.Name(), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// memory returns the process's resident set size, its anonymous and file-backed parts (the latter
// is mostly the binary's own pages) and its peak as "<rss> MiB (anon <a>, file <f>; peak <hwm>)".
func (p *proc) memory() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return "?"
	}
	s := string(b)
	mib := func(field string) float64 { return float64(statusKiB(s, field)) / 1024 }
	return fmt.Sprintf("%.0f MiB (anon %.0f, file %.0f; peak %.0f)", mib("VmRSS:"), mib("RssAnon:"), mib("RssFile:"), mib("VmHWM:"))
}

// statusKiB returns the kB value of a /proc/PID/status field ("VmRSS:"), -1 when absent.
func statusKiB(status, field string) int {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return -1
			}
			return kb
		}
	}
	return -1
}

// cpuTicks returns the user+system clock ticks the process used so far (/proc/PID/stat fields 14
// and 15, counted after the command name, which may hold spaces).
func (p *proc) cpuTicks() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return statTicks(string(b))
}

func statTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	return u + s, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
