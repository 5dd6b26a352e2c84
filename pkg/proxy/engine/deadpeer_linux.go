package engine

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT: the longest data (or, with keepalive on, probes) may stay
// unacknowledged before the kernel closes the connection with ETIMEDOUT.
func setUserTimeout(tc *net.TCPConn, timeout time.Duration) error {
	raw, err := tc.SyscallConn()
	if err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(timeout/time.Millisecond))
	}); err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", serr)
	}
	return nil
}
