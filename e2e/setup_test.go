//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
)

// scenarioEnv is what the specs of one Ordered scenario share, filled in by the BeforeAll that
// setUpScenario registers: the installation, the scenario's own namespace and its host.
type scenarioEnv struct {
	h    *framework.HTTPScale
	ns   string
	host string // <ns>.example unless a set-up step changes it
}

// setUpScenario registers, in the Ordered container it is called from, a BeforeAll that makes the
// scenario's namespace (see scenario) and then runs steps in order, and returns the environment
// that BeforeAll fills in for the specs.
func setUpScenario(prefix string, steps ...func(ctx SpecContext, e *scenarioEnv)) *scenarioEnv {
	e := &scenarioEnv{}
	BeforeAll(func(ctx SpecContext) {
		e.h, e.ns, e.host = scenario(ctx, prefix)
		for _, step := range steps {
			step(ctx, e)
		}
	})
	return e
}

// hostApp is a set-up step that creates the sample app name with the given replicas, routed on the
// scenario's host (see routedApp), with mods applied to its HTTPScaledObject's spec.
func hostApp(name string, replicas int32, mods ...func(*httpscalev1alpha1.HTTPScaledObjectSpec)) func(SpecContext, *scenarioEnv) {
	return func(ctx SpecContext, e *scenarioEnv) {
		routedApp(ctx, e.ns, name, replicas, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(e.host)}
			for _, m := range mods {
				m(s)
			}
		})
	}
}

// scaledownAfter sets an HTTPScaledObject's scaledown period.
func scaledownAfter(d time.Duration) func(*httpscalev1alpha1.HTTPScaledObjectSpec) {
	return func(s *httpscalev1alpha1.HTTPScaledObjectSpec) { s.ScaledownPeriod = ptr.To(int32(d.Seconds())) }
}

// concurrencyTarget scales an HTTPScaledObject on concurrency, target requests in flight per replica.
func concurrencyTarget(target int32) func(*httpscalev1alpha1.HTTPScaledObjectSpec) {
	return func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.ScalingMetric = &httpscalev1alpha1.ScalingMetric{Concurrency: &httpscalev1alpha1.ConcurrencyMetric{TargetValue: target}}
	}
}
