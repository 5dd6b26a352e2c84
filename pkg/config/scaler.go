package config

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Scaler configures the scaler binary.
type Scaler struct {
	Common
	// GRPCAddr serves KEDA's ExternalScaler and the gRPC health service.
	GRPCAddr string
	// Namespace is where the interceptor admin Service lives (the install namespace).
	Namespace string
	InterceptorAdmin
	// PollInterval paces the counts polls; PollTimeout bounds one poll of one replica.
	PollInterval, PollTimeout time.Duration
	// StaleGrace is how long an unreachable replica keeps contributing its last counts.
	StaleGrace time.Duration
	// WakeHold is how long a wake notice keeps an app active.
	WakeHold time.Duration
	// DrainDelay is how long a stopping scaler serves on with its readiness failing before it ends
	// KEDA's streams and closes its connections.
	DrainDelay time.Duration
	// TLSCertFile and TLSKeyFile enable TLS on the gRPC port; TLSClientCAFile additionally requires
	// client certificates signed by that CA.
	TLSCertFile, TLSKeyFile, TLSClientCAFile string
}

// Bind registers the scaler's flags on fs, then takes their values from the environment (see EnvName).
func (s *Scaler) Bind(fs *flag.FlagSet) {
	s.bind(fs, ":9191", ":9190")
	fs.StringVar(&s.GRPCAddr, "grpc-bind-address", ":9090", "Address serving KEDA's external scaler gRPC API and gRPC health.")
	fs.StringVar(&s.Namespace, "namespace", "httpscale-system", "Namespace of the interceptor admin Service (the install namespace).")
	s.InterceptorAdmin.Bind(fs)
	fs.DurationVar(&s.PollInterval, "poll-interval", 200*time.Millisecond, "How often every interceptor replica's counts are polled.")
	fs.DurationVar(&s.PollTimeout, "poll-timeout", time.Second, "Timeout of one poll of one replica.")
	fs.DurationVar(&s.StaleGrace, "stale-grace", 15*time.Second, "How long a replica that stopped answering keeps contributing its last counts (marked stale) before it is ignored.")
	fs.DurationVar(&s.WakeHold, "wake-hold", 5*time.Second, "How long a wake notice keeps an app active (it only has to bridge the gap until a poll counts the held request).")
	fs.DurationVar(&s.DrainDelay, "drain-delay", 3*time.Second, "On SIGTERM, how long the scaler serves on with its readiness failing (so that new connections go to other replicas) before it ends KEDA's streams, which KEDA then opens again on a live replica.")
	fs.StringVar(&s.TLSCertFile, "tls-cert-file", "", "PEM certificate for the gRPC port; enables TLS (KEDA's enableTLS).")
	fs.StringVar(&s.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file.")
	fs.StringVar(&s.TLSClientCAFile, "tls-client-ca-file", "", "PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS).")
	s.loadEnv(fs)
}

// Validate reports every invalid setting at once.
func (s *Scaler) Validate() error {
	errs := []error{s.validate()}
	if err := validateAddr("grpc-bind-address", s.GRPCAddr); err != nil {
		errs = append(errs, err)
	}
	if s.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if _, err := s.Selector(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"poll-interval", s.PollInterval}, {"poll-timeout", s.PollTimeout}, {"stale-grace", s.StaleGrace}, {"wake-hold", s.WakeHold}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", d.name, d.v))
		}
	}
	if s.DrainDelay < 0 {
		errs = append(errs, fmt.Errorf("--drain-delay must not be negative, got %s", s.DrainDelay))
	}
	if s.StaleGrace > 0 && s.StaleGrace < s.PollInterval+s.PollTimeout {
		errs = append(errs, fmt.Errorf("--stale-grace %s must be at least --poll-interval + --poll-timeout (%s), or every slow answer drops a replica", s.StaleGrace, s.PollInterval+s.PollTimeout))
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file must be set together"))
	}
	if s.TLSClientCAFile != "" && s.TLSCertFile == "" {
		errs = append(errs, errors.New("--tls-client-ca-file needs --tls-cert-file and --tls-key-file"))
	}
	return errors.Join(errs...)
}
