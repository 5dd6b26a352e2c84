#!/usr/bin/env bash
# Regenerates code and manifests and fails if that changed any committed file. Works on any tree state:
# it compares checksums of the generated paths before and after instead of asking git.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sum() { find "$@" -type f 2>/dev/null | LC_ALL=C sort | xargs -r sha256sum; }
before=$(sum "$@")
make --no-print-directory generate manifests >/dev/null
after=$(sum "$@")
if [ "$before" != "$after" ]; then
	echo "Regenerating changed these files; run 'make generate manifests' and commit the result:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	exit 1
fi
echo "generated files are up to date"
