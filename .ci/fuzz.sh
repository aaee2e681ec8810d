#!/usr/bin/env bash
# Runs every fuzz target for a short, fixed time (default 5s each).
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-5s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $f ($t)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" > /tmp/rotor-fuzz.log 2>&1 || { cat /tmp/rotor-fuzz.log; exit 1; }
  done
done
