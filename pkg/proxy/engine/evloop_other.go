//go:build !linux

package engine

import "net"

// evLoops needs epoll; elsewhere the fast path serves every connection on its own goroutine
// (Server.EventLoops is ignored).
type evLoops struct{}

func newEvLoops(*h1Server, *Engine, int) (*evLoops, error) { return nil, nil }

func (*evLoops) adopt(net.Conn) {}
func (*evLoops) shutdown()      {}
func (*evLoops) close()         {}
