//go:build e2e

// Package e2e is httpscale's end-to-end suite: a local control plane (kube-apiserver, controller-manager,
// scheduler, KEDA's operator and metrics adapter as processes inside a network namespace) with two real
// nodes (kubelet, containerd, runc; zone-a and zone-b) next to kwok's fake ones, and httpscale installed
// from charts/httpscale as real pods of the images hack/images builds from this tree; the sample app
// runs as real pods of its own image (see docs/local-cluster.md). Run it with `make e2e` (root).
package e2e

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/e2e/framework"
)

var f *framework.Framework

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "httpscale e2e")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	f, err = framework.Start(ctx, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
}, NodeTimeout(55*time.Minute))

var _ = ReportAfterSuite("component logs on failure", func(r Report) {
	if !r.SuiteSucceeded && f != nil {
		f.DumpLogs(os.Stdout)
	}
})

var _ = AfterSuite(func() {
	Expect(f.Stop(GinkgoWriter)).To(Succeed())
})
