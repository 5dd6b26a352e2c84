package localcluster

// Ports and namespace of httpscale's components as the chart runs them (its default values).
const (
	ProxyPort          = 8080
	InterceptorAdmin   = 9090
	InterceptorProbe   = 9091
	InterceptorMetrics = 9092
	ScalerGRPCPort     = 9090
	ScalerProbePort    = 9191
	ScalerMetricsPort  = 9190
	OperatorProbePort  = 8081
	OperatorMetrics    = 8080
	OperatorWebhook    = 9443
	Namespace          = "httpscale-system"
	// Release is the Helm release name of charts/httpscale.
	Release = "httpscale"
)

// Components are the chart's Deployments, each named httpscale-<component>, their pods labelled
// app.kubernetes.io/component=<component>.
var Components = []string{"operator", "interceptor", "scaler"}
