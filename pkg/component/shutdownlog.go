package component

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
)

// errLeaderElectionLost is the text of the error controller-runtime's manager reports whenever
// leadership ends, also when it ends because the manager is stopping and released the lease on
// purpose (LeaderElectionReleaseOnCancel).
const errLeaderElectionLost = "leader election lost"

// shutdownSink logs, once the run's context has ended, the errors that the shutdown itself causes
// (context cancellation, the lease released on purpose) as info lines: every error line asks a user
// to act, and a normal SIGTERM must not print any. Before the context ends, and for any other error,
// it logs exactly what it is given.
type shutdownSink struct {
	logr.LogSink
	stopping *atomic.Bool
}

// shutdownLogger wraps log so that errors caused by ctx ending are logged as info lines.
func shutdownLogger(ctx context.Context, log logr.Logger) logr.Logger {
	stopping := &atomic.Bool{}
	context.AfterFunc(ctx, func() { stopping.Store(true) })
	inner := log.GetSink()
	if cd, ok := inner.(logr.CallDepthLogSink); ok {
		inner = cd.WithCallDepth(1) // Info and Error below add one frame
	}
	return logr.New(shutdownSink{LogSink: inner, stopping: stopping})
}

// Init does nothing: the wrapped sink was initialised by the logr.Logger it came from, and
// shutdownLogger accounts for this sink's own frame.
func (s shutdownSink) Init(logr.RuntimeInfo) {}

func (s shutdownSink) Info(level int, msg string, kv ...any) {
	s.LogSink.Info(level, msg, kv...)
}

func (s shutdownSink) Error(err error, msg string, kv ...any) {
	if s.stopping.Load() && causedByShutdown(err, msg) {
		text := "<nil>"
		if err != nil {
			text = err.Error()
		}
		s.LogSink.Info(0, msg, append(append(make([]any, 0, len(kv)+4), kv...), "error", text, "shuttingDown", true)...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s shutdownSink) WithValues(kv ...any) logr.LogSink {
	return shutdownSink{LogSink: s.LogSink.WithValues(kv...), stopping: s.stopping}
}

func (s shutdownSink) WithName(name string) logr.LogSink {
	return shutdownSink{LogSink: s.LogSink.WithName(name), stopping: s.stopping}
}

func (s shutdownSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return shutdownSink{LogSink: cd.WithCallDepth(depth), stopping: s.stopping}
	}
	return s
}

// causedByShutdown reports whether an error logged while stopping is the stop's own doing. klog's
// lines (client-go's leader election) carry no error value, only their text.
func causedByShutdown(err error, msg string) bool {
	if err != nil {
		return errors.Is(err, context.Canceled) || err.Error() == errLeaderElectionLost ||
			strings.Contains(err.Error(), context.Canceled.Error())
	}
	return strings.Contains(msg, context.Canceled.Error())
}
