package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startShell starts sh -c script in its own session, reaped by the test, and records it like
// StartProcess does.
func startShell(t *testing.T, script string) *Process {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	st, err := startTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "001-sh.pid")
	if err := os.WriteFile(pidFile, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Process{Name: "sh", PID: cmd.Process.Pid, Start: st, PIDFile: pidFile}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	p := startShell(t, `trap "" TERM; while :; do sleep 0.05; done`)
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	t0 := time.Now()
	if err := p.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Errorf("Stop returned after %s; a process ignoring SIGTERM must get the whole grace period", took)
	}
	if p.Alive() {
		t.Error("process still alive after Stop")
	}
	if _, err := os.Stat(p.PIDFile); !os.IsNotExist(err) {
		t.Errorf("pid file not removed: %v", err)
	}
}

func TestStopTerminatesPolitely(t *testing.T) {
	p := startShell(t, `sleep 30`)
	t0 := time.Now()
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("Stop took %s for a process that exits on SIGTERM", took)
	}
	if p.Alive() {
		t.Error("process still alive after Stop")
	}
}

func TestReusedPIDIsNotSignalled(t *testing.T) {
	p := startShell(t, `sleep 30`)
	other := *p
	other.Start++ // same PID, different start time: a different process as far as we know
	if other.Alive() {
		t.Fatal("a PID with another start time must not count as our process")
	}
	if err := other.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if !p.Alive() {
		t.Fatal("Stop signalled a process it did not start")
	}
}
