#!/usr/bin/env bash
# Builds rotor's container image from ./Dockerfile on a machine with no Docker
# engine and no registry (Debian 12, root), then runs checks inside it:
#   rotor -version, rotor -check of config.example.toml and of the image's own
#   default config, and a real start of the image (healthcheck, SIGHUP reload,
#   SIGTERM exits 0).
#
# How: buildah (chroot isolation) and podman (runc, --network none), installed
# from Debian when missing. FROM golang/distroless cannot be pulled here, so the
# Dockerfile's ARG bases are replaced by a local Go builder image, made once
# from this machine's /usr/local/go plus a static busybox (cached in the
# buildah store under a tag carrying the Go version), and by `scratch` for the
# runtime stage (the Dockerfile copies the CA bundle itself).
#
# Environment:
#   ROTOR_IMAGE            image tag to build (default localhost/rotor:ci)
#   ROTOR_VERSION          version stamped into the binary (default: git describe, else "dev")
#   ROTOR_DOCKER_OFFLINE=1 no network in the build: modules are vendored into a
#                          temporary copy of the tree and built with GOPROXY=off
#                          (default: the Dockerfile's own `go mod download`)
#   ROTOR_DOCKER_REBUILD_BASE=1  rebuild the local Go builder base image
#
# Idempotent; fails (non-zero) on any failure; removes the containers and
# temporary files it made. Run as root: bash .ci/docker.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGE=${ROTOR_IMAGE:-localhost/rotor:ci}
BASE_RECIPE=1 # bump when the builder base recipe below changes
PODMAN=(podman --runtime runc)
RUN_FLAGS=(--network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

T_START=$(date +%s)
T_STEP=$T_START
step() { # step NAME: prints the time the previous step took
	local now
	now=$(date +%s)
	echo "docker.sh: [+$((now - T_START))s, previous step $((now - T_STEP))s] $*"
	T_STEP=$now
}
die() {
	echo "docker.sh: FAIL: $*" >&2
	exit 1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rotor-docker.XXXXXX")
CTRS=()
BCTRS=()
cleanup() {
	local rc=$?
	for c in "${CTRS[@]}"; do
		"${PODMAN[@]}" rm -f -t 0 "$c" >/dev/null 2>&1 || true
	done
	for c in "${BCTRS[@]}"; do
		buildah umount "$c" >/dev/null 2>&1 || true
		buildah rm "$c" >/dev/null 2>&1 || true
	done
	rm -rf "$TMP"
	if [ "$rc" -ne 0 ]; then
		echo "docker.sh: FAILED after $(($(date +%s) - T_START))s (exit $rc)" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || die "run as root (buildah/podman rootful, apt-get)"

# --- 1. tools -----------------------------------------------------------------
step "checking tools"
# (Not `dpkg -s | grep -q`: under pipefail, grep quitting early makes dpkg die of SIGPIPE.)
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
missing=""
for p in buildah podman runc busybox-static; do
	installed "$p" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "docker.sh: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086
	if ! apt-get install -y -qq --no-install-recommends $missing >"$TMP/apt.log" 2>&1; then
		echo "docker.sh: apt-get install failed; apt-get update and retry"
		apt-get update -qq
		# shellcheck disable=SC2086
		apt-get install -y -qq --no-install-recommends $missing >"$TMP/apt.log" 2>&1 || {
			cat "$TMP/apt.log" >&2
			die "apt-get install$missing"
		}
	fi
fi
command -v go >/dev/null || die "go not on PATH"
GOROOT=$(go env GOROOT)
GOVERSION=$(go env GOVERSION)
echo "docker.sh: $(buildah --version); $(podman --version); $GOVERSION at $GOROOT"

# --- 2. the code builds at all (clear error before any image work) ------------
step "go build ./cmd/rotor on the host"
(cd "$ROOT" && go build -o /dev/null ./cmd/rotor) || die "go build ./cmd/rotor fails on the host"

# --- 3. local base: the Go builder ----------------------------------------------
BUILDER=localhost/rotor-go-builder:$GOVERSION-r$BASE_RECIPE
if [ "${ROTOR_DOCKER_REBUILD_BASE:-}" = 1 ]; then
	buildah rmi -f "$BUILDER" >/dev/null 2>&1 || true
fi
if buildah inspect --type image "$BUILDER" >/dev/null 2>&1; then
	step "builder base $BUILDER present (cached)"
else
	step "making builder base $BUILDER"
	ctr=$(buildah from scratch)
	BCTRS+=("$ctr")
	mnt=$(buildah mount "$ctr")
	mkdir -p "$mnt"/{bin,sbin,usr/bin,usr/sbin,usr/local,etc/ssl/certs,root,go,src}
	install -d -m 1777 "$mnt/tmp"
	# The toolchain without its tests and docs (not needed to build).
	tar -C "$(dirname "$GOROOT")" --exclude=go/test --exclude=go/doc --exclude=go/api --exclude=go/misc \
		-cf - "$(basename "$GOROOT")" | tar -C "$mnt/usr/local" -xf -
	if [ "$(basename "$GOROOT")" != go ]; then
		mv "$mnt/usr/local/$(basename "$GOROOT")" "$mnt/usr/local/go"
	fi
	cp /bin/busybox "$mnt/bin/busybox"
	chroot "$mnt" /bin/busybox --install -s
	cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/"
	printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$mnt/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$mnt/etc/group"
	printf 'hosts: files dns\n' >"$mnt/etc/nsswitch.conf"
	buildah umount "$ctr" >/dev/null
	buildah config \
		--env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		--env GOPATH=/go --env GOTOOLCHAIN=local --env HOME=/root \
		--workingdir /go --cmd /bin/sh \
		--label org.opencontainers.image.description="rotor CI: $GOVERSION from the host + busybox" \
		"$ctr"
	buildah commit --rm -q "$ctr" "$BUILDER" >/dev/null
	BCTRS=()
fi

# --- 4. build the image --------------------------------------------------------
VERSION=${ROTOR_VERSION:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}
CONTEXT=$ROOT
EXTRA=()
if [ "${ROTOR_DOCKER_OFFLINE:-}" = 1 ]; then
	step "offline: vendoring modules into a temporary copy of the tree"
	CONTEXT=$TMP/context
	mkdir -p "$CONTEXT"
	tar -C "$ROOT" --exclude=./.git --exclude=./interop/node/node_modules --exclude=./bench/results \
		--exclude=./vendor -cf - . | tar -C "$CONTEXT" -xf -
	(cd "$CONTEXT" && go mod vendor) || die "go mod vendor"
	EXTRA+=(--build-arg GOPROXY=off)
else
	EXTRA+=(--build-arg GOPROXY="$(go env GOPROXY)")
fi
old_id=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
step "buildah bud -> $IMAGE (version $VERSION)"
buildah bud --isolation chroot --format docker --layers --force-rm \
	--build-arg GO_IMAGE="$BUILDER" \
	--build-arg RUNTIME_IMAGE=scratch \
	--build-arg VERSION="$VERSION" \
	"${EXTRA[@]}" \
	-f "$ROOT/Dockerfile" -t "$IMAGE" "$CONTEXT" >"$TMP/build.log" 2>&1 || {
	cat "$TMP/build.log" >&2
	die "buildah bud"
}
grep -E '^\[[0-9]/[0-9]\] STEP|Using cache|^GOPROXY' "$TMP/build.log" | sed 's/^/  /' | cut -c1-150
new_id=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
	buildah rmi "$old_id" >/dev/null 2>&1 || true # the previous build, now untagged
fi
buildah images --format '  {{.Name}}:{{.Tag}} {{.ID}} {{.Size}}' "$IMAGE"

# --- 5. static checks of the image --------------------------------------------
step "checking image config"
cfg=$("${PODMAN[@]}" image inspect --format '{{json .Config}} {{json .HealthCheck}}' "$IMAGE")
for want in '"User":"65532:65532"' '"Entrypoint":["/rotor"]' '"Cmd":["-config","/etc/rotor/rotor.toml"]' \
	'"Test":["CMD","/rotor","-healthcheck"' '"1080/tcp"' '"8080/tcp"' '"9090/tcp"'; do
	case $cfg in
	*"$want"*) ;;
	*) die "image config lacks $want: $cfg" ;;
	esac
done
echo "  user 65532, entrypoint, cmd, healthcheck, exposed ports: ok"

# --- 6. run it -----------------------------------------------------------------
# One-shot runs skip the image's HEALTHCHECK: podman would try to schedule it
# with systemd timers, which these machines do not run (harmless, noisy).
prun() { "${PODMAN[@]}" run --rm --no-healthcheck "${RUN_FLAGS[@]}" "$@"; }

step "podman run: rotor -version"
out=$(prun "$IMAGE" -version) || die "rotor -version: $out"
echo "  $out"
[ "$out" = "rotor $VERSION" ] || die "rotor -version printed '$out', want 'rotor $VERSION'"

step "podman run: rotor -check of config.example.toml"
mkdir -p "$TMP/etc"
chmod 755 "$TMP" "$TMP/etc"
if [ -f "$ROOT/config.example.toml" ]; then
	cp "$ROOT/config.example.toml" "$TMP/etc/rotor.toml"
else
	echo "  (no config.example.toml: checking a minimal config)"
	printf '[listen]\nsocks5 = "127.0.0.1:1080"\n\n[[upstream]]\nurl = "direct://"\n' >"$TMP/etc/rotor.toml"
fi
chmod 644 "$TMP/etc/rotor.toml"
out=$(prun -v "$TMP/etc:/etc/rotor:ro" "$IMAGE" -config /etc/rotor/rotor.toml -check 2>&1) ||
	die "rotor -check of config.example.toml: $out"
echo "  $out"

step "podman run: rotor -check of the image's default config"
out=$(prun -e ROTOR_CLIENT_PASSWORD=ci-client -e ROTOR_ADMIN_TOKEN=ci-admin "$IMAGE" \
	-config /etc/rotor/rotor.toml -check 2>&1) || die "rotor -check of the default config: $out"
echo "  $out"
if out=$(prun "$IMAGE" -config /etc/rotor/rotor.toml -check 2>&1); then
	die "the default config passed -check without ROTOR_CLIENT_PASSWORD: $out"
fi
echo "  without ROTOR_CLIENT_PASSWORD it is refused: $(echo "$out" | head -1 | cut -c1-120)"

step "podman run -d: config dir mounted, healthcheck, live edit, SIGHUP, SIGTERM"
# As docker/README.md tells users: a directory mounted over /etc/rotor (a
# single-file mount would not see editors' write+rename), here holding the
# image's default config.
mkdir -p "$TMP/live"
chmod 755 "$TMP/live"
cp "$ROOT/docker/rotor.toml" "$TMP/live/rotor.toml"
chmod 644 "$TMP/live/rotor.toml"
name=rotor-ci-$$
CTRS+=("$name")
logs_have() { # logs_have REGEX: wait up to 5 s for it in the container's log
	for _ in $(seq 1 25); do
		"${PODMAN[@]}" logs "$name" 2>&1 | grep -Eq "$1" && return 0
		sleep 0.2
	done
	"${PODMAN[@]}" logs "$name" >&2 || true
	return 1
}
# Podman's complaints about systemd (healthcheck timers) go to a log.
"${PODMAN[@]}" run -d --name "$name" "${RUN_FLAGS[@]}" -v "$TMP/live:/etc/rotor:ro" \
	-e ROTOR_CLIENT_PASSWORD=ci-client -e ROTOR_ADMIN_TOKEN=ci-admin "$IMAGE" >/dev/null 2>>"$TMP/podman.log" || {
	cat "$TMP/podman.log" >&2
	die "podman run -d"
}
healthy=""
for _ in $(seq 1 50); do
	# Runs the image's HEALTHCHECK command (rotor -healthcheck) in the container.
	if "${PODMAN[@]}" healthcheck run "$name" >>"$TMP/podman.log" 2>&1; then
		healthy=1
		break
	fi
	sleep 0.2
done
[ -n "$healthy" ] || {
	cat "$TMP/podman.log" >&2
	"${PODMAN[@]}" logs "$name" >&2 || true
	die "the image's HEALTHCHECK never passed in the running container"
}
echo "  HEALTHCHECK (rotor -healthcheck): $("${PODMAN[@]}" inspect --format '{{.State.Health.Status}}' "$name" 2>>"$TMP/podman.log")"
# Edit the upstream list the way editors do: write a new file, rename it over.
cp "$TMP/live/rotor.toml" "$TMP/live/.rotor.toml.new"
printf '\n[[upstream]]\nurl  = "socks5://127.0.0.1:1"\nname = "added-live"\n' >>"$TMP/live/.rotor.toml.new"
chmod 644 "$TMP/live/.rotor.toml.new"
mv "$TMP/live/.rotor.toml.new" "$TMP/live/rotor.toml"
logs_have 'file changed' || die "no reload logged after the mounted config was replaced"
echo "  config replaced on the host (write + rename): reload logged"
"${PODMAN[@]}" kill -s HUP "$name" >/dev/null 2>>"$TMP/podman.log"
logs_have 'SIGHUP' || die "no SIGHUP reload logged"
if "${PODMAN[@]}" logs "$name" 2>&1 | grep -q 'reload rejected'; then
	"${PODMAN[@]}" logs "$name" >&2
	die "a reload was rejected"
fi
"${PODMAN[@]}" healthcheck run "$name" >>"$TMP/podman.log" 2>&1 || die "unhealthy after SIGHUP"
echo "  SIGHUP reload logged, still healthy"
"${PODMAN[@]}" stop -t 15 "$name" >/dev/null 2>>"$TMP/podman.log"
code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || {
	"${PODMAN[@]}" logs "$name" >&2 || true
	die "SIGTERM: exit code $code, want 0"
}
echo "  SIGTERM: exit 0"
"${PODMAN[@]}" rm -f "$name" >/dev/null 2>>"$TMP/podman.log"
CTRS=()

step "done"
echo "docker.sh: OK: $IMAGE built and checked in $(($(date +%s) - T_START))s"
