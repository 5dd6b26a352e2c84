package engine

import (
	"fmt"
	"net"
	"time"
)

// DefaultDeadPeerTimeout is how long an upstream connection may go without a sign of life from
// its peer's kernel before it is closed (Options.DeadPeerTimeout).
const DefaultDeadPeerTimeout = 20 * time.Second

// watchDeadPeer makes the kernel close nc, failing whatever request waits on it, once its peer has
// acknowledged nothing for about timeout: neither the request's bytes (TCP_USER_TIMEOUT, where the
// system has it) nor keepalive probes, sent after timeout/2 of silence and every timeout/4 after.
//
// A pod on a node that was lost (powered off, its network cut) neither answers nor resets its
// connections: without this, a request already written to it waits for the response-header
// timeout (minutes), and an idle pooled connection to it is found dead only when a request is
// sent on it. A pod that is merely slow is unaffected: its kernel acknowledges data and probes
// however long the application takes to answer.
func watchDeadPeer(nc net.Conn, timeout time.Duration) error {
	tc, ok := nc.(*net.TCPConn)
	if !ok || timeout <= 0 {
		return nil // a test's in-memory connection, or turned off
	}
	if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable: true, Idle: timeout / 2, Interval: max(timeout/4, time.Second), Count: 3,
	}); err != nil {
		return fmt.Errorf("setting TCP keepalive: %w", err)
	}
	return setUserTimeout(tc, timeout)
}
