#!/usr/bin/env bash
# up.sh — start Flux's source-controller and kustomize-controller (built by build.sh) as local
# processes against a running realenv (../shared/realenv/up.sh): Flux's CRDs are applied
# server-side from each controller's module (config/crd/bases), namespace flux-system is made,
# and both controllers run with realenv's admin kubeconfig, leader election off, every address on
# 127.0.0.1. GitRepositories read realenv's own git server. Their PIDs are appended to
# $REALENV/pids, so realenv's down.sh stops them with the rest; $REALENV/flux.env gets
# SOURCE_CONTROLLER_PID, KUSTOMIZE_CONTROLLER_PID and FLUX_NAMESPACE. Logs: $REALENV/run/*.log.
set -Eeuo pipefail
REALENV=${REALENV:-/tmp/realenv}
BIN=$REALENV/bin
RUN=$REALENV/run
PIDS=$REALENV/pids
NS=${FLUX_NAMESPACE:-flux-system}
STORAGE_PORT=${FLUX_STORAGE_PORT:-19090}
SC_METRICS_PORT=${FLUX_SC_METRICS_PORT:-19080}
SC_HEALTH_PORT=${FLUX_SC_HEALTH_PORT:-19440}
KC_METRICS_PORT=${FLUX_KC_METRICS_PORT:-19081}
KC_HEALTH_PORT=${FLUX_KC_HEALTH_PORT:-19441}
H=127.0.0.1
log() { printf '[flux-up %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ -s "$REALENV/realenv.env" ] || die "$REALENV/realenv.env missing: start realenv (../shared/realenv/up.sh) first"
# shellcheck disable=SC1091
. "$REALENV/realenv.env"
export KUBECONFIG
for b in source-controller kustomize-controller; do
	[ -x "$BIN/$b" ] && [ -s "$BIN/$b.version" ] || die "$BIN/$b missing: run deploy/e2e/flux/build.sh first"
done
kubectl get --raw /readyz >/dev/null || die "kube-apiserver of realenv ($KUBE_URL) is not answering"

# CRDs from the module versions the binaries were built from.
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
for b in source-controller kustomize-controller; do
	v=$(cat "$BIN/$b.version")
	dir=$(go mod download -json "github.com/fluxcd/$b@$v" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	[ -d "$dir/config/crd/bases" ] || die "github.com/fluxcd/$b@$v: no config/crd/bases in the module"
	kubectl apply --server-side --force-conflicts -f "$dir/config/crd/bases" >/dev/null
	log "applied the CRDs of $b $v"
done
for crd in gitrepositories.source.toolkit.fluxcd.io kustomizations.kustomize.toolkit.fluxcd.io; do
	# A CRD created a moment ago has no conditions yet and kubectl wait fails at once: retry.
	for _ in $(seq 50); do kubectl wait --for condition=established --timeout 10s "crd/$crd" >/dev/null 2>&1 && break; sleep 0.2; done
	kubectl wait --for condition=established --timeout 1s "crd/$crd" >/dev/null || die "CRD $crd not established"
done
kubectl get ns "$NS" >/dev/null 2>&1 || kubectl create ns "$NS" >/dev/null

start() {
	local name=$1
	shift
	setsid "$@" >"$RUN/$name.log" 2>&1 </dev/null &
	echo "$! $name" >>"$PIDS"
	log "started $name (pid $!)"
	echo "$!"
}
mkdir -p "$RUN" "$REALENV/data/flux-storage"
SC=$(start source-controller env RUNTIME_NAMESPACE="$NS" "$BIN/source-controller" \
	--storage-path "$REALENV/data/flux-storage" --storage-addr "$H:$STORAGE_PORT" --storage-adv-addr "$H:$STORAGE_PORT" \
	--metrics-addr "$H:$SC_METRICS_PORT" --health-addr "$H:$SC_HEALTH_PORT" --enable-leader-election=false \
	--log-level info --log-encoding json)
KC=$(start kustomize-controller env RUNTIME_NAMESPACE="$NS" "$BIN/kustomize-controller" \
	--metrics-addr "$H:$KC_METRICS_PORT" --health-addr "$H:$KC_HEALTH_PORT" --enable-leader-election=false \
	--no-remote-bases --log-level info --log-encoding json)
for p in $SC_HEALTH_PORT $KC_HEALTH_PORT; do
	end=$((SECONDS + 60))
	until curl -sf -m 2 "http://$H:$p/readyz" >/dev/null; do
		[ $SECONDS -lt $end ] || die "controller with health port $p not ready after 60s (see $RUN/*-controller.log)"
		sleep 0.3
	done
done
cat >"$REALENV/flux.env" <<EOF
# written by deploy/e2e/flux/up.sh
export SOURCE_CONTROLLER_PID=$SC
export KUSTOMIZE_CONTROLLER_PID=$KC
export FLUX_NAMESPACE=$NS
export SOURCE_CONTROLLER_VERSION=$(cat "$BIN/source-controller.version")
export KUSTOMIZE_CONTROLLER_VERSION=$(cat "$BIN/kustomize-controller.version")
EOF
log "Flux is up: source-controller $SC, kustomize-controller $KC; $REALENV/flux.env"
