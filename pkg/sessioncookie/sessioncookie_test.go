package sessioncookie

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/testenv"
)

func mustKeys(t *testing.T, keys ...string) *Keys {
	t.Helper()
	bs := make([][]byte, len(keys))
	for i, k := range keys {
		bs[i] = []byte(k)
	}
	k, err := NewKeys(bs...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const key1, key2 = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"

func TestValueIsBoundToKeyAppAndAddress(t *testing.T) {
	k := mustKeys(t, key1, key2)
	v := k.Value(0, "shop/web", "10.0.0.1:8080")
	if len(v) != ValueLen || !base64url(v) {
		t.Fatalf("value %q: want %d base64url characters", v, ValueLen)
	}
	if v != k.Value(0, "shop/web", "10.0.0.1:8080") {
		t.Error("the same key, app and address give another value")
	}
	if v2 := mustKeys(t, key1).Value(0, "shop/web", "10.0.0.1:8080"); v2 != v {
		t.Error("another process with the same key computes another value")
	}
	for name, other := range map[string]string{
		"another app":      k.Value(0, "shop/admin", "10.0.0.1:8080"),
		"another address":  k.Value(0, "shop/web", "10.0.0.2:8080"),
		"another port":     k.Value(0, "shop/web", "10.0.0.1:8081"),
		"another key":      k.Value(1, "shop/web", "10.0.0.1:8080"),
		"a shifted border": k.Value(0, "shop/web1", "0.0.0.1:8080"),
	} {
		if other == v {
			t.Errorf("%s gives the same value", name)
		}
	}
}

func TestParseKeys(t *testing.T) {
	k, err := ParseKeys([]byte("# rotated in 2026-11\n  " + key2 + "  \n\n" + key1 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !k.Equal(mustKeys(t, key2, key1)) {
		t.Error("ParseKeys did not read the keys in order, trimmed")
	}
	for _, bad := range []string{"", "# only a comment\n", "short\n", strings.Repeat(key1+"\n", maxKeys+1)} {
		if _, err := ParseKeys([]byte(bad)); err == nil {
			t.Errorf("ParseKeys(%q) accepted it", bad)
		}
	}
}

func TestFindReadsOnlyWellFormedValuesOfTheName(t *testing.T) {
	v1, v2 := strings.Repeat("A", ValueLen), strings.Repeat("b", ValueLen)
	for _, c := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"browser form", []string{"theme=dark; pod=" + v1 + "; x=1"}, []string{v1}},
		{"two lines (HTTP/2)", []string{"theme=dark", "pod=" + v1}, []string{v1}},
		{"quoted", []string{`pod="` + v1 + `"`}, []string{v1}},
		{"two of the name, in order", []string{"pod=" + v1 + ";pod=" + v2}, []string{v1, v2}},
		{"another name with the name as prefix", []string{"pods=" + v1 + "; xpod=" + v1}, nil},
		{"names are case-sensitive", []string{"Pod=" + v1}, nil},
		{"too long", []string{"pod=" + v1 + "A"}, nil},
		{"oversized", []string{"pod=" + strings.Repeat("A", 64<<10)}, nil},
		{"too short", []string{"pod=" + v1[1:]}, nil},
		{"not base64url", []string{"pod=" + v1[1:] + "="}, nil},
		{"empty", []string{"pod=", "pod", ";;;", ""}, nil},
		{"spaces and tabs", []string{" \tpod=" + v1 + "\t "}, []string{v1}},
	} {
		var got []string
		Find(c.lines, "pod", 4, func(v string) bool { got = append(got, v); return false })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: found %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFindStopsAtMaxAndWhenFound(t *testing.T) {
	v := strings.Repeat("A", ValueLen)
	line := strings.Repeat("pod="+v+"; ", 1000)
	n := 0
	Find([]string{line}, "pod", 4, func(string) bool { n++; return false })
	if n != 4 {
		t.Errorf("looked at %d values, want at most 4", n)
	}
	n = 0
	Find([]string{line}, "pod", 4, func(string) bool { n++; return true })
	if n != 1 {
		t.Errorf("looked at %d values after one was found", n)
	}
	if a := testing.AllocsPerRun(100, func() { Find([]string{line}, "pod", 4, func(string) bool { return false }) }); a != 0 {
		t.Errorf("Find allocates %.0f times", a)
	}
}

func TestFileSourceReloadsAndKeepsTheLastGoodKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	if err := os.WriteFile(path, []byte(key1), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewFileSource(path, 10*time.Millisecond, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	defer func() { cancel(); <-done }()

	if err := os.WriteFile(path, []byte(key2+"\n"+key1), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the rotated keys are in use", func() bool { return s.Keys().Equal(mustKeys(t, key2, key1)) })
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // several reloads of the broken file
	if !s.Keys().Equal(mustKeys(t, key2, key1)) {
		t.Error("a broken file replaced the keys in use")
	}
}

// A file that is not there yet (the Secret not filled yet) is no reason not to start: a random key
// signs meanwhile, and the keys are taken up once written.
func TestFileSourceStartsBeforeTheKeysAreWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	s := NewFileSource(path, 10*time.Millisecond, logr.Discard())
	if s.Keys() == nil || s.Keys().Len() != 1 {
		t.Fatal("no keys to sign with before the file exists")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	defer func() { cancel(); <-done }()
	if err := os.WriteFile(path, []byte(key1), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the written key is in use", func() bool { return s.Keys().Equal(mustKeys(t, key1)) })
}

// FuzzFind: whatever Cookie header lines a client sends, Find yields only what a value of ours can
// be (ValueLen base64url characters), values that stand in the lines after the name and "=", at most
// max of them, and never panics.
func FuzzFind(f *testing.F) {
	v := strings.Repeat("A", ValueLen)
	f.Add("pod="+v, "pod")
	f.Add(`a=1; pod="`+v+`"; pod=`+v, "pod")
	f.Add(";;pod=;pod", "pod")
	f.Add("pod=\t"+v, "pod")
	f.Fuzz(func(t *testing.T, line, name string) {
		if name == "" || strings.ContainsAny(name, "=; \t") {
			return
		}
		n := 0
		Find([]string{line, line}, name, 3, func(got string) bool {
			n++
			if len(got) != ValueLen || !base64url(got) {
				t.Fatalf("Find(%q, %q) yielded %q", line, name, got)
			}
			if !strings.Contains(line, name+"="+got) && !strings.Contains(line, name+`="`+got+`"`) {
				t.Fatalf("Find(%q, %q) yielded %q, which does not follow the name", line, name, got)
			}
			return false
		})
		if n > 3 {
			t.Fatalf("Find(%q) yielded %d values, more than max", line, n)
		}
	})
}
