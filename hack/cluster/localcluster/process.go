package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a process started inside the namespace, recorded in <dir>/pids/<seq>-<name>.pid as
// "<pid> <start time>" so that a later `down` (another process) stops exactly it and nothing else.
type Process struct {
	Name    string
	PID     int
	Start   uint64 // clock ticks since boot, from /proc/<pid>/stat; guards against PID reuse
	PIDFile string
	LogFile string
	// exited is closed once a process this program started has been reaped; state is then its exit
	// status. Both are nil for a process read back from its pid file.
	exited chan struct{}
	state  *os.ProcessState
}

// StartProcess starts bin inside the namespace of c with its output appended to <dir>/logs/<name>.log.
// env is added to the current environment. The process gets its own session, so it outlives the caller
// and Stop can signal its whole process group.
func (c Config) StartProcess(name, bin string, args, env []string) (*Process, error) {
	// `ip netns exec` joins the namespace and execs bin, so the PID is bin's own.
	return c.startProcess(name, append([]string{"ip", "netns", "exec", c.NetNS, bin}, args...), env)
}

// startNodeProcess is StartProcess for kubelet, containerd and kube-proxy: nsenter joins only the
// network namespace, whereas `ip netns exec` also remounts /sys, which hides /sys/fs/cgroup from them.
// nsenter execs bin too, so the PID is still bin's own.
func (c Config) startNodeProcess(name, bin string, args, env []string) (*Process, error) {
	return c.startProcess(name, append([]string{"nsenter", "--net=" + netnsPath(c.NetNS), bin}, args...), env)
}

func (c Config) startProcess(name string, argv, env []string) (*Process, error) {
	for _, d := range []string{c.LogDir(), c.path("pids")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	logFile := filepath.Join(c.LogDir(), name+".log")
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer out.Close()
	fmt.Fprintf(out, "=== %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, PID: cmd.Process.Pid, LogFile: logFile, exited: make(chan struct{})}
	// Reap it if it exits while this process lives (keeping its exit status); otherwise init does.
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	p.Start, _ = startTime(p.PID)
	seq := nextSeq(c.path("pids"))
	p.PIDFile = filepath.Join(c.path("pids"), fmt.Sprintf("%03d-%s.pid", seq, name))
	if err := os.WriteFile(p.PIDFile, fmt.Appendf(nil, "%d %d\n", p.PID, p.Start), 0o644); err != nil {
		_ = p.Stop(0)
		return nil, fmt.Errorf("recording pid of %s: %w", name, err)
	}
	return p, nil
}

func nextSeq(dir string) int {
	entries, _ := os.ReadDir(dir)
	max := 0
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.SplitN(e.Name(), "-", 2)[0]); err == nil && n > max {
			max = n
		}
	}
	return max + 1
}

// Processes lists the recorded processes, oldest first.
func (c Config) Processes() ([]*Process, error) {
	dir := c.path("pids")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ps []*Process
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		file := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		var p Process
		if _, err := fmt.Sscanf(string(data), "%d %d", &p.PID, &p.Start); err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		name := strings.TrimSuffix(e.Name(), ".pid")
		p.Name = strings.SplitN(name, "-", 2)[1]
		p.PIDFile = file
		p.LogFile = filepath.Join(c.LogDir(), p.Name+".log")
		ps = append(ps, &p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].PIDFile < ps[j].PIDFile })
	return ps, nil
}

// Alive reports whether the recorded process still runs (same PID and start time, not a zombie).
func (p *Process) Alive() bool {
	st, state := procStat(p.PID)
	return st != 0 && st == p.Start && state != "Z" && state != "X"
}

// ExitCode waits up to timeout for a process this program started to be reaped and returns its exit
// code (-1 when a signal killed it). It fails for a process read back from its pid file, whose parent
// is another program.
func (p *Process) ExitCode(timeout time.Duration) (int, error) {
	if p.exited == nil {
		return 0, fmt.Errorf("%s (pid %d) was not started by this program; its exit status is unknown", p.Name, p.PID)
	}
	select {
	case <-p.exited:
		return p.state.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s (pid %d) has not exited after %s", p.Name, p.PID, timeout)
	}
}

// signal sends sig once to the process group led by p (every process started here leads its own
// session), or to p alone if it leads no group. Once only: a second SIGTERM means "exit now" to many
// programs (controller-runtime's signal handler exits 1 on it, cutting a graceful drain short).
func (p *Process) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.PID, sig); err != nil {
		_ = syscall.Kill(p.PID, sig)
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after timeout, waits until the process is gone
// and removes its pid file.
func (p *Process) Stop(timeout time.Duration) error {
	if p.Alive() {
		p.signal(syscall.SIGTERM)
		deadline := time.Now().Add(timeout)
		for p.Alive() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if p.Alive() {
			p.signal(syscall.SIGKILL)
			deadline = time.Now().Add(10 * time.Second)
			for p.Alive() && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if p.Alive() {
				return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
			}
		}
	}
	if p.PIDFile != "" {
		if err := os.Remove(p.PIDFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func startTime(pid int) (uint64, error) {
	st, _ := procStat(pid)
	if st == 0 {
		return 0, fmt.Errorf("process %d not found", pid)
	}
	return st, nil
}

// procStat returns the start time and state of pid from /proc/<pid>/stat, or 0 when it does not exist.
func procStat(pid int) (uint64, string) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// The command name may contain spaces; fields after it start after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, ""
	}
	st, err := strconv.ParseUint(f[19], 10, 64) // field 22 overall
	if err != nil {
		return 0, ""
	}
	return st, f[0]
}
