package controller_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/controller"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

const (
	True  = metav1.ConditionTrue
	False = metav1.ConditionFalse
)

var ctx = context.Background()

// scaledObject returns a function for Eventually yielding the ScaledObject next to h (nil if absent).
func scaledObject(h *v1.HTTPScaledObject) func() *kedav1alpha1.ScaledObject {
	return func() *kedav1alpha1.ScaledObject {
		so := &kedav1alpha1.ScaledObject{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(h), so); err != nil {
			return nil
		}
		return so
	}
}

// eventWait bounds the wait for an event. Events go through client-go's rate-limited event sink:
// after a spec that created 200 objects, an event waited 33 s there (client-side throttling).
const eventWait = 2 * time.Minute

// events returns "Type Reason" of every event about h.
func events(h *v1.HTTPScaledObject) func() []string {
	return func() []string {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(h.Namespace)); err != nil {
			return nil
		}
		var out []string
		for _, e := range list.Items {
			if e.Regarding.Name == h.Name && e.Regarding.Kind == "HTTPScaledObject" {
				out = append(out, e.Type+" "+e.Reason)
			}
		}
		return out
	}
}

func entryOf(key string) func() *routing.Entry {
	return func() *routing.Entry { return tableEntry(key) }
}

func tableVersion() string {
	GinkgoHelper()
	t, err := readTable(ctx)
	Expect(err).NotTo(HaveOccurred())
	return t.Version()
}

func update(h *v1.HTTPScaledObject, mutate func(*v1.HTTPScaledObject)) {
	GinkgoHelper()
	Eventually(func() error {
		cur := &v1.HTTPScaledObject{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
			return err
		}
		mutate(cur)
		return k8s.Update(ctx, cur)
	}).Should(Succeed())
}

var _ = Describe("An HTTPScaledObject", func() {
	var ns string
	BeforeEach(func() { ns = ginkgoenv.NewNamespace(context.Background(), k8s, "app-") })

	It("is routed with everything the interceptor needs and gets a ScaledObject, a finalizer and status", func() {
		svc := createService(ns, "shop", corev1.ServicePort{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080), AppProtocol: ptr.To("kubernetes.io/h2c")})
		createDeployment(ns, "shop")
		h := hso(ns, "shop", "shop."+ns+".example.com")
		h.Spec.ScaleTargetRef.Port = nil
		h.Spec.ScaleTargetRef.PortName = ptr.To("web")
		h.Spec.PathPrefixes = []v1.PathPrefix{"/api"}
		h.Spec.Headers = []v1.HeaderMatch{{Name: "X-Tenant", Value: ptr.To("blue")}}
		h.Spec.Timeouts = &v1.Timeouts{Readiness: ptr.To(v1.Duration("20s")), ResponseHeader: ptr.To(v1.Duration("1500ms"))}
		h.Spec.ColdStart = &v1.ColdStart{QueueLimit: ptr.To[int32](50), Placeholder: &v1.Placeholder{Body: "warming up"},
			WaitingPage: &v1.WaitingPage{Enabled: true, HTML: "<p>opening</p>"}}
		h.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](7)}
		h.Spec.ScaledownPeriod = ptr.To[int32](60)
		h.Spec.ScalingMetric = &v1.ScalingMetric{
			Concurrency: &v1.ConcurrencyMetric{TargetValue: 20},
			RequestRate: &v1.RequestRateMetric{TargetValue: 50, Window: "2m", Granularity: "5s"},
		}
		Expect(k8s.Create(ctx, h)).To(Succeed())
		key := ns + "/shop"

		By("writing a routing entry that needs no other object to route")
		Eventually(entryOf(key)).ShouldNot(BeNil())
		Expect(*tableEntry(key)).To(Equal(routing.Entry{
			Namespace: ns, Name: "shop", Generation: 1,
			Hosts: []string{"shop." + ns + ".example.com"}, PathPrefixes: []string{"/api"},
			Headers: []routing.HeaderMatch{{Name: "X-Tenant", Value: ptr.To("blue")}},
			Service: "shop", Port: 80, PortName: "web", TargetPort: 8080, Protocol: routing.ProtocolH2C,
			ClusterIP: svc.Spec.ClusterIP, // read from the API: the interceptors never resolve a tenant's name
			Timeouts:  routing.Timeouts{Readiness: 20 * time.Second, ResponseHeader: 1500 * time.Millisecond},
			ColdStart: routing.ColdStart{QueueLimit: 50, Placeholder: &routing.Placeholder{StatusCode: 503, Body: "warming up"},
				WaitingPage: &routing.WaitingPage{Refresh: 2, HTML: "<p>opening</p>"}}, // refresh defaulted by the API server
		}))

		By("creating the KEDA ScaledObject, owned by the HTTPScaledObject")
		Eventually(scaledObject(h)).ShouldNot(BeNil())
		so := scaledObject(h)()
		cur := current(h)
		Expect(metav1.IsControlledBy(so, cur)).To(BeTrue())
		Expect(so.Labels).To(HaveKeyWithValue(controller.LabelManagedBy, "httpscale-operator"))
		Expect(so.Spec.ScaleTargetRef).To(Equal(&kedav1alpha1.ScaleTarget{APIVersion: "apps/v1", Kind: "Deployment", Name: "shop"}))
		Expect(so.Spec.MinReplicaCount).To(Equal(ptr.To[int32](1)))
		Expect(so.Spec.MaxReplicaCount).To(Equal(ptr.To[int32](7)))
		Expect(so.Spec.CooldownPeriod).To(Equal(ptr.To[int32](60)))
		Expect(so.Spec.Triggers).To(HaveLen(1))
		Expect(so.Spec.Triggers[0].Type).To(Equal("external-push"))
		Expect(so.Spec.Triggers[0].Metadata).To(HaveKeyWithValue("scalerAddress", scalerAddr))
		md, err := trigger.Parse(so.Spec.Triggers[0].Metadata)
		Expect(err).NotTo(HaveOccurred())
		Expect(md).To(Equal(trigger.Metadata{App: key, ConcurrencyTarget: 20, RequestRateTarget: 50, Window: 2 * time.Minute, Granularity: 5 * time.Second}))

		By("adding the finalizer and reporting what was resolved")
		Expect(cur.Finalizers).To(ContainElement(controller.Finalizer))
		Eventually(condition(h, v1.ConditionValid)).Should(haveCondition(True, "Resolved"))
		Eventually(condition(h, v1.ConditionScaledObjectReady)).Should(haveCondition(True, "InSync"))
		Eventually(condition(h, v1.ConditionConflict)).Should(haveCondition(False, "NoConflict"))
		Eventually(condition(h, v1.ConditionRoutingPropagated)).Should(haveCondition(False, "NoInterceptors"))
		Eventually(condition(h, v1.ConditionReady)).Should(And(haveCondition(False, "NoInterceptors"), HaveField("ObservedGeneration", int64(1))))
		cur = current(h)
		Expect(cur.Status.ObservedGeneration).To(Equal(int64(1)))
		Expect(cur.Status.TargetService).To(Equal("shop:80"))
		Expect(cur.Status.TargetWorkload).To(Equal("Deployment/shop"))
		Expect(cur.Status.Routing).To(Equal(&v1.RoutingStatus{TableVersion: tableVersion()}))
		Expect(events(h)()).To(ContainElement("Normal ScaledObjectCreated"))
	})

	It("follows spec updates into a new table version and the ScaledObject, and skips needless writes", func() {
		h := app(ns, "web", "web."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		key := ns + "/web"
		Eventually(entryOf(key)).ShouldNot(BeNil())
		Eventually(scaledObject(h)).ShouldNot(BeNil())
		before := tableVersion()

		update(h, func(h *v1.HTTPScaledObject) {
			h.Spec.Hosts = append(h.Spec.Hosts, v1.Host("www."+ns+".example.com"))
			h.Spec.Replicas = &v1.ReplicaBounds{Max: ptr.To[int32](3)}
		})
		Eventually(entryOf(key)).Should(And(
			HaveField("Generation", int64(2)),
			HaveField("Hosts", []string{"web." + ns + ".example.com", "www." + ns + ".example.com"})))
		Expect(tableVersion()).NotTo(Equal(before))
		Eventually(func() *int32 { return scaledObject(h)().Spec.MaxReplicaCount }).Should(Equal(ptr.To[int32](3)))
		Eventually(func() *v1.RoutingStatus { return current(h).Status.Routing }).Should(HaveField("TableVersion", tableVersion()))
		Eventually(condition(h, v1.ConditionReady)).Should(HaveField("ObservedGeneration", int64(2)))

		By("reconciling an annotation change without rewriting the table or the ScaledObject")
		version, soVersion := tableVersion(), scaledObject(h)().ResourceVersion
		update(h, func(h *v1.HTTPScaledObject) { h.Annotations = map[string]string{"example.com/note": "hello"} })
		Consistently(func() string { return scaledObject(h)().ResourceVersion }).Should(Equal(soVersion))
		Expect(tableVersion()).To(Equal(version))
	})

	It("leaves the routing table before its finalizer is removed", func() {
		h := app(ns, "gone", "gone."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		key := ns + "/gone"
		Eventually(entryOf(key)).ShouldNot(BeNil())

		// Each request of the operator that takes its finalizer off the object is held while the
		// stored table is read: at that moment the table must not hold the object any more. (Polling
		// the object and the table from here could miss that moment on a loaded machine.)
		type release struct {
			inTable bool
			err     error
		}
		var mu sync.Mutex
		var releases []release
		objectPath := "/apis/" + v1.GroupVersion.Group + "/" + v1.GroupVersion.Version + "/namespaces/" + ns + "/httpscaledobjects/gone"
		operatorRequests.add(func(req *http.Request) {
			if req.URL.Path != objectPath || (req.Method != http.MethodPatch && req.Method != http.MethodPut) {
				return
			}
			var body struct {
				Metadata map[string]json.RawMessage `json:"metadata"`
			}
			if json.Unmarshal(requestBody(req), &body) != nil {
				return
			}
			raw, sets := body.Metadata["finalizers"]
			var finalizers []string
			if !sets || json.Unmarshal(raw, &finalizers) != nil || slices.Contains(finalizers, controller.Finalizer) {
				return // does not take the finalizer off
			}
			t, err := readTable(context.Background())
			r := release{err: err}
			if err == nil {
				_, r.inTable = t.Lookup(key)
			}
			mu.Lock()
			releases = append(releases, r)
			mu.Unlock()
		})
		Expect(k8s.Delete(ctx, h)).To(Succeed())
		Eventually(isNotFound(h)).Should(BeTrue())

		mu.Lock()
		defer mu.Unlock()
		Expect(releases).NotTo(BeEmpty(), "the object left without a request of the operator that removed its finalizer: the test proved nothing")
		for _, r := range releases {
			Expect(r.err).NotTo(HaveOccurred())
			Expect(r.inTable).To(BeFalse(), "the operator removed its finalizer while the stored routing table still held the object")
		}
	})

	It("routes an object that arrives with its finalizer (the mutating webhook's), and lets go of one that never routed", func() {
		// As the webhook admits it: the routing controller has no patch to make.
		h := app(ns, "early", "early."+ns+".example.com")
		h.Finalizers = []string{controller.Finalizer}
		Expect(k8s.Create(ctx, h)).To(Succeed())
		key := ns + "/early"
		Eventually(entryOf(key)).ShouldNot(BeNil())
		Eventually(condition(h, v1.ConditionValid)).Should(haveCondition(True, "Resolved"))
		Eventually(scaledObject(h)).ShouldNot(BeNil())
		Expect(current(h).Finalizers).To(ConsistOf(controller.Finalizer))
		Expect(k8s.Delete(ctx, h)).To(Succeed())
		Eventually(isNotFound(h)).Should(BeTrue())
		Expect(tableEntry(key)).To(BeNil())

		// An object whose Service does not exist is never routed; the finalizer it was admitted with
		// must not keep it from being deleted.
		stray := hso(ns, "stray", "stray."+ns+".example.com")
		stray.Finalizers = []string{controller.Finalizer}
		Expect(k8s.Create(ctx, stray)).To(Succeed())
		Eventually(condition(stray, v1.ConditionValid)).Should(haveCondition(False, "ServiceNotFound"))
		Expect(k8s.Delete(ctx, stray)).To(Succeed())
		Eventually(isNotFound(stray)).Should(BeTrue())
	})

	It("reports a missing Service and recovers when it appears, without affecting other apps", func() {
		good := app(ns, "good", "good."+ns+".example.com")
		Expect(k8s.Create(ctx, good)).To(Succeed())
		createDeployment(ns, "bad")
		bad := hso(ns, "bad", "bad."+ns+".example.com")
		Expect(k8s.Create(ctx, bad)).To(Succeed())

		Eventually(condition(bad, v1.ConditionValid)).Should(And(haveCondition(False, "ServiceNotFound"),
			HaveField("Message", ContainSubstring("Service "+ns+"/bad does not exist"))))
		Eventually(entryOf(ns + "/good")).ShouldNot(BeNil())
		Expect(tableEntry(ns + "/bad")).To(BeNil())
		Eventually(condition(bad, v1.ConditionRoutingPropagated)).Should(haveCondition(False, "Invalid"))
		Eventually(condition(bad, v1.ConditionReady)).Should(haveCondition(False, "ServiceNotFound"))
		Eventually(condition(bad, v1.ConditionScaledObjectReady)).Should(haveCondition(False, "NotValid"))
		Expect(scaledObject(bad)()).To(BeNil(), "an invalid object must not get a ScaledObject")
		Eventually(events(bad), eventWait).Should(ContainElement("Warning ValidFalse"))

		createService(ns, "bad")
		Eventually(condition(bad, v1.ConditionValid), 10*time.Second).Should(haveCondition(True, "Resolved"))
		Eventually(entryOf(ns + "/bad")).ShouldNot(BeNil())
		Eventually(scaledObject(bad)).ShouldNot(BeNil())
		Eventually(events(bad), eventWait).Should(ContainElement("Normal ValidTrue"))
	})

	It("reports a port the Service does not have and recovers when the Service gets it", func() {
		svc := createService(ns, "ports", corev1.ServicePort{Name: "web", Port: 8080})
		createDeployment(ns, "ports")
		h := hso(ns, "ports", "ports."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionValid)).Should(And(haveCondition(False, "PortNotFound"),
			HaveField("Message", And(ContainSubstring("no TCP port 80"), ContainSubstring("8080(web)")))))
		Expect(tableEntry(ns + "/ports")).To(BeNil())

		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 80})
		Expect(k8s.Update(ctx, svc)).To(Succeed())
		Eventually(entryOf(ns+"/ports"), 10*time.Second).Should(And(
			HaveField("PortName", "alt"), HaveField("TargetPort", int32(80)), HaveField("Protocol", routing.ProtocolHTTP)))
		Eventually(condition(h, v1.ConditionValid)).Should(haveCondition(True, "Resolved"))
	})

	It("waits for a Deployment that appears later", func() {
		createService(ns, "late")
		h := hso(ns, "late", "late."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionValid)).Should(And(haveCondition(False, "TargetNotFound"),
			HaveField("Message", ContainSubstring("Deployment "+ns+"/late does not exist"))))

		createDeployment(ns, "late")
		// Well under the periodic re-check: the Deployment watch brings the news.
		Eventually(condition(h, v1.ConditionValid), 10*time.Second).Should(haveCondition(True, "Resolved"))
		Eventually(entryOf(ns + "/late")).ShouldNot(BeNil())
	})

	It("scales a StatefulSet, also one that appears later", func() {
		createService(ns, "db")
		h := hso(ns, "db", "db."+ns+".example.com")
		h.Spec.ScaleTargetRef.Kind = "StatefulSet"
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionValid)).Should(haveCondition(False, "TargetNotFound"))

		createStatefulSet(ns, "db")
		Eventually(condition(h, v1.ConditionValid), 10*time.Second).Should(haveCondition(True, "Resolved"))
		Eventually(scaledObject(h)).Should(HaveField("Spec.ScaleTargetRef",
			Equal(&kedav1alpha1.ScaleTarget{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"})))
		Expect(current(h).Status.TargetWorkload).To(Equal("StatefulSet/db"))
		Eventually(entryOf(ns + "/db")).ShouldNot(BeNil())
	})

	It("rejects scale targets without a /scale subresource and unknown kinds", func() {
		createService(ns, "cfg")
		noScale := hso(ns, "cfg", "cfg."+ns+".example.com")
		noScale.Spec.ScaleTargetRef.APIVersion, noScale.Spec.ScaleTargetRef.Kind = "v1", "ConfigMap"
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: ns}})).To(Succeed())
		Expect(k8s.Create(ctx, noScale)).To(Succeed())
		unknown := hso(ns, "widget", "widget."+ns+".example.com")
		unknown.Spec.ScaleTargetRef.Service = "cfg"
		unknown.Spec.ScaleTargetRef.APIVersion, unknown.Spec.ScaleTargetRef.Kind = "example.com/v1", "Widget"
		Expect(k8s.Create(ctx, unknown)).To(Succeed())

		Eventually(condition(noScale, v1.ConditionValid)).Should(And(haveCondition(False, "TargetNotScalable"),
			HaveField("Message", ContainSubstring("ConfigMap has no /scale subresource"))))
		Eventually(condition(unknown, v1.ConditionValid)).Should(And(haveCondition(False, "TargetKindUnknown"),
			HaveField("Message", ContainSubstring("no kind Widget in example.com/v1"))))
		Expect(tableEntry(ns + "/cfg")).To(BeNil())
		Expect(tableEntry(ns + "/widget")).To(BeNil())
	})

	It("lets the oldest object keep a contested route and hands it over when that object goes away", func() {
		first := app(ns, "zz-first", "shared."+ns+".example.com")
		Expect(k8s.Create(ctx, first)).To(Succeed())
		Eventually(entryOf(ns + "/zz-first")).ShouldNot(BeNil())
		// creationTimestamp has a resolution of one second; wait for the next one so that the second
		// object is strictly younger. Its name sorts first, so only age can make it lose.
		created := current(first).CreationTimestamp.Time
		Eventually(func() time.Time { return time.Now().Truncate(time.Second) }).Should(BeTemporally(">", created))
		second := app(ns, "aa-second", "shared."+ns+".example.com")
		Expect(k8s.Create(ctx, second)).To(Succeed())

		Eventually(condition(second, v1.ConditionConflict)).Should(And(haveCondition(True, "RouteClaimed"),
			HaveField("Message", ContainSubstring("already routed to "+ns+"/zz-first"))))
		Eventually(condition(second, v1.ConditionRoutingPropagated)).Should(haveCondition(False, "Conflict"))
		Eventually(condition(second, v1.ConditionReady)).Should(haveCondition(False, "RouteClaimed"))
		Expect(tableEntry(ns + "/aa-second")).To(BeNil())
		Expect(tableEntry(ns + "/zz-first")).NotTo(BeNil())
		Expect(condition(first, v1.ConditionConflict)()).To(haveCondition(False, "NoConflict"))
		Eventually(events(second), eventWait).Should(ContainElement("Warning ConflictTrue"))

		By("handing the route over when the winner is deleted")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(entryOf(ns + "/aa-second")).ShouldNot(BeNil())
		Eventually(condition(second, v1.ConditionConflict)).Should(haveCondition(False, "NoConflict"))
		Eventually(isNotFound(first)).Should(BeTrue())
		Expect(tableEntry(ns + "/zz-first")).To(BeNil())
	})

	It("creates no ScaledObject when the user owns it, deletes ours when told so, and recreates it after", func() {
		owned := app(ns, "own", "own."+ns+".example.com")
		owned.Annotations = map[string]string{v1.AnnotationSkipScaledObject: "true"}
		Expect(k8s.Create(ctx, owned)).To(Succeed())
		Eventually(condition(owned, v1.ConditionScaledObjectReady)).Should(haveCondition(True, "UserOwned"))
		Eventually(entryOf(ns + "/own")).ShouldNot(BeNil())
		Consistently(scaledObject(owned), time.Second).Should(BeNil())

		h := app(ns, "later", "later."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(scaledObject(h)).ShouldNot(BeNil())
		update(h, func(h *v1.HTTPScaledObject) {
			h.Annotations = map[string]string{v1.AnnotationSkipScaledObject: "true"}
		})
		Eventually(scaledObject(h)).Should(BeNil())
		Eventually(events(h), eventWait).Should(ContainElement("Normal ScaledObjectDeleted"))
		Eventually(condition(h, v1.ConditionScaledObjectReady)).Should(haveCondition(True, "UserOwned"))

		update(h, func(h *v1.HTTPScaledObject) { delete(h.Annotations, v1.AnnotationSkipScaledObject) })
		Eventually(scaledObject(h)).ShouldNot(BeNil())
		Eventually(condition(h, v1.ConditionScaledObjectReady)).Should(haveCondition(True, "InSync"))
	})

	It("does not take over a ScaledObject it did not create", func() {
		foreign := &kedav1alpha1.ScaledObject{
			ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns},
			Spec: kedav1alpha1.ScaledObjectSpec{
				ScaleTargetRef: &kedav1alpha1.ScaleTarget{Name: "foreign"},
				Triggers:       []kedav1alpha1.ScaleTriggers{{Type: "cpu", Metadata: map[string]string{"value": "50"}}},
			},
		}
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		h := app(ns, "foreign", "foreign."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionScaledObjectReady)).Should(And(haveCondition(False, "ScaledObjectExists"),
			HaveField("Message", ContainSubstring(v1.AnnotationSkipScaledObject))))
		Eventually(condition(h, v1.ConditionReady)).Should(haveCondition(False, "ScaledObjectExists"))
		Eventually(events(h), eventWait).Should(ContainElement("Warning ScaledObjectReadyFalse"))
		Expect(scaledObject(h)().Spec.Triggers).To(HaveExactElements(HaveField("Type", "cpu")))
	})
})
