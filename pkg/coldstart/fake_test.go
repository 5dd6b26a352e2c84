package coldstart

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

// fakeEndpoints is an endpoints.Prober whose listings a test sets. It serves answered endpoints as
// the endpoint cache does (the cache's own tests and the envtest spec prove the cache).
type fakeEndpoints struct {
	mu         sync.Mutex
	keys       map[endpoints.ServiceKey]*fakeKey
	answered   []string // every Answered call that was accepted, "key addr"
	unfollowed map[endpoints.ServiceKey]int
}

type fakeKey struct {
	l        endpoints.Listing
	changed  chan struct{}
	answered map[string]endpoints.Endpoint
}

func newFakeEndpoints() *fakeEndpoints {
	return &fakeEndpoints{keys: map[endpoints.ServiceKey]*fakeKey{}}
}

func (f *fakeEndpoints) key(k endpoints.ServiceKey) *fakeKey {
	fk := f.keys[k]
	if fk == nil {
		fk = &fakeKey{changed: make(chan struct{})}
		fk.l.Changed = fk.changed
		f.keys[k] = fk
	}
	return fk
}

// list sets k's endpoints: ready ones and starting ones.
func (f *fakeEndpoints) list(k endpoints.ServiceKey, ready []endpoints.Endpoint, pending ...endpoints.Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fk := f.key(k)
	fk.l.Ready, fk.l.Pending = nil, pending
	if len(ready) > 0 {
		fk.l.Ready = &endpoints.Set{Key: k, Endpoints: ready}
		fk.answered = nil
		if fk.l.ReadyAt.IsZero() {
			fk.l.ReadyAt = time.Now()
		}
	} else {
		fk.l.ReadyAt = time.Time{}
	}
	switch {
	case len(ready) == 0 && len(pending) == 0:
		fk.l.ListedAt = time.Time{}
	case fk.l.ListedAt.IsZero():
		fk.l.ListedAt = time.Now()
	}
	f.republish(k, fk)
}

func (f *fakeEndpoints) republish(k endpoints.ServiceKey, fk *fakeKey) {
	fk.l.Answered = nil
	if fk.l.Ready == nil {
		var eps []endpoints.Endpoint
		for _, p := range fk.l.Pending {
			if _, ok := fk.answered[p.Addr()]; ok {
				eps = append(eps, p)
			}
		}
		if len(eps) > 0 {
			fk.l.Answered = &endpoints.Set{Key: k, Endpoints: eps, Probed: true}
		}
	}
	close(fk.changed)
	fk.changed = make(chan struct{})
	fk.l.Changed = fk.changed
}

func (f *fakeEndpoints) Listed(k endpoints.ServiceKey) endpoints.Listing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.key(k).l
}

func (f *fakeEndpoints) Answered(k endpoints.ServiceKey, ep endpoints.Endpoint) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fk := f.key(k)
	if fk.l.Ready != nil || !slices.ContainsFunc(fk.l.Pending, func(p endpoints.Endpoint) bool {
		return p.Addr() == ep.Addr() && p.Pod == ep.Pod && p.PodUID == ep.PodUID
	}) {
		return false
	}
	if fk.answered == nil {
		fk.answered = map[string]endpoints.Endpoint{}
	}
	fk.answered[ep.Addr()] = ep
	f.answered = append(f.answered, k.String()+" "+ep.Addr())
	f.republish(k, fk)
	return true
}

func (f *fakeEndpoints) Withdraw(k endpoints.ServiceKey, ep endpoints.Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fk := f.key(k)
	delete(fk.answered, ep.Addr())
	f.republish(k, fk)
}

// Unfollow counts the calls, by key.
func (f *fakeEndpoints) Unfollow(k endpoints.ServiceKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unfollowed == nil {
		f.unfollowed = map[endpoints.ServiceKey]int{}
	}
	f.unfollowed[k]++
}

func (f *fakeEndpoints) Ready(k endpoints.ServiceKey) *endpoints.Set {
	l := f.Listed(k)
	if l.Ready != nil {
		return l.Ready
	}
	return l.Answered
}

func (f *fakeEndpoints) WaitReady(ctx context.Context, k endpoints.ServiceKey) (*endpoints.Set, error) {
	for {
		l := f.Listed(k)
		if s := f.Ready(k); s != nil {
			return s, nil
		}
		select {
		case <-l.Changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakeEndpoints) accepted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.answered)
}

// fakePods serves pods by name.
type fakePods struct {
	mu    sync.Mutex
	pods  map[string]*corev1.Pod
	reads int
}

func (p *fakePods) Pod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	if pod := p.pods[namespace+"/"+name]; pod != nil {
		return pod.DeepCopy(), nil
	}
	return nil, fmt.Errorf("pods %q not found", name)
}

func (p *fakePods) add(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods == nil {
		p.pods = map[string]*corev1.Pod{}
	}
	p.pods[pod.Namespace+"/"+pod.Name] = pod
}

// appPod is a running pod at ip whose container "app" has an HTTP readiness probe on its port
// "http" (8000) at /ready.
func appPod(namespace, name, ip string, created time.Time) *corev1.Pod {
	ts := metav1.NewTime(created.Truncate(time.Second))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: ts},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
				PeriodSeconds: 10,
			},
		}}},
		Status: corev1.PodStatus{
			PodIP:      ip,
			PodIPs:     []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ts}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{
				Running: &corev1.ContainerStateRunning{StartedAt: ts}}}},
		},
	}
}

// endpointOf is pod's endpoint on port 8000.
func endpointOf(pod *corev1.Pod) endpoints.Endpoint {
	return endpoints.Endpoint{IP: pod.Status.PodIP, Port: 8000, Pod: pod.Name, PodUID: pod.UID}
}

// fakeNet answers dials by address: refused, hanging, or an HTTP server answering status (or a
// connection that is accepted and closed, for TCP). It records every address dialled.
type fakeNet struct {
	mu     sync.Mutex
	state  map[string]string // addr -> "up", "hang"; absent: refused
	status int
	dials  []string
	paths  []string
}

func (n *fakeNet) set(addr, state string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == nil {
		n.state = map[string]string{}
	}
	n.state[addr] = state
}

func (n *fakeNet) dialled() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.dials)
}

func (n *fakeNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.dials = append(n.dials, addr)
	state, status := n.state[addr], n.status
	n.mu.Unlock()
	if status == 0 {
		status = http.StatusOK
	}
	switch state {
	case "up":
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			req, err := http.ReadRequest(bufio.NewReader(server))
			if err != nil {
				return
			}
			n.mu.Lock()
			n.paths = append(n.paths, req.Host+" "+req.URL.Path)
			n.mu.Unlock()
			fmt.Fprintf(server, "HTTP/1.1 %d X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", status)
		}()
		return client, nil
	case "hang":
		client, server := net.Pipe()
		go func() {
			// Accept the connection and never answer: the prober must give up by itself.
			buf := make([]byte, 4096)
			for {
				if _, err := server.Read(buf); err != nil {
					server.Close()
					return
				}
			}
		}()
		return client, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.Join(syscall.ECONNREFUSED)}
}
