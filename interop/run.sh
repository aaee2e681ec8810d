#!/bin/sh
# Runs rotor's interop suite: installs the real proxies and clients (Debian
# packages, npm agents), then the Go tests against them with ROTOR_INTEROP=1.
# Usage: interop/run.sh [extra go test flags, e.g. -run TestSignals]
# The log is kept in $INTEROP_LOG (default: interop-results.log in $TMPDIR).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOG=${INTEROP_LOG:-${TMPDIR:-/tmp}/interop-results.log}

"$ROOT/.ci/interop-deps.sh"

cd "$ROOT"
status=0
ROTOR_INTEROP=1 go test -count=1 -v -timeout 8m "$@" ./interop/ >"$LOG" 2>&1 || status=$?
cat "$LOG"
echo "interop: log in $LOG"
exit "$status"
