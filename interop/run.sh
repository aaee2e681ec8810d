#!/usr/bin/env bash
# Runs rotor's interop suite: installs the real proxies and clients (Debian
# packages, npm agents) with .ci/interop-deps.sh, then the Go tests against
# them with ROTOR_INTEROP=1.
#
# Usage: interop/run.sh [extra go test flags, e.g. -run TestSignals]
# Env:   INTEROP_LOG  where the log goes (default $TMPDIR/interop-results.log)
#        ROTOR_BIN    a prebuilt rotor binary (default: go build ./cmd/rotor)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOG=${INTEROP_LOG:-${TMPDIR:-/tmp}/interop-results.log}

"$ROOT/.ci/interop-deps.sh"

cd "$ROOT"
ROTOR_INTEROP=1 go test -count=1 -v -timeout 8m "$@" ./interop/ 2>&1 | tee "$LOG"
echo "interop: log in $LOG"
