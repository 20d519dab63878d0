# syntax=docker/dockerfile:1
#
# jetembed, CPU image. ONNX Runtime comes from the npm package
# onnxruntime-node, fetched and sha256-checked by scripts/deps.sh exactly as
# `make deps` does on a workstation, so image and tests run the same library.
#
#   docker build -t jetembed:dev .            (or: make docker)
#   docker run --rm jetembed:dev version
#
# The builder is Debian bookworm so the binary needs glibc <= 2.36 and also
# runs on the Ubuntu 24.04 base of Dockerfile.cuda.

ARG GO_VERSION=1.26
ARG DEBIAN=bookworm

FROM golang:${GO_VERSION}-${DEBIAN} AS build
# npm for deps.sh (npm pack onnxruntime-node); gcc comes with the image (cgo).
RUN apt-get update \
 && apt-get install -y --no-install-recommends npm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
# deps.sh before the sources: its layer survives code changes.
COPY scripts/deps.sh scripts/deps.sh
RUN --mount=type=cache,target=/root/go/pkg/mod ./scripts/deps.sh \
 && install -D -m 0644 .deps/onnxruntime/libonnxruntime.so.1 /out/lib/libonnxruntime.so.1
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/bin/jetembed ./cmd/jetembed \
 && /out/bin/jetembed version

FROM debian:${DEBIAN}-slim
# libstdc++ for ONNX Runtime; CA certificates for NATS over TLS.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libstdc++6 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 jetembed \
 && useradd --system --uid 65532 --gid jetembed --home-dir /nonexistent --shell /usr/sbin/nologin jetembed \
 && install -d -o jetembed -g jetembed /var/cache/jetembed
COPY --from=build /out/lib/libonnxruntime.so.1 /opt/onnxruntime/lib/libonnxruntime.so.1
COPY --from=build /out/bin/jetembed /usr/local/bin/jetembed
# The random-weight tiny model of the tests, so `docker compose up` works
# without downloading BGE-M3. Its vectors mean nothing: mount a real model
# at /models and set JETEMBED_MODEL for anything else.
COPY testdata/models/tiny-hidden /usr/share/jetembed/models/tiny
ENV JETEMBED_ORT_LIB=/opt/onnxruntime/lib/libonnxruntime.so.1 \
    JETEMBED_PROVIDER=cpu \
    JETEMBED_MODEL=/usr/share/jetembed/models/tiny \
    JETEMBED_HTTP=0.0.0.0:9090 \
    JETEMBED_LOG_FORMAT=json
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["jetembed"]
CMD ["serve"]
