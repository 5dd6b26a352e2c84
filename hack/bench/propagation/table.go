package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/pkg/routing"
)

// tableWatch records when each routing-table ConfigMap event was seen: the operator creates the new
// shard (after building and encoding the table), then updates the head.
type tableWatch struct {
	mu     sync.Mutex
	events []tableEvent
}

type tableEvent struct {
	at      time.Time
	typ     watch.EventType
	name    string
	version string // the head's version annotation
}

func (h *tableWatch) start(ctx context.Context, cs kubernetes.Interface) error {
	cms := cs.CoreV1().ConfigMaps(installNS)
	opts := metav1.ListOptions{LabelSelector: routing.LabelTable + "=" + routing.DefaultBaseName}
	w, err := cms.Watch(ctx, opts)
	if err != nil {
		return err
	}
	go func() {
		for {
			for ev := range w.ResultChan() {
				at := time.Now()
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				opts.ResourceVersion = cm.ResourceVersion
				h.mu.Lock()
				h.events = append(h.events, tableEvent{at: at, typ: ev.Type, name: cm.Name, version: cm.Annotations[routing.AnnotationVersion]})
				h.mu.Unlock()
			}
			// The API server ends watches after a while: watch again from the last version seen.
			for ctx.Err() == nil {
				if w, err = cms.Watch(ctx, opts); err == nil {
					break
				}
				opts.ResourceVersion = ""
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

// headVersion returns the head's last version seen.
func (h *tableWatch) headVersion() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.events) - 1; i >= 0; i-- {
		if e := h.events[i]; e.name == routing.DefaultBaseName && e.typ != watch.Deleted {
			return e.version
		}
	}
	return ""
}

// headWrites counts the head's writes seen from event index from on.
func (h *tableWatch) headWrites(from int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events[from:] {
		if e.name == routing.DefaultBaseName && e.typ != watch.Deleted {
			n++
		}
	}
	return n
}

func (h *tableWatch) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// after returns when, after t, the first new shard and the first head with a version other than
// prev were seen (ok false until the head was).
func (h *tableWatch) after(t time.Time, prev string) (shard, head time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if !e.at.After(t) {
			continue
		}
		switch {
		case e.name != routing.DefaultBaseName && e.typ == watch.Added && shard.IsZero():
			shard = e.at
		case e.name == routing.DefaultBaseName && e.typ != watch.Deleted && e.version != prev:
			return shard, e.at, true
		}
	}
	return shard, time.Time{}, false
}

// tableState maps every routing-table ConfigMap (head and shards) to its resourceVersion.
type tableState map[string]string

// readTableState lists the table's ConfigMaps' metadata (no data: 512 shards at 50,000 apps).
func readTableState(ctx context.Context, k8s client.Client) (tableState, error) {
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := k8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingLabels{routing.LabelTable: routing.DefaultBaseName}); err != nil {
		return nil, fmt.Errorf("listing the routing table's ConfigMaps: %w", err)
	}
	s := tableState{}
	for _, m := range list.Items {
		s[m.Name] = m.ResourceVersion
	}
	return s, nil
}

// tableDiff is what changed in the stored table between two states: shard ConfigMaps created,
// deleted, or rewritten under the same name (shards are immutable, so that should not happen), and
// whether the head was rewritten.
type tableDiff struct {
	created, deleted, rewritten int
	head                        bool
	shards                      int // shard ConfigMaps in the later state
}

func diffTable(before, after tableState) tableDiff {
	var d tableDiff
	for name, rv := range after {
		was, ok := before[name]
		switch {
		case name == routing.DefaultBaseName:
			d.head = !ok || was != rv
			continue
		case !ok:
			d.created++
		case was != rv:
			d.rewritten++
		}
		d.shards++
	}
	for name := range before {
		if _, ok := after[name]; !ok && name != routing.DefaultBaseName {
			d.deleted++
		}
	}
	return d
}

// String is "+created -deleted", with "~rewritten" when any and "head" when the head was rewritten.
func (d tableDiff) String() string {
	s := fmt.Sprintf("+%d -%d", d.created, d.deleted)
	if d.rewritten > 0 {
		s += fmt.Sprintf(" ~%d", d.rewritten)
	}
	if d.head {
		s += " head"
	}
	return s
}
