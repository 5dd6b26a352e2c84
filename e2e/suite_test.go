//go:build e2e

// Package e2e is httpscale's end-to-end suite: a local control plane (kube-apiserver, controller-manager,
// scheduler, KEDA's operator and metrics adapter as processes inside a network namespace) with two real
// nodes (kubelet, containerd, runc; zone-a and zone-b) next to kwok's fake ones, and httpscale installed
// from charts/httpscale as real pods of the images hack/images builds from this tree; the sample app
// runs as real pods of its own image (see docs/local-cluster.md). Run it with `make e2e` (root).
package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

var f *framework.Framework

// faultsEnv set to 1 runs the specs labelled "fault" (the fault scenarios of fault_*_test.go: an
// API server outage, a node lost, the operator leader killed in a burst, an interceptor killed, KEDA
// away, a scaler replica lost); without it they are skipped. Each has passed in focused runs; they
// join make test once they have passed in a whole run of the suite.
const faultsEnv = "HTTPSCALE_E2E_FAULTS"

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	suite, reporter := GinkgoConfiguration()
	if os.Getenv(faultsEnv) != "1" {
		if suite.LabelFilter == "" {
			suite.LabelFilter = "!fault"
		} else {
			suite.LabelFilter = "(" + suite.LabelFilter + ") && !fault"
		}
	}
	RunSpecs(t, "httpscale e2e", suite, reporter)
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

var _ = AfterSuite(func(ctx SpecContext) {
	// Stop even when the uninstall check fails.
	defer func() { Expect(f.Stop(GinkgoWriter)).To(Succeed()) }()
	if f.Stopping() {
		By("helm uninstall leaves only what docs/install.md says it leaves")
		expectUninstallLeaves(ctx)
	}
})

// expectUninstallLeaves runs `helm uninstall` (last, on a cluster about to be stopped) and checks that
// of everything in the install namespace and everything cluster-scoped the chart made, only what
// docs/install.md ("Uninstalling") lists remains: the CRD, the operator's Leases and routing-table
// ConfigMaps (and what Kubernetes itself puts in every namespace).
func expectUninstallLeaves(ctx context.Context) {
	GinkgoHelper()
	_, err := f.Cluster.HelmRun(ctx, GinkgoWriter, "uninstall", localcluster.Release, "-n", localcluster.Namespace, "--wait", "--timeout=3m")
	Expect(err).NotTo(HaveOccurred())
	// The pods go once they have drained (the interceptors' drain delay and in-flight requests).
	Eventually(func(g Gomega) {
		left, err := f.Cluster.KubectlRun(ctx, "", "get", "-n", localcluster.Namespace, "-o", "name",
			"deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,roles,rolebindings,leases.coordination.k8s.io,poddisruptionbudgets")
		g.Expect(err).NotTo(HaveOccurred())
		var unexpected []string
		for _, o := range strings.Fields(left) {
			switch {
			case o == "serviceaccount/default", o == "configmap/kube-root-ca.crt": // every namespace has them
			case o == "lease.coordination.k8s.io/operator.httpscale.dev", o == "lease.coordination.k8s.io/default.fleet.httpscale.dev":
			case strings.HasPrefix(o, "configmap/httpscale-routing-table"):
			default:
				unexpected = append(unexpected, o)
			}
		}
		g.Expect(unexpected).To(BeEmpty(), "left in %s after helm uninstall", localcluster.Namespace)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	cluster, err := f.Cluster.KubectlRun(ctx, "", "get", "-o", "name", "-l", "app.kubernetes.io/instance="+localcluster.Release,
		"clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.Fields(cluster)).To(BeEmpty(), "cluster-scoped objects of the release left")
	webhook, _ := f.Cluster.KubectlRun(ctx, "", "get", "validatingwebhookconfiguration", "httpscale-operator-webhook", "-o", "name", "--ignore-not-found")
	Expect(webhook).To(BeEmpty())
	_, err = f.Cluster.KubectlRun(ctx, "", "get", "crd", "httpscaledobjects.httpscale.dev")
	Expect(err).NotTo(HaveOccurred(), "the CRD stays (Helm never deletes CRDs)")
}
