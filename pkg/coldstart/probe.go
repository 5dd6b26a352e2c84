package coldstart

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

// check is one probe of one pod: a TCP connection to port, or an HTTP GET of path on port.
type check struct {
	tcp     bool
	https   bool
	port    int32
	path    string
	headers [][2]string
}

func (c check) String() string {
	if c.tcp {
		return "tcpSocket :" + strconv.Itoa(int(c.port))
	}
	scheme := ""
	if c.https {
		scheme = "https "
	}
	return "httpGet " + scheme + ":" + strconv.Itoa(int(c.port)) + c.path
}

// plan is how a pod is probed: every check must pass, threshold times in a row.
type plan struct {
	checks    []check
	threshold int
	timeout   time.Duration
	// desc says what is probed and where it comes from, for the record.
	desc string
}

// Limits on what a pod's readiness probe may make the interceptor send.
const (
	maxProbeHeaders     = 16
	maxProbeHeaderBytes = 1024
	maxProbePathBytes   = 2048
	// maxProbeBody is how much of a probe's answer is read (the kubelet reads 10 KiB).
	maxProbeBody = 10 << 10
	// maxThreshold bounds the successes in a row a probe's successThreshold asks for.
	maxThreshold = 10
)

// errNoProbe wraps the reasons a pod is not probed; the cold start then waits for the kubelet.
var errNoProbe = errors.New("not probed")

// planFor returns how to probe pod: by override when it is set, else by the readiness probes of the
// pod's containers (and sidecars), all of which must pass. Each probe's timeout is at most timeout.
// It fails (errNoProbe) when a readiness probe is one the interceptor cannot run (exec, gRPC), names a
// port the container does not declare, or when no container has one (the kubelet then finds the pod
// ready as soon as it runs, so there is nothing to gain).
func planFor(pod *corev1.Pod, override *routing.Probe, timeout time.Duration) (plan, error) {
	if o := override; o != nil && !o.Off {
		c := check{tcp: o.TCP, port: o.Port, path: o.Path}
		return plan{checks: []check{c}, threshold: 1, timeout: timeout, desc: c.String() + " (spec.coldStart.probe)"}, nil
	}
	p := plan{threshold: 1, timeout: timeout}
	var descs []string
	containers := slices.Clone(pod.Spec.Containers)
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c) // a sidecar: its readiness counts for the pod's
		}
	}
	for _, c := range containers {
		rp := c.ReadinessProbe
		if rp == nil {
			continue
		}
		ck, err := checkOf(&c, rp)
		if err != nil {
			return plan{}, fmt.Errorf("%w: container %s: %w", errNoProbe, c.Name, err)
		}
		p.checks = append(p.checks, ck)
		descs = append(descs, ck.String())
		p.threshold = max(p.threshold, min(int(rp.SuccessThreshold), maxThreshold))
		if rp.TimeoutSeconds > 0 {
			p.timeout = min(p.timeout, time.Duration(rp.TimeoutSeconds)*time.Second)
		}
	}
	if len(p.checks) == 0 {
		return plan{}, fmt.Errorf("%w: no container has a readiness probe, so the pod is ready once it runs", errNoProbe)
	}
	p.desc = strings.Join(descs, ", ") + " (the pod's readiness probe)"
	return p, nil
}

// checkOf turns a container's readiness probe into a check. The probe's host is never used: a probe
// goes to the pod's own address.
func checkOf(c *corev1.Container, rp *corev1.Probe) (check, error) {
	switch {
	case rp.HTTPGet != nil:
		h := rp.HTTPGet
		port, err := portOf(c, h.Port)
		if err != nil {
			return check{}, err
		}
		path := h.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		if len(path) > maxProbePathBytes {
			return check{}, fmt.Errorf("readiness probe path is longer than %d bytes", maxProbePathBytes)
		}
		ck := check{port: port, path: path, https: h.Scheme == corev1.URISchemeHTTPS}
		for _, hd := range h.HTTPHeaders {
			if len(ck.headers) == maxProbeHeaders || len(hd.Name)+len(hd.Value) > maxProbeHeaderBytes {
				return check{}, fmt.Errorf("readiness probe has more than %d headers or one over %d bytes", maxProbeHeaders, maxProbeHeaderBytes)
			}
			ck.headers = append(ck.headers, [2]string{hd.Name, hd.Value})
		}
		return ck, nil
	case rp.TCPSocket != nil:
		port, err := portOf(c, rp.TCPSocket.Port)
		if err != nil {
			return check{}, err
		}
		return check{tcp: true, port: port}, nil
	case rp.Exec != nil:
		return check{}, errors.New("an exec readiness probe, which only the kubelet can run")
	case rp.GRPC != nil:
		return check{}, errors.New("a gRPC readiness probe, which the interceptor does not run")
	}
	return check{}, errors.New("a readiness probe of no known kind")
}

// portOf resolves a probe's port, a number or the name of one of the container's ports.
func portOf(c *corev1.Container, p intstr.IntOrString) (int32, error) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			return 0, fmt.Errorf("readiness probe port %d is not in 1-65535", p.IntVal)
		}
		return p.IntVal, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal && cp.Protocol != corev1.ProtocolUDP && cp.Protocol != corev1.ProtocolSCTP {
			return cp.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("readiness probe port %q is not a TCP port of the container", p.StrVal)
}

// checkPod reports why ep's address must not be probed as pod's: the endpoint names another pod
// (UID), the pod is terminating, uses the node's network, or the address is not one of its IPs. An
// EndpointSlice that is not the EndpointSlice controller's may list any address; a probe only ever
// goes to an address the API server says is the named pod's own.
func checkPod(pod *corev1.Pod, ep endpoints.Endpoint) error {
	switch {
	case ep.PodUID != "" && pod.UID != ep.PodUID:
		return fmt.Errorf("%w: the EndpointSlice names pod %s with UID %s, which is now %s", errNoProbe, pod.Name, ep.PodUID, pod.UID)
	case pod.DeletionTimestamp != nil:
		return fmt.Errorf("%w: pod %s is terminating", errNoProbe, pod.Name)
	case pod.Spec.HostNetwork:
		return fmt.Errorf("%w: pod %s uses the node's network", errNoProbe, pod.Name)
	}
	for _, ip := range pod.Status.PodIPs {
		if ip.IP == ep.IP {
			return nil
		}
	}
	if pod.Status.PodIP == ep.IP && ep.IP != "" {
		return nil
	}
	return fmt.Errorf("%w: address %s is not an IP of pod %s", errNoProbe, ep.IP, pod.Name)
}

// probeClient runs checks. It only ever connects to the address it is given: no proxy from the
// environment, no redirect followed, no connection kept.
type probeClient struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	http *http.Client
}

func newProbeClient(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *probeClient {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dial,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 16 << 10,
		// As the kubelet: a readiness probe over HTTPS does not verify the certificate.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}
	return &probeClient{dial: dial, http: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// run runs c against ip within timeout: nil when it passed.
func (pc *probeClient) run(ctx context.Context, ip string, c check, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(ip, strconv.Itoa(int(c.port)))
	if c.tcp {
		conn, err := pc.dial(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	scheme := "http"
	if c.https {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+c.path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "httpscale-coldstart-probe")
	req.Header.Set("Accept", "*/*")
	for _, h := range c.headers {
		if strings.EqualFold(h[0], "Host") {
			req.Host = h[1]
			continue
		}
		req.Header.Add(h[0], h[1])
	}
	resp, err := pc.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
