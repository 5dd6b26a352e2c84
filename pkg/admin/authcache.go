package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// acceptance is a token the API server accepted: it is let in without a review until fresh, and
// reviewed again in the background while in use (see Auth).
type acceptance struct {
	token string // to review it again
	peer  bool   // reviewed with the admin audience (else as a metrics scraper)
	user  string
	// fresh ends the acceptance's CacheTTL; expiry is the token's own exp claim (authentic once the
	// API server has accepted the token, whose signature covers it), zero for a token without one.
	fresh, expiry time.Time
	// reviewing is closed when the review in flight ends; nil when none is.
	reviewing chan struct{}
	// retry: after a failed review, none is started again before it.
	retry time.Time
	// staleSince is when it was first let in on a stale review in this outage (zero: it was not).
	staleSince time.Time
}

// canServeStale tells whether a is still good for stale-if-error: only within the token's expiry,
// so never for a token without one.
func (p *acceptance) canServeStale(now time.Time) bool {
	return !p.expiry.IsZero() && now.Before(p.expiry)
}

// checkAccepted answers a token accepted before: ok false when the token has no acceptance (or it
// expired), else the status to answer: 0 within its CacheTTL, or past it while the API server cannot
// review it; the refusal of a review made now; 503 when no review can be made and the acceptance
// cannot be served stale.
func (a *Auth) checkAccepted(ctx context.Context, key cacheKey, now time.Time) (int, bool) {
	a.mu.Lock()
	p, ok := a.accepted.Get(key)
	if !ok {
		a.mu.Unlock()
		return 0, false
	}
	if !p.expiry.IsZero() && !now.Before(p.expiry) {
		a.accepted.Remove(key)
		a.mu.Unlock()
		return 0, false // the claims refuse it as expired
	}
	if now.Before(p.fresh) {
		// Reviewed again before the TTL ends, so that a caller in use never waits for a review,
		// and an API server that stopped answering is known before the TTL ends.
		// (Not near the token's expiry, where the TTL is cut short: its client has a new one then.)
		if !now.Before(p.fresh.Add(-a.o.CacheTTL/4)) && (p.expiry.IsZero() || p.fresh.Before(p.expiry)) {
			a.revalidateLocked(key, p, now)
		}
		a.mu.Unlock()
		return 0, true
	}
	if a.down && p.canServeStale(now) {
		a.revalidateLocked(key, p, now)
		a.acceptStaleLocked(p, now)
		a.mu.Unlock()
		return 0, true
	}
	done := a.revalidateLocked(key, p, now)
	a.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return http.StatusServiceUnavailable, true
	}
	now = a.o.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.accepted.Get(key); ok {
		switch {
		case now.Before(p.fresh):
			return 0, true
		case a.down && p.canServeStale(now):
			a.acceptStaleLocked(p, now)
			return 0, true
		}
		return http.StatusServiceUnavailable, true
	}
	if d, ok := a.refused.Get(key); ok && now.Before(d.expires) {
		return d.code, true
	}
	return 0, false
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// revalidateLocked starts a background review of p unless one is running or a failed one is too
// recent, and returns a channel closed when the review in flight (if any) has ended. Reviews of
// accepted tokens are not charged to ReviewRate: their number is bounded by the accepted tokens
// (the fleet's own and authorized scrapers), so callers forging tokens cannot crowd them out.
func (a *Auth) revalidateLocked(key cacheKey, p *acceptance, now time.Time) <-chan struct{} {
	if p.reviewing != nil {
		return p.reviewing
	}
	if now.Before(p.retry) {
		return closedChan
	}
	done := make(chan struct{})
	p.reviewing = done
	a.bg.Add(1)
	go a.revalidate(key, p, done)
	return done
}

func (a *Auth) revalidate(key cacheKey, p *acceptance, done chan struct{}) {
	defer a.bg.Done()
	defer close(done)
	ctx := context.Background() // not the caller's: its answer serves every caller of the token
	d, err := a.review(ctx, p.token, p.peer)
	now := a.o.Now()
	if err != nil {
		a.failed(ctx, err)
		a.o.Log.V(1).Info("reviewing an admin port caller's token again failed", "user", p.user, "error", err.Error())
	} else {
		a.answered()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p.reviewing = nil
	switch {
	case err != nil:
		p.retry = now.Add(a.o.RetryInterval)
	case d.code == 0:
		p.fresh = freshUntil(now, a.o.CacheTTL, p.expiry)
		p.staleSince = time.Time{}
	default:
		if cur, ok := a.accepted.Get(key); ok && cur == p {
			a.accepted.Remove(key)
		}
		a.refuseLocked(key, d, now, p.expiry)
		a.o.Log.Info("an admin port caller accepted before is refused now", "user", p.user, "status", d.code)
	}
}

func (a *Auth) acceptStaleLocked(p *acceptance, now time.Time) {
	a.stale.Inc()
	a.downStale++
	if p.staleSince.IsZero() {
		p.staleSince = now
		a.o.Log.Info("accepting an admin port caller on an earlier review: the API server cannot review its token now",
			"user", p.user, "reviewedUntil", p.fresh, "acceptedUntil", p.expiry)
	}
}

// failed records a review that did not end in the API server's decision. Only a review the API
// server did not answer (no connection, a timeout, 5xx, 429) marks it down, which lets accepted
// tokens in on their earlier review; a review ended because its caller went away says nothing.
func (a *Auth) failed(ctx context.Context, err error) {
	a.errs.Inc()
	if ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !unanswered(err) {
		a.down = false // it answered, with an error (e.g. 403: the interceptor may not review)
		return
	}
	if !a.down {
		a.down, a.downStale = true, 0
		a.o.Log.Info("the API server cannot review admin port callers' tokens; tokens accepted before stay accepted until they expire", "error", err.Error())
	}
}

// answered records a review the API server decided.
func (a *Auth) answered() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		a.o.Log.Info("the API server reviews admin port callers' tokens again", "staleAccepted", a.downStale)
	}
	a.down = false
}

// unanswered tells whether err means the API server gave no decision it stands by: no answer at
// all (connection refused or reset, a timeout), or a 5xx or 429 status.
func unanswered(err error) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code >= 500 || code == http.StatusTooManyRequests
	}
	return true
}

func freshUntil(now time.Time, ttl time.Duration, expiry time.Time) time.Time {
	t := now.Add(ttl)
	if !expiry.IsZero() && expiry.Before(t) {
		t = expiry
	}
	return t
}

// accept remembers p, accepted by a review at now.
func (a *Auth) accept(key cacheKey, p *acceptance, now time.Time) {
	p.fresh = freshUntil(now, a.o.CacheTTL, p.expiry)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused.Remove(key)
	a.accepted.Add(key, p)
}

// refuse remembers d for NegativeTTL (never past the token's expiry) and returns d.code.
func (a *Auth) refuse(key cacheKey, d decision, now, tokenExpiry time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refuseLocked(key, d, now, tokenExpiry)
	return d.code
}

func (a *Auth) refuseLocked(key cacheKey, d decision, now, tokenExpiry time.Time) {
	d.expires = freshUntil(now, a.o.NegativeTTL, tokenExpiry)
	a.refused.Add(key, d)
}

func (a *Auth) cachedRefusal(key cacheKey, now time.Time) (decision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.refused.Get(key)
	if !ok || !now.Before(d.expires) {
		return decision{}, false
	}
	return d, true
}

// CacheLen returns the number of decisions cached, acceptances and refusals (for tests and metrics).
func (a *Auth) CacheLen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accepted.Len() + a.refused.Len()
}

// Wait blocks until the background reviews started so far have ended.
func (a *Auth) Wait() { a.bg.Wait() }
