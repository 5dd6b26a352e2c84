package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/httpscale/httpscale/pkg/admin"
)

// fakeJWT returns a token shaped like a ServiceAccount token with the given claims (unsigned: the
// fake reviewer decides what is valid, as the API server does).
func fakeJWT(sub string, aud []string, exp time.Time, nonce string) string {
	payload, _ := json.Marshal(map[string]any{"sub": sub, "aud": aud, "exp": exp.Unix(), "jti": nonce})
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(payload) + "." + enc([]byte("sig-"+nonce))
}

// reviewer is a fake API server: tokens it issued (valid) authenticate as their subject, for the
// audiences they were issued for; it counts the reviews.
type reviewer struct {
	mu      sync.Mutex
	valid   map[string][]string // token → audiences
	reviews int
	fail    error
	// mayScrape are the users whose SubjectAccessReview for /metrics is allowed.
	mayScrape map[string]bool
	access    int
}

func (f *reviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews++
	if f.fail != nil {
		return nil, f.fail
	}
	auds, ok := f.valid[tr.Spec.Token]
	want := tr.Spec.Audiences
	if len(want) == 0 {
		want = []string{"https://kubernetes.default.svc"}
	}
	out := tr.DeepCopy()
	if !ok || !contains(auds, want[0]) {
		out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		return out, nil
	}
	var c struct{ Sub string }
	p, _ := base64.RawURLEncoding.DecodeString(splitPayload(tr.Spec.Token))
	_ = json.Unmarshal(p, &c)
	out.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: c.Sub}, Audiences: want[:1]}
	return out, nil
}

type accessReviewer struct{ f *reviewer }

func (a accessReviewer) Create(_ context.Context, r *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	a.f.access++
	out := r.DeepCopy()
	out.Status.Allowed = r.Spec.NonResourceAttributes != nil && r.Spec.NonResourceAttributes.Path == "/metrics" &&
		r.Spec.NonResourceAttributes.Verb == "get" && a.f.mayScrape[r.Spec.User]
	return out, nil
}

func splitPayload(tok string) string {
	var parts [3]string
	n := 0
	start := 0
	for i := range len(tok) {
		if tok[i] == '.' && n < 2 {
			parts[n] = tok[start:i]
			n++
			start = i + 1
		}
	}
	parts[n] = tok[start:]
	return parts[1]
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (f *reviewer) issue(sub string, aud []string, exp time.Time, nonce string) string {
	tok := fakeJWT(sub, aud, exp, nonce)
	f.mu.Lock()
	f.valid[tok] = aud
	f.mu.Unlock()
	return tok
}

func (f *reviewer) counts() (reviews, access int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews, f.access
}

type authRun struct {
	t    *testing.T
	f    *reviewer
	now  time.Time
	auth *admin.Auth
	srv  http.Handler
}

const scaler = "system:serviceaccount:httpscale-system:httpscale-scaler"

func newAuthRun(t *testing.T, mod func(*admin.AuthOptions)) *authRun {
	r := &authRun{t: t, f: &reviewer{valid: map[string][]string{}, mayScrape: map[string]bool{}}, now: time.Unix(1_800_000_000, 0)}
	o := admin.AuthOptions{
		Tokens:  r.f,
		Access:  accessReviewer{r.f},
		Allowed: []string{"httpscale-system/httpscale-scaler", "httpscale-system/httpscale-operator"},
		Now:     func() time.Time { return r.now },
	}
	if mod != nil {
		mod(&o)
	}
	a, err := admin.NewAuth(o)
	if err != nil {
		t.Fatal(err)
	}
	r.auth = a
	r.srv = a.Wrap(admin.NewHandler(admin.HandlerOptions{
		Status:  func() admin.Status { return admin.Status{TableVersion: "v1"} },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }),
	}))
	return r
}

func (r *authRun) call(path, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	r.srv.ServeHTTP(rec, req)
	return rec
}

func (r *authRun) expect(path, token string, code int) {
	r.t.Helper()
	if got := r.call(path, token); got.Code != code {
		r.t.Fatalf("GET %s: %d %q, want %d", path, got.Code, got.Body.String(), code)
	}
}

func TestAuthProbesStayOpenEverythingElseNeedsAToken(t *testing.T) {
	r := newAuthRun(t, nil)
	r.expect(admin.PathHealthz, "", http.StatusOK)
	r.expect(admin.PathReadyz, "", http.StatusOK)
	for _, p := range []string{admin.PathStatus, admin.PathCounts, admin.PathWake, admin.PathMetrics, "/anything"} {
		rec := r.call(p, "")
		if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s without a token: %d WWW-Authenticate=%q, want 401 with a challenge", p, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
	}
	if n, _ := r.f.counts(); n != 0 {
		t.Errorf("%d reviews for requests without a token", n)
	}
}

func TestAuthAllowsTheFleetsServiceAccountsAndCaches(t *testing.T) {
	r := newAuthRun(t, nil)
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
	for range 10 {
		r.expect(admin.PathStatus, tok, http.StatusOK)
	}
	if n, _ := r.f.counts(); n != 1 {
		t.Fatalf("%d reviews for 10 calls with one token, want 1 (cached)", n)
	}
	r.now = r.now.Add(61 * time.Second) // past the cache's TTL
	r.expect(admin.PathStatus, tok, http.StatusOK)
	if n, _ := r.f.counts(); n != 2 {
		t.Fatalf("%d reviews after the TTL, want 2", n)
	}
	// The allowed ServiceAccounts may scrape too, without an access review.
	r.expect(admin.PathMetrics, tok, http.StatusOK)
	if _, a := r.f.counts(); a != 0 {
		t.Errorf("%d access reviews for an allowed ServiceAccount", a)
	}
}

func TestAuthRefusesOtherCallersWithoutAskingTheAPIServer(t *testing.T) {
	r := newAuthRun(t, nil)
	exp := r.now.Add(time.Hour)
	cases := map[string]struct {
		token string
		code  int
	}{
		"a tenant's ServiceAccount with the audience": {r.f.issue("system:serviceaccount:team-a:default", []string{admin.DefaultTokenAudience}, exp, "t"), http.StatusForbidden},
		"the scaler's default token (API audience)":   {r.f.issue(scaler, []string{"https://kubernetes.default.svc"}, exp, "d"), http.StatusUnauthorized},
		"not a JWT":            {"hello", http.StatusUnauthorized},
		"an expired token":     {r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(-time.Second), "e"), http.StatusUnauthorized},
		"a token over 8 KiB":   {fakeJWT(scaler, []string{admin.DefaultTokenAudience}, exp, string(make([]byte, 9000))), http.StatusUnauthorized},
		"bad base64 in claims": {"a.!!!.c", http.StatusUnauthorized},
	}
	for name, c := range cases {
		for _, p := range []string{admin.PathCounts, admin.PathWake, admin.PathStatus} {
			if got := r.call(p, c.token); got.Code != c.code {
				t.Errorf("%s on %s: %d, want %d", name, p, got.Code, c.code)
			}
		}
	}
	if n, _ := r.f.counts(); n != 0 {
		t.Errorf("%d TokenReviews for tokens the claims already rule out, want 0", n)
	}
}

// A forged token claiming the scaler's identity is reviewed, refused, and remembered for a while.
func TestAuthForgedTokenIsReviewedOnceAndRefused(t *testing.T) {
	r := newAuthRun(t, nil)
	forged := fakeJWT(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "forged") // not issued
	for range 5 {
		r.expect(admin.PathCounts, forged, http.StatusUnauthorized)
	}
	if n, _ := r.f.counts(); n != 1 {
		t.Fatalf("%d reviews of one forged token, want 1 (the refusal is cached)", n)
	}
	r.now = r.now.Add(11 * time.Second)
	r.expect(admin.PathCounts, forged, http.StatusUnauthorized)
	if n, _ := r.f.counts(); n != 2 {
		t.Fatalf("%d reviews after the negative TTL, want 2", n)
	}
}

// A caller sending a new forged token each time costs the API server at most the review rate; the
// rest are answered 503 at once, and the cache stays bounded.
func TestAuthBoundsReviewsAndCache(t *testing.T) {
	r := newAuthRun(t, func(o *admin.AuthOptions) { o.ReviewRate, o.ReviewBurst, o.CacheSize = 5, 10, 100 })
	unavailable := 0
	for i := range 1000 {
		tok := fakeJWT(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), fmt.Sprint(i))
		switch rec := r.call(admin.PathCounts, tok); rec.Code {
		case http.StatusServiceUnavailable:
			unavailable++
			if rec.Header().Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
		case http.StatusUnauthorized:
		default:
			t.Fatalf("forged token %d: %d", i, rec.Code)
		}
	}
	if n, _ := r.f.counts(); n != 10 {
		t.Errorf("%d reviews for 1000 forged tokens at one instant, want the burst (10)", n)
	}
	if unavailable != 990 {
		t.Errorf("%d answered 503, want 990", unavailable)
	}
	r.now = r.now.Add(time.Second) // 5 more reviews allowed
	for i := range 20 {
		r.call(admin.PathCounts, fakeJWT(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), fmt.Sprint("later", i)))
	}
	if n, _ := r.f.counts(); n != 15 {
		t.Errorf("%d reviews a second later, want 15", n)
	}
	for i := range 500 {
		r.call(admin.PathCounts, fmt.Sprint("garbage", i)) // refused by their claims, cached
	}
	if n := r.auth.CacheLen(); n > 100 {
		t.Errorf("cache holds %d decisions, want at most 100", n)
	}
}

func TestAuthMetricsForPrometheus(t *testing.T) {
	r := newAuthRun(t, nil)
	exp := r.now.Add(time.Hour)
	prom := r.f.issue("system:serviceaccount:monitoring:prometheus", []string{"https://kubernetes.default.svc"}, exp, "p")
	tenant := r.f.issue("system:serviceaccount:team-a:default", []string{"https://kubernetes.default.svc"}, exp, "t")
	r.f.mayScrape["system:serviceaccount:monitoring:prometheus"] = true
	r.expect(admin.PathMetrics, prom, http.StatusOK)
	r.expect(admin.PathMetrics, tenant, http.StatusForbidden)
	// A scraper may read metrics and nothing else.
	r.expect(admin.PathCounts, prom, http.StatusUnauthorized)
	r.expect(admin.PathStatus, prom, http.StatusUnauthorized)
	if _, a := r.f.counts(); a != 2 {
		t.Errorf("%d access reviews, want 2", a)
	}

	// Without an access reviewer only the fleet's own ServiceAccounts scrape.
	r = newAuthRun(t, func(o *admin.AuthOptions) { o.Access = nil })
	prom = r.f.issue("system:serviceaccount:monitoring:prometheus", []string{"https://kubernetes.default.svc"}, exp, "p")
	r.expect(admin.PathMetrics, prom, http.StatusUnauthorized)
}

func TestAuthReviewErrorIsNotCached(t *testing.T) {
	r := newAuthRun(t, nil)
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
	r.f.fail = errors.New("API server down")
	rec := r.call(admin.PathCounts, tok)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("review failing: %d, want 503 with Retry-After", rec.Code)
	}
	r.f.fail = nil
	r.expect(admin.PathCounts, tok, http.StatusNotFound) // authenticated; the handler here serves no counts
}

func TestNewAuthRejectsMalformedServiceAccounts(t *testing.T) {
	for _, sa := range []string{"scaler", "/x", "ns/", "a/b/c"} {
		if _, err := admin.NewAuth(admin.AuthOptions{Tokens: &reviewer{}, Allowed: []string{sa}}); err == nil {
			t.Errorf("allowed ServiceAccount %q accepted", sa)
		}
	}
}

// A negative bound is a mistake in the caller's code, not a request for the default.
func TestNewAuthRejectsNegativeBounds(t *testing.T) {
	for name, o := range map[string]admin.AuthOptions{
		"CacheSize":   {CacheSize: -1},
		"NegativeTTL": {NegativeTTL: -time.Second},
		"ReviewRate":  {ReviewRate: -1},
	} {
		o.Tokens = &reviewer{}
		if _, err := admin.NewAuth(o); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("%s negative: error %v, want one saying it must not be negative", name, err)
		}
	}
	if _, err := admin.NewAuth(admin.AuthOptions{Tokens: &reviewer{}}); err != nil {
		t.Errorf("zero options (the defaults): %v", err)
	}
}
