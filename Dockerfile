# rotor container image.
#
#   docker build -t rotor --build-arg VERSION=$(git describe --tags --always) .
#
# Base images are arguments so the same file builds with the public images
# (the defaults) and with locally made bases on machines without a registry
# (.ci/docker.sh: buildah, a Go builder made from /usr/local/go, scratch).
# The runtime base must provide nothing: the binary is static and the CA
# bundle is copied from the build stage, so distroless/static and scratch
# both work.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src

# Modules first, so this layer is reused while go.mod/go.sum are unchanged.
# --build-arg GOPROXY=… picks a module proxy; GOPROXY=off builds offline from
# a vendor/ directory in the context (the repository has none: .ci/docker.sh
# makes one in a temporary copy of the tree when ROTOR_DOCKER_OFFLINE=1).
ARG GOPROXY
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    if [ "$GOPROXY" = off ]; then echo "GOPROXY=off: modules come from vendor/"; else go mod download; fi

COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/rotor ./cmd/rotor \
 && mkdir -p /out/state /out/root/tmp && chmod 1777 /out/root/tmp

FROM ${RUNTIME_IMAGE}
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/rotor /rotor
# The default config: fronts on every interface, so client credentials are
# required (ROTOR_CLIENT_PASSWORD) and the admin API needs a token
# (ROTOR_ADMIN_TOKEN). Mount a directory over /etc/rotor to use your own.
COPY docker/rotor.toml /etc/rotor/rotor.toml
# The default config's state_file = "/var/lib/rotor/state.json": writable by
# uid 65532; mount a volume here to keep it across containers.
COPY --from=build --chown=65532:65532 /out/state /var/lib/rotor
# rotor records the admin address it listens on in /tmp, where
# `rotor -healthcheck` reads it (scratch has no /tmp; distroless has one).
# Copied as an entry of /out/root, so that it keeps its mode (1777).
COPY --from=build /out/root/ /
USER 65532:65532
EXPOSE 1080 8080 9090
# Asks the running rotor's admin listener (the address it recorded in /tmp
# at start), so a bad or pending edit of the config file does not make a
# healthy container unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/rotor", "-healthcheck", "-config", "/etc/rotor/rotor.toml"]
ENTRYPOINT ["/rotor"]
CMD ["-config", "/etc/rotor/rotor.toml"]
