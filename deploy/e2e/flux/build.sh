#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller from the Go module proxy into
# $REALENV/bin, for the TestRealFlux cases. helm-controller is not built: the module proxy
# used here does not serve it. v1.10.x needs Go 1.27; v1.9.6 is the newest that builds on Go 1.26.
#
# Each controller gets its own throwaway module under $REALENV/src/flux-<name>, whose go.mod
# requires the controller and copies its replace block (minus the "=> ./api" one, which
# points inside the module zip and is satisfied by the required api module instead).
set -euo pipefail
REALENV=${REALENV:-/tmp/realenv}
FLUX_VERSION=${FLUX_VERSION:-v1.9.6}
BIN=$REALENV/bin
mkdir -p "$BIN"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

build_one() {
	local name=$1 mod=github.com/fluxcd/$1
	local out=$BIN/$name
	if [[ -x $out && -f $out.version && $(cat "$out.version") == "$FLUX_VERSION" && -z ${FORCE:-} ]]; then
		echo "$name $FLUX_VERSION: cached at $out"
		return
	fi
	local src=$REALENV/src/flux-$name
	rm -rf "$src"
	mkdir -p "$src"
	local gomod
	gomod=$(go mod download -json "$mod@$FLUX_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	[[ -f $gomod ]] || { echo "build.sh: cannot download $mod@$FLUX_VERSION" >&2; return 1; }
	{
		echo "module prflow.local/flux-$name"
		echo
		grep -m1 '^go ' "$gomod"
		echo
		echo "require $mod $FLUX_VERSION"
		echo
		# Replace lines and blocks, except local-path ones.
		awk '
			/^replace \(/ {inblk=1; print; next}
			inblk && /^\)/ {inblk=0; print; next}
			inblk { if ($0 !~ /=> \.\//) print; next }
			/^replace / { if ($0 !~ /=> \.\//) print }
		' "$gomod"
	} >"$src/go.mod"
	cat >"$src/tools.go" <<GO
//go:build tools

package tools

import _ "$mod"
GO
	(cd "$src" && go mod tidy -e >/dev/null 2>&1 || true
	 cd "$src" && go get "$mod@$FLUX_VERSION" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out" "$mod")
	echo "$FLUX_VERSION" >"$out.version"
	echo "$name $FLUX_VERSION: built $out"
}

for c in ${CONTROLLERS:-source-controller kustomize-controller}; do
	build_one "$c"
done
