package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/controller"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

// serveApp returns a Serve-mode object for a new Service and Deployment named name, with an extra
// trigger (admission requires one at min 0).
func serveApp(ns, name string) *v1.HTTPScaledObject {
	GinkgoHelper()
	h := app(ns, name, name+"."+ns+".example.com") // per namespace: other specs route web.example.com and the like
	h.Spec.Mode = v1.ModeServe
	h.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "metrics-api", Metadata: map[string]string{
		"url": "http://" + name + "." + ns + ".svc/stats", "valueLocation": "inflight", "targetValue": "10",
	}}}}
	return h
}

// redirect returns a function for Eventually yielding the redirect slice of Service svc (nil if
// absent).
func redirect(ns, svc string) func() *discoveryv1.EndpointSlice {
	return func() *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: svc + "-httpscale-redirect"}, s); err != nil {
			return nil
		}
		return s
	}
}

// redirectTargets returns "ip:port name" of every endpoint of the redirect of svc, sorted; nil when
// there is no redirect.
func redirectTargets(ns, svc string) func() []string {
	return func() []string {
		s := redirect(ns, svc)()
		if s == nil {
			return nil
		}
		out := []string{}
		for _, e := range s.Endpoints {
			for _, p := range s.Ports {
				out = append(out, e.Addresses[0]+":"+strconv.Itoa(int(*p.Port))+" "+ptr.Deref(p.Name, ""))
			}
		}
		slices.Sort(out)
		return out
	}
}

// appSlice publishes the Service's own EndpointSlice, as the Kubernetes EndpointSlice controller
// would, with one endpoint of the given readiness on port http.
func appSlice(ns, svc, ip string, ready bool) {
	GinkgoHelper()
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: svc + "-pods", Namespace: ns}}
	_, err := ctrl.CreateOrUpdate(ctx, k8s, s, func() error {
		s.Labels = map[string]string{serviceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
		s.AddressType = discoveryv1.AddressTypeIPv4
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}}
		return nil
	})
	Expect(err).NotTo(HaveOccurred())
}

func scaleDeployment(ns, name string, replicas int32) {
	GinkgoHelper()
	Eventually(func() error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(replicas)
		return k8s.Update(ctx, d)
	}).Should(Succeed())
}

// servePortOf returns the Serve port of key in the stored routing table (0 when none).
func servePortOf(key string) func() int32 {
	return func() int32 {
		if e := tableEntry(key); e != nil {
			return e.ServePort
		}
		return 0
	}
}

// targetsAt returns what redirectTargets says of a redirect to ips at port.
func targetsAt(port int32) func(ips ...string) []string {
	return func(ips ...string) []string {
		out := make([]string, len(ips))
		for i, ip := range ips {
			out[i] = fmt.Sprintf("%s:%d http", ip, port)
		}
		return out
	}
}

// setKEDAActive sets the Active condition of h's ScaledObject, as KEDA does at each check.
func setKEDAActive(h *v1.HTTPScaledObject, status metav1.ConditionStatus) {
	GinkgoHelper()
	Eventually(func() error {
		so := scaledObject(h)()
		if so == nil {
			return errors.New("no ScaledObject yet")
		}
		so.Status.Conditions = kedav1alpha1.Conditions{{Type: kedav1alpha1.ConditionActive, Status: status, Reason: "Test"}}
		return k8s.Status().Update(ctx, so)
	}).Should(Succeed())
}

// serveFleet publishes the fake interceptors as the admin Service's endpoints for one spec and
// removes them afterwards, so other specs see the fleet they expect.
func serveFleet(fakes ...*fakeInterceptor) {
	GinkgoHelper()
	publishFleet("serve-fleet", fakes)
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "serve-fleet", Namespace: installNS}}))).To(Succeed())
	})
}

var _ = Describe("Serve mode", func() {
	It("redirects the app's Service to the ready interceptors while the app has no ready endpoint, and hands it back once the interceptors hold nothing", func() {
		a, b := newFakeInterceptor("198.19.0.1"), newFakeInterceptor("198.19.0.2")
		serveFleet(a, b)
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		h := serveApp(ns, "shop")
		key := ns + "/shop"
		Expect(k8s.Create(ctx, h)).To(Succeed())

		// The app gets a Serve port of its own on the interceptors, in the routing table.
		Eventually(servePortOf(key), timeout).Should(And(BeNumerically(">=", controller.DefaultServePortMin), BeNumerically("<=", controller.DefaultServePortMax)))
		at := targetsAt(servePortOf(key)())

		// Deployment at 1 replica, no ready pod yet: the http port goes to both interceptors' Serve
		// port of the app, named as the Service port.
		Eventually(redirectTargets(ns, "shop"), timeout).Should(Equal(at("198.19.0.1", "198.19.0.2")))
		s := redirect(ns, "shop")()
		Expect(s.Labels).To(HaveKeyWithValue(serviceName, "shop"))
		Expect(s.Labels).To(HaveKeyWithValue(discoveryv1.LabelManagedBy, endpoints.RedirectManagedBy))
		Eventually(condition(h, v1.ConditionServing), timeout).Should(haveCondition(False, v1.ServingReasonProxying))
		Eventually(condition(h, v1.ConditionReady), timeout).Should(haveCondition(True, "Ready"))
		Eventually(events(h), eventWait).Should(ContainElement("Normal RedirectCreated"))

		// The interceptors find the app by the Service's in-cluster names and cluster IP.
		svc := &corev1.Service{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, svc)).To(Succeed())
		Eventually(func() []string {
			if e := tableEntry(key); e != nil {
				return e.Hosts
			}
			return nil
		}, timeout).Should(ConsistOf("shop."+ns+".example.com", "shop."+ns, "shop."+ns+".svc", "shop."+ns+".svc.cluster.local", svc.Spec.ClusterIP))
		Expect(scaledObject(h)().Spec.Triggers).To(HaveLen(2), "the interceptor's trigger and the extra metrics-api one")

		// An interceptor leaves: the redirect follows.
		publishFleet("serve-fleet", []*fakeInterceptor{a})
		Eventually(redirectTargets(ns, "shop"), timeout).Should(Equal(at("198.19.0.1")))

		// The app gets a ready endpoint while an interceptor still holds two requests for it: the
		// redirect stays until they are handed over.
		a.hold(key, 2)
		appSlice(ns, "shop", "10.244.0.7", true)
		Eventually(condition(h, v1.ConditionServing), timeout).Should(HaveField("Message", ContainSubstring("2 held")))
		Consistently(redirect(ns, "shop"), 2*time.Second).ShouldNot(BeNil())
		a.hold(key, 0)
		Eventually(redirect(ns, "shop"), timeout).Should(BeNil())
		Eventually(condition(h, v1.ConditionServing), timeout).Should(haveCondition(True, v1.ServingReasonDirect))
		Eventually(events(h), eventWait).Should(ContainElement("Normal RedirectRemoved"))

		// KEDA finds every trigger idle (Active=False), its decision to scale to zero after the
		// cooldown: the redirect goes in place while the pod is still ready, and goes again once KEDA
		// finds the app active.
		Expect(scaledObject(h)().Spec.PollingInterval).To(BeNil(), "scaledownPeriod 300 s: KEDA's own polling")
		setKEDAActive(h, metav1.ConditionFalse)
		Eventually(redirectTargets(ns, "shop"), 5*time.Second).Should(Equal(at("198.19.0.1")))
		Eventually(condition(h, v1.ConditionServing), timeout).Should(And(haveCondition(False, v1.ServingReasonProxying),
			HaveField("Message", ContainSubstring("KEDA finds every trigger"))))
		setKEDAActive(h, metav1.ConditionTrue)
		Eventually(redirect(ns, "shop"), timeout).Should(BeNil())
		Eventually(condition(h, v1.ConditionServing), timeout).Should(haveCondition(True, v1.ServingReasonDirect))

		// KEDA scales the workload to zero: the redirect is back before the pods are gone (the pod
		// is still ready in its slice).
		scaleDeployment(ns, "shop", 0)
		Eventually(redirectTargets(ns, "shop"), 5*time.Second).Should(Equal(at("198.19.0.1")))
		Eventually(condition(h, v1.ConditionServing), timeout).Should(And(haveCondition(False, v1.ServingReasonProxying),
			HaveField("Message", ContainSubstring("scaled to zero"))))

		// Proxy mode gives the Service back as it was.
		update(h, func(o *v1.HTTPScaledObject) { o.Spec.Mode = v1.ModeProxy; o.Spec.Scaling = nil })
		Eventually(redirect(ns, "shop"), timeout).Should(BeNil())
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(current(h).Status.Conditions, v1.ConditionServing)
		}, timeout).Should(BeNil())
		Eventually(func() []string {
			if e := tableEntry(key); e != nil {
				return e.Hosts
			}
			return nil
		}, timeout).Should(Equal([]string{"shop." + ns + ".example.com"}))

		// Back to Serve, then deleted: the Service is restored and the object goes.
		update(h, func(o *v1.HTTPScaledObject) {
			o.Spec.Mode = v1.ModeServe
			o.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
		})
		Eventually(redirect(ns, "shop"), timeout).ShouldNot(BeNil())
		Expect(k8s.Delete(ctx, current(h))).To(Succeed())
		Eventually(redirect(ns, "shop"), timeout).Should(BeNil())
		Eventually(isNotFound(h), timeout).Should(BeTrue())
	})

	It("restores the Service of an object switched to Proxy while the operator was down", func() {
		a := newFakeInterceptor("198.19.1.1")
		serveFleet(a)
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		DeferCleanup(func() { Expect(k8s.DeleteAllOf(ctx, &v1.HTTPScaledObject{}, client.InNamespace(ns))).To(Succeed()) })
		h := serveApp(ns, "cart")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(servePortOf(ns+"/cart"), timeout).ShouldNot(BeZero())
		Eventually(redirectTargets(ns, "cart"), timeout).Should(Equal(targetsAt(servePortOf(ns + "/cart")())("198.19.1.1")))

		op.stop()
		DeferCleanup(func() { op = startOperator(defaultOptions()) })
		update(h, func(o *v1.HTTPScaledObject) { o.Spec.Mode = v1.ModeProxy; o.Spec.Scaling = nil })
		Consistently(redirect(ns, "cart"), time.Second).ShouldNot(BeNil(), "nothing runs to remove it")

		op = startOperator(defaultOptions())
		DeferCleanup(func() { op.stop() })
		// A new leader reconciles every object of the suite first and holds its first table write up
		// to 30 s (see the generated-RBAC spec): allow for that.
		Eventually(redirect(ns, "cart"), 2*time.Minute).Should(BeNil())
	})

	It("creates no redirect its object's status does not record, so a later reconcile always finds it", func() {
		a := newFakeInterceptor("198.19.1.2")
		serveFleet(a)
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		DeferCleanup(func() { Expect(k8s.DeleteAllOf(ctx, &v1.HTTPScaledObject{}, client.InNamespace(ns))).To(Succeed()) })

		// An operator whose status writes for this namespace fail, as when it is stopped between
		// the redirect and the status write of one reconcile.
		op.stop()
		DeferCleanup(func() { op = startOperator(defaultOptions()) })
		faulty := rest.CopyConfig(restCfg)
		statusPath := "/namespaces/" + ns + "/httpscaledobjects/"
		faulty.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.Method != http.MethodGet && strings.Contains(req.URL.Path, statusPath) && strings.HasSuffix(req.URL.Path, "/status") {
					return nil, errors.New("status writes refused by the test")
				}
				return rt.RoundTrip(req)
			})
		}
		broken := startOperatorAs(faulty, defaultOptions(), false)
		brokenStopped := false
		DeferCleanup(func() {
			if !brokenStopped {
				broken.stop()
			}
		})
		h := serveApp(ns, "cart")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(entryOf(ns+"/cart"), timeout).ShouldNot(BeNil(), "routed: the reconciles that would redirect have run")
		Consistently(redirect(ns, "cart"), 3*time.Second).Should(BeNil(), "no redirect before the status says one may exist")
		broken.stop()
		brokenStopped = true

		update(h, func(o *v1.HTTPScaledObject) { o.Spec.Mode = v1.ModeProxy; o.Spec.Scaling = nil })
		op = startOperator(defaultOptions())
		DeferCleanup(func() { op.stop() })
		Eventually(condition(h, v1.ConditionReady), 2*time.Minute).Should(haveCondition(True, "Ready"))
		Expect(redirect(ns, "cart")()).To(BeNil())
	})

	It("leaves a Service it cannot serve as it is and says why, and gives a claimed Service to the next object when the first goes", func() {
		a := newFakeInterceptor("198.19.2.1")
		serveFleet(a)
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		// Objects waiting for a ready endpoint are re-checked every second: do not leave them to the
		// specs that follow.
		DeferCleanup(func() { Expect(k8s.DeleteAllOf(ctx, &v1.HTTPScaledObject{}, client.InNamespace(ns))).To(Succeed()) })

		// Two Serve-mode objects on one Service: the older keeps it.
		first := serveApp(ns, "web")
		Expect(k8s.Create(ctx, first)).To(Succeed())
		Eventually(redirect(ns, "web"), timeout).ShouldNot(BeNil())
		second := hso(ns, "web-two", "two."+ns+".example.com")
		second.Spec.ScaleTargetRef = first.Spec.ScaleTargetRef
		second.Spec.Mode = v1.ModeServe
		second.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
		Expect(k8s.Create(ctx, second)).To(Succeed())
		Eventually(condition(second, v1.ConditionServing), timeout).Should(And(haveCondition(False, v1.ServingReasonServiceClaimed),
			HaveField("Message", ContainSubstring("already served by HTTPScaledObject web"))))
		Eventually(condition(second, v1.ConditionReady), timeout).Should(haveCondition(False, v1.ServingReasonServiceClaimed))
		Eventually(events(second), eventWait).Should(ContainElement("Warning ServingFalse"))
		Expect(redirect(ns, "web")().Labels).To(HaveKeyWithValue("httpscale.dev/redirect-for", "web"))
		// Still routed by its own hosts, without the Service's names.
		Eventually(entryOf(ns+"/web-two"), timeout).Should(HaveField("Hosts", Equal([]string{"two." + ns + ".example.com"})))
		// Ready needs every listed interceptor to serve the table: allow for a fleet change of another spec.
		Eventually(condition(first, v1.ConditionReady), 2*time.Minute).Should(haveCondition(True, "Ready"))

		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(func() string {
			return ptr.Deref(redirect(ns, "web")(), discoveryv1.EndpointSlice{}).Labels["httpscale.dev/redirect-for"]
		}, timeout).Should(Equal("web-two"))
		Eventually(condition(second, v1.ConditionServing), timeout).Should(haveCondition(False, v1.ServingReasonProxying))
		Eventually(func() []string {
			if e := tableEntry(ns + "/web-two"); e != nil {
				return e.Hosts
			}
			return nil
		}, timeout).Should(ContainElement("web." + ns + ".svc"))

		// A headless Service and a Service selecting other pods are left alone.
		headless := serveApp(ns, "db")
		svc := &corev1.Service{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db"}, svc)).To(Succeed())
		Expect(k8s.Delete(ctx, svc)).To(Succeed())
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		}}
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		Expect(k8s.Create(ctx, headless)).To(Succeed())
		Eventually(condition(headless, v1.ConditionServing), timeout).Should(And(haveCondition(False, v1.ServingReasonUnsupportedService),
			HaveField("Message", ContainSubstring("headless"))))

		other := serveApp(ns, "api")
		Eventually(func() error {
			s := &corev1.Service{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api"}, s); err != nil {
				return err
			}
			s.Spec.Selector = map[string]string{"app": "api-v2"}
			return k8s.Update(ctx, s)
		}).Should(Succeed())
		Expect(k8s.Create(ctx, other)).To(Succeed())
		Eventually(condition(other, v1.ConditionServing), timeout).Should(And(haveCondition(False, v1.ServingReasonSelectorMismatch),
			HaveField("Message", ContainSubstring("does not select the pods"))))
		Consistently(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db-httpscale-redirect"}, &discoveryv1.EndpointSlice{})) &&
				apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api-httpscale-redirect"}, &discoveryv1.EndpointSlice{}))
		}, time.Second).Should(BeTrue())
	})
})

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
