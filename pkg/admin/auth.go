package admin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultTokenAudience is the audience of the ServiceAccount tokens the admin port accepts for its
// peer paths (PathStatus, PathCounts, PathWake): the scaler and the operator mount a projected token
// bound to it, which the API server would not accept for itself, so an interceptor that sees it
// cannot replay it elsewhere.
const DefaultTokenAudience = "httpscale.dev/interceptor-admin"

// TokenReviewer creates TokenReviews (client-go's AuthenticationV1().TokenReviews()).
type TokenReviewer interface {
	Create(ctx context.Context, r *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// AccessReviewer creates SubjectAccessReviews (client-go's AuthorizationV1().SubjectAccessReviews()).
type AccessReviewer interface {
	Create(ctx context.Context, r *authzv1.SubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SubjectAccessReview, error)
}

// AuthOptions configure Auth. Zero bounds take the defaults named below.
type AuthOptions struct {
	// Tokens reviews bearer tokens; required.
	Tokens TokenReviewer
	// Access authorizes callers of PathMetrics outside Allowed: a SubjectAccessReview for "get" on
	// the non-resource URL /metrics, the permission Prometheus' ClusterRole has. Nil: only Allowed
	// callers may scrape.
	Access AccessReviewer
	// Audience the peer paths' tokens must be bound to; "" means DefaultTokenAudience.
	Audience string
	// Allowed are the ServiceAccounts ("namespace/name") that may call every path: the fleet's own
	// scaler and operator.
	Allowed []string
	// CacheSize bounds the acceptances and, apart, the refusals remembered (default 1024 each, so
	// a caller sending garbage cannot push the fleet's own tokens out); CacheTTL is how long an
	// acceptance holds without a new review (default 1 minute, never past the token's expiry);
	// NegativeTTL how long a refusal is kept (default 10 seconds). See the stale-if-error rule on
	// Auth.
	CacheSize             int
	CacheTTL, NegativeTTL time.Duration
	// RetryInterval is the least time between two reviews of one accepted token after a review
	// failed (default 2 seconds).
	RetryInterval time.Duration
	// ReviewRate and ReviewBurst bound the reviews sent to the API server for tokens not in the
	// cache (default 20/s, burst 40): a caller sending new tokens costs the API server a bounded
	// rate, and beyond it gets 503 with Retry-After.
	ReviewRate  float64
	ReviewBurst int
	// ReviewTimeout bounds one review (default 5 seconds).
	ReviewTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Registerer, when set, gets the metrics MetricStaleAccepted and MetricReviewErrors.
	Registerer prometheus.Registerer
	Log        logr.Logger
}

// Auth authenticates the callers of the admin port: every path but the probes needs a bearer
// ServiceAccount token, reviewed by the API server (TokenReview). The peer paths (status, counts,
// wake stream) accept only tokens bound to the audience and issued to an allowed ServiceAccount;
// PathMetrics also accepts any token the API server accepts whose user may get /metrics
// (SubjectAccessReview). Decisions are cached by the token's SHA-256, bounded in number and time.
//
// Stale-if-error: an accepted token is reviewed again (in the background, before its CacheTTL ends,
// while it is in use) and a refusal replaces the acceptance. While the API server cannot answer
// (no connection, a timeout, a 5xx or 429), a token accepted by an earlier review stays accepted
// until the token's own expiry, never beyond it; a token never reviewed, or refused, is not
// accepted (503 "cannot review the token now", refusals keep their NegativeTTL). Once a review
// succeeds again, the usual CacheTTL applies. The cost, a token revoked during an outage is
// accepted until the outage ends or the token expires, is counted in MetricStaleAccepted.
// It is safe for concurrent use.
type Auth struct {
	o       AuthOptions
	allowed map[string]bool // usernames: system:serviceaccount:<namespace>:<name>
	limit   *rate.Limiter
	stale   prometheus.Counter
	errs    prometheus.Counter
	bg      sync.WaitGroup // background reviews

	mu       sync.Mutex
	accepted *simplelru.LRU[cacheKey, *acceptance]
	refused  *simplelru.LRU[cacheKey, decision]
	// down is set when a review got no answer from the API server and cleared by the next answer;
	// downStale counts the stale acceptances since, for the log line at recovery.
	down      bool
	downStale int
}

type cacheKey struct {
	sum     [sha256.Size]byte
	metrics bool
}

type decision struct {
	code    int // 0 allowed, else the status to answer
	user    string
	expires time.Time
}

// Metrics of Auth (served on the admin port's /metrics, docs/metrics.md).
const (
	MetricStaleAccepted = "httpscale_interceptor_admin_auth_stale_accepted_total"
	MetricReviewErrors  = "httpscale_interceptor_admin_auth_review_errors_total"
)

// MaxTokenBytes bounds a bearer token; ServiceAccount tokens are about 1 KiB.
const MaxTokenBytes = 8 << 10

// NewAuth returns an Auth.
func NewAuth(o AuthOptions) (*Auth, error) {
	if o.Tokens == nil {
		return nil, errors.New("admin auth: a TokenReviewer is required")
	}
	if o.Audience == "" {
		o.Audience = DefaultTokenAudience
	}
	if o.CacheSize < 0 || o.CacheTTL < 0 || o.NegativeTTL < 0 || o.ReviewRate < 0 || o.ReviewBurst < 0 ||
		o.ReviewTimeout < 0 || o.RetryInterval < 0 {
		return nil, errors.New("admin auth: CacheSize, CacheTTL, NegativeTTL, ReviewRate, ReviewBurst, ReviewTimeout and RetryInterval must not be negative (0: the default)")
	}
	o.CacheSize = cmp.Or(o.CacheSize, 1024)
	o.CacheTTL = cmp.Or(o.CacheTTL, time.Minute)
	o.NegativeTTL = cmp.Or(o.NegativeTTL, 10*time.Second)
	o.ReviewRate = cmp.Or(o.ReviewRate, 20)
	o.ReviewBurst = cmp.Or(o.ReviewBurst, 40)
	o.ReviewTimeout = cmp.Or(o.ReviewTimeout, 5*time.Second)
	o.RetryInterval = cmp.Or(o.RetryInterval, 2*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	// Least recently used first: a flood of new tokens pushes out only other refusals, and an
	// acceptance in use (the fleet's own callers) stays.
	accepted, err := simplelru.NewLRU[cacheKey, *acceptance](o.CacheSize, nil)
	if err != nil {
		return nil, fmt.Errorf("admin auth: %w", err)
	}
	refused, err := simplelru.NewLRU[cacheKey, decision](o.CacheSize, nil)
	if err != nil {
		return nil, fmt.Errorf("admin auth: %w", err)
	}
	a := &Auth{o: o, allowed: map[string]bool{}, limit: rate.NewLimiter(rate.Limit(o.ReviewRate), o.ReviewBurst),
		accepted: accepted, refused: refused,
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricStaleAccepted,
			Help: "Admin port calls accepted on an earlier review of their token because the API server could not review it now."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricReviewErrors,
			Help: "Token and access reviews of admin port callers the API server did not answer (connection, timeout, 5xx, 429) or refused to make."}),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{a.stale, a.errs} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("admin auth: registering metrics: %w", err)
			}
		}
	}
	for _, sa := range o.Allowed {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("admin auth: allowed ServiceAccount %q: want namespace/name", sa)
		}
		a.allowed[ServiceAccountUser(ns, name)] = true
	}
	return a, nil
}

// ServiceAccountUser is the username the API server gives a ServiceAccount's tokens.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Wrap returns next behind the authentication; PathHealthz and PathReadyz stay open (the kubelet
// probes them without a token).
func (a *Auth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == PathHealthz || r.URL.Path == PathReadyz {
			next.ServeHTTP(w, r)
			return
		}
		if code, reason := a.check(r.Context(), r.Header.Get("Authorization"), r.URL.Path == PathMetrics); code != 0 {
			switch code {
			case http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", `Bearer realm="httpscale interceptor admin"`)
			case http.StatusServiceUnavailable:
				w.Header().Set("Retry-After", "1")
			}
			writeText(w, code, reason)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check returns 0 when the Authorization header's token may call the path, else the status to
// answer and why.
func (a *Auth) check(ctx context.Context, header string, metrics bool) (int, string) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return http.StatusUnauthorized, "a bearer ServiceAccount token is required"
	}
	if len(token) > MaxTokenBytes {
		return http.StatusUnauthorized, "token too long"
	}
	now := a.o.Now()
	key := cacheKey{sum: sha256.Sum256([]byte(token)), metrics: metrics}
	if code, ok := a.checkAccepted(ctx, key, now); ok {
		if code == http.StatusServiceUnavailable {
			return code, "cannot review the token now; retry"
		}
		return code, reasonFor(code)
	}
	if d, ok := a.cachedRefusal(key, now); ok {
		return d.code, reasonFor(d.code)
	}
	// Cheap checks on the token's own claims first, so that a token the review would refuse costs
	// the API server nothing: a caller sending garbage is answered here.
	c, err := parseClaims(token)
	if err != nil {
		return a.refuse(key, decision{code: http.StatusUnauthorized}, now, time.Time{}), "token is not a ServiceAccount token"
	}
	if !c.expiry().IsZero() && !now.Before(c.expiry()) {
		return http.StatusUnauthorized, "token expired"
	}
	peer := a.allowed[c.Sub] && c.hasAudience(a.o.Audience)
	if !peer && !(metrics && a.o.Access != nil) {
		code := http.StatusForbidden
		if !c.hasAudience(a.o.Audience) {
			code = http.StatusUnauthorized
		}
		return a.refuse(key, decision{code: code}, now, c.expiry()), reasonFor(code)
	}
	if !a.limit.AllowN(now, 1) {
		return http.StatusServiceUnavailable, "too many token reviews; retry"
	}
	d, err := a.review(ctx, token, peer)
	if err != nil {
		a.failed(ctx, err)
		a.o.Log.Error(err, "reviewing an admin port caller's token")
		return http.StatusServiceUnavailable, "cannot review the token now; retry"
	}
	a.answered()
	if d.code != 0 {
		a.o.Log.V(1).Info("admin port caller refused", "user", d.user, "status", d.code)
		return a.refuse(key, d, now, c.expiry()), reasonFor(d.code)
	}
	a.accept(key, &acceptance{token: token, peer: peer, user: d.user, expiry: c.expiry()}, now)
	return 0, ""
}

// review asks the API server who the token belongs to: with the audience for a peer, with the API
// server's own audiences for a metrics scraper, which must then be allowed to get /metrics.
func (a *Auth) review(ctx context.Context, token string, peer bool) (decision, error) {
	ctx, cancel := context.WithTimeout(ctx, a.o.ReviewTimeout)
	defer cancel()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
	if peer {
		tr.Spec.Audiences = []string{a.o.Audience}
	}
	res, err := a.o.Tokens.Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("creating TokenReview: %w", err)
	}
	st := res.Status
	if !st.Authenticated || st.Error != "" {
		return decision{code: http.StatusUnauthorized}, nil
	}
	user := st.User.Username
	if peer {
		if !a.allowed[user] || !slices.Contains(st.Audiences, a.o.Audience) {
			return decision{code: http.StatusForbidden, user: user}, nil
		}
		return decision{user: user}, nil
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user, UID: st.User.UID, Groups: st.User.Groups, Extra: extra(st.User.Extra),
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: PathMetrics, Verb: "get"},
	}}
	ares, err := a.o.Access.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("creating SubjectAccessReview for %s: %w", user, err)
	}
	if !ares.Status.Allowed {
		return decision{code: http.StatusForbidden, user: user}, nil
	}
	return decision{user: user}, nil
}

func extra(in map[string]authnv1.ExtraValue) map[string]authzv1.ExtraValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]authzv1.ExtraValue, len(in))
	for k, v := range in {
		out[k] = authzv1.ExtraValue(v)
	}
	return out
}

func reasonFor(code int) string {
	switch code {
	case 0:
		return ""
	case http.StatusUnauthorized:
		return "token not accepted"
	default:
		return "this ServiceAccount may not call the interceptor's admin port"
	}
}

// claims are the parts of a ServiceAccount token (a JWT) read before the review. They are not
// verified here; only the review decides, they only spare it tokens it would refuse.
type claims struct {
	Sub string          `json:"sub"`
	Aud json.RawMessage `json:"aud"`
	Exp float64         `json:"exp"`
}

func (c claims) expiry() time.Time {
	if c.Exp <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(c.Exp), 0)
}

func (c claims) hasAudience(aud string) bool {
	var one string
	if json.Unmarshal(c.Aud, &one) == nil {
		return one == aud
	}
	var many []string
	return json.Unmarshal(c.Aud, &many) == nil && slices.Contains(many, aud)
}

func parseClaims(token string) (claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return claims{}, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims{}, fmt.Errorf("JWT payload: %w", err)
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return claims{}, fmt.Errorf("JWT payload: %w", err)
	}
	return c, nil
}
