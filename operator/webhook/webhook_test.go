package webhook_test

import (
	"bytes"
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/webhook"
)

func valid(name string) *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"shop.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{Name: "shop", Service: "shop", Port: ptr.To[int32](8080)},
			Replicas:       &v1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](10)},
			Schedules: []v1.ScheduleRule{{
				Name: "sale", Schedule: "30 8 * * mon-fri", TimeZone: ptr.To("Europe/Berlin"),
				TargetMinReplicas: ptr.To[int32](5), TargetMaxReplicas: ptr.To[int32](20),
			}},
		},
	}
}

func caBundle(ctx context.Context) []byte {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: configName}, vwc)).To(Succeed())
	return vwc.Webhooks[0].ClientConfig.CABundle
}

func mutatingCABundle(ctx context.Context) []byte {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: configName}, mwc)).To(Succeed())
	return mwc.Webhooks[0].ClientConfig.CABundle
}

func secret(ctx context.Context) *corev1.Secret {
	s := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secretName}, s)).To(Succeed())
	return s
}

// acceptsValidObjects waits until the API server reaches the webhook over TLS and it admits a valid
// object, which needs the self-managed certificate and the caBundle to agree.
func acceptsValidObjects(ctx context.Context, name string) {
	Eventually(func() error {
		obj := valid(name)
		err := k8s.Create(ctx, obj)
		if err == nil {
			return k8s.Delete(ctx, obj)
		}
		return err
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
}

var _ = Describe("Admission webhooks", Ordered, func() {
	ctx := context.Background()

	It("serves with its own certificate: Secret written, caBundle patched, valid objects admitted", func() {
		acceptsValidObjects(ctx, "valid")
		s := secret(ctx)
		Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
		Expect(s.Data).To(HaveKey(webhook.KeyCAKey))
		Expect(caBundle(ctx)).To(Equal(s.Data[webhook.KeyCA]), "the configuration trusts exactly the Secret's CA bundle")
	})

	DescribeTable("rejects an invalid object with a message that says what to fix",
		func(mutate func(*v1.HTTPScaledObject), byWebhook bool, field, message string) {
			obj := valid("invalid")
			mutate(obj)
			err := k8s.Create(ctx, obj)
			Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "want a rejection, got %v", err)
			if byWebhook {
				Expect(err.Error()).To(ContainSubstring(`admission webhook "httpscaledobjects.httpscale.dev" denied the request`))
			}
			Expect(err.Error()).To(ContainSubstring(field))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		// Only the webhook can check these.
		Entry("invalid cron", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "30 25 * * *" }, true,
			"spec.schedules[0].schedule", "not a valid 5-field cron expression (minute hour day-of-month month day-of-week"),
		Entry("cron with six fields", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "0 30 8 * * *" }, true,
			"spec.schedules[0].schedule", "not a valid 5-field cron expression"),
		Entry("cron that never fires", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "0 8 31 apr *" }, true,
			"spec.schedules[0].schedule", "never fires"),
		Entry("unknown time zone", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].TimeZone = ptr.To("Europe/Atlantis") }, true,
			"spec.schedules[0].timeZone", "not a known IANA time zone (examples: UTC, Europe/Berlin, America/New_York)"),
		Entry("targetMax alone below replicas.min", func(o *v1.HTTPScaledObject) {
			o.Spec.Replicas.Min = ptr.To[int32](3)
			o.Spec.Schedules[0].TargetMinReplicas, o.Spec.Schedules[0].TargetMaxReplicas = nil, ptr.To[int32](2)
		}, true, "spec.schedules[0].targetMaxReplicas", "also set targetMinReplicas (at most 2) or lower replicas.min"),
		Entry("header names differing only in case", func(o *v1.HTTPScaledObject) {
			o.Spec.Headers = []v1.HeaderMatch{{Name: "X-Tenant"}, {Name: "x-tenant"}}
		}, true, "spec.headers[1].name", "header names are case-insensitive"),
		// The CRD's CEL and schema rules catch these before the webhook (which checks them too).
		Entry("duplicate rule names", func(o *v1.HTTPScaledObject) { o.Spec.Schedules = append(o.Spec.Schedules, o.Spec.Schedules[0]) }, false,
			"spec.schedules[1]", "Duplicate value"),
		Entry("rule without a target", func(o *v1.HTTPScaledObject) {
			o.Spec.Schedules[0].TargetMinReplicas, o.Spec.Schedules[0].TargetMaxReplicas = nil, nil
		}, false, "spec.schedules[0]", "a schedule rule needs targetMinReplicas, targetMaxReplicas or both"),
		Entry("targetMin above targetMax", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].TargetMinReplicas = ptr.To[int32](30) }, false,
			"spec.schedules[0]", "targetMinReplicas must not be greater than targetMaxReplicas"),
		Entry("rule name too long", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Name = "a-rule-name-that-is-longer-than-32" }, false,
			"spec.schedules[0].name", "Too long"),
		Entry("rule name with upper case", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Name = "Sale" }, false,
			"spec.schedules[0].name", "schedule name must be 1-32 lowercase letters"),
		Entry("@every", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "@every 1h" }, false,
			"spec.schedules[0].schedule", "@every is not a cron schedule"),
		Entry("time zone inside the schedule", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "CRON_TZ=UTC 0 8 * * *" }, false,
			"spec.schedules[0].schedule", "set the time zone in timeZone"),
		Entry("successful history limit 0", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].SuccessfulHistoryLimit = ptr.To[int32](0) }, false,
			"spec.schedules[0].successfulHistoryLimit", "should be greater than or equal to 1"),
		Entry("failed history limit 33", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].FailedHistoryLimit = ptr.To[int32](33) }, false,
			"spec.schedules[0].failedHistoryLimit", "should be less than or equal to 32"),
	)

	It("rejects an update that makes a valid object invalid, and still lets it be deleted", func() {
		obj := valid("update")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		Expect(obj.Spec.Schedules[0].SuccessfulHistoryLimit).To(Equal(ptr.To[int32](3)), "history limits default to 3")
		obj.Spec.Schedules[0].TimeZone = ptr.To("Mars/Olympus")
		err := k8s.Update(ctx, obj)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("not a known IANA time zone"))
		Expect(k8s.Delete(ctx, obj)).To(Succeed())
	})

	It("puts the fleet's finalizer on new objects of its fleet in the namespaces it watches, and on no other", func() {
		Eventually(func() []byte { return mutatingCABundle(ctx) }).Should(Equal(secret(ctx).Data[webhook.KeyCA]), "the mutating configuration trusts the Secret's CA bundle")
		create := func(ns, name, fleet string, finalizers ...string) []string {
			obj := valid(name)
			obj.Namespace, obj.Spec.Fleet, obj.Finalizers = ns, fleet, finalizers
			// A host per namespace: an older object of another namespace would hold it (tenancy).
			obj.Spec.Hosts = []v1.Host{v1.Host("finalizer." + ns + ".example.com")}
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			DeferCleanup(func() {
				// No operator runs here to take its finalizer away.
				Expect(client.IgnoreNotFound(k8s.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
				Expect(client.IgnoreNotFound(k8s.Delete(ctx, obj))).To(Succeed())
			})
			return obj.Finalizers
		}
		Expect(create(watchedNS, "mine", "")).To(Equal([]string{finalizer}), "the create's answer carries the finalizer")
		Expect(create(watchedNS, "mine-default", "default")).To(Equal([]string{finalizer}))
		Expect(create(watchedNS, "has-others", "", "example.com/keep")).To(Equal([]string{"example.com/keep", finalizer}))
		Expect(create(watchedNS, "has-it", "", finalizer)).To(Equal([]string{finalizer}), "never twice")
		Expect(create(watchedNS, "blue", "blue")).To(BeEmpty(), "another fleet's object")
		Expect(create("default", "unwatched", "")).To(BeEmpty(), "a namespace this operator does not watch")
	})

	It("recovers from a lost Secret with a new CA and re-published caBundle", func() {
		before := caBundle(ctx)
		Expect(k8s.Delete(ctx, secret(ctx))).To(Succeed())
		_, err := certs.Sync(ctx)
		Expect(err).NotTo(HaveOccurred())
		after := secret(ctx)
		Expect(bytes.Equal(after.Data[webhook.KeyCA], before)).To(BeFalse(), "a new CA was generated")
		Expect(caBundle(ctx)).To(Equal(after.Data[webhook.KeyCA]))
		Expect(mutatingCABundle(ctx)).To(Equal(after.Data[webhook.KeyCA]))
		acceptsValidObjects(ctx, "after-rotation")
	})
})
