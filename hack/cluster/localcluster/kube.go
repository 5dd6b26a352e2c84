package localcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Command returns a command that runs name inside the namespace, with KUBECONFIG set to the admin's.
func (c Config) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.NetNS, name}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.AdminKubeconfig())
	return cmd
}

// Kubectl runs kubectl as the cluster administrator inside the namespace, feeding stdin (may be empty),
// and returns its standard output.
func (c Config) KubectlRun(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := c.Command(ctx, c.Kubectl(), append([]string{"--kubeconfig", c.AdminKubeconfig()}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Apply applies YAML manifests (server-side, so large CRDs fit).
func (c Config) Apply(ctx context.Context, manifests string) error {
	_, err := c.KubectlRun(ctx, manifests, "apply", "--server-side", "--force-conflicts", "--field-manager=httpscale-local-cluster", "-f", "-")
	return err
}

// token is a static bearer token for one control-plane identity.
type token struct{ user, value, groups string }

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeTokens writes the static token file kube-apiserver reads and one kubeconfig per identity.
// Control-plane parts and KEDA run as cluster administrators; httpscale's own binaries get
// ServiceAccount tokens instead (see Components), so their RBAC is what a real install grants.
func (c Config) writeTokens() error {
	dir := c.path("kubeconfigs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	toks := []token{
		{"admin", randomToken(), "system:masters"},
		{"system:kube-controller-manager", randomToken(), "system:masters"},
		{"system:kube-scheduler", randomToken(), "system:masters"},
		{"kwok", randomToken(), "system:masters"},
		{"keda", randomToken(), "system:masters"},
	}
	if c.DNS {
		// No group beyond system:authenticated: CoreDNS's RBAC is dnsManifests' ClusterRole.
		toks = append(toks, token{DNSUser, randomToken(), "system:authenticated"})
	}
	if c.RealNodes {
		// RBAC has no Node authorizer here; kubelets and kube-proxy run as administrators, like the
		// rest of the control plane.
		for _, n := range c.Real {
			toks = append(toks, token{"system:node:" + n.Name, randomToken(), "system:nodes,system:masters"})
		}
		toks = append(toks, token{"system:kube-proxy", randomToken(), "system:masters"})
	}
	var csv strings.Builder
	for i, t := range toks {
		fmt.Fprintf(&csv, "%s,%s,uid-%d,\"%s\"\n", t.value, t.user, i, t.groups)
		name := map[string]string{"system:kube-controller-manager": "kcm", "system:kube-scheduler": "scheduler", "system:kube-proxy": "kube-proxy", DNSUser: "coredns"}[t.user]
		if n, ok := strings.CutPrefix(t.user, "system:node:"); ok {
			name = n
		}
		if name == "" {
			name = t.user
		}
		if err := c.WriteKubeconfig(filepath.Join(dir, name+".kubeconfig"), t.user, t.value); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(c.PKIDir(), "tokens.csv"), []byte(csv.String()), 0o600)
}

// WriteKubeconfig writes a kubeconfig that authenticates to the cluster with a bearer token.
func (c Config) WriteKubeconfig(path, user, tok string) error {
	ca, err := os.ReadFile(filepath.Join(c.PKIDir(), "ca.crt"))
	if err != nil {
		return err
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: httpscale-%[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: %[4]s
  user:
    token: %[5]s
contexts:
- name: httpscale-%[1]s
  context:
    cluster: httpscale-%[1]s
    user: %[4]s
current-context: httpscale-%[1]s
`, c.Name, c.Server(), base64.StdEncoding.EncodeToString(ca), user, tok)
	return os.WriteFile(path, []byte(kc), 0o600)
}

// adminToken reads the administrator's token back from the token file.
func (c Config) adminToken() (string, error) {
	data, err := os.ReadFile(filepath.Join(c.PKIDir(), "tokens.csv"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ",")
		if len(f) > 1 && f[1] == "admin" {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("no admin token in %s", c.PKIDir())
}

// HTTPClient returns a client whose connections are made inside the namespace. It trusts the cluster CA.
func (c Config) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	if ca, err := os.ReadFile(filepath.Join(c.PKIDir(), "ca.crt")); err == nil {
		pool.AppendCertsFromPEM(ca)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       DialContext(c.NetNS),
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		},
	}
}

// get performs a GET inside the namespace and returns status and body.
func (c Config) get(ctx context.Context, url, bearer string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body), nil
}

// errExited aborts a poll: the process it waits for is gone, so waiting longer cannot help.
type errExited struct{ p *Process }

func (e errExited) Error() string {
	return fmt.Sprintf("%s (pid %d) exited; see %s", e.p.Name, e.p.PID, e.p.LogFile)
}

// alive returns an errExited when p no longer runs.
func alive(p *Process) error {
	if p != nil && !p.Alive() {
		return errExited{p}
	}
	return nil
}

// poll calls cond every 250ms until it returns true, returns an errExited, or the timeout passes; the
// last transient error is reported on timeout.
func poll(ctx context.Context, what string, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		var exited errExited
		if errors.As(err, &exited) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
