package coldstart

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/httpscale/httpscale/pkg/admin"
)

// finish records the cold start as it stands and forgets it; later calls do nothing. With readCtx
// (nil: no read) the pod the held requests went to is read once more when it had not started its
// containers when it was first read. The pod's own steps come from the API server, to the second.
func (c *ColdStart) finish(readCtx context.Context, pods map[string]*corev1.Pod) {
	t := c.t
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	c.finished = true
	podName := c.pod
	c.mu.Unlock()

	if podName != "" && t.opts.Pods != nil {
		pod := pods[podName]
		if readCtx != nil && (pod == nil || containersStarted(pod).IsZero()) {
			ctx, cancel := context.WithTimeout(readCtx, podReadTimeout)
			if p, err := t.opts.Pods.Pod(ctx, c.app.Target.Namespace, podName); err == nil {
				pod = p
			}
			cancel()
		}
		if pod != nil {
			c.podSteps(pod)
		}
	}

	c.mu.Lock()
	rec := admin.ColdStart{App: c.app.Key, Interceptor: t.opts.Name, Pod: c.pod, Probe: c.probe, Steps: slices.Clone(c.steps)}
	switch {
	case c.forwarded:
		rec.Outcome = admin.OutcomeForwarded
	case c.timedOut:
		rec.Outcome = admin.OutcomeTimedOut
	case !c.everHeld && (c.hasStep(admin.StepEndpointReady) || c.hasStep(admin.StepAppAnswered)):
		rec.Outcome = admin.OutcomeReady
	default:
		rec.Outcome = admin.OutcomeAbandoned
	}
	c.mu.Unlock()
	// Held stays first; the rest in time order (a time kept to the second may come out up to a
	// second early, even before Held).
	slices.SortStableFunc(rec.Steps[1:], func(a, b admin.ColdStartStep) int { return a.At.Compare(b.At) })

	t.mu.Lock()
	if t.active[c.app.Key] == c {
		delete(t.active, c.app.Key)
	}
	t.record(rec)
	t.mu.Unlock()
	if c.followed {
		// Nothing follows the app's listing any more: its channels need not stay (a request held
		// later, or the next cold start, asks for new ones).
		t.prober.Unfollow(c.app.Target)
	}
	t.metrics.observe(rec)
	held := rec.Steps[0].At
	kv := []any{"app", rec.App, "outcome", rec.Outcome, "pod", rec.Pod, "probe", rec.Probe}
	for _, s := range rec.Steps[1:] {
		kv = append(kv, s.Name, s.At.Sub(held).Round(time.Millisecond).String())
	}
	t.opts.Log.V(1).Info("cold start", kv...)
}

// podSteps records pod's own steps, as the API server keeps them (to the second).
func (c *ColdStart) podSteps(pod *corev1.Pod) {
	c.addStep(admin.StepPodCreated, pod.CreationTimestamp.Time, true)
	if at := scheduled(pod); !at.IsZero() {
		c.addStep(admin.StepPodScheduled, at, true)
	}
	if at := containersStarted(pod); !at.IsZero() {
		c.addStep(admin.StepContainersStarted, at, true)
	}
}

// scheduled is when pod was bound to a node (its PodScheduled condition), zero when unknown.
func scheduled(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// containersStarted is when the last of pod's containers started, zero while one has not.
func containersStarted(pod *corev1.Pod) time.Time {
	var last time.Time
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) || len(pod.Spec.Containers) == 0 {
		return time.Time{}
	}
	for _, s := range pod.Status.ContainerStatuses {
		r := s.State.Running
		if r == nil {
			return time.Time{}
		}
		if r.StartedAt.After(last) {
			last = r.StartedAt.Time
		}
	}
	return last
}
