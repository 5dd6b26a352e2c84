#!/usr/bin/env bash
# Builds (or reuses from a cache outside the clone) the real Kubernetes binaries that tests and the
# local control plane run. Everything comes from the Go module proxy, so a fresh machine with only Go
# can build it; a machine with internet may fetch prebuilt envtest binaries first (see try_download).
#
# Usage: hack/tools.sh <set>...   sets: envtest (kube-apiserver, etcd, kubectl)
#                                       cluster (envtest + kube-controller-manager, kube-scheduler)
#                                       helm (helm, in its own directory)
# Prints the directory holding the last set's binaries on the last line of stdout; progress goes to
# stderr.
#
# Cache: ${HTTPSCALE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/httpscale/tools}/<name>-<version>/
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
HELM_VERSION=v3.22.0
# Bump when the build recipe changes so caches built by an older recipe are not reused.
RECIPE=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${HTTPSCALE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/httpscale/tools}
bin_dir="$cache_root/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-r${RECIPE}"
mkdir -p "$bin_dir"

log() { printf '[tools] %s\n' "$*" >&2; }

# Serialise concurrent callers (parallel test packages, a demo started during a test run).
exec 9>"$bin_dir/.lock"
flock 9

have() { [ -x "$bin_dir/$1" ]; }

build_go() { # build_go <module dir> <output name> <package> [ldflags]
	local mod=$1 out=$2 pkg=$3 ldflags=${4:-}
	local start=$SECONDS
	log "building $out from $pkg (cold builds take minutes; cached afterwards in $bin_dir)"
	(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w $ldflags" \
		-o "$bin_dir/.$out.tmp" "$pkg")
	mv "$bin_dir/.$out.tmp" "$bin_dir/$out"
	log "built $out in $((SECONDS - start))s"
}

kube_ldflags() {
	local minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	local f=""
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		f+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$f"
}

# A user with internet gets the same binaries faster from the envtest release; here (module proxy
# only) the request is refused at once and we fall back to building.
try_download() {
	[ "${HTTPSCALE_TOOLS_DOWNLOAD:-auto}" != "never" ] || return 1
	command -v curl >/dev/null || return 1
	local v=${K8S_VERSION#v} tmp
	local url="https://github.com/kubernetes-sigs/controller-tools/releases/download/envtest-v$v/envtest-v$v-linux-amd64.tar.gz"
	tmp=$(mktemp -d)
	if curl -fsSL --connect-timeout 5 --max-time 120 -o "$tmp/envtest.tgz" "$url" 2>/dev/null &&
		tar -C "$tmp" -xzf "$tmp/envtest.tgz" 2>/dev/null; then
		for b in kube-apiserver etcd kubectl; do
			[ -x "$tmp/controller-tools/envtest/$b" ] || { rm -rf "$tmp"; return 1; }
		done
		for b in kube-apiserver etcd kubectl; do mv "$tmp/controller-tools/envtest/$b" "$bin_dir/$b"; done
		rm -rf "$tmp"
		log "downloaded envtest binaries $K8S_VERSION"
		return 0
	fi
	rm -rf "$tmp"
	log "prebuilt envtest binaries not reachable; building from the Go module proxy"
	return 1
}

ensure_envtest() {
	if ! have kube-apiserver || ! have etcd || ! have kubectl; then
		try_download || true
	fi
	have etcd || build_go "$here/tools/etcd" etcd .
	local missing=()
	have kube-apiserver || missing+=(kube-apiserver)
	have kubectl || missing+=(kubectl)
	build_kube "${missing[@]}"
}

ensure_cluster() {
	ensure_envtest
	local missing=()
	have kube-controller-manager || missing+=(kube-controller-manager)
	have kube-scheduler || missing+=(kube-scheduler)
	build_kube "${missing[@]}"
}

build_kube() { # build_kube <binary>...
	[ $# -gt 0 ] || return 0
	local flags b
	flags=$(kube_ldflags)
	for b in "$@"; do
		build_go "$here/tools/kube" "$b" "k8s.io/kubernetes/cmd/$b" "$flags"
	done
}

# helm from the Go module proxy, stamped with the Kubernetes version we run so `helm lint/template`
# do not assume Kubernetes 1.20. Cached in its own directory, apart from the Kubernetes binaries.
ensure_helm() {
	local dir="$cache_root/helm-${HELM_VERSION}-k8s-${K8S_VERSION}-r${RECIPE}" minor=${K8S_VERSION#v1.} f=""
	minor=${minor%%.*}
	mkdir -p "$dir"
	out_dir=$dir
	flock -u 9 # helm does not touch the Kubernetes binaries: let envtest callers go on meanwhile
	(
		flock 8
		[ -x "$dir/helm" ] && exit 0
		for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
			f+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
		done
		log "building helm $HELM_VERSION (about 2 minutes cold; cached afterwards in $dir)"
		local start=$SECONDS tmp
		tmp=$(mktemp -d "$dir/.build.XXXXXX")
		CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= go install -trimpath \
			-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION$f" \
			"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
		mv "$tmp/helm" "$dir/helm"
		rm -rf "$tmp"
		log "built helm in $((SECONDS - start))s"
	) 8>"$dir/.lock"
	flock 9
}

out_dir=$bin_dir
[ $# -gt 0 ] || set -- envtest
for set in "$@"; do
	case $set in
	envtest) out_dir=$bin_dir; ensure_envtest ;;
	cluster) out_dir=$bin_dir; ensure_cluster ;;
	helm) ensure_helm ;;
	*) log "unknown tool set: $set"; exit 2 ;;
	esac
done
echo "$out_dir"
