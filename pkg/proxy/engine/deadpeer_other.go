//go:build !linux

package engine

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: keepalive alone finds a dead
// peer of an idle connection.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
