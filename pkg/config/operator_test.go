package config

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func parseOperator(t *testing.T, args ...string) (*Operator, error) {
	t.Helper()
	o := &Operator{}
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	o.Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return o, o.Validate()
}

func TestOperatorDefaults(t *testing.T) {
	o, err := parseOperator(t)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	got := []any{o.Fleet, o.Namespace, o.TableName, o.TableDebounce, o.TableMaxDelay, o.MaxConcurrentReconciles, o.LeaderElect, o.InterceptorAdminPort}
	want := []any{"default", "httpscale-system", "httpscale-routing-table", 250 * time.Millisecond, 2 * time.Second, 4, true, "admin"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

func TestOperatorEnvironmentThenFlags(t *testing.T) {
	t.Setenv("HTTPSCALE_ROUTING_TABLE_MAX_DELAY", "5s")
	t.Setenv("HTTPSCALE_MAX_CONCURRENT_RECONCILES", "12")
	t.Setenv("HTTPSCALE_WATCH_NAMESPACES", "a, b")
	o, err := parseOperator(t, "--max-concurrent-reconciles=16")
	if err != nil {
		t.Fatal(err)
	}
	if o.TableMaxDelay != 5*time.Second || o.MaxConcurrentReconciles != 16 || !cmp.Equal(o.WatchNamespaces, []string{"a", "b"}) {
		t.Errorf("got max delay %s, reconciles %d, namespaces %v; want 5s (env), 16 (flag over env), [a b]",
			o.TableMaxDelay, o.MaxConcurrentReconciles, o.WatchNamespaces)
	}
}

func TestOperatorValidateReportsEverything(t *testing.T) {
	_, err := parseOperator(t, "--routing-table-max-delay=0s", "--max-concurrent-reconciles=0",
		"--interceptor-admin-selector=a in (", "--namespace=", "--fleet=Blue")
	if err == nil {
		t.Fatal("invalid settings validated")
	}
	for _, want := range []string{"--routing-table-max-delay", "--max-concurrent-reconciles", "--interceptor-admin-selector", "--namespace", "--fleet"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}
