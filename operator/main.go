// Command operator reconciles HTTPScaledObjects into the routing table and KEDA ScaledObjects.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/controller"
	"github.com/httpscale/httpscale/operator/scheduler"
	"github.com/httpscale/httpscale/operator/webhook"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/component"
	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
)

// Leader election: client-go's Lease lock only gets, creates and updates its Lease (releasing it on
// shutdown is an update), which the chart's install test proves with the operator's own token.
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=httpscale-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=events,verbs=create;patch

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error { return runWithLogs(ctx, args, nil) }

// runWithLogs is run with the logs going to logs (nil: stderr).
func runWithLogs(ctx context.Context, args []string, logs io.Writer) error {
	cfg := &config.Operator{}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, httpscalev1alpha1.AddToScheme, kedav1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("building scheme: %w", err)
		}
	}
	return component.Run(ctx, component.Spec{
		Name:      "operator",
		Config:    cfg,
		Scheme:    scheme,
		LogWriter: logs,
		Options: func(o *manager.Options) {
			o.LeaderElection = cfg.LeaderElect
			o.LeaderElectionID = controller.LeaderElectionID(cfg.Fleet)
			o.LeaderElectionNamespace = cfg.Namespace
			// Hand leadership over at once on SIGTERM instead of letting the next replica wait out the lease.
			o.LeaderElectionReleaseOnCancel = true
			o.Cache = controller.CacheOptions(options(cfg))
			o.PprofBindAddress = cfg.PprofAddr // off unless asked for (profiling)
		},
		Setup: func(mgr manager.Manager, log logr.Logger) error {
			wo := webhook.OptionsFrom(cfg.Webhook, cfg.Namespace)
			wo.Finalizer, wo.Fleet, wo.WatchNamespaces = controller.FinalizerFor(cfg.Fleet), cfg.Fleet, cfg.WatchNamespaces
			wo.ClusterDomain, wo.MaxEntryBytes = cfg.ClusterDomain, cfg.MaxEntryBytes
			if _, err := webhook.Setup(mgr, wo, log.WithName("webhook")); err != nil {
				return err
			}
			if cfg.SessionKeysSecret != "" {
				if err := addSessionKeeper(mgr, cfg, log); err != nil {
					return err
				}
			}
			opts := options(cfg)
			if f := cfg.InterceptorAdminTokenFile; f != "" {
				rt, err := admin.TokenTransport(f, http.DefaultTransport.(*http.Transport).Clone())
				if err != nil {
					return err
				}
				opts.ProbeTransport = rt
			}
			opts.Schedules = scheduler.New(mgr.GetClient(), cfg.Schedules, mgr.GetEventRecorder("httpscale-operator"), log)
			_, err := controller.Setup(mgr, opts, log)
			return err
		},
	}, args)
}

// addSessionKeeper adds the runnable that fills the interceptors' session-keys Secret.
// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=secrets,verbs=get;create;update
func addSessionKeeper(mgr manager.Manager, cfg *config.Operator, log logr.Logger) error {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating Kubernetes client for the session keys: %w", err)
	}
	k := &sessioncookie.SecretKeeper{Client: cs, Namespace: cfg.Namespace, Name: cfg.SessionKeysSecret, Log: log.WithName("session-keys")}
	if err := mgr.Add(k); err != nil {
		return fmt.Errorf("adding the session keys keeper: %w", err)
	}
	return nil
}

// options translates the validated configuration into the controllers' options.
func options(cfg *config.Operator) controller.Options {
	sel, _ := cfg.Selector() // Validate already parsed it
	return controller.Options{
		Namespace:                 cfg.Namespace,
		Fleet:                     cfg.Fleet,
		WatchNamespaces:           cfg.WatchNamespaces,
		TableName:                 cfg.TableName,
		ScalerAddress:             cfg.ScalerAddress,
		ScalerTLSAuthentication:   cfg.ScalerTLSAuthentication,
		InterceptorSelector:       sel,
		InterceptorAdminPort:      cfg.InterceptorAdminPort,
		ProbeInterval:             cfg.ProbeInterval,
		ProbeTimeout:              cfg.ProbeTimeout,
		TableDebounce:             cfg.TableDebounce,
		TableMaxDelay:             cfg.TableMaxDelay,
		MaxConcurrentReconciles:   cfg.MaxConcurrentReconciles,
		InterceptorServiceAccount: cfg.InterceptorServiceAccount,
		ClusterDomain:             cfg.ClusterDomain,
		ServePortMin:              int32(cfg.ServePortMin),
		ServePortMax:              int32(cfg.ServePortMax),
		HostClaimRetention:        cfg.HostClaimRetention,
		MaxEntryBytes:             cfg.MaxEntryBytes,
		KEDACheckInterval:         cfg.KEDACheckInterval,
	}
}
