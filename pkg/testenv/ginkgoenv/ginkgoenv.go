// Package ginkgoenv shares one envtest API server (see package testenv) among a Ginkgo suite's
// specs. It is apart from testenv because importing Ginkgo registers its flags on the command line,
// which the benchmark programs that use testenv must not get.
package ginkgoenv

import (
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// Suite is the API server one Ginkgo suite's specs share; ForSuite registers its start and stop.
// Env is set once the suite's BeforeSuite ran.
type Suite struct {
	Env *envtest.Environment
}

// ForSuite registers a BeforeSuite that starts an environment (see testenv.Start) and then calls then, when
// set, with its config (to build the suite's clients), and an AfterSuite that stops it. Call it
// once, at package level: var suite = ginkgoenv.ForSuite(...).
func ForSuite(then func(cfg *rest.Config)) *Suite {
	s := &Suite{}
	ginkgo.BeforeSuite(func() {
		env, cfg, err := testenv.Start()
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		s.Env = env
		if then != nil {
			then(cfg)
		}
	})
	ginkgo.AfterSuite(func() {
		if s.Env != nil {
			gomega.Expect(s.Env.Stop()).To(gomega.Succeed())
		}
	})
	return s
}
