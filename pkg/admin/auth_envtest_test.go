package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// The admin port's authentication against a real kube-apiserver: real ServiceAccount tokens (the
// TokenRequest API, as the kubelet's projected volumes get them), real TokenReviews and
// SubjectAccessReviews, made by the interceptor's own ServiceAccount with only the permissions the
// chart gives it.
func TestAuthOnARealAPIServer(t *testing.T) {
	_, cfg := testenv.StartT(t)
	ctx := context.Background()
	adminCS := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"httpscale-system", "team-a", "monitoring"} {
		if _, err := adminCS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sa := range [][2]string{{"httpscale-system", "httpscale-interceptor"}, {"httpscale-system", "httpscale-scaler"},
		{"team-a", "default"}, {"monitoring", "prometheus"}} {
		if _, err := adminCS.CoreV1().ServiceAccounts(sa[0]).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa[1]}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grant := func(name string, rules []rbacv1.PolicyRule, ns, sa string) {
		t.Helper()
		if _, err := adminCS.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := adminCS.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What the chart grants the interceptor for the admin port, and what Prometheus usually has.
	grant("interceptor-reviews", []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, "httpscale-system", "httpscale-interceptor")
	grant("prometheus-metrics", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, "monitoring", "prometheus")

	token := func(ns, sa string, audiences ...string) string {
		t.Helper()
		tr, err := adminCS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// The interceptor reviews with its own ServiceAccount's (default-audience) token.
	icfg := rest.AnonymousClientConfig(cfg)
	icfg.BearerToken = token("httpscale-system", "httpscale-interceptor")
	ics := kubernetes.NewForConfigOrDie(icfg)
	auth, err := admin.NewAuth(admin.AuthOptions{
		Tokens:  ics.AuthenticationV1().TokenReviews(),
		Access:  ics.AuthorizationV1().SubjectAccessReviews(),
		Allowed: []string{"httpscale-system/httpscale-scaler"},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := queue.NewRegistry(nil)
	reg.App("team-b/shop").Received()
	stop := make(chan struct{})
	srv := httptest.NewServer(auth.Wrap(admin.NewHandler(admin.HandlerOptions{
		Status:  func() admin.Status { return admin.Status{TableVersion: "v1"} },
		Counts:  reg,
		Wake:    reg,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) }),
		Stop:    stop,
	})))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })

	// The scaler, as it runs: a projected token file bound to the audience, read by TokenTransport.
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(token("httpscale-system", "httpscale-scaler", admin.DefaultTokenAudience)), 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := admin.TokenTransport(file, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	scalerClient := admin.Client{HTTP: &http.Client{Transport: rt}}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := scalerClient.Counts(cctx, srv.URL, 0, "")
	if err != nil || len(counts.Apps) != 1 || counts.Apps[0].Key != "team-b/shop" {
		t.Fatalf("the scaler's counts: %+v, %v", counts, err)
	}
	if st, err := scalerClient.Status(cctx, srv.URL); err != nil || st.TableVersion != "v1" {
		t.Fatalf("the scaler's status: %+v, %v", st, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = scalerClient.Wake(wctx, srv.URL, func(admin.WakeEvent) {})
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the scaler's wake stream: %v, want it open until the caller ends it", err)
	}

	get := func(path, tok string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tenantAud := token("team-a", "default", admin.DefaultTokenAudience) // any ServiceAccount may ask for any audience
	tenantDefault := token("team-a", "default")
	prom := token("monitoring", "prometheus")
	cases := []struct {
		what, path, token string
		want              int
	}{
		{"a tenant with the audience: counts", admin.PathCounts, tenantAud, http.StatusForbidden},
		{"a tenant with the audience: wake stream", admin.PathWake, tenantAud, http.StatusForbidden},
		{"a tenant with the audience: status", admin.PathStatus, tenantAud, http.StatusForbidden},
		{"a tenant's default token: counts", admin.PathCounts, tenantDefault, http.StatusUnauthorized},
		{"a tenant's default token: metrics", admin.PathMetrics, tenantDefault, http.StatusForbidden},
		{"no token: counts", admin.PathCounts, "", http.StatusUnauthorized},
		{"Prometheus: metrics", admin.PathMetrics, prom, http.StatusOK},
		{"Prometheus: counts", admin.PathCounts, prom, http.StatusUnauthorized},
		{"the kubelet: readyz", admin.PathReadyz, "", http.StatusOK},
	}
	for _, c := range cases {
		if got := get(c.path, c.token); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}

}
