package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsPath is where `ip netns add` pins named namespaces.
func netnsPath(name string) string { return filepath.Join("/var/run/netns", name) }

func netnsExists(name string) bool {
	_, err := os.Stat(netnsPath(name))
	return err == nil
}

// createNetNS creates the namespace, brings lo up and routes the local ranges to lo — only inside it.
func createNetNS(name string, local []netip.Prefix) error {
	if netnsExists(name) {
		if err := run("ip", "netns", "del", name); err != nil {
			return fmt.Errorf("removing stale network namespace %s: %w", name, err)
		}
	}
	steps := [][]string{
		{"ip", "netns", "add", name},
		{"ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"},
	}
	for _, p := range local {
		steps = append(steps, []string{"ip", "netns", "exec", name, "ip", "route", "add", "local", p.String(), "dev", "lo"})
	}
	return runAll(steps)
}

func runAll(steps [][]string) error {
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// localRoutes are the prefixes routed to lo: LocalRange, minus RealNodeRange when real nodes run (a
// local route would swallow the traffic meant for their bridges, pods and ClusterIPs).
func (c Config) localRoutes() ([]netip.Prefix, error) {
	outer, err := netip.ParsePrefix(c.LocalRange)
	if err != nil {
		return nil, fmt.Errorf("local range %q: %w", c.LocalRange, err)
	}
	if !c.RealNodes {
		return []netip.Prefix{outer}, nil
	}
	inner, err := netip.ParsePrefix(c.RealNodeRange)
	if err != nil {
		return nil, fmt.Errorf("real node range %q: %w", c.RealNodeRange, err)
	}
	return carve(outer, inner), nil
}

// carve returns the prefixes, in address order, that cover outer except inner (IPv4 only).
func carve(outer, inner netip.Prefix) []netip.Prefix {
	outer, inner = outer.Masked(), inner.Masked()
	if !outer.Overlaps(inner) {
		return []netip.Prefix{outer}
	}
	if inner.Bits() <= outer.Bits() {
		return nil // inner covers outer
	}
	bits := outer.Bits() + 1
	lo := netip.PrefixFrom(outer.Addr(), bits)
	hiAddr := outer.Addr().AsSlice()
	i := outer.Bits() / 8
	hiAddr[i] |= 0x80 >> (outer.Bits() % 8)
	hi := netip.PrefixFrom(netip.AddrFrom4([4]byte(hiAddr)), bits)
	return append(carve(lo, inner), carve(hi, inner)...)
}

func deleteNetNS(name string) error {
	if !netnsExists(name) {
		return nil
	}
	return run("ip", "netns", "del", name)
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inNetNS runs fn on a fresh OS thread that has joined the namespace. Sockets keep the namespace they
// were created in, so a connection or listener made by fn lives inside the namespace while the rest of
// the process stays outside. The thread is never unlocked: it exits with the goroutine, so no other
// goroutine ever runs in the namespace by accident.
func inNetNS(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(netnsPath(name))
		if err != nil {
			errc <- fmt.Errorf("opening network namespace %s: %w", name, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("joining network namespace %s: %w", name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// DialContext dials addr (an IP literal and port) from inside the namespace. It fits
// http.Transport.DialContext and rest.Config.Dial.
func DialContext(netns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if net.ParseIP(host) == nil {
			// A name would be resolved by goroutines outside the namespace.
			return nil, errors.New("dialing into the local cluster needs an IP address, got " + addr)
		}
		var conn net.Conn
		err = inNetNS(netns, func() error {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			conn = c
			return err
		})
		return conn, err
	}
}

// Listen opens a TCP listener inside the namespace.
func Listen(netns, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetNS(netns, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}
