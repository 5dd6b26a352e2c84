package localcluster

import (
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
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

// TestMain lets the test binary double as a child process that counts the SIGTERMs it receives.
func TestMain(m *testing.M) {
	if out := os.Getenv("LOCALCLUSTER_COUNT_SIGTERM"); out != "" {
		countSIGTERM(out)
		return
	}
	os.Exit(m.Run())
}

// countSIGTERM waits for a SIGTERM, counts further ones for a second, writes the count to out and exits.
func countSIGTERM(out string) {
	c := make(chan os.Signal, 8)
	signal.Notify(c, syscall.SIGTERM)
	_ = os.WriteFile(out+".ready", nil, 0o644)
	<-c
	n := 1
	for deadline := time.After(time.Second); ; {
		select {
		case <-c:
			n++
			continue
		case <-deadline:
		}
		break
	}
	_ = os.WriteFile(out, []byte(strconv.Itoa(n)), 0o644)
}

// A program that treats a second SIGTERM as "exit now" (controller-runtime's signal handler does)
// must get exactly one, or its graceful shutdown is cut short; its exit status must be readable.
func TestStopSendsOneSIGTERM(t *testing.T) {
	out := filepath.Join(t.TempDir(), "count")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCALCLUSTER_COUNT_SIGTERM="+out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p := &Process{Name: "counter", PID: cmd.Process.Pid, exited: exited}
	go func() { _ = cmd.Wait(); p.state = cmd.ProcessState; close(exited) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	p.Start, _ = startTime(p.PID)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(out + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child never became ready")
		}
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	code, err := p.ExitCode(5 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("exit code %d, %v; want 0", code, err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "1" {
		t.Errorf("the process received %s SIGTERMs; want 1", got)
	}
}
