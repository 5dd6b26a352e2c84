package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// RealNodeByZone returns the real node of zone.
func (c Config) RealNodeByZone(zone string) (RealNode, error) {
	for _, n := range c.Real {
		if n.Zone == zone {
			return n, nil
		}
	}
	return RealNode{}, fmt.Errorf("no real node in zone %q", zone)
}

// StopKubelet stops the kubelet of node n, as an operator stopping the service would: its containers
// keep running under containerd, nothing probes them or reports their status until StartKubelet.
func (c Config) StopKubelet(n RealNode) error {
	ps, err := c.Processes()
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Name == "kubelet-"+n.Zone {
			return p.Stop(c.StopTimeout)
		}
	}
	return fmt.Errorf("no kubelet recorded for node %s", n.Name)
}

// StartKubelet starts the kubelet of node n again (unless it runs) and waits until the node reports
// Ready.
func (c Config) StartKubelet(ctx context.Context, n RealNode) error {
	ps, err := c.Processes()
	if err != nil {
		return err
	}
	var p *Process
	for _, q := range ps {
		if q.Name == "kubelet-"+n.Zone && q.Alive() {
			p = q
		}
	}
	if p == nil {
		if p, err = c.startKubelet(n); err != nil {
			return err
		}
	}
	return poll(ctx, "node "+n.Name+" Ready", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(p); err != nil {
			return false, err
		}
		out, err := c.KubectlRun(ctx, "", "get", "node", n.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == "True", err
	})
}

// SignalContainer sends sig to every process of the container with the runtime id containerID
// ("containerd://<id>" as a pod's status names it), found through its cgroup.
func SignalContainer(containerID string, sig syscall.Signal) (int, error) {
	pids, err := ContainerPIDs(containerID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err == nil {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no process of container %s could be signalled", containerID)
	}
	return n, nil
}

// ContainerPIDs returns the processes of the container with the runtime id containerID
// ("containerd://<id>"), found through their cgroups; /proc/<pid>/ns/net of one of them is the
// pod's network namespace.
func ContainerPIDs(containerID string) ([]int, error) {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok || id == "" {
		return nil, fmt.Errorf("container id %q: want <runtime>://<id>", containerID)
	}
	cgroups, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range cgroups {
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(data), id) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(f, "/proc/%d/cgroup", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process of container %s found", id)
	}
	return pids, nil
}
