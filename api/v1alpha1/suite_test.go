package v1alpha1_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

var k8s client.Client

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "HTTPScaledObject admission (real kube-apiserver)")
}

var _ = ginkgoenv.ForSuite(func(cfg *rest.Config) {
	scheme := runtime.NewScheme()
	Expect(httpscalev1alpha1.AddToScheme(scheme)).To(Succeed())
	var err error
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})
