package controller_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

// burstEnv sets the size of the burst; the default keeps `make test` fast, the benchmark in
// docs/benchmarks/operator.md sets it to 10000.
const burstEnv = "HTTPSCALE_OPERATOR_BURST"

var _ = Describe("A burst of new objects", func() {
	It("is coalesced into a handful of routing-table writes", func() {
		n := 200
		if v := os.Getenv(burstEnv); v != "" {
			var err error
			n, err = strconv.Atoi(v)
			Expect(err).NotTo(HaveOccurred(), burstEnv)
		}
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		deleteObjectsAfterSpec(ns)
		createService(ns, "burst")
		createDeployment(ns, "burst")
		tables0, writes0 := op.writer.Tables.Load(), op.writer.Writes.Load()

		start := time.Now()
		work := make(chan int)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				defer GinkgoRecover()
				for i := range work {
					// Hosts of this namespace only: another spec's objects (the burst-delete spec's are
					// app-NNNNN too) keep their hosts claimed for the claim retention after they are gone,
					// and objects refused their hosts until then are routed one by one as the claims are
					// released, a trickle rather than a burst.
					h := hso(ns, fmt.Sprintf("app-%05d", i), fmt.Sprintf("app-%05d.%s.example.com", i, ns))
					h.Spec.ScaleTargetRef.Name, h.Spec.ScaleTargetRef.Service = "burst", "burst"
					Expect(k8s.Create(ctx, h)).To(Succeed())
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		created := time.Since(start)

		want := sets.New[string]()
		for i := range n {
			want.Insert(fmt.Sprintf("%s/app-%05d", ns, i))
		}
		Eventually(func() int {
			t, err := readTable(ctx)
			if err != nil {
				return 0
			}
			have := 0
			for k := range want {
				if _, ok := t.Lookup(k); ok {
					have++
				}
			}
			return have
		}).WithTimeout(time.Duration(max(60, n/8)) * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(n))
		routed := time.Since(start)
		tables, writes := op.writer.Tables.Load()-tables0, op.writer.Writes.Load()-writes0
		t, err := readTable(ctx)
		Expect(err).NotTo(HaveOccurred())

		report := fmt.Sprintf("burst of %d objects: created in %s, all routed after %s, %d table versions written, %d ConfigMap writes, table of %d entries",
			n, created.Round(time.Millisecond), routed.Round(time.Millisecond), tables, writes, t.Len())
		AddReportEntry("burst", report)
		fmt.Fprintln(GinkgoWriter, report)
		if os.Getenv(burstEnv) != "" {
			fmt.Fprintln(os.Stderr, report)
		}
		// The first change at once (the writer was idle), one version per MaxDelay (2s) of the burst, plus
		// the last one; far fewer than one per object.
		maxTables := int64(routed/(2*time.Second)) + 3
		Expect(tables).To(BeNumerically("<=", maxTables), report)
		Expect(tables).To(BeNumerically("<", n/10), report)
	})
})
