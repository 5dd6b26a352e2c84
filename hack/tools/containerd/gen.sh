#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the wrapper module that builds containerd (daemon, runc shim, ctr).
# containerd's go.mod has no replace lines, so requiring it at the wanted version is enough.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
v=${1:?usage: gen.sh v2.3.7}
tools=()
for t in containerd containerd-shim-runc-v2 ctr; do
	tools+=("github.com/containerd/containerd/v2/cmd/$t@$v")
done
go get -tool "${tools[@]}"
