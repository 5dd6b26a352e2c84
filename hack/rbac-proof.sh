#!/usr/bin/env bash
# Installs (or upgrades) the httpscale chart into the cluster of $KUBECONFIG and writes one kubeconfig per
# component that authenticates with nothing but a token of the component's chart ServiceAccount
# (`kubectl create token`). Running the operator, interceptor and scaler out of cluster with these
# kubeconfigs proves the chart's least-privilege RBAC: a missing permission shows up as a "forbidden"
# error in the binary's log.
#
# Usage: hack/rbac-proof.sh <out-dir> [extra helm args]
#   e.g. --set operator.replicas=0,interceptor.replicas=0,scaler.replicas=0 when the binaries run out of
#   cluster (no pods of ours in the cluster, only the Services, RBAC, webhook configuration and CRD)
#   env: KUBECONFIG (required), NAMESPACE (default httpscale-system), RELEASE (default httpscale),
#        FLEET (default default: the chart value fleet; its ServiceAccounts are httpscale-<fleet>-<component>),
#        HELM / KUBECTL (default: built by hack/tools.sh), TOKEN_DURATION (default 24h)
# Writes <out-dir>/{operator,interceptor,scaler}.kubeconfig and prints their paths.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: hack/rbac-proof.sh <out-dir> [helm args...]}
shift
: "${KUBECONFIG:?set KUBECONFIG to an administrator kubeconfig of the target cluster}"
ns=${NAMESPACE:-httpscale-system}
release=${RELEASE:-httpscale}
fleet=${FLEET:-default}
prefix=httpscale
if [ "$fleet" != default ]; then prefix=httpscale-$fleet; fi
helm=${HELM:-$("$root/hack/tools.sh" helm | tail -n1)/helm}
kubectl=${KUBECTL:-$("$root/hack/tools.sh" envtest | tail -n1)/kubectl}
mkdir -p "$out"

"$helm" upgrade --install "$release" "$root/charts/httpscale" --namespace "$ns" --create-namespace --set fleet="$fleet" "$@" >&2

server=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
"$kubectl" config view --minify --raw --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
	base64 -d >"$out/ca.crt"

for component in operator interceptor scaler; do
	sa=$prefix-$component
	kc=$out/$component.kubeconfig
	token=$("$kubectl" create token "$sa" --namespace "$ns" --duration "${TOKEN_DURATION:-24h}")
	rm -f "$kc"
	"$kubectl" config --kubeconfig "$kc" set-cluster cluster --server "$server" \
		--certificate-authority "$out/ca.crt" --embed-certs=true >/dev/null
	"$kubectl" config --kubeconfig "$kc" set-credentials "$sa" --token "$token" >/dev/null
	"$kubectl" config --kubeconfig "$kc" set-context "$sa" --cluster cluster --user "$sa" --namespace "$ns" >/dev/null
	"$kubectl" config --kubeconfig "$kc" use-context "$sa" >/dev/null
	chmod 600 "$kc"
	echo "$component $kc"
done
