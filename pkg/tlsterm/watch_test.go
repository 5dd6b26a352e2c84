package tlsterm_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/tlsterm"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// The Watcher against a real API server, as a user that may get, list and watch only the two
// Secrets the table names (a Role with resourceNames, what the operator grants the interceptor):
// certificates load, reload when a Secret changes, and a Secret that is invalid, fixed or deleted
// changes only its own app's handshakes.
func TestWatcherAgainstAPIServer(t *testing.T) {
	env, cfg := testenv.StartT(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const ns = "shop"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"},
		ResourceNames: []string{"web-tls", "api-tls"},
	}}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "interceptor"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tls"}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: "interceptor"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	limited := kubernetes.NewForConfigOrDie(u.Config())
	// The user really is limited: the namespace's other Secrets and a plain list are denied.
	if _, err := limited.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing every Secret of %s as the limited user: got %v, want forbidden", ns, err)
	}

	web1, web2, api := tlstermtest.NewCert("web.example.com"), tlstermtest.NewCert("web.example.com"), tlstermtest.NewCert("api.example.com")
	create := func(s *corev1.Secret) {
		t.Helper()
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(web1.Secret(ns, "web-tls"))
	broken := api.Secret(ns, "api-tls")
	broken.Data[corev1.TLSPrivateKeyKey] = web1.KeyPEM // a key that does not belong to the certificate
	create(broken)

	store := tlsterm.NewStore("")
	w := tlsterm.NewWatcher(limited, store, testr.New(t))
	w.OnTable(table(t, entry(ns, "web", "web-tls", "web.example.com"), entry(ns, "api", "api-tls", "api.example.com")))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Start(wctx) }()
	addr := serve(t, store)

	presents := func(what, sni string, want *tlstermtest.Cert) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := handshake(addr, sni)
			switch {
			case want == nil && err != nil:
				return
			case want != nil && err == nil && got == want.Serial.String():
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: SNI %s got certificate %q (error %v), want %v", what, sni, got, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	presents("loaded", "web.example.com", &web1)
	presents("an invalid Secret serves nothing", "api.example.com", nil)

	s, err := admin.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = web2.Secret(ns, "web-tls").Data
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	presents("reloaded after the Secret changed", "web.example.com", &web2)
	presents("the invalid one still serves nothing", "api.example.com", nil)

	s, err = admin.CoreV1().Secrets(ns).Get(ctx, "api-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = api.Secret(ns, "api-tls").Data
	if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	presents("fixed", "api.example.com", &api)
	presents("the other app unchanged", "web.example.com", &web2)

	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "web-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	presents("deleted", "web.example.com", nil)
	presents("the other app after a deletion", "api.example.com", &api)

	// An app leaving the table stops its watch.
	w.OnTable(table(t, entry(ns, "api", "api-tls", "api.example.com")))
	if n := w.Watching(); n != 1 {
		t.Fatalf("watching %d Secrets after one app left, want 1", n)
	}
}
