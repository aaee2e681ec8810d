#!/usr/bin/env bash
# bench/run.sh: build rotor and rotor-bench, run the load tool in spawn mode
# (it configures and starts rotor itself, with its own loopback relay and
# targets), and write bench/results/<UTC date>-<short hash>.{json,txt}.
# Extra arguments go to rotor-bench, e.g. bench/run.sh -rounds 3 -duration 10s
# If ./cmd/rotor does not build yet, it runs a relay-as-gateway plumbing run
# instead and says so. Loopback only; every phase stops by itself.
set -euo pipefail

cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Record the commit before building: others may commit while the run lasts.
commit=$(git rev-parse HEAD 2>/dev/null || true)
dirty=false
if [ -n "$commit" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=true
fi
hash=${commit:0:7}
hash=${hash:-nocommit}
go build -o "$tmp/rotor-bench" ./cmd/rotor-bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p bench/results
out="bench/results/$stamp-$hash"

if go build -o "$tmp/rotor" ./cmd/rotor; then
	mode=(-spawn-rotor "$tmp/rotor" -rotor-log "$tmp/rotor.log")
else
	echo "run.sh: ./cmd/rotor does not build; plumbing run with the relay as the gateway" >&2
	out="$out-plumbing"
	mode=(-gateway-is-relay)
fi

status=0
"$tmp/rotor-bench" "${mode[@]}" -commit "$commit" -commit-dirty="$dirty" -json "$out.json" "$@" | tee "$out.txt" || status=$?
if [ "$status" -ne 0 ] && [ -s "$tmp/rotor.log" ]; then
	echo "run.sh: rotor log tail:" >&2
	tail -n 20 "$tmp/rotor.log" >&2
fi
echo "run.sh: wrote $out.json and $out.txt" >&2
exit "$status"
