// Command scaler is the KEDA external scaler: it sums interceptor counts per app and serves them to KEDA.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/component"
	"github.com/httpscale/httpscale/pkg/config"
)

// Interceptor replicas (admin Service EndpointSlices) and the objects whose targets it reports.
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=httpscale-system,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=httpscale.dev,resources=httpscaledobjects,verbs=get;list;watch

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scaler:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, httpscalev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("building scheme: %w", err)
		}
	}
	return component.Run(ctx, component.Spec{Name: "scaler", Config: &config.Scaler{}, Scheme: scheme}, args)
}
