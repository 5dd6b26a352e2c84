package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// The binary with --admin-auth=token, as the chart runs it, against a real API server: the probes
// answer without a token, counts only for the allowed ServiceAccount's token bound to the audience.
func TestAdminAuthAgainstAPIServer(t *testing.T) {
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	for _, ns := range []string{installNS, "team-a"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(ns, sa string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{admin.DefaultTokenAudience}, ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scaler, tenant := token(installNS, "httpscale-scaler"), token("team-a", "default")
	writeTable(t, cs, []routing.Entry{{Namespace: "team-a", Name: "web", Hosts: []string{"web.example.com"}, Service: "web", Port: 80}})

	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := testenv.FreeAddr(t)
	startRun(t, []string{
		"--kubeconfig=" + kubeconfig, "--health-probe-bind-address=" + testenv.FreeAddr(t),
		"--proxy-bind-address=" + testenv.FreeAddr(t), "--admin-bind-address=" + adminAddr,
		"--namespace=" + installNS, "--drain-delay=0", "--drain-timeout=5s",
		"--admin-auth=token", "--admin-allowed-service-accounts=" + installNS + "/httpscale-scaler",
	}, runOptions{})

	call := func(path, tok string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+adminAddr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, 60*time.Second, "the interceptor is ready (its probe answers without a token)", func() bool {
		return call(admin.PathReadyz, "") == http.StatusOK
	})
	for _, c := range []struct {
		what, path, token string
		want              int
	}{
		{"no token", admin.PathCounts, "", http.StatusUnauthorized},
		{"a tenant's token with the audience", admin.PathCounts, tenant, http.StatusForbidden},
		{"a tenant's token with the audience: wake", admin.PathWake, tenant, http.StatusForbidden},
		{"the scaler's token", admin.PathStatus, scaler, http.StatusOK},
		{"the liveness probe", admin.PathHealthz, "", http.StatusOK},
	} {
		if got := call(c.path, c.token); got != c.want {
			t.Errorf("%s on %s: %d, want %d", c.what, c.path, got, c.want)
		}
	}
	counts, err := admin.Client{HTTP: &http.Client{Transport: bearerTransport(scaler)}}.Counts(ctx, "http://"+adminAddr, 0, "")
	if err != nil || counts.Epoch == "" || len(counts.Apps) != 1 {
		t.Errorf("the scaler's counts: %+v %v, want the one routed app", counts, err)
	}

	// The stale-if-error counters are served, and listed in docs/metrics.md as served.
	req, _ := http.NewRequest(http.MethodGet, "http://"+adminAddr+admin.PathMetrics, nil)
	req.Header.Set("Authorization", "Bearer "+scaler)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{admin.MetricStaleAccepted, admin.MetricReviewErrors} {
		if !strings.Contains(string(body), "# TYPE "+name+" counter\n"+name+" 0\n") {
			t.Errorf("/metrics lacks the counter %s at 0", name)
		}
		if !strings.Contains(string(doc), "| `"+name+"` | counter | |") {
			t.Errorf("docs/metrics.md does not list %s as an unlabelled counter", name)
		}
	}
}

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
