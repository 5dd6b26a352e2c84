package localcluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPruneStateKeepsOnlyTheLogs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"logs/etcd.log", "etcd/member/wal/0.wal", "images/httpscale/index.json", "bin/kubectl", "images.json"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := pruneState(dir, filepath.Join(dir, "logs")); err != nil {
		t.Fatalf("pruneState: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) != 1 || left[0] != "logs" {
		t.Fatalf("left in the state folder: %v, want only logs", left)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "logs", "etcd.log")); err != nil || string(b) != "logs/etcd.log" {
		t.Fatalf("the log was not kept: %q, %v", b, err)
	}
	// A folder that is already gone is not an error (down twice).
	if err := pruneState(filepath.Join(dir, "gone"), filepath.Join(dir, "gone", "logs")); err != nil {
		t.Fatalf("pruneState of a missing folder: %v", err)
	}
	if err := pruneState("", "logs"); err == nil {
		t.Fatal("pruneState of an empty folder name succeeded")
	}
}
