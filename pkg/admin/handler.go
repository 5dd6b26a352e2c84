package admin

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// CountsSource is what PathCounts serves: one replica's counters. pkg/queue's Registry implements it.
type CountsSource interface {
	// Epoch identifies the process; it never changes during the source's life.
	Epoch() string
	// CountsSince answers a delta since the given sequence of this epoch, or a full snapshot for
	// since 0 (see Counts). It must not block on I/O.
	CountsSince(since uint64) Counts
}

// WakeSource is what PathWake streams. pkg/queue's Registry implements it.
type WakeSource interface {
	// Subscribe returns a channel of events that is closed after cancel is called; cancel may be
	// called more than once. A slow reader must never block the source's publishers. The first
	// events announce the apps holding requests when the stream opens, so that events published
	// while a stream was reconnecting are not lost.
	Subscribe(buffer int) (events <-chan WakeEvent, cancel func())
}

// DefaultMaxWakeStreams is HandlerOptions.MaxWakeStreams when zero: each scaler replica holds one
// stream per interceptor replica, so a few are in use and the rest is room for reconnects.
const DefaultMaxWakeStreams = 64

// HandlerOptions wires the admin port to its sources. Nil sources leave their path unserved (404),
// except the probes.
type HandlerOptions struct {
	// Status answers PathStatus.
	Status func() Status
	// Counts answers PathCounts.
	Counts CountsSource
	// Wake feeds PathWake.
	Wake WakeSource
	// ColdStarts answers PathColdStarts.
	ColdStarts ColdStartSource
	// Ready answers PathReadyz: nil error is 200, an error is 503 with its text. Nil means always
	// ready. The interceptor returns an error from the moment it starts draining.
	Ready func() error
	// Metrics serves PathMetrics, typically promhttp.HandlerFor(registry, ...).
	Metrics http.Handler

	// WakeHeartbeat is how often an idle wake stream gets a heartbeat line; zero means
	// DefaultWakeHeartbeat. It is also the write deadline of each line on the stream, so a reader
	// that stopped reading is cut off after one interval.
	WakeHeartbeat time.Duration
	// WakeBuffer is the channel buffer requested from Wake.Subscribe per stream; zero means 64.
	WakeBuffer int
	// MaxWakeStreams bounds the wake streams open at once; zero means DefaultMaxWakeStreams. Every
	// stream is a subscription that each wake notice is published to, so an unbounded number of idle
	// subscribers would cost memory and slow the request path; a stream beyond the limit is answered
	// 503 with Retry-After.
	MaxWakeStreams int
	// Stop ends every wake stream when closed. http.Server.Shutdown waits for handlers to return and
	// does not cancel their requests, so the owner must close Stop when it starts draining, e.g.
	// with server.RegisterOnShutdown(func() { close(stop) }). Nil means streams end only when their
	// client goes away.
	Stop <-chan struct{}
}

// NewHandler returns the admin port's handler. Every path answers GET (and HEAD); the handler is safe
// for concurrent use and holds no lock while writing a response.
func NewHandler(opts HandlerOptions) http.Handler {
	if opts.WakeHeartbeat <= 0 {
		opts.WakeHeartbeat = DefaultWakeHeartbeat
	}
	if opts.WakeBuffer <= 0 {
		opts.WakeBuffer = 64
	}
	if opts.MaxWakeStreams <= 0 {
		opts.MaxWakeStreams = DefaultMaxWakeStreams
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if opts.Ready != nil {
			if err := opts.Ready(); err != nil {
				writeText(w, http.StatusServiceUnavailable, err.Error())
				return
			}
		}
		writeText(w, http.StatusOK, "ok")
	})
	if opts.Status != nil {
		mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, opts.Status())
		})
	}
	if opts.Counts != nil {
		mux.HandleFunc("GET "+PathCounts, countsHandler(opts.Counts))
	}
	if opts.ColdStarts != nil {
		mux.HandleFunc("GET "+PathColdStarts, coldStartsHandler(opts.ColdStarts))
	}
	if opts.Wake != nil {
		mux.Handle("GET "+PathWake, &wakeHandler{
			src: opts.Wake, heartbeat: opts.WakeHeartbeat, buffer: opts.WakeBuffer, stop: opts.Stop,
			slots: make(chan struct{}, opts.MaxWakeStreams),
		})
	}
	if opts.Metrics != nil {
		mux.Handle("GET "+PathMetrics, opts.Metrics)
	}
	return mux
}

// countsHandler serves PathCounts?since=<seq>&epoch=<epoch>. An epoch other than the source's (a
// restarted replica, or a first poll with none) gets a full snapshot, whatever since says.
func countsHandler(src CountsSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		since, ok := sinceParam(w, q)
		if !ok {
			return
		}
		if q.Get("epoch") != src.Epoch() {
			since = 0
		}
		writeJSON(w, src.CountsSince(since))
	}
}

// sinceParam reads the query's since (0 when absent); a malformed one is answered 400 (ok false).
func sinceParam(w http.ResponseWriter, q url.Values) (since uint64, ok bool) {
	s := q.Get("since")
	if s == "" {
		return 0, true
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		writeText(w, http.StatusBadRequest, "since must be an unsigned integer")
		return 0, false
	}
	return v, true
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeText(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	_, _ = w.Write(append(body, '\n')) // a failed write means the client went away
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}
