package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// TestRunStopsCleanlyOnCancel runs the scaler on a fresh install (no interceptor yet), stops it as
// SIGTERM does, and fails on any error-level line.
func TestRunStopsCleanlyOnCancel(t *testing.T) {
	logs := &testenv.LogBuffer{}
	testenv.CheckCleanShutdown(t, func(ctx context.Context, args []string) error {
		return runWithLogs(ctx, args, logs)
	}, "--grpc-bind-address="+testenv.FreeAddr(t))
	testenv.ExpectQuietShutdown(t, logs.String())
}

// TestRunServesKEDAWithOnlyItsGeneratedRBAC runs the binary as a user bound to nothing but the
// generated Role (config/rbac/scaler): it must become ready (its EndpointSlice cache synced, the
// first snapshot published) and answer KEDA's calls and gRPC health checks.
func TestRunServesKEDAWithOnlyItsGeneratedRBAC(t *testing.T) {
	env, cfg := testenv.StartT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k8s, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns, user = "httpscale-system", "httpscale-scaler-test"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	roleName := createGeneratedRoles(ctx, t, k8s)
	if err := k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: roleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := userKubeconfig(t, env, user)

	grpcAddr, probe := testenv.FreeAddr(t), testenv.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--kubeconfig=" + kubeconfig, "--grpc-bind-address=" + grpcAddr,
			"--health-probe-bind-address=" + probe, "--metrics-bind-address=0", "--namespace=" + ns})
	}()
	waitReady(t, "http://"+probe+"/readyz", done)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v %v, want SERVING", hc, err)
	}
	ref := &externalscaler.ScaledObjectRef{Namespace: "apps", Name: "web",
		ScalerMetadata: trigger.Metadata{App: "apps/web", ConcurrencyTarget: 10}.Encode(grpcAddr)}
	scaler := externalscaler.NewExternalScalerClient(conn)
	spec, err := scaler.GetMetricSpec(ctx, ref)
	if err != nil || len(spec.MetricSpecs) != 1 || spec.MetricSpecs[0].MetricName != trigger.MetricConcurrency || spec.MetricSpecs[0].TargetSizeFloat != 10 {
		t.Errorf("GetMetricSpec: %v %v, want one concurrency metric with target 10", spec, err)
	}
	active, err := scaler.IsActive(ctx, ref)
	if err != nil || active.Result {
		t.Errorf("IsActive: %v %v, want false without interceptors", active, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancellation", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancellation")
	}
}

// createGeneratedRoles creates the objects of config/rbac/scaler/role.yaml and returns the Role's name.
func createGeneratedRoles(ctx context.Context, t *testing.T, k8s client.Client) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "scaler", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role string
	for _, doc := range strings.Split(string(data), "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decoding role.yaml: %v", err)
		}
		co := obj.(client.Object)
		if r, ok := obj.(*rbacv1.Role); ok {
			role = r.Name
		}
		if err := k8s.Create(ctx, co); err != nil {
			t.Fatalf("creating %T %s: %v", obj, co.GetName(), err)
		}
	}
	if role == "" {
		t.Fatal("role.yaml holds no Role")
	}
	return role
}

func userKubeconfig(t *testing.T, env *envtest.Environment, name string) string {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitReady(t *testing.T, url string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned before becoming ready: %v", err)
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within 60s", url)
}
