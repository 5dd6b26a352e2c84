// Command interceptor is the HTTP proxy fleet: it routes requests to apps, holds them while an app
// scales from zero, and counts traffic per app for the scaler.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/httpscale/httpscale/pkg/component"
	"github.com/httpscale/httpscale/pkg/config"
)

// The routing table, ready endpoints of routed Services, and this replica's node (for its zone).
// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "interceptor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	return component.Run(ctx, component.Spec{Name: "interceptor", Config: &config.Interceptor{}, Scheme: scheme}, args)
}
