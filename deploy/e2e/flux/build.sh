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
# Versions tried newest first, per controller; a version that does not build is skipped for
# the next one. source-controller v1.9.4-v1.9.6 require github.com/fluxcd/pkg/artifact
# v0.18.2/v0.18.3, which the proxy refuses (403 "not available"); it serves v0.18.1, the same
# API, so EXTRA_REPLACE pins that (set it empty to see the refusal).
SOURCE_VERSIONS=${SOURCE_VERSIONS:-v1.9.6 v1.9.4 v1.8.5}
EXTRA_REPLACE_source_controller=${EXTRA_REPLACE_source_controller-github.com/fluxcd/pkg/artifact => github.com/fluxcd/pkg/artifact v0.18.1}
KUSTOMIZE_VERSIONS=${KUSTOMIZE_VERSIONS:-v1.9.6 v1.9.5 v1.7.3}
BIN=$REALENV/bin
mkdir -p "$BIN"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

build_one() {
	local name=$1 FLUX_VERSION=$2 mod=github.com/fluxcd/$1
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
		local extra=EXTRA_REPLACE_${name//-/_}
		[[ -z ${!extra:-} ]] || echo "replace ${!extra}"
	} >"$src/go.mod"
	cat >"$src/tools.go" <<GO
//go:build tools

package tools

import _ "$mod"
GO
	# tidy -e: the controllers' own tests import test servers (fluxcd/pkg/helmtestserver) the
	# proxy does not serve; the binary does not need them.
	(cd "$src" && go get "$mod@$FLUX_VERSION" && go mod tidy -e && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out" "$mod") || return 1
	echo "$FLUX_VERSION" >"$out.version"
	echo "$name $FLUX_VERSION: built $out"
}

build_any() {
	local name=$1 v
	shift
	for v in "$@"; do
		if build_one "$name" "$v"; then
			return 0
		fi
		echo "$name $v: does not build from the proxy here; trying an older version" >&2
	done
	echo "build.sh: no version of $name builds ($*)" >&2
	return 1
}

build_any kustomize-controller $KUSTOMIZE_VERSIONS
build_any source-controller $SOURCE_VERSIONS
