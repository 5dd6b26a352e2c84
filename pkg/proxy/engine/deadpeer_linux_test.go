package engine

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUpstreamConnectionsFindDeadPeers checks the socket options of the pool's connections (both
// paths dial through it): the kernel closes a connection whose peer acknowledged nothing for the
// dead-peer timeout, a request written to a pod on a lost node included. The e2e spec "Fault: a node
// lost" shows the behaviour on real nodes, where a pod's network is cut.
func TestUpstreamConnectionsFindDeadPeers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	opts := func(timeout time.Duration) map[string]int {
		t.Helper()
		p := newPool(Options{DialTimeout: time.Second, DeadPeerTimeout: timeout})
		nc, err := p.dial(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		raw, err := nc.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		_ = raw.Control(func(fd uintptr) {
			for name, o := range map[string][2]int{
				"SO_KEEPALIVE": {unix.SOL_SOCKET, unix.SO_KEEPALIVE}, "TCP_KEEPIDLE": {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
				"TCP_KEEPINTVL": {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL}, "TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
			} {
				v, err := unix.GetsockoptInt(int(fd), o[0], o[1])
				if err != nil {
					t.Errorf("getsockopt %s: %v", name, err)
				}
				got[name] = v
			}
		})
		return got
	}
	want := func(got map[string]int, name string, v int) {
		t.Helper()
		if got[name] != v {
			t.Errorf("%s = %d, want %d (all: %v)", name, got[name], v, got)
		}
	}

	def := opts(0) // the default
	want(def, "SO_KEEPALIVE", 1)
	want(def, "TCP_KEEPIDLE", 10) // seconds of silence before the first probe
	want(def, "TCP_KEEPINTVL", 5)
	want(def, "TCP_USER_TIMEOUT", 20000) // milliseconds

	short := opts(4 * time.Second)
	want(short, "TCP_KEEPIDLE", 2)
	want(short, "TCP_KEEPINTVL", 1)
	want(short, "TCP_USER_TIMEOUT", 4000)

	off := opts(-1)
	want(off, "TCP_USER_TIMEOUT", 0) // the kernel's default: data may stay unacknowledged for its retransmissions (~15 min)
}
