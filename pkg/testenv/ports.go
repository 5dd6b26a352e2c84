package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// FreeAddr returns a loopback host:port that no other test process on the machine is handed until
// t ends, for a binary under test to bind from its flags.
//
// A port the kernel picked for "127.0.0.1:0" and that was closed again is not reserved: while the
// binary starts, any process binding ":0" or dialling out (the API servers and clients of packages
// tested in parallel) may be given the same port. The binary then fails to bind, and the test talks
// to the other process (a controller-runtime probe answers /readyz 200 too). So the port comes from
// outside the kernel's ephemeral range, where only explicit binds land, and a lock file in the
// temporary directory, held until t ends, keeps other test processes off it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo, hi := ephemeralRange()
	dir := filepath.Join(os.TempDir(), "httpscale-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		port := 10000 + rand.IntN(55000)
		if port >= lo && port <= hi {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another test process holds it
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close() // bound by something that is not a test
			continue
		}
		l.Close()
		t.Cleanup(func() { f.Close() }) // closing the file releases the lock
		return addr
	}
	t.Fatal("no free loopback port outside the ephemeral range after 200 tries")
	return ""
}

// ephemeralRange returns the ports the kernel hands out for ":0" binds and outgoing connections
// (Linux's default when it cannot be read).
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var l, h int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &l, &h); err == nil && l > 0 && h >= l {
		return l, h
	}
	return lo, hi
}
