package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// hso is one standalone document routing host to service, listing eps (comma-separated) as endpoints.
func hso(name, host, service, eps string) string {
	return fmt.Sprintf(`---
apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata:
  name: %s
  annotations: {standalone.httpscale.dev/endpoints: %q}
spec:
  hosts: [%s]
  scaleTargetRef: {name: %s, service: %s, port: 80}
  timeouts: {readiness: 20s}
`, name, eps, host, service, service)
}

// TestStandaloneRoutesByFile runs the interceptor as the binary runs it with --standalone, with no
// API server at all: it routes real requests by Host to backends on 127.0.0.1 listed in the file,
// re-routes when the file changes, holds an app without endpoints until the file lists one, keeps
// its last good table (and logs an error naming the problem) when the file turns invalid, and shows
// the counts on the admin port.
func TestStandaloneRoutesByFile(t *testing.T) {
	backend := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s answered %s %s", name, r.Host, r.URL.Path)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	blue, green := backend("blue"), backend("green")

	file := filepath.Join(t.TempDir(), "routes.yaml")
	write := func(content string) {
		t.Helper()
		// Write and rename, as editors do, so the interceptor never reads half a file.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(hso("shop", "shop.example.com", "shop", blue) + hso("cold", "cold.example.com", "cold", ""))

	logs := &testenv.LogBuffer{}
	proxyAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	stop := startRun(t, []string{
		"--standalone=" + file, "--kubeconfig=" + filepath.Join(t.TempDir(), "no-such-kubeconfig"),
		"--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr,
		"--drain-delay=0", "--drain-timeout=5s",
	}, runOptions{logs: logs})

	testenv.Eventually(t, 30*time.Second, "the admin port is ready", func() bool {
		resp, err := http.Get("http://" + adminAddr + admin.PathReadyz)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	if code, body, _ := get(proxyAddr, "shop.example.com", "/cart"); code != http.StatusOK || body != "blue answered shop.example.com /cart" {
		t.Fatalf("shop: %d %q, want 200 from blue", code, body)
	}
	if code, body, _ := get(proxyAddr, "nope.example.com", "/"); code != http.StatusNotFound {
		t.Errorf("unknown host: %d %q, want 404", code, body)
	}

	// An app without endpoints holds its requests, as an app at zero does, until the file lists one.
	held := getAsync(proxyAddr, "cold.example.com", "/")
	testenv.Eventually(t, 10*time.Second, "the cold app's request is held", func() bool { return appCount(adminAddr, "default/cold").Held == 1 })
	select {
	case r := <-held:
		t.Fatalf("the cold app's request was answered before it had an endpoint: %d %q", r.code, r.body)
	default:
	}

	// Re-route: shop moves to green, cold gets an endpoint.
	write(hso("shop", "shop.example.com", "shop", green) + hso("cold", "cold.example.com", "cold", blue))
	select {
	case r := <-held:
		if r.code != http.StatusOK || r.body != "blue answered cold.example.com /" || r.hdr.Get("X-Httpscale-Cold-Start") != "true" {
			t.Errorf("held request: %d %q cold-start=%q, want 200 from blue after a cold start", r.code, r.body, r.hdr.Get("X-Httpscale-Cold-Start"))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the held request was not forwarded within 15s of the file listing an endpoint")
	}
	testenv.Eventually(t, 10*time.Second, "shop is re-routed to green", func() bool {
		_, body, _ := get(proxyAddr, "shop.example.com", "/")
		return strings.HasPrefix(body, "green answered")
	})

	// A broken file keeps the last good table and logs an error naming the problem.
	write(hso("shop", "shop.example.com", "shop", "localhost:9") + hso("cold", "cold.example.com", "cold", blue))
	testenv.Eventually(t, 10*time.Second, "the broken file is reported", func() bool {
		return strings.Contains(logs.String(), "standalone file not loaded")
	})
	if !strings.Contains(logs.String(), `is not an IP address; write 127.0.0.1 rather than localhost`) {
		t.Errorf("the error does not name the problem; logs:\n%s", logs.String())
	}
	if code, body, _ := get(proxyAddr, "shop.example.com", "/still"); code != http.StatusOK || body != "green answered shop.example.com /still" {
		t.Errorf("after a broken file: %d %q, want the last good table (green)", code, body)
	}

	// Counts are visible on the admin port: shop got 1 (blue) + at least 1 (re-route poll) + 1 requests.
	if c := appCount(adminAddr, "default/shop"); c.Requests < 3 {
		t.Errorf("admin counts for default/shop: %+v, want at least 3 requests", c)
	}
	if c := appCount(adminAddr, "default/cold"); c.Requests != 1 || c.Held != 0 {
		t.Errorf("admin counts for default/cold: %+v, want 1 request and none held", c)
	}

	stop()
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, `"level":"error"`) && !strings.Contains(line, "standalone file not loaded") {
			t.Errorf("unexpected error line: %s", line)
		}
	}
}

// TestStandaloneRejectsAnInvalidFileAtStart checks that an invalid file stops the interceptor with an
// error naming the document and the field.
func TestStandaloneRejectsAnInvalidFileAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(file, []byte(hso("shop", "shop.example.com", "shop", "127.0.0.1:9000")+
		"---\napiVersion: httpscale.dev/v1alpha1\nkind: HTTPScaledObject\nmetadata: {name: web}\nspec: {hots: [web.example.com]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--standalone=" + file, "--proxy-bind-address=127.0.0.1:0", "--admin-bind-address=127.0.0.1:0"},
		runOptions{logs: &testenv.LogBuffer{}})
	if err == nil || !strings.Contains(err.Error(), "document 2") || !strings.Contains(err.Error(), `unknown field "hots"`) {
		t.Fatalf("run = %v, want an error naming document 2 and the field hots", err)
	}
}
