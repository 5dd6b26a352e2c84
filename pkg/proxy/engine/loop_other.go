//go:build !linux

package engine

import (
	"context"
	"net"
	"time"

	"github.com/go-logr/logr"
)

// evLoops needs epoll; elsewhere net/http serves every connection (Server.EventLoops is ignored).
type evLoops struct{}

type loopConfig struct {
	e                                      *Engine
	n                                      int
	base                                   context.Context
	handoff                                *handoffListener
	heads                                  *headGate
	idleTimeout, headerTimeout, watchAfter time.Duration
	log                                    logr.Logger
	maxHead                                int
	maxArriving                            int64
}

func newEvLoops(loopConfig) (*evLoops, error) { return nil, nil }

func (*evLoops) adopt(net.Conn)                 {}
func (*evLoops) shutdown(context.Context) error { return nil }
func (*evLoops) close()                         {}
func (*evLoops) shuttingDown() bool             { return true }
func (*evLoops) connections() int               { return 0 }
func (*evLoops) arrivingHeads() (int64, uint64) { return 0, 0 }
