package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

var _ = Describe("An operator limited to some namespaces", func() {
	It("routes and scales only the objects in those namespaces", func() {
		watched, other := ginkgoenv.NewNamespace(context.Background(), k8s, "app-"), ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		// One writer of the table at a time: the suite's operator steps aside for this spec.
		op.stop()
		DeferCleanup(func() { op = startOperator(defaultOptions()) })
		o := defaultOptions()
		o.WatchNamespaces = []string{watched}
		scoped := startOperatorAs(restCfg, o, false)
		DeferCleanup(scoped.stop)

		in := app(watched, "in", "in."+watched+".example.com")
		Expect(k8s.Create(ctx, in)).To(Succeed())
		out := app(other, "out", "out."+other+".example.com")
		Expect(k8s.Create(ctx, out)).To(Succeed())

		Eventually(entryOf(watched+"/in"), time.Minute).ShouldNot(BeNil())
		Eventually(scaledObject(in)).ShouldNot(BeNil())
		Consistently(scaledObject(out)).Should(BeNil())
		Expect(tableEntry(other + "/out")).To(BeNil())
		Expect(current(out).Finalizers).To(BeEmpty())
		Expect(current(out).Status.Conditions).To(BeEmpty())
	})
})
