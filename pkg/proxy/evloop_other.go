//go:build !linux

package proxy

import (
	"errors"
	"net"
)

// evLoops needs epoll; elsewhere the fast path serves every connection on its own goroutine.
type evLoops struct{}

func newEvLoops(*h1Server, *Proxy, int) (*evLoops, error) {
	return nil, errors.New("event loops need Linux")
}

func (*evLoops) adopt(net.Conn) {}
func (*evLoops) shutdown()      {}
func (*evLoops) close()         {}
