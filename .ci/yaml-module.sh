#!/usr/bin/env bash
# Moves every import of gopkg.in/yaml.v3 (archived upstream) to go.yaml.in/yaml/v3, its
# maintained continuation with the same API and package name. Safe to run again (after merging
# branches that added new imports of the old path): it changes only what still names it.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -d '' files < <(git ls-files -z '*.go' | xargs -0 grep -lZ '"gopkg.in/yaml.v3"' || true)
if [ "${#files[@]}" -gt 0 ]; then
  sed -i 's#"gopkg.in/yaml.v3"#"go.yaml.in/yaml/v3"#' "${files[@]}"
  gofmt -w "${files[@]}" # the new path sorts elsewhere in its import block
fi
go mod tidy
if grep -rl --include='*.go' '"gopkg.in/yaml.v3"' . >/dev/null; then
  echo "gopkg.in/yaml.v3 is still imported" >&2
  exit 1
fi
echo "moved ${#files[@]} files to go.yaml.in/yaml/v3"
