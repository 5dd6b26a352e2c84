package config

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// HoldLimits bound what one interceptor spends on requests for every app together, and cap what an
// HTTPScaledObject may ask for, so that one tenant's objects or clients cannot take a shared
// interceptor's memory from the others.
type HoldLimits struct {
	// MaxHeldRequests and MaxHeldBytes bound the requests held at once for every app together, in
	// number and in the memory they are charged (see queue.Pool); 0 is no bound.
	MaxHeldRequests int
	MaxHeldBytes    int64
	// MaxHeaderBytes bounds the header block of one request (net/http's MaxHeaderBytes); larger
	// heads are answered 431.
	MaxHeaderBytes int64
	// MaxArrivingHeaderBytes bounds the memory of header blocks still arriving on every connection
	// together, beyond each one's first 4 KiB; a header block that would need more is answered 503.
	// 0 is no bound.
	MaxArrivingHeaderBytes int64
	// MaxQueueLimit, MaxReadinessTimeout and MaxRequestTimeout cap coldStart.queueLimit,
	// timeouts.readiness and timeouts.request (and responseHeader) of every object; 0 is no cap.
	MaxQueueLimit       int
	MaxReadinessTimeout time.Duration
	MaxRequestTimeout   time.Duration
	// MaxWaitingPerEndpoint bounds the forwarded requests waiting in line for a connection to one
	// pod (--max-conns-per-endpoint are open); more are answered 503. 0 is no bound.
	MaxWaitingPerEndpoint int
	// MemoryLimit is the container's memory limit (the chart passes it through the downward API);
	// the Go runtime's soft memory limit is set below it (see MemoryLimitFraction), so that the
	// garbage collector works harder instead of letting the heap's headroom reach the limit. 0:
	// none. GOMEMLIMIT, when set, wins.
	MemoryLimit int64
}

// MemoryLimitFraction is the part of --memory-limit the Go runtime's soft limit is set to; the rest
// is for what the runtime does not count (the binary's own pages, C stacks, kernel buffers).
const MemoryLimitFraction = 0.85

// Defaults of HoldLimits. The held-bytes bound leaves an interceptor with the chart's 512 MiB memory
// limit room for its routing table and warm traffic (docs/benchmarks.md#held-requests-under-a-flood).
const (
	DefaultMaxHeldRequests = 10000
	DefaultMaxHeldBytes    = 256 << 20
	DefaultMaxHeaderBytes  = 32 << 10
	// DefaultMaxArrivingHeaderBytes lets 2,048 header blocks of 32 KiB arrive at once.
	DefaultMaxArrivingHeaderBytes = 64 << 20
	DefaultMaxQueueLimit          = 10000
	DefaultMaxReadinessTimeout    = 10 * time.Minute
	DefaultMaxRequestTimeout      = time.Hour
	// DefaultMaxWaitingPerEndpoint is twice the default connections per pod: a pod that answers
	// slowly gets a line that drains in two rounds of its connections, not one without end.
	DefaultMaxWaitingPerEndpoint = 1024
	// DefaultResponseHeaderTimeout is --response-header-timeout's default: how long a forwarded
	// request may wait for its response to start (Knative's default request timeout; the KEDA HTTP
	// add-on's 500 ms cuts off ordinary slow endpoints).
	DefaultResponseHeaderTimeout = 5 * time.Minute
)

// Bind registers the limits' flags on fs.
func (l *HoldLimits) Bind(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxHeldRequests, "max-held-requests", DefaultMaxHeldRequests, "Requests held at once for every app together, shared fairly between namespaces, then apps; 0 means no bound.")
	l.MaxHeldBytes, l.MaxHeaderBytes, l.MaxArrivingHeaderBytes = DefaultMaxHeldBytes, DefaultMaxHeaderBytes, DefaultMaxArrivingHeaderBytes // before Var, which records the default
	fs.Var(bytesFlag{&l.MaxHeldBytes}, "max-held-bytes", "Memory the held requests may be charged for every app together (a Kubernetes quantity, e.g. 256Mi), shared fairly between namespaces, then apps; 0 means no bound.")
	fs.Var(bytesFlag{&l.MaxHeaderBytes}, "max-header-bytes", "Largest request header block accepted (a Kubernetes quantity, e.g. 64Ki); larger heads get 431.")
	fs.Var(bytesFlag{&l.MaxArrivingHeaderBytes}, "max-arriving-header-bytes", "Memory of request header blocks still arriving, every connection together, beyond each one's first 4Ki (a Kubernetes quantity); a header block that would need more gets 503 head_room. 0 means no bound.")
	fs.IntVar(&l.MaxWaitingPerEndpoint, "max-waiting-per-endpoint", DefaultMaxWaitingPerEndpoint, "Forwarded requests waiting for a connection to one pod while --max-conns-per-endpoint are open; more get 503 upstream_busy. 0 means no bound.")
	fs.Var(bytesFlag{&l.MemoryLimit}, "memory-limit", "The container's memory limit (a Kubernetes quantity); the Go runtime's soft limit is set to 85% of it (GOMEMLIMIT wins); 0 means none.")
	fs.IntVar(&l.MaxQueueLimit, "max-queue-limit", DefaultMaxQueueLimit, "Cap of an object's coldStart.queueLimit; 0 means no cap.")
	fs.DurationVar(&l.MaxReadinessTimeout, "max-readiness-timeout", DefaultMaxReadinessTimeout, "Cap of an object's timeouts.readiness; 0 means no cap.")
	fs.DurationVar(&l.MaxRequestTimeout, "max-request-timeout", DefaultMaxRequestTimeout, "Cap of an object's timeouts.request and timeouts.responseHeader; 0 means no cap.")
}

// Validate reports every invalid limit, and defaults above their caps.
func (l *HoldLimits) Validate(queueLimit int, readiness, request, responseHeader time.Duration) error {
	var errs []error
	for name, v := range map[string]int64{
		"max-held-requests": int64(l.MaxHeldRequests), "max-held-bytes": l.MaxHeldBytes, "max-queue-limit": int64(l.MaxQueueLimit),
		"memory-limit": l.MemoryLimit, "max-waiting-per-endpoint": int64(l.MaxWaitingPerEndpoint),
		"max-arriving-header-bytes": l.MaxArrivingHeaderBytes,
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: must not be negative", name, v))
		}
	}
	for name, d := range map[string]time.Duration{"max-readiness-timeout": l.MaxReadinessTimeout, "max-request-timeout": l.MaxRequestTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("--%s %s: must not be negative", name, d))
		}
	}
	// 4 KiB is what the fast path reads before it hands a head over; a smaller bound would refuse
	// ordinary requests.
	if l.MaxHeaderBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("--max-header-bytes %d: want at least 4Ki", l.MaxHeaderBytes))
	}
	if l.MaxQueueLimit > 0 && queueLimit > l.MaxQueueLimit {
		errs = append(errs, fmt.Errorf("--queue-limit %d is above --max-queue-limit %d", queueLimit, l.MaxQueueLimit))
	}
	if l.MaxReadinessTimeout > 0 && readiness > l.MaxReadinessTimeout {
		errs = append(errs, fmt.Errorf("--readiness-timeout %s is above --max-readiness-timeout %s", readiness, l.MaxReadinessTimeout))
	}
	if l.MaxRequestTimeout > 0 {
		if request > l.MaxRequestTimeout {
			errs = append(errs, fmt.Errorf("--request-timeout %s is above --max-request-timeout %s", request, l.MaxRequestTimeout))
		}
		if responseHeader > l.MaxRequestTimeout {
			errs = append(errs, fmt.Errorf("--response-header-timeout %s is above --max-request-timeout %s", responseHeader, l.MaxRequestTimeout))
		}
	}
	return errors.Join(errs...)
}

// bytesFlag is a byte count given as a Kubernetes quantity ("256Mi", "65536").
type bytesFlag struct{ p *int64 }

func (b bytesFlag) String() string {
	if b.p == nil {
		return "0"
	}
	return resource.NewQuantity(*b.p, resource.BinarySI).String()
}

func (b bytesFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a quantity such as 64Ki or 256Mi", s)
	}
	v, ok := q.AsInt64()
	if !ok {
		return fmt.Errorf("%q is not a whole number of bytes", s)
	}
	*b.p = v
	return nil
}

func (b bytesFlag) Get() any { return *b.p }
