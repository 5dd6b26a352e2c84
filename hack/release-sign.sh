#!/usr/bin/env bash
# Signs what `make release` published (the release workflow runs it after `make release`): every image
# index and the chart by digest with cosign, and each platform image's CycloneDX SBOM attested to that
# image (`cosign attest --type cyclonedx`). Keyless in GitHub Actions (the workflow's OIDC identity);
# elsewhere set COSIGN_KEY to a key pair's private key (and COSIGN_PASSWORD).
#
# Usage: hack/release-sign.sh <release dir>   (bin/release: subjects.json, release.json, sbom/)
#
# Verify: cosign verify ghcr.io/httpscale/operator:<version> \
#   --certificate-identity-regexp '^https://github.com/httpscale/httpscale/\.github/workflows/release\.yml@' \
#   --certificate-oidc-issuer https://token.actions.githubusercontent.com
set -euo pipefail
dir=${1:?usage: hack/release-sign.sh <release dir>}
key=()
if [ -n "${COSIGN_KEY:-}" ]; then key=(--key "$COSIGN_KEY"); fi

jq -r '.[] | "\(.name)@\(.digest)"' "$dir/subjects.json" | while read -r ref; do
	echo "signing $ref" >&2
	cosign sign --yes "${key[@]}" "$ref"
done

registry=$(jq -r .registry "$dir/release.json")
version=$(jq -r .version "$dir/release.json")
jq -r '.platformImages | to_entries[] | .key as $c | .value | to_entries[] | "\($c) \(.key) \(.value)"' "$dir/release.json" |
	while read -r component platform digest; do
		sbom="$dir/sbom/$component-$version-${platform%%/*}-${platform#*/}.cdx.json"
		echo "attesting $sbom to $registry/$component@$digest" >&2
		cosign attest --yes "${key[@]}" --type cyclonedx --predicate "$sbom" "$registry/$component@$digest"
	done
