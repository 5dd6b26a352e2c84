package migrate

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// peerModule is the KEDA HTTP add-on's Go module; the suite reads its CRD and examples when a version
// of it is in the module cache, and never downloads it.
const peerModule = "github.com/kedacore/http-add-on"

var (
	env        *envtest.Environment
	k8s        client.Client
	kubeconfig string
	kubectlBin string
	peerDir    string // the add-on's module in the module cache, or ""
)

func TestMigrate(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "migration from the KEDA HTTP add-on (real kube-apiserver, both CRDs)")
}

// findPeerModule returns the newest version of peerModule in the module cache, or "".
func findPeerModule() string {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return ""
	}
	dirs, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(peerModule)+"@v*"))
	sort.Strings(dirs)
	if len(dirs) == 0 {
		return ""
	}
	return dirs[len(dirs)-1]
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	peerDir = findPeerModule()
	peerCRD := filepath.Join("testdata", "crd", "http.keda.sh_httpscaledobjects.yaml")
	if peerDir != "" {
		peerCRD = filepath.Join(peerDir, "config", "crd", "bases", "http.keda.sh_httpscaledobjects.yaml")
		GinkgoWriter.Printf("using the add-on's own CRD from %s\n", peerCRD)
	}
	env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, peerCRD)
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(v1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	dir, err := os.MkdirTemp("", "httpscale-migrate-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	kubeconfig, err = testenv.WriteKubeconfig(env, dir)
	Expect(err).NotTo(HaveOccurred())
	assets, err := testenv.AssetsDir()
	Expect(err).NotTo(HaveOccurred())
	kubectlBin = filepath.Join(assets, "kubectl")
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// kubectl runs kubectl against the test API server with an empty discovery cache (so every call sees
// the CRDs as they are now) and returns its stdout and stderr.
func kubectl(stdin string, args ...string) (string, string, error) {
	cache, err := os.MkdirTemp("", "httpscale-kubectl-cache-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(cache)
	ctx, cancel := context.WithTimeout(context.Background(), defaultKubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cache}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}
