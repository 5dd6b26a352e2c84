#!/usr/bin/env bash
# Builds (or reuses from a cache outside the clone) the real Kubernetes binaries that tests and the
# local control plane run. Everything comes from the Go module proxy, so a fresh machine with only Go
# can build it; a machine with internet may fetch prebuilt envtest binaries first (see try_download).
#
# Usage: hack/tools.sh <set>...   sets: envtest (kube-apiserver, etcd, kubectl)
#                                       cluster (envtest + kube-controller-manager, kube-scheduler)
#                                       helm (helm, in its own directory)
#                                       kwok (kwok + its stage manifests under stages/)
#                                       keda (keda operator + keda-adapter)
#                                       dns (coredns with the plugins of hack/tools/coredns/main.go)
#                                       node (kubelet, kube-proxy, containerd, containerd-shim-runc-v2,
#                                             ctr, registry, crane, pause; runc, CNI plugins, iptables
#                                             and conntrack from Debian when missing)
#                                       actionlint (the GitHub workflows' linter; shellcheck from
#                                             Debian when missing, for the workflows' scripts)
#                                       promtool (Prometheus' rule checker, for the chart's alerts)
#                                       gatewayapi (Gateway API's standard CRDs under crds/, for the
#                                             e2e check of the HTTPRoute sample)
# Prints the directory holding the binaries of the last set on the last line of stdout; progress goes
# to stderr. Each set that has its own versioned directory is locked separately, so a long KEDA build
# does not block envtest users.
#
# Cache: ${HTTPSCALE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/httpscale/tools}/<name>-<version>/
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
HELM_VERSION=v3.22.0
KWOK_VERSION=v0.8.0
KEDA_VERSION=v2.21.0
CONTAINERD_VERSION=v2.3.7
GGCR_VERSION=v0.22.1
COREDNS_VERSION=v1.15.0
ACTIONLINT_VERSION=v1.7.12
# Prometheus' Go module versions are v0.<major*100+minor>.<patch>: v0.316.0 is Prometheus 3.16.0.
PROMETHEUS_VERSION=v0.316.0
GATEWAY_API_VERSION=v1.6.3
# Bump when the build recipe changes so caches built by an older recipe are not reused.
RECIPE=1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${HTTPSCALE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/httpscale/tools}
bin_dir="$cache_root/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-r${RECIPE}"
mkdir -p "$bin_dir"

log() { printf '[tools] %s\n' "$*" >&2; }

# Serialise concurrent callers (parallel test packages, a demo started during a test run).
lock_k8s() { exec 9>"$bin_dir/.lock" && flock 9; }

have() { [ -x "$bin_dir/$1" ]; }

build_go() { # build_go <module dir> <output name> <package> [ldflags [tags]]
	local mod=$1 out=$2 pkg=$3 ldflags=${4:-} tags=${5:-}
	local start=$SECONDS
	log "building $out from $pkg (cold builds take minutes; cached afterwards in $bin_dir)"
	(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" \
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
	lock_k8s
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

# in_dir <dir> <command>...: runs a builder with bin_dir pointing at another versioned cache directory,
# holding that directory's own lock.
in_dir() {
	local dir=$1
	shift
	mkdir -p "$dir"
	(
		exec 8>"$dir/.lock"
		flock 8
		bin_dir=$dir
		"$@"
	)
}

kwok_dir="$cache_root/kwok-${KWOK_VERSION}-r${RECIPE}"
keda_dir="$cache_root/keda-${KEDA_VERSION}-r${RECIPE}"
helm_dir="$cache_root/helm-${HELM_VERSION}-k8s-${K8S_VERSION}-r${RECIPE}"
# The plugin set is part of CoreDNS's version here: main.go and go.mod key its directory too.
dns_key=$(cat "$here/tools/coredns/main.go" "$here/tools/coredns/go.mod" | sha256sum | cut -c1-8)
dns_dir="$cache_root/coredns-${COREDNS_VERSION}-${dns_key}-r${RECIPE}"
node_dir="$cache_root/node-k8s-${K8S_VERSION}-containerd-${CONTAINERD_VERSION}-ggcr-${GGCR_VERSION}-r${RECIPE}"
actionlint_dir="$cache_root/actionlint-${ACTIONLINT_VERSION}-r${RECIPE}"
promtool_dir="$cache_root/promtool-${PROMETHEUS_VERSION}-minsd-r${RECIPE}"
gatewayapi_dir="$cache_root/gateway-api-${GATEWAY_API_VERSION}-r${RECIPE}"

ensure_kwok() {
	if ! have kwok; then
		local start=$SECONDS
		log "building kwok $KWOK_VERSION (about 2 minutes cold; cached afterwards in $bin_dir)"
		(cd "$here" && GOBIN="$bin_dir" GOFLAGS= CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
			"sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
		log "built kwok in $((SECONDS - start))s"
	fi
	# The standalone binary has no built-in stages; the ones kwok ships as manifests are copied
	# next to it so the local cluster needs no module cache at run time.
	if [ ! -f "$bin_dir/stages/.complete" ]; then
		local src
		src=$(cd "$here" && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
			sed -n 's/.*"Dir": "\(.*\)",/\1/p')
		mkdir -p "$bin_dir/stages"
		# kwok's "fast" set: nodes become Ready and keep a lease; pods turn Running+Ready at once.
		local d
		for d in node/fast node/heartbeat-with-lease pod/fast; do
			find "$src/kustomize/stage/$d" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml \
				-exec cp {} "$bin_dir/stages/" \;
		done
		chmod u+w "$bin_dir"/stages/*.yaml
		touch "$bin_dir/stages/.complete"
	fi
}

ensure_keda() {
	local ldflags="-X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
	have keda || build_go "$here/tools/keda" keda github.com/kedacore/keda/v2/cmd/operator "$ldflags"
	have keda-adapter || build_go "$here/tools/keda" keda-adapter github.com/kedacore/keda/v2/cmd/adapter "$ldflags"
	# KEDA's CRDs ship in its module; keep them next to the binaries of the same version.
	if [ ! -f "$bin_dir/crds/.complete" ]; then
		local src
		src=$(cd "$here/tools/keda" && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)
		mkdir -p "$bin_dir/crds"
		cp "$src"/config/crd/bases/*.yaml "$bin_dir/crds/"
		chmod u+w "$bin_dir"/crds/*.yaml
		touch "$bin_dir/crds/.complete"
	fi
}

# CoreDNS for the local cluster's DNS, from a wrapper module whose main.go imports only the plugins it
# needs (no forward: nothing is resolved outside the cluster). Run through in_dir: bin_dir is its own
# versioned directory.
ensure_dns() {
	have coredns || build_go "$here/tools/coredns" coredns .
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
# do not assume Kubernetes 1.20. Run through in_dir: bin_dir is helm's own versioned directory.
ensure_helm() {
	[ -x "$bin_dir/helm" ] && return 0
	local minor=${K8S_VERSION#v1.} f="" start=$SECONDS tmp p
	minor=${minor%%.*}
	for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
		f+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
	done
	log "building helm $HELM_VERSION (about 2 minutes cold; cached afterwards in $bin_dir)"
	tmp=$(mktemp -d "$bin_dir/.build.XXXXXX")
	CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= go install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION$f" \
		"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	mv "$tmp/helm" "$bin_dir/helm"
	rm -rf "$tmp"
	log "built helm in $((SECONDS - start))s"
}

# Debian packages a real node needs at run time; installed only when missing (needs root).
ensure_node_packages() {
	local missing=()
	command -v runc >/dev/null || missing+=(runc)
	[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v conntrack >/dev/null || missing+=(conntrack)
	[ ${#missing[@]} -gt 0 ] || return 0
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		log "real nodes need these packages: ${missing[*]} (install them as root)"
		return 1
	fi
	log "installing ${missing[*]} from Debian"
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

# Real nodes (opt-in in the local cluster): kubelet and kube-proxy from the same wrapper module and
# ldflags as the control plane, containerd built without cgo or the snapshotters that need it,
# go-containerregistry's registry (serves images inside the namespace) and crane (assembles and pushes
# them), and a pause binary the cluster wraps into the sandbox image (no registry.k8s.io here). Run
# through in_dir: bin_dir is the node set's own versioned directory.
ensure_node() {
	ensure_node_packages
	local flags
	flags=$(kube_ldflags)
	local b
	for b in kubelet kube-proxy; do
		have $b || build_go "$here/tools/kube" $b "k8s.io/kubernetes/cmd/$b" "$flags"
	done
	local cflags="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
	local ctags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs"
	for b in containerd containerd-shim-runc-v2 ctr; do
		have $b || build_go "$here/tools/containerd" $b "github.com/containerd/containerd/v2/cmd/$b" "$cflags" "$ctags"
	done
	for b in registry crane; do
		if ! have $b; then
			local start=$SECONDS
			log "building $b $GGCR_VERSION (seconds; cached afterwards in $bin_dir)"
			(cd "$here" && GOBIN="$bin_dir" GOFLAGS= CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
				"github.com/google/go-containerregistry/cmd/$b@$GGCR_VERSION")
			log "built $b in $((SECONDS - start))s"
		fi
	done
	have pause || build_go "$here/tools/pause" pause .
}

# go_install <name> <package@version> <what>: a go install into the set's own directory (bin_dir). The
# tools whose modules have no replace directives build this way, outside the project's go.mod.
go_install() { # go_install <name> <package@version> <what> [tags]
	local name=$1 pkg=$2 what=$3 tags=${4:-} start=$SECONDS tmp
	have "$name" && return 0
	log "building $name ($what; cached afterwards in $bin_dir)"
	tmp=$(mktemp -d "$bin_dir/.build.XXXXXX")
	(cd "$here" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= go install -trimpath -tags "$tags" -ldflags "-s -w" "$pkg")
	mv "$tmp/$name" "$bin_dir/$name"
	rm -rf "$tmp"
	log "built $name in $((SECONDS - start))s"
}

# actionlint checks the GitHub workflows; it runs shellcheck on their run: scripts when shellcheck is on
# PATH (Debian's package, installed here when missing and we are root).
ensure_actionlint() {
	go_install actionlint "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" "seconds"
	if ! command -v shellcheck >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		log "installing shellcheck from Debian (actionlint checks the workflows' scripts with it)"
		apt-get update -qq >&2 || true
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >&2 || log "shellcheck not installed; actionlint skips the scripts"
	fi
}

# promtool loads the chart's alerting rules and runs their unit tests, as Prometheus would. Built with
# Prometheus' own remove_all_sd tag: without the cloud service-discovery plugins (AWS, Azure, GCE, ...),
# which promtool's rule commands never use and which would triple the build.
ensure_promtool() {
	go_install promtool "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION" "minutes cold: Prometheus' dependencies" remove_all_sd
}

# Gateway API's standard-channel CRDs ship in its Go module; copied next to nothing else.
ensure_gatewayapi() {
	[ -f "$bin_dir/crds/.complete" ] && return 0
	local src
	src=$(cd "$here" && GOFLAGS= go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" |
		sed -n 's/.*"Dir": "\(.*\)",/\1/p')
	mkdir -p "$bin_dir/crds"
	cp "$src"/config/crd/standard/*.yaml "$bin_dir/crds/"
	chmod u+w "$bin_dir"/crds/*.yaml
	touch "$bin_dir/crds/.complete"
}

out_dir=$bin_dir
[ $# -gt 0 ] || set -- envtest
for set in "$@"; do
	case $set in
	# In a subshell, so that the Kubernetes lock is released before the next set: a caller that only
	# needs envtest must not wait for this call's KEDA build.
	envtest) (ensure_envtest); out_dir=$bin_dir ;;
	cluster) (ensure_cluster); out_dir=$bin_dir ;;
	helm) in_dir "$helm_dir" ensure_helm; out_dir=$helm_dir ;;
	kwok) in_dir "$kwok_dir" ensure_kwok; out_dir=$kwok_dir ;;
	keda) in_dir "$keda_dir" ensure_keda; out_dir=$keda_dir ;;
	dns) in_dir "$dns_dir" ensure_dns; out_dir=$dns_dir ;;
	node) in_dir "$node_dir" ensure_node; out_dir=$node_dir ;;
	actionlint) in_dir "$actionlint_dir" ensure_actionlint; out_dir=$actionlint_dir ;;
	promtool) in_dir "$promtool_dir" ensure_promtool; out_dir=$promtool_dir ;;
	gatewayapi) in_dir "$gatewayapi_dir" ensure_gatewayapi; out_dir=$gatewayapi_dir ;;
	*) log "unknown tool set: $set"; exit 2 ;;
	esac
done
echo "$out_dir"
