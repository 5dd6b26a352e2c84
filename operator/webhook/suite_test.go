package webhook_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/webhook"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

const (
	namespace   = "httpscale-system"
	secretName  = "httpscale-operator-webhook-tls"
	configName  = "httpscale-operator-webhook"
	serviceName = "httpscale-operator-webhook"
	// watchedNS is the one namespace the operator under test watches: its new objects get finalizer.
	watchedNS = "watched"
	finalizer = "httpscale.dev/routing-table"
)

var (
	env    *envtest.Environment
	k8s    client.Client
	certs  *webhook.CertManager
	cancel context.CancelFunc
	done   = make(chan error, 1)
)

func TestWebhook(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "HTTPScaledObject admission webhooks (real kube-apiserver)")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	// The generated configuration, pointed by envtest at 127.0.0.1:<free port>. Its caBundle is
	// envtest's; the operator's certificate manager must replace it for any request to get through.
	env.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "webhook")}}
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())

	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
	Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: watchedNS}})).To(Succeed())

	log := zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	wio := env.WebhookInstallOptions
	certs, err = webhook.Setup(mgr, webhook.Options{
		BindAddress:              net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)),
		SelfManagedCerts:         true,
		Namespace:                namespace,
		ServiceName:              serviceName,
		SecretName:               secretName,
		WebhookConfigurationName: configName,
		IPs:                      []net.IP{net.ParseIP(wio.LocalServingHost)},
		CAValidity:               10 * 365 * 24 * time.Hour,
		CertValidity:             365 * 24 * time.Hour,
		Location:                 time.UTC,
		Finalizer:                finalizer,
		WatchNamespaces:          []string{watchedNS},
		ClusterDomain:            "cluster.local",
		MaxEntryBytes:            routing.DefaultMaxEntryBytes,
	}, log)
	Expect(err).NotTo(HaveOccurred())
	Expect(certs).NotTo(BeNil())

	var ctx context.Context
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- mgr.Start(ctx) }()
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
		Eventually(done, time.Minute).Should(Receive(BeNil()))
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
