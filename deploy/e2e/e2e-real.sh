#!/usr/bin/env bash
# e2e-real.sh — run the TestReal… end-to-end tests against a real Argo CD (../shared/realenv):
# build it if its binaries are missing, start it unless one is already up, run the tests with
# PRFLOW_REALENV, and stop it again if this script started it (KEEP_REALENV=1 leaves it up).
# Needs root (realenv uses network namespaces). Env: REALENV (default /tmp/realenv),
# REALENV_SCRIPTS (default ../shared/realenv), RUN (test regexp, default ^TestReal).
set -euo pipefail
cd "$(dirname "$0")/../.."
export REALENV=${REALENV:-/tmp/realenv}
SCRIPTS=${REALENV_SCRIPTS:-../shared/realenv}
RUN=${RUN:-^TestReal}
[ -x "$SCRIPTS/up.sh" ] || { echo "e2e-real: $SCRIPTS/up.sh not found (set REALENV_SCRIPTS)" >&2; exit 2; }
[ -x "$REALENV/bin/argocd" ] || "$SCRIPTS/build.sh"

up() { # is a realenv answering?
  [ -s "$REALENV/realenv.env" ] || return 1
  local url
  url=$(. "$REALENV/realenv.env"; echo "$ARGOCD_URL")
  curl -sf -m 3 "$url/healthz" >/dev/null 2>&1
}
started=0
if ! up; then
  "$SCRIPTS/up.sh" >/dev/null
  started=1
fi
stop() {
  if [ "$started" = 1 ] && [ "${KEEP_REALENV:-0}" != 1 ]; then "$SCRIPTS/down.sh" >/dev/null || true; fi
}
trap stop EXIT
# Real Flux (TestRealFlux…): build source-controller and kustomize-controller once, and start
# them on this realenv unless they already run (their PIDs join realenv's, so down.sh stops them).
if [[ "TestRealFlux" =~ $RUN ]]; then
  [ -x "$REALENV/bin/source-controller" ] && [ -x "$REALENV/bin/kustomize-controller" ] || deploy/e2e/flux/build.sh
  flux_up() { # is the source-controller of flux.env still running?
    [ -s "$REALENV/flux.env" ] || return 1
    local pid
    pid=$(. "$REALENV/flux.env"; echo "$SOURCE_CONTROLLER_PID")
    [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q source-controller
  }
  flux_up || deploy/e2e/flux/up.sh
fi
set +e
PRFLOW_REALENV=$REALENV/realenv.env go test -count=1 -v -timeout 40m -run "$RUN" ./deploy/e2e/ > "$REALENV/e2e-real.log" 2>&1
rc=$?
set -e
grep -E '^(=== RUN|--- |PASS|FAIL|ok)|^\s+--- |REALTIME' "$REALENV/e2e-real.log" || true
[ $rc = 0 ] || echo "e2e-real: tests failed (exit $rc); full output in $REALENV/e2e-real.log" >&2
exit $rc
