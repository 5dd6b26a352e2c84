package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// heartbeatLine is a WakeEvent with an empty Key.
var heartbeatLine = []byte("{}\n")

// wakeHandler streams one subscription as newline-delimited JSON, flushing every line.
type wakeHandler struct {
	src       WakeSource
	heartbeat time.Duration
	buffer    int
	stop      <-chan struct{}
	slots     chan struct{} // one per open stream
}

// ServeHTTP returns when the client goes away, a write fails or times out (one heartbeat interval),
// the source closes the subscription, or stop is closed.
func (h *wakeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeText(w, http.StatusServiceUnavailable, "too many wake streams")
		return
	}
	events, cancel := h.src.Subscribe(h.buffer)
	defer cancel()

	rc := http.NewResponseController(w)
	hdr := w.Header()
	hdr.Set("Content-Type", "application/x-ndjson")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // in case a proxy sits in front of the admin port
	hdr.Set(HeaderWakeHeartbeat, h.heartbeat.String())
	w.WriteHeader(http.StatusOK)
	// Send the headers now: the client starts its heartbeat watchdog when they arrive.
	if err := h.deadline(rc); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}

	idle := time.NewTimer(h.heartbeat)
	defer idle.Stop()
	line := make([]byte, 0, 256)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.stop:
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			b, err := json.Marshal(ev)
			if err != nil {
				return // cannot happen for WakeEvent; end the stream rather than lie
			}
			line = append(append(line[:0], b...), '\n')
			if h.write(rc, w, line) != nil {
				return
			}
		case <-idle.C:
			if h.write(rc, w, heartbeatLine) != nil {
				return
			}
		}
		idle.Reset(h.heartbeat)
	}
}

// write sends one line under a write deadline of one heartbeat interval, so a client that stopped
// reading cannot hold the handler (and the server's Shutdown) forever.
func (h *wakeHandler) write(rc *http.ResponseController, w http.ResponseWriter, line []byte) error {
	if err := h.deadline(rc); err != nil {
		return err
	}
	if _, err := w.Write(line); err != nil {
		return err
	}
	return rc.Flush()
}

func (h *wakeHandler) deadline(rc *http.ResponseController) error {
	err := rc.SetWriteDeadline(time.Now().Add(h.heartbeat))
	if errors.Is(err, http.ErrNotSupported) {
		return nil // e.g. httptest.ResponseRecorder; nothing to bound
	}
	return err
}
