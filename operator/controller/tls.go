package controller

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/tlsterm"
)

// The operator reads the Secrets objects name in spec.tls (to report TLSReady, watching their
// metadata only) and must hold what it grants the interceptor: get, list and watch on exactly those
// Secrets, through a Role with resourceNames and a RoleBinding in each namespace that has them.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// It creates those (RBAC cannot limit a create to a name) and reads, updates and deletes only its
// own, by name (the default fleet's; chart-sync gives another fleet's its prefix).
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,resourceNames=httpscale-interceptor-tls-secrets,verbs=get;update;delete

// indexTLSSecret indexes HTTPScaledObjects by the Secret their spec.tls names.
const indexTLSSecret = "httpscale.dev/tls-secret"

func tlsSecretIndex(obj client.Object) []string {
	if t := obj.(*v1.HTTPScaledObject).Spec.TLS; t != nil {
		return []string{t.SecretName}
	}
	return nil
}

// setTLSStatus reports TLSReady for an object with spec.tls, from the Secret as the API server has it
// now (read uncached: the operator caches no Secret data), and removes it from one without.
func (r *Reconciler) setTLSStatus(ctx context.Context, hso *v1.HTTPScaledObject) error {
	t := hso.Spec.TLS
	if t == nil {
		meta.RemoveStatusCondition(&hso.Status.Conditions, v1.ConditionTLSReady)
		return nil
	}
	s := &corev1.Secret{}
	err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: hso.Namespace, Name: t.SecretName}, s)
	switch {
	case apierrors.IsNotFound(err):
		r.setCondition(hso, v1.ConditionTLSReady, metav1.ConditionFalse, "SecretNotFound",
			fmt.Sprintf("tls.secretName: Secret %s/%s does not exist; create it (kubectl create secret tls %s --cert=... --key=... -n %s) or correct the name. Until then its hosts get no certificate of their own on the interceptors' TLS port",
				hso.Namespace, t.SecretName, t.SecretName, hso.Namespace))
		return nil
	case err != nil:
		return fmt.Errorf("reading TLS Secret %s/%s: %w", hso.Namespace, t.SecretName, err)
	}
	cert, err := tlsterm.ParseSecret(s)
	var se *tlsterm.SecretError
	if errors.As(err, &se) {
		r.setCondition(hso, v1.ConditionTLSReady, metav1.ConditionFalse, se.Reason,
			"tls.secretName: "+se.Message+". Until it is fixed its hosts get no certificate of their own on the interceptors' TLS port")
		return nil
	}
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("Secret %s holds a certificate for %v", t.SecretName, cert.Leaf.DNSNames)
	if missing := uncovered(hso.Spec.Hosts, cert.Leaf); len(missing) > 0 {
		// Not an error: a client may connect by another name, or the user may know better.
		msg += fmt.Sprintf("; it does not cover %v, whose clients will refuse it", missing)
	}
	r.setCondition(hso, v1.ConditionTLSReady, metav1.ConditionTrue, "CertificateLoaded", msg)
	return nil
}

// uncovered returns the object's hosts the certificate does not cover, as a client checks it (a
// wildcard DNS name covers one label). A wildcard host is checked with one label in front of it;
// host * is never reported.
func uncovered(hosts []v1.Host, leaf *x509.Certificate) []string {
	var out []string
	for _, h := range hosts {
		host := string(h)
		if host == "*" {
			continue
		}
		name := host
		if strings.HasPrefix(host, "*.") {
			name = "any" + host[1:]
		}
		if leaf.VerifyHostname(name) != nil {
			out = append(out, host)
		}
	}
	return out
}

// SecretGrants keeps, in each namespace, one Role and RoleBinding that let the interceptor's
// ServiceAccount get, list and watch exactly the Secrets the namespace's HTTPScaledObjects of its
// fleet name in spec.tls (resourceNames), and removes them when none does. The interceptor watches
// each such Secret with a metadata.name field selector, which this Role authorises; it can read no
// other Secret, and none of an object of another fleet (whose interceptors have a Role of their
// own, named after their ServiceAccount). Reconcile requests carry the namespace only.
type SecretGrants struct {
	Client client.Client
	// Reader reads Roles and RoleBindings uncached, so the operator caches none.
	Reader client.Reader
	// ServiceAccount and ServiceAccountNamespace name the interceptor's ServiceAccount; the Role and
	// RoleBinding are named after it (Name).
	ServiceAccount, ServiceAccountNamespace string
	// Fleet is the fleet whose objects' Secrets are granted; "" means v1.DefaultFleet.
	Fleet string
}

// Name is the Role and RoleBinding name in each namespace.
func (g *SecretGrants) Name() string { return g.ServiceAccount + "-tls-secrets" }

// Reconcile implements reconcile.Reconciler for the namespace req.Namespace.
func (g *SecretGrants) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if ctx.Err() != nil {
		return ctrl.Result{}, nil
	}
	ns := req.Namespace
	var list v1.HTTPScaledObjectList
	if err := g.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing HTTPScaledObjects in %s: %w", ns, err)
	}
	fleet := g.Fleet
	if fleet == "" {
		fleet = v1.DefaultFleet
	}
	var names []string
	for i := range list.Items {
		h := &list.Items[i]
		if t := h.Spec.TLS; t != nil && h.DeletionTimestamp.IsZero() && h.Spec.FleetName() == fleet {
			names = append(names, t.SecretName)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	key := types.NamespacedName{Namespace: ns, Name: g.Name()}
	labels := map[string]string{LabelManagedBy: managedByValue}
	if len(names) == 0 {
		for _, obj := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
			obj.SetNamespace(ns)
			obj.SetName(key.Name)
			if err := g.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("removing the interceptor's TLS Secret grant %T %s: %w", obj, key, err)
			}
		}
		return ctrl.Result{}, nil
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name, Labels: labels}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}, ResourceNames: names,
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name, Labels: labels},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: g.ServiceAccount, Namespace: g.ServiceAccountNamespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: key.Name}}
	if err := g.apply(ctx, key, role, &rbacv1.Role{}, func(have client.Object) bool {
		h := have.(*rbacv1.Role)
		same := equality.Semantic.DeepEqual(h.Rules, role.Rules)
		h.Rules = role.Rules
		return same
	}); err != nil {
		return ctrl.Result{}, err
	}
	if err := g.apply(ctx, key, binding, &rbacv1.RoleBinding{}, func(have client.Object) bool {
		h := have.(*rbacv1.RoleBinding)
		same := equality.Semantic.DeepEqual(h.Subjects, binding.Subjects)
		h.Subjects = binding.Subjects
		return same && h.RoleRef == binding.RoleRef
	}); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// apply creates want, or updates the existing object when sync (which copies want's content into
// it) reports a difference. A RoleBinding whose roleRef differs cannot be updated and is recreated.
func (g *SecretGrants) apply(ctx context.Context, key types.NamespacedName, want, have client.Object, sync func(client.Object) bool) error {
	err := g.Reader.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		if err := g.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("granting the interceptor its TLS Secrets in %s (%T): %w", key.Namespace, want, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the interceptor's TLS Secret grant %s: %w", key, err)
	}
	if sync(have) {
		return nil
	}
	if b, ok := have.(*rbacv1.RoleBinding); ok && b.RoleRef != want.(*rbacv1.RoleBinding).RoleRef {
		if err := g.Client.Delete(ctx, have); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing RoleBinding %s: %w", key, err)
		}
		return g.Client.Create(ctx, want)
	}
	if err := g.Client.Update(ctx, have); err != nil {
		return fmt.Errorf("updating the interceptor's TLS Secret grant %s: %w", key, err)
	}
	return nil
}

// byNamespace maps an HTTPScaledObject to its namespace's SecretGrants request.
func byNamespace(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}}}
}

var _ handler.MapFunc = byNamespace

// tlsChanged passes the HTTPScaledObject events that can change a namespace's grant: an object with
// spec.tls created or deleted, spec.tls changed, deletion started, or an object with spec.tls moved
// to another fleet.
var tlsChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return e.Object.(*v1.HTTPScaledObject).Spec.TLS != nil },
	DeleteFunc: func(e event.DeleteEvent) bool { return e.Object.(*v1.HTTPScaledObject).Spec.TLS != nil },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1.HTTPScaledObject), e.ObjectNew.(*v1.HTTPScaledObject)
		moved := o.Spec.FleetName() != n.Spec.FleetName() && (o.Spec.TLS != nil || n.Spec.TLS != nil)
		return moved || !equality.Semantic.DeepEqual(o.Spec.TLS, n.Spec.TLS) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
	},
	GenericFunc: func(event.GenericEvent) bool { return true },
}
