// Command peerprobe tries, from inside a pod, what a tenant's pod could do to httpscale's internal
// ports: GET admin-port URLs with each of the tokens it has (none, its namespace's default
// ServiceAccount token, a projected token it asked the kubelet for), and call the scaler's gRPC
// IsActive in plain text and over TLS without a client certificate. It prints one JSON line per
// attempt; the Internal ports spec (e2e/internal_ports_test.go) runs it as a pod on a real node.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Result is one attempt; the test decodes these lines.
type Result struct {
	Check  string `json:"check"` // get or grpc
	Target string `json:"target"`
	// Token names the token sent with a GET ("none" or the label given with -token); Mode is plain
	// or tls for a gRPC call.
	Token  string `json:"token,omitempty"`
	Mode   string `json:"mode,omitempty"`
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
	Code   string `json:"code,omitempty"`
	Err    string `json:"err,omitempty"`
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var gets, tokens, grpcs list
	flag.Var(&gets, "get", "URL to GET with every token (repeatable).")
	flag.Var(&tokens, "token", "label=file of a bearer token to try (repeatable); every URL is also tried without one.")
	flag.Var(&grpcs, "grpc", "host:port of a KEDA external scaler to call IsActive on, in plain text and over TLS (repeatable).")
	app := flag.String("app", "", "namespace/name the gRPC calls ask about.")
	timeout := flag.Duration("timeout", 10*time.Second, "Bound of each attempt.")
	flag.Parse()

	enc := json.NewEncoder(os.Stdout)
	bearer := map[string]string{"none": ""}
	order := []string{"none"}
	for _, t := range tokens {
		label, file, _ := strings.Cut(t, "=")
		b, err := os.ReadFile(file)
		if err != nil {
			_ = enc.Encode(Result{Check: "token", Target: file, Token: label, Err: err.Error()})
			continue
		}
		bearer[label] = strings.TrimSpace(string(b))
		order = append(order, label)
	}
	client := &http.Client{Timeout: *timeout}
	for _, u := range gets {
		for _, label := range order {
			r := Result{Check: "get", Target: u, Token: label}
			req, err := http.NewRequest(http.MethodGet, u, nil)
			if err == nil {
				if tok := bearer[label]; tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				var resp *http.Response
				if resp, err = client.Do(req); err == nil {
					// A wake stream that answered 200 never ends: read only its first bytes.
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
					resp.Body.Close()
					r.Status, r.Body = resp.StatusCode, string(b)
				}
			}
			if err != nil {
				r.Err = err.Error()
			}
			_ = enc.Encode(r)
		}
	}
	md := map[string]string{"httpScaledObject": *app, "concurrencyTarget": "1"}
	ns, name, _ := strings.Cut(*app, "/")
	for _, addr := range grpcs {
		for mode, creds := range map[string]credentials.TransportCredentials{
			"plain": insecure.NewCredentials(),
			"tls":   credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}), // no client certificate
		} {
			r := Result{Check: "grpc", Target: addr, Mode: mode}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				_, err = externalscaler.NewExternalScalerClient(conn).IsActive(ctx, &externalscaler.ScaledObjectRef{Namespace: ns, Name: name, ScalerMetadata: md})
				cancel()
				conn.Close()
			}
			if err != nil {
				r.Err, r.Code = err.Error(), status.Code(err).String()
			}
			_ = enc.Encode(r)
		}
	}
}
