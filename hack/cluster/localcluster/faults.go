package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault injection for the e2e suite's fault scenarios. Every process is found through what this
// harness recorded when it started it (its pid file: PID and start time) or through the cgroup tree
// of a node's pods, and signalled by PID; nothing is ever signalled by name.

// Process returns the recorded process name (e.g. "kube-apiserver", "keda-operator") that still runs.
func (c Config) Process(name string) (*Process, error) {
	ps, err := c.Processes()
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.Name == name && p.Alive() {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no running process %q recorded in %s", name, c.Dir)
}

// SignalProcess sends sig to the recorded process name alone (not its group), e.g. SIGSTOP and
// SIGCONT to kube-apiserver for an outage in which its connections stay open and go silent.
func (c Config) SignalProcess(name string, sig syscall.Signal) error {
	p, err := c.Process(name)
	if err != nil {
		return err
	}
	if err := syscall.Kill(p.PID, sig); err != nil {
		return fmt.Errorf("sending %v to %s (pid %d): %w", sig, name, p.PID, err)
	}
	return nil
}

// StopProcess stops the recorded process name (SIGTERM, SIGKILL after StopTimeout) and forgets it,
// as an operator stopping a component would; start it again with its Start function (e.g.
// StartKEDAOperator).
func (c Config) StopProcess(name string) error {
	p, err := c.Process(name)
	if err != nil {
		return err
	}
	return p.Stop(c.StopTimeout)
}

// kill SIGKILLs the process group of p, waits until p is gone and forgets it.
func kill(p *Process) error {
	p.signal(syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); p.Alive(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
		}
	}
	if err := os.Remove(p.PIDFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// LostNode is a real node that LoseNode took away.
type LostNode struct {
	Node RealNode
	// Frozen are the freezer cgroups of its pods that LoseNode froze.
	Frozen []string
}

// LoseNode takes node n away as a power cut would, without destroying it: its kubelet and containerd
// are killed (SIGKILL, by their recorded PIDs), every process of its pods is frozen (cgroup freezer:
// no signal is delivered, they simply stop running), and its pods' bridge goes down, so connections
// to its pod IPs get no answer at all. Nothing reports the node's state any more; the control plane
// notices only through the node's lease (the node monitor's grace period). RestoreNode undoes it.
func (c Config) LoseNode(n RealNode) (*LostNode, error) {
	l := &LostNode{Node: n}
	for _, name := range []string{"kubelet-" + n.Zone, "containerd-" + n.Zone} {
		p, err := c.Process(name)
		if err != nil {
			return l, err
		}
		if err := kill(p); err != nil {
			return l, err
		}
	}
	frozen, err := freezeTree(filepath.Join("/sys/fs/cgroup/freezer", c.cgroupRoot(n)), "FROZEN")
	l.Frozen = frozen
	if err != nil {
		return l, err
	}
	if err := run("ip", "-n", c.NetNS, "link", "set", n.Bridge, "down"); err != nil {
		return l, fmt.Errorf("taking the pod bridge of %s down: %w", n.Name, err)
	}
	return l, nil
}

// RestoreNode brings a node LoseNode took away back: its pod bridge up, its pods thawed, containerd
// and kubelet started again (the containers ran on under their shims), and waits until the node
// reports Ready.
func (c Config) RestoreNode(ctx context.Context, l *LostNode) error {
	n := l.Node
	var errs []error
	if err := run("ip", "-n", c.NetNS, "link", "set", n.Bridge, "up"); err != nil {
		errs = append(errs, fmt.Errorf("bringing the pod bridge of %s up: %w", n.Name, err))
	}
	if _, err := freezeTree(filepath.Join("/sys/fs/cgroup/freezer", c.cgroupRoot(n)), "THAWED"); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if _, err := c.Process("containerd-" + n.Zone); err != nil {
		if err := c.startContainerd(ctx, n); err != nil {
			return err
		}
	}
	return c.StartKubelet(ctx, n)
}

// freezeTree writes state (FROZEN or THAWED) to freezer.state of every cgroup below root that holds
// processes, and returns those cgroups. A cgroup freezes its descendants too, but a pod's cgroups
// are created per pod, so each is set.
func freezeTree(root, state string) ([]string, error) {
	var done []string
	var errs []error
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == root {
			return nil
		}
		if data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs")); len(strings.TrimSpace(string(data))) == 0 {
			return nil
		}
		if err := os.WriteFile(filepath.Join(p, "freezer.state"), []byte(state), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("setting %s to %s: %w", p, state, err))
			return nil
		}
		done = append(done, p)
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if state == "FROZEN" && len(done) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("no process found under %s", root))
	}
	return done, errors.Join(errs...)
}

// ServiceConnections returns the pod IPs behind the established TCP connections to the Service
// address clusterIP:port, from the namespace's connection tracking table (kube-proxy DNATs each
// connection to one endpoint when it is opened; the reply direction names that endpoint). It tells,
// for example, which scaler replica KEDA's gRPC connection is pinned to.
func (c Config) ServiceConnections(ctx context.Context, clusterIP string, port int) ([]string, error) {
	cmd := c.Command(ctx, "conntrack", "-L", "-p", "tcp", "--orig-dst", clusterIP, "--orig-port-dst", strconv.Itoa(port))
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("conntrack -L: %w", err)
	}
	var ips []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "ESTABLISHED") {
			continue
		}
		// The second src= is the reply's source: the endpoint the connection was DNATed to.
		var srcs []string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "src="); ok {
				srcs = append(srcs, v)
			}
		}
		if len(srcs) == 2 && srcs[1] != clusterIP {
			ips = append(ips, srcs[1])
		}
	}
	return ips, nil
}
