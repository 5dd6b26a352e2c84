package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	t.Run("cut off from the API server", func(t *testing.T) {
		testCutOff(t, cfg, icfg, file, token)
	})
}

// testCutOff runs an Auth whose client reaches the API server through a forwarder the test stops:
// the scaler's polls (the token file, as TokenTransport reads it) cost one review, go on being
// accepted on it while no review can be made, until the token's own expiry; a token never reviewed
// gets 503; once the API server is reachable again, new tokens are reviewed again.
func testCutOff(t *testing.T, cfg, icfg *rest.Config, scalerFile string, token func(ns, sa string, audiences ...string) string) {
	ctx := context.Background()
	api, err := url.Parse(cfg.Host)
	if err != nil || api.Host == "" {
		t.Fatalf("API server address %q: %v", cfg.Host, err)
	}
	fwd := startForwarder(t, "127.0.0.1:0", api.Host)
	pcfg := rest.CopyConfig(icfg)
	pcfg.Host = "https://" + fwd.addr
	pcs := kubernetes.NewForConfigOrDie(pcfg)
	reviews := &countingReviewer{next: pcs.AuthenticationV1().TokenReviews()}
	clock := &testClock{now: time.Now()}
	reg := prometheus.NewRegistry()
	auth, err := admin.NewAuth(admin.AuthOptions{
		Tokens: reviews, Access: pcs.AuthorizationV1().SubjectAccessReviews(),
		Allowed: []string{"httpscale-system/httpscale-scaler"}, Now: clock.Now, Registerer: reg, Log: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(auth.Wrap(admin.NewHandler(admin.HandlerOptions{
		Status:  func() admin.Status { return admin.Status{TableVersion: "v1"} },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) }),
	})))
	t.Cleanup(srv.Close)
	t.Cleanup(auth.Wait)
	rt, err := admin.TokenTransport(scalerFile, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	scaler := admin.Client{HTTP: &http.Client{Transport: rt}}
	poll := func() error {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := scaler.Status(cctx, srv.URL)
		auth.Wait()
		return err
	}
	get := func(path, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		auth.Wait()
		return resp.StatusCode, string(b)
	}

	for range 20 {
		if err := poll(); err != nil {
			t.Fatalf("the scaler's poll: %v", err)
		}
	}
	if n := reviews.count(); n != 1 {
		t.Fatalf("%d TokenReviews for 20 polls with the scaler's token, want 1", n)
	}
	prom := token("monitoring", "prometheus")
	if code, body := get(admin.PathMetrics, prom); code != http.StatusOK {
		t.Fatalf("Prometheus before the cut: %d %s", code, body)
	}

	fwd.stop()
	if _, err := pcs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil || apierrors.IsForbidden(err) {
		t.Fatalf("the API server still answers through the stopped forwarder: %v", err)
	}
	clock.add(2 * time.Minute) // past the decisions' TTL: every token is due a review
	if err := poll(); err != nil {
		t.Fatalf("the scaler's poll while the API server cannot be reached: %v", err)
	}
	if code, body := get(admin.PathMetrics, prom); code != http.StatusOK {
		t.Fatalf("Prometheus while the API server cannot be reached: %d %s", code, body)
	}
	fresh := token("httpscale-system", "httpscale-scaler", admin.DefaultTokenAudience)
	if code, body := get(admin.PathStatus, fresh); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot review the token now") {
		t.Fatalf("a token never reviewed while the API server cannot be reached: %d %q, want 503", code, body)
	}
	if n := counter(t, reg, admin.MetricStaleAccepted); n < 2 {
		t.Errorf("%s = %v, want the scaler's and Prometheus' calls counted", admin.MetricStaleAccepted, n)
	}

	raw, err := os.ReadFile(scalerFile)
	if err != nil {
		t.Fatal(err)
	}
	expiry := jwtExpiry(t, string(raw))
	clock.set(expiry.Add(-time.Second))
	if err := poll(); err != nil {
		t.Fatalf("the scaler's poll a second before its token expires: %v", err)
	}
	clock.set(expiry)
	if code, body := get(admin.PathStatus, string(raw)); code != http.StatusUnauthorized {
		t.Fatalf("the scaler's token at its expiry: %d %q, want 401", code, body)
	}

	fwd = startForwarder(t, fwd.addr, api.Host) // reachable again
	clock.set(time.Now())
	if code, body := get(admin.PathStatus, fresh); code != http.StatusOK {
		t.Fatalf("a new token once the API server is reachable again: %d %q", code, body)
	}
}

type countingReviewer struct {
	next admin.TokenReviewer
	mu   sync.Mutex
	n    int
}

func (c *countingReviewer) Create(ctx context.Context, r *authnv1.TokenReview, o metav1.CreateOptions) (*authnv1.TokenReview, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.next.Create(ctx, r, o)
}

func (c *countingReviewer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) { c.set(c.Now().Add(d)) }

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func jwtExpiry(t *testing.T, tok string) time.Time {
	t.Helper()
	var c struct{ Exp int64 }
	p, err := base64.RawURLEncoding.DecodeString(splitPayload(tok))
	if err != nil || json.Unmarshal(p, &c) != nil || c.Exp == 0 {
		t.Fatalf("token without an expiry: %v", err)
	}
	return time.Unix(c.Exp, 0)
}

// forwarder passes TCP connections on to target until stopped, when it closes them all: the API
// server behind it becomes unreachable (connections reset, new ones refused).
type forwarder struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startForwarder(t *testing.T, addr, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(f.stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close(); c.Close() }()
			go func() { _, _ = io.Copy(c, u); u.Close(); c.Close() }()
		}
	}()
	return f
}

func (f *forwarder) stop() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}
