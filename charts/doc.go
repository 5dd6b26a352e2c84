// Package charts holds httpscale's Helm chart (charts/httpscale) and the tests that prove it: `helm lint
// --strict`, renders with default and non-default values decoded strictly into Kubernetes types, the
// kustomize install (config/default) matching the chart, and an install on a real kube-apiserver with
// RBAC enforced where each component runs with its own ServiceAccount token.
package charts
