// Package ginkgoenv shares one envtest API server (see package testenv) among a Ginkgo suite's
// specs. It is apart from testenv because importing Ginkgo registers its flags on the command line,
// which the benchmark programs that use testenv must not get.
package ginkgoenv

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// Suite is the API server one Ginkgo suite's specs share; ForSuite registers its start and stop.
// Env is set, and NewNamespace works, once the suite's BeforeSuite ran.
type Suite struct {
	Env    *envtest.Environment
	client client.Client
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
		s.client, err = client.New(cfg, client.Options{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
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

// NewNamespace creates a namespace of its own for one spec (see the function NewNamespace).
func (s *Suite) NewNamespace(ctx context.Context, prefix string) string {
	ginkgo.GinkgoHelper()
	return NewNamespace(ctx, s.client, prefix)
}

// NewNamespace creates a namespace of its own for one spec, named prefix and a random suffix, and
// returns its name. Specs in namespaces of their own do not see each other's objects; the API server
// of envtest runs no namespace controller, so the namespaces stay until the suite's server stops.
func NewNamespace(ctx context.Context, c client.Client, prefix string) string {
	ginkgo.GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	gomega.Expect(c.Create(ctx, ns)).To(gomega.Succeed())
	return ns.Name
}
