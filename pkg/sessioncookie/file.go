package sessioncookie

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// DefaultReload is how often a FileSource reads its file again.
const DefaultReload = 30 * time.Second

// FileSource keeps the keys of a file current: a Secret mounted as a volume, which the kubelet
// updates in place when the Secret changes, so that keys rotate without a restart. It is a
// controller-runtime Runnable; Keys is safe for concurrent use and never blocks (one atomic load).
type FileSource struct {
	path   string
	reload time.Duration
	log    logr.Logger
	cur    atomic.Pointer[Keys]
}

// NewFileSource reads path once. A file that is missing, empty or invalid at start is no reason
// not to serve: cookies are then signed with a random key of this process (valid on this replica
// only) until the file holds valid keys, which is logged. reload 0 means DefaultReload.
func NewFileSource(path string, reload time.Duration, log logr.Logger) *FileSource {
	if reload <= 0 {
		reload = DefaultReload
	}
	s := &FileSource{path: path, reload: reload, log: log}
	k, err := s.read()
	if err != nil {
		s.report(err, "")
		k = RandomKeys()
	}
	s.cur.Store(k)
	return s
}

// report logs why the file could not be used, unless it says what it said before (last).
func (s *FileSource) report(err error, last string) {
	if err.Error() == last {
		return
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoKeys) {
		s.log.Info("no session keys yet; signing session cookies with a key of this replica until they are written", "file", s.path)
		return
	}
	s.log.Error(err, "session keys not loaded; keeping the keys in use")
}

// Keys returns the keys read last.
func (s *FileSource) Keys() *Keys { return s.cur.Load() }

// NeedLeaderElection reports false: every replica reads its own file.
func (s *FileSource) NeedLeaderElection() bool { return false }

// Start reads the file every reload period until ctx ends. A file that cannot be read or holds no
// valid key is logged and the keys read before stay in use.
func (s *FileSource) Start(ctx context.Context) error {
	t := time.NewTicker(s.reload)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		k, err := s.read()
		if err != nil {
			s.report(err, lastErr)
			lastErr = err.Error()
			continue
		}
		lastErr = ""
		if !k.Equal(s.cur.Load()) {
			s.cur.Store(k)
			s.log.Info("session keys reloaded", "keys", k.Len())
		}
	}
}

func (s *FileSource) read() (*Keys, error) {
	b, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("reading session keys: %w", err)
	}
	k, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	return k, nil
}
