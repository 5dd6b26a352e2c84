package version

import "testing"

func TestCommit(t *testing.T) {
	vcs := func(rev string, modified bool) func() (string, bool) {
		return func() (string, bool) { return rev, modified }
	}
	for _, tc := range []struct {
		name, stamped string
		vcs           func() (string, bool)
		want          string
	}{
		{"stamped wins", "abc123", vcs("def456", true), "abc123"},
		{"vcs clean", "", vcs("def456", false), "def456"},
		{"vcs dirty", "", vcs("def456", true), "def456-dirty"},
		{"nothing", "", vcs("", false), "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := commit(tc.stamped, tc.vcs); got != tc.want {
				t.Errorf("commit(%q) = %q, want %q", tc.stamped, got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	Version, Commit = "1.2.3", "0123abcd"
	if got, want := String("scaler"), "scaler 1.2.3 (commit 0123abcd)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
