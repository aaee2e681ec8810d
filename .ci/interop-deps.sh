#!/bin/sh
# Installs what rotor's interop suite (interop/) needs on a Debian 12 machine, as root.
# Idempotent and fast when everything is present: packages are checked with dpkg -s and
# apt-get runs only when something is missing. Debian's postinst would start squid,
# danted and tinyproxy as system services; a temporary policy-rc.d forbids that, so the
# suite's private instances are the only ones running.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PKGS="squid dante-server microsocks tinyproxy curl proxychains4 apache2-utils chromium redis-server"

installed() {
	dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

missing=""
for p in $PKGS; do
	installed "$p" || missing="$missing $p"
done
if ! command -v node >/dev/null 2>&1; then
	missing="$missing nodejs"
fi
if ! command -v npm >/dev/null 2>&1; then
	missing="$missing npm"
fi

if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "interop-deps: missing:$missing (run as root to install)" >&2
		exit 1
	fi
	policy=/usr/sbin/policy-rc.d
	made_policy=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\n# interop-deps: keep postinst from starting services\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		made_policy=1
	fi
	cleanup() {
		if [ -n "$made_policy" ]; then
			rm -f "$policy"
		fi
	}
	trap cleanup EXIT INT TERM
	echo "interop-deps: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing
	cleanup
	made_policy=""
	trap - EXIT INT TERM
else
	echo "interop-deps: all packages present"
fi

# The npm agents, pinned in interop/node/package.json (node_modules is not committed).
NODE_DIR="$ROOT/interop/node"
if [ ! -d "$NODE_DIR/node_modules/socks-proxy-agent" ] || [ ! -d "$NODE_DIR/node_modules/https-proxy-agent" ]; then
	echo "interop-deps: npm install in $NODE_DIR"
	if [ -f "$NODE_DIR/package-lock.json" ]; then
		(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
	else
		(cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error)
	fi
else
	echo "interop-deps: npm packages present"
fi
