//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// tlsPort is the TLS port of the interceptor pods and of the interceptor Service with the chart's
// default values (interceptor.tls.enabled is on by default, port and servicePort 8443).
const tlsPort = 8443

// TLS termination at the interceptors as the chart installs it: the interceptor pods read each app's
// certificate from the Secret its HTTPScaledObject names, through the Role the operator grants their
// ServiceAccount, and choose it by SNI. An app at zero is woken over TLS exactly as over plain HTTP.
var _ = Describe("TLS termination", Ordered, func() {
	var (
		h    *framework.HTTPScale
		ns   string
		host string
		cert tlstermtest.Cert
		// roots trusts every certificate of this scenario: a handshake is checked by the serial it
		// presents, not only by whether it verifies.
		roots = x509.NewCertPool()
	)
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		return localcluster.DialContext(f.Cluster.NetNS)(ctx, "tcp", addr)
	}

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "tls")
		cert = tlstermtest.NewCert(host)
		roots.AppendCertsFromPEM(cert.CertPEM)
		Expect(f.Client.Create(ctx, cert.Secret(ns, "app-tls"))).To(Succeed())
		hso := routedApp(ctx, ns, "app", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.ScaledownPeriod = ptr.To[int32](600) // stays up for the whole scenario once woken
			s.TLS = &httpscalev1alpha1.TLS{SecretName: "app-tls"}
		})
		Eventually(tlsReady(ctx, hso)).Should(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", "CertificateLoaded")))
	})

	// presented handshakes with the interceptor at addr for server name sni and returns the serial of
	// the leaf it presented, verified against roots for sni.
	presented := func(ctx context.Context, addr, sni string) (string, error) {
		conn, err := dial(ctx, "tcp", addr)
		if err != nil {
			return "", err
		}
		c := tls.Client(conn, &tls.Config{ServerName: sni, RootCAs: roots})
		defer c.Close()
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.HandshakeContext(hctx); err != nil {
			return "", err
		}
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	// everyInterceptorPresents waits until each interceptor pod presents the certificate of the given
	// serial for sni.
	everyInterceptorPresents := func(ctx context.Context, sni, serial string) {
		GinkgoHelper()
		for _, ic := range h.Interceptors {
			addr := net.JoinHostPort(ic.IP, fmt.Sprint(tlsPort))
			Eventually(func() (string, error) { return presented(ctx, addr, sni) }).WithContext(ctx).
				WithTimeout(90*time.Second).Should(Equal(serial), "interceptor %s presents certificate %s for %s", ic.Name, serial, sni)
		}
	}
	// tlsClient sends requests for https://<host>/... to the interceptor Service's TLS port, with the
	// host as SNI, over HTTP/2 (ALPN h2) or HTTP/1.1.
	tlsClient := func(h2 bool) *http.Client {
		var p http.Protocols
		cfg := &tls.Config{RootCAs: roots}
		if h2 {
			p.SetHTTP2(true)
		} else {
			p.SetHTTP1(true)
			cfg.NextProtos = []string{"http/1.1"}
		}
		svc := net.JoinHostPort(h.InterceptorService, fmt.Sprint(tlsPort))
		return &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &p,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) { return dial(ctx, network, svc) }}}
	}
	type tlsAnswer struct {
		answer
		proto, alpn, serial, cold string
		err                       error
	}
	send := func(ctx context.Context, c *http.Client, hostHeader, path string) tlsAnswer {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+path, nil)
		Expect(err).NotTo(HaveOccurred())
		req.Host = hostHeader
		resp, err := c.Do(req)
		if err != nil {
			return tlsAnswer{err: err}
		}
		a := tlsAnswer{proto: resp.Proto, alpn: resp.TLS.NegotiatedProtocol, serial: resp.TLS.PeerCertificates[0].SerialNumber.String(),
			cold: resp.Header.Get(proxy.HeaderColdStart)}
		a.answer, a.err = readAnswer(resp)
		return a
	}

	It("wakes an app at zero by requests over TLS (HTTP/2 and HTTP/1.1) to the interceptor Service, presenting the app's certificate", func(ctx SpecContext) {
		everyInterceptorPresents(ctx, host, cert.Serial.String())
		Expect(replicas(ctx, ns, "app")).To(BeEquivalentTo(0))

		start := time.Now()
		answers := map[bool]chan tlsAnswer{true: make(chan tlsAnswer, 1), false: make(chan tlsAnswer, 1)}
		for h2, ch := range answers {
			go func() {
				defer GinkgoRecover()
				ch <- send(ctx, tlsClient(h2), host, fmt.Sprintf("/wake-h2-%v", h2))
			}()
		}
		for h2, ch := range answers {
			var a tlsAnswer
			Eventually(ch).WithTimeout(3 * time.Minute).Should(Receive(&a))
			Expect(a.err).NotTo(HaveOccurred())
			wantProto, wantALPN := "HTTP/1.1", "http/1.1"
			if h2 {
				wantProto, wantALPN = "HTTP/2.0", "h2"
			}
			Expect(a.proto).To(Equal(wantProto))
			Expect(a.alpn).To(Equal(wantALPN))
			Expect(a.serial).To(Equal(cert.Serial.String()), "the app's own certificate")
			Expect(a.Status).To(Equal(http.StatusOK))
			Expect(a.cold).To(Equal("true"), "held until the app was up")
			Expect(a.Host).To(Equal(host))
			Expect(a.Path).To(Equal(fmt.Sprintf("/wake-h2-%v", h2)))
			Expect(podIPs(ctx, ns, "app")).To(ContainElement(a.PodIP), "answered by a real pod of the app")
		}
		AddReportEntry("TLS cold start through the interceptor Service: requests -> both answered", time.Since(start).String())
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))
	})

	It("reports a missing Secret in that object's status only, and keeps serving the other app over TLS", func(ctx SpecContext) {
		brokenHost := "broken." + host
		broken := routedApp(ctx, ns, "broken", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(brokenHost)}
			s.TLS = &httpscalev1alpha1.TLS{SecretName: "missing-tls"}
		})
		Eventually(tlsReady(ctx, broken)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "SecretNotFound"),
			HaveField("Message", ContainSubstring("Secret "+ns+"/missing-tls does not exist"))))
		app := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
		Expect(tlsReady(ctx, app)()).To(HaveField("Status", metav1.ConditionTrue))

		for _, ic := range h.Interceptors {
			addr := net.JoinHostPort(ic.IP, fmt.Sprint(tlsPort))
			_, err := presented(ctx, addr, brokenHost)
			Expect(err).To(MatchError(ContainSubstring("unrecognized name")), "interceptor %s: no certificate for %s (no default certificate)", ic.Name, brokenHost)
			Expect(presented(ctx, addr, host)).To(Equal(cert.Serial.String()), "interceptor %s still serves the first app", ic.Name)
		}
		for _, h2 := range []bool{true, false} {
			a := send(ctx, tlsClient(h2), host, "/still")
			Expect(a.err).NotTo(HaveOccurred())
			Expect(a.Status).To(Equal(http.StatusOK))
			Expect(a.serial).To(Equal(cert.Serial.String()))
			Expect(a.cold).To(BeEmpty(), "warm")

			By("a request on the first app's connection for the other app's host is misdirected")
			a = send(ctx, tlsClient(h2), brokenHost, "/misdirected")
			Expect(a.err).NotTo(HaveOccurred())
			Expect(a.Status).To(Equal(http.StatusMisdirectedRequest))
		}
		Expect(replicas(ctx, ns, "broken")).To(BeEquivalentTo(0), "a misdirected request wakes nothing")
	})

	It("presents the new certificate to new handshakes once the Secret is rotated, without restarting the interceptors", func(ctx SpecContext) {
		before, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
		Expect(err).NotTo(HaveOccurred())
		// A keep-alive connection opened before the rotation.
		old := tlsClient(false)
		a := send(ctx, old, host, "/before")
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.serial).To(Equal(cert.Serial.String()))

		rotated := tlstermtest.NewCert(host)
		roots.AppendCertsFromPEM(rotated.CertPEM)
		var s corev1.Secret
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-tls"}, &s)).To(Succeed())
		s.Data = rotated.Secret(ns, "app-tls").Data
		Expect(f.Client.Update(ctx, &s)).To(Succeed())
		rotatedAt := time.Now()

		everyInterceptorPresents(ctx, host, rotated.Serial.String())
		AddReportEntry("TLS Secret rotated -> every interceptor presents the new certificate", time.Since(rotatedAt).String())
		for _, h2 := range []bool{true, false} {
			a := send(ctx, tlsClient(h2), host, "/after")
			Expect(a.err).NotTo(HaveOccurred())
			Expect(a.Status).To(Equal(http.StatusOK))
			Expect(a.serial).To(Equal(rotated.Serial.String()))
		}
		// The connection opened before keeps its certificate and keeps serving.
		a = send(ctx, old, host, "/kept")
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.Status).To(Equal(http.StatusOK))
		Expect(a.serial).To(Equal(cert.Serial.String()), "the connection opened before the rotation was reused and kept its certificate")

		after, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(HaveLen(len(before)))
		for i := range before {
			Expect(after[i].UID).To(Equal(before[i].UID), "interceptor pod %s replaced", before[i].Name)
			Expect(after[i].ContainerIDs).To(Equal(before[i].ContainerIDs), "interceptor pod %s restarted", before[i].Name)
			Expect(after[i].Restarts).To(Equal(before[i].Restarts), "interceptor pod %s restarted", before[i].Name)
		}
	})
})

// tlsReady returns the object's TLSReady condition as the API server has it now (zero when absent).
func tlsReady(ctx context.Context, hso *httpscalev1alpha1.HTTPScaledObject) func() (metav1.Condition, error) {
	return func() (metav1.Condition, error) {
		if err := f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso); err != nil {
			return metav1.Condition{}, err
		}
		if c := meta.FindStatusCondition(hso.Status.Conditions, httpscalev1alpha1.ConditionTLSReady); c != nil {
			return *c, nil
		}
		return metav1.Condition{}, nil
	}
}
