package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Stale-if-error: while the API server cannot review tokens, a token accepted by an earlier review
// stays accepted until the token's own expiry; nothing else is let in. Time is the run's clock.

var errNoConnection = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

// newStaleRun returns an authRun whose metrics are registered in reg.
func newStaleRun(t *testing.T, mod func(*admin.AuthOptions)) (*authRun, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	r := newAuthRun(t, func(o *admin.AuthOptions) {
		o.Registerer = reg
		if mod != nil {
			mod(o)
		}
	})
	return r, reg
}

func (r *authRun) setFail(err error) {
	r.f.mu.Lock()
	r.f.fail = err
	r.f.mu.Unlock()
}

func (r *authRun) revoke(tok string) {
	r.f.mu.Lock()
	delete(r.f.valid, tok)
	r.f.mu.Unlock()
}

// expectSettled calls path, waits for the background reviews it started, and checks the status.
func (r *authRun) expectSettled(path, token string, code int) *http.Response {
	r.t.Helper()
	rec := r.call(path, token)
	r.auth.Wait()
	if rec.Code != code {
		r.t.Fatalf("at %s: GET %s: %d %q, want %d", r.now.Format(time.TimeOnly), path, rec.Code, rec.Body.String(), code)
	}
	return rec.Result()
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}

func TestAuthStaleIfErrorKeepsAnAcceptedTokenUntilItsExpiryNeverBeyond(t *testing.T) {
	r, reg := newStaleRun(t, nil)
	expiry := r.now.Add(10 * time.Minute)
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, expiry, "1")
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)

	r.setFail(errNoConnection)
	r.now = r.now.Add(61 * time.Second) // past the TTL: a review is due and cannot be made
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	if n := counter(t, reg, admin.MetricStaleAccepted); n != 1 {
		t.Errorf("%s = %v, want 1", admin.MetricStaleAccepted, n)
	}
	reviews, _ := r.f.counts()
	for range 50 { // callers during the outage: none waits for a review, at most one per RetryInterval
		r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	}
	if n, _ := r.f.counts(); n != reviews {
		t.Errorf("%d reviews for 50 calls at one instant of the outage, want none", n-reviews)
	}
	r.now = expiry.Add(-time.Second)
	r.expectSettled(admin.PathCounts, tok, http.StatusNotFound) // accepted; the handler here serves no counts
	if n := counter(t, reg, admin.MetricStaleAccepted); n != 52 {
		t.Errorf("%s = %v, want 52", admin.MetricStaleAccepted, n)
	}
	if n := counter(t, reg, admin.MetricReviewErrors); n < 2 {
		t.Errorf("%s = %v, want the failed reviews counted", admin.MetricReviewErrors, n)
	}
	r.now = expiry // the token's own expiry ends it, outage or not
	r.expectSettled(admin.PathStatus, tok, http.StatusUnauthorized)
	r.now = expiry.Add(time.Hour)
	r.expectSettled(admin.PathStatus, tok, http.StatusUnauthorized)
}

func TestAuthStaleIfErrorNeverLetsInATokenNotAcceptedBefore(t *testing.T) {
	r, reg := newStaleRun(t, nil)
	exp := r.now.Add(time.Hour)
	forged := fakeJWT(scaler, []string{admin.DefaultTokenAudience}, exp, "forged")
	revoked := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, exp, "revoked")
	r.expectSettled(admin.PathStatus, forged, http.StatusUnauthorized)
	r.expectSettled(admin.PathStatus, revoked, http.StatusOK)
	r.revoke(revoked)
	r.now = r.now.Add(61 * time.Second) // the review due now refuses it
	r.expectSettled(admin.PathStatus, revoked, http.StatusUnauthorized)

	r.setFail(errNoConnection)
	never := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, exp, "never")
	rec := r.call(admin.PathStatus, never)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "cannot review the token now") || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a token never reviewed, in an outage: %d %q, want 503 cannot review, with Retry-After", rec.Code, rec.Body.String())
	}
	// A refusal keeps its TTL, and is then not turned into an acceptance; the forged token's has
	// ended already.
	r.expectSettled(admin.PathStatus, revoked, http.StatusUnauthorized)
	r.now = r.now.Add(11 * time.Second)
	for _, tok := range []string{forged, revoked, never} {
		r.expectSettled(admin.PathStatus, tok, http.StatusServiceUnavailable)
	}
	if n := counter(t, reg, admin.MetricStaleAccepted); n != 0 {
		t.Errorf("%s = %v, want 0", admin.MetricStaleAccepted, n)
	}
}

// Only a review the API server did not decide (no answer, 5xx, 429) lets an accepted token in on
// its earlier review; an answer refusing the interceptor itself (its RBAC gone) does not.
func TestAuthStaleIfErrorOnlyWhenTheAPIServerDoesNotAnswer(t *testing.T) {
	gr := schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}
	cases := []struct {
		err   error
		stale bool
	}{
		{errNoConnection, true},
		{context.DeadlineExceeded, true},
		{apierrors.NewServiceUnavailable("etcd down"), true},
		{apierrors.NewInternalError(errors.New("boom")), true},
		{apierrors.NewTooManyRequests("priority and fairness", 1), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{apierrors.NewForbidden(gr, "", errors.New("the interceptor may not create tokenreviews")), false},
		{apierrors.NewUnauthorized("the interceptor's own token expired"), false},
		{apierrors.NewBadRequest("bad"), false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%T %v", c.err, c.err), func(t *testing.T) {
			r, _ := newStaleRun(t, nil)
			tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
			r.expectSettled(admin.PathStatus, tok, http.StatusOK)
			r.setFail(c.err)
			r.now = r.now.Add(61 * time.Second)
			want := http.StatusServiceUnavailable
			if c.stale {
				want = http.StatusOK
			}
			r.expectSettled(admin.PathStatus, tok, want)
		})
	}
}

// The trade-off: a token revoked during an outage is accepted until reviews succeed again (or it
// expires); the first review made then refuses it.
func TestAuthTokenRevokedDuringAnOutageIsRefusedOnceReviewsSucceed(t *testing.T) {
	r, reg := newStaleRun(t, nil)
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	r.setFail(errNoConnection)
	r.revoke(tok)
	r.now = r.now.Add(5 * time.Minute)
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)

	r.setFail(nil)
	r.now = r.now.Add(3 * time.Second) // past RetryInterval: this call starts the review
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	r.expectSettled(admin.PathStatus, tok, http.StatusUnauthorized)
	r.now = r.now.Add(time.Minute)
	r.setFail(errNoConnection) // a new outage does not bring it back
	r.expectSettled(admin.PathStatus, tok, http.StatusServiceUnavailable)
	if n := counter(t, reg, admin.MetricStaleAccepted); n != 2 {
		t.Errorf("%s = %v, want 2", admin.MetricStaleAccepted, n)
	}
}

// Once reviews succeed again the usual TTL applies: no stale acceptance without a new failure.
func TestAuthAfterAnOutageTheUsualTTLApplies(t *testing.T) {
	r, reg := newStaleRun(t, nil)
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	r.setFail(errNoConnection)
	r.now = r.now.Add(2 * time.Minute)
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	r.setFail(nil)
	r.now = r.now.Add(3 * time.Second)
	r.expectSettled(admin.PathStatus, tok, http.StatusOK) // stale, and the review that ends the outage
	stale := counter(t, reg, admin.MetricStaleAccepted)
	reviews, _ := r.f.counts()
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	if n, _ := r.f.counts(); n != reviews || counter(t, reg, admin.MetricStaleAccepted) != stale {
		t.Fatalf("fresh again: %d reviews, stale %v, want none", n-reviews, counter(t, reg, admin.MetricStaleAccepted)-stale)
	}
	// A review failing with an answer (403 for the interceptor) is not an outage.
	r.now = r.now.Add(61 * time.Second)
	r.setFail(apierrors.NewForbidden(schema.GroupResource{Resource: "tokenreviews"}, "", errors.New("no")))
	r.expectSettled(admin.PathStatus, tok, http.StatusServiceUnavailable)
}

// blockingReviewer holds every review until the test releases it with a result, as a review over a
// connection that stopped carrying packets does until its timeout.
type blockingReviewer struct {
	*reviewer
	release chan error
	started chan struct{}
}

func (b blockingReviewer) Create(ctx context.Context, tr *authnv1.TokenReview, o metav1.CreateOptions) (*authnv1.TokenReview, error) {
	b.started <- struct{}{}
	if err := <-b.release; err != nil {
		b.reviewer.mu.Lock()
		b.reviewer.reviews++
		b.reviewer.mu.Unlock()
		return nil, err
	}
	return b.reviewer.Create(ctx, tr, o)
}

// A caller in use (the scaler polling) never waits for a review: its token is reviewed again in the
// background before the TTL ends, so a review that hangs (a silent connection) is known to fail by
// then, and the polls go on answered at once.
func TestAuthReviewsAnAcceptedTokenAheadWithoutMakingItsCallerWait(t *testing.T) {
	b := blockingReviewer{release: make(chan error), started: make(chan struct{}, 1)}
	r, reg := newStaleRun(t, func(o *admin.AuthOptions) { o.Tokens = &b })
	b.reviewer = r.f
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
	go func() { <-b.started; b.release <- nil }()
	r.expectSettled(admin.PathCounts, tok, http.StatusNotFound)

	// Polls every second: the ones in the TTL's last quarter start one review, and are answered
	// while it hangs.
	for range 50 {
		r.now = r.now.Add(time.Second)
		r.call(admin.PathCounts, tok)
	}
	<-b.started
	for range 9 { // up to 59 s: still within the TTL, answered without waiting for the review
		r.now = r.now.Add(time.Second)
		if rec := r.call(admin.PathCounts, tok); rec.Code != http.StatusNotFound {
			t.Fatalf("a poll while the review hangs: %d", rec.Code)
		}
	}
	b.release <- context.DeadlineExceeded // the review times out
	r.auth.Wait()
	r.now = r.now.Add(2 * time.Second) // past the TTL
	go func() {
		for range b.started {
			b.release <- context.DeadlineExceeded
		}
	}()
	r.expectSettled(admin.PathCounts, tok, http.StatusNotFound)
	close(b.started)
	if n := counter(t, reg, admin.MetricStaleAccepted); n != 1 {
		t.Errorf("%s = %v, want 1", admin.MetricStaleAccepted, n)
	}
}

// A hostile client can neither push the fleet's accepted token out of the cache nor starve its
// reviews: garbage and forged tokens are remembered apart, and reviews of accepted tokens are not
// charged to the rate that bounds reviews of new ones.
func TestAuthFloodCannotEvictOrStarveAnAcceptedToken(t *testing.T) {
	r, _ := newStaleRun(t, func(o *admin.AuthOptions) { o.ReviewRate, o.ReviewBurst, o.CacheSize = 5, 10, 100 })
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), "1")
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	flood := func(round string) {
		for i := range 1000 {
			r.call(admin.PathStatus, fmt.Sprint("garbage", round, i))
			r.call(admin.PathStatus, fakeJWT(scaler, []string{admin.DefaultTokenAudience}, r.now.Add(time.Hour), fmt.Sprint(round, i)))
		}
	}
	flood("a")
	r.now = r.now.Add(61 * time.Second)
	flood("b") // the review rate is used up at this instant
	before, _ := r.f.counts()
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	if n, _ := r.f.counts(); n != before+1 {
		t.Fatalf("%d reviews of the accepted token after the flood, want 1", n-before)
	}
	r.setFail(errNoConnection)
	r.now = r.now.Add(61 * time.Second)
	flood("c")
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
}

// A token without an expiry (a legacy Secret token) has no bound to serve it stale to.
func TestAuthStaleIfErrorNeedsATokenExpiry(t *testing.T) {
	r, _ := newStaleRun(t, nil)
	tok := r.f.issue(scaler, []string{admin.DefaultTokenAudience}, time.Unix(0, 0), "noexp") // exp 0: none
	r.expectSettled(admin.PathStatus, tok, http.StatusOK)
	r.setFail(errNoConnection)
	r.now = r.now.Add(61 * time.Second)
	r.expectSettled(admin.PathStatus, tok, http.StatusServiceUnavailable)
}
