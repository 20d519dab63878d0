#!/usr/bin/env bash
# deps.sh installs the native pieces jetembed needs, from reachable registries
# only, into .deps/ (git-ignored). Idempotent: a second run checks hashes and
# returns in well under a second.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
mkdir -p "$deps"

# ONNX Runtime CPU shared library, taken from the npm package onnxruntime-node.
ORT_NPM_VERSION=1.30.0
ORT_TGZ_SHA256=6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75
ort_dir="$deps/onnxruntime-$ORT_NPM_VERSION"
ort_lib="$ort_dir/libonnxruntime.so.1"

if [ ! -f "$ort_lib" ]; then
  command -v npm >/dev/null || { echo "deps: npm is required to fetch onnxruntime-node" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "deps: fetching onnxruntime-node@$ORT_NPM_VERSION (npm pack)" >&2
  (cd "$tmp" && npm pack --silent "onnxruntime-node@$ORT_NPM_VERSION" >/dev/null)
  tgz="$tmp/onnxruntime-node-$ORT_NPM_VERSION.tgz"
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  if [ "$got" != "$ORT_TGZ_SHA256" ]; then
    echo "deps: onnxruntime-node tarball sha256 mismatch: got $got want $ORT_TGZ_SHA256" >&2
    exit 1
  fi
  tar -xzf "$tgz" -C "$tmp" package/bin/napi-v6/linux/x64/libonnxruntime.so.1
  mkdir -p "$ort_dir"
  mv "$tmp/package/bin/napi-v6/linux/x64/libonnxruntime.so.1" "$ort_lib.partial"
  mv "$ort_lib.partial" "$ort_lib"
fi
ln -sfn "onnxruntime-$ORT_NPM_VERSION" "$deps/onnxruntime"
ln -sfn libonnxruntime.so.1 "$ort_dir/libonnxruntime.so"

# nats-server binary, for tests that restart or kill a separate server process.
NATS_SERVER_VERSION=v2.15.2
if [ ! -x "$deps/bin/nats-server" ] || ! "$deps/bin/nats-server" --version 2>/dev/null | grep -q "${NATS_SERVER_VERSION#v}"; then
  echo "deps: go install nats-server@$NATS_SERVER_VERSION" >&2
  GOBIN="$deps/bin" go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
fi

# nats CLI, so tests and users can drive the service the way operators do
# (`nats req embed.v1.embed ...`).
NATSCLI_VERSION=v0.5.0
if [ ! -x "$deps/bin/nats" ] || ! "$deps/bin/nats" --version 2>/dev/null | grep -qx "$NATSCLI_VERSION"; then
  echo "deps: go install natscli@$NATSCLI_VERSION" >&2
  GOBIN="$deps/bin" go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
fi

# HuggingFace tokenizers (Rust, through its Node binding) as the parity oracle
# and benchmark peer. Optional: skipped when Node is not installed.
if command -v node >/dev/null && [ ! -d "$deps/hf-oracle/node_modules/tokenizers" ]; then
  oracle_src="$root/../shared/tools/hf-oracle"
  [ -d "$oracle_src" ] || oracle_src="$root/tools/hf-oracle"
  if [ -d "$oracle_src" ]; then
    echo "deps: npm install hf-oracle (tokenizers)" >&2
    rm -rf "$deps/hf-oracle" && mkdir -p "$deps/hf-oracle"
    cp "$oracle_src"/*.js "$oracle_src"/package.json "$deps/hf-oracle/"
    (cd "$deps/hf-oracle" && npm install --silent --ignore-scripts --no-audit --no-fund >/dev/null)
  else
    echo "deps: note: no ../shared/tools/hf-oracle nor tools/hf-oracle: the tokenizer parity tests against HuggingFace tokenizers will be skipped (TestDifferential*)" >&2
  fi
elif ! command -v node >/dev/null; then
  echo "deps: note: no node: the tokenizer parity tests against HuggingFace tokenizers will be skipped" >&2
fi

# The Node.js example's NATS client (examples/node, versions pinned by its
# package-lock.json), into its own git-ignored node_modules. Optional:
# skipped without Node; TestNodeExample installs it too when missing.
if command -v npm >/dev/null && [ ! -d "$root/examples/node/node_modules/@nats-io/transport-node" ]; then
  echo "deps: npm ci examples/node (@nats-io/transport-node, @nats-io/jetstream)" >&2
  (cd "$root/examples/node" && npm ci --silent --ignore-scripts --no-audit --no-fund >/dev/null)
fi

# The official OpenAI Node client, pinned by scripts/openai-node's lockfile
# (npm ci checks its sha512), for the test that drives the HTTP gateway as
# a RAG framework would. Optional: skipped when Node is not installed.
OPENAI_NODE_VERSION=6.49.0
openai_dir="$deps/openai-node"
if command -v npm >/dev/null && ! grep -qs "\"version\": \"$OPENAI_NODE_VERSION\"" "$openai_dir/node_modules/openai/package.json"; then
  echo "deps: npm ci openai@$OPENAI_NODE_VERSION" >&2
  rm -rf "$openai_dir" && mkdir -p "$openai_dir"
  cp "$root/scripts/openai-node/package.json" "$root/scripts/openai-node/package-lock.json" "$openai_dir/"
  (cd "$openai_dir" && npm ci --silent --ignore-scripts --no-audit --no-fund >/dev/null)
fi

# Python torch and onnx, for scripts/gen-torch-fixtures.sh (make
# torch-fixtures) and the test that checks the committed torch-made models
# against it. Not installed here (they are large, and this script runs in
# image builds): `make torch-fixtures` installs them with apt-get.
if ! "${PYTHON:-/usr/bin/python3}" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("onnx")))' 2>/dev/null; then
  echo "deps: no python3-torch/python3-onnx: the torch fixture check is skipped (make torch-fixtures installs them)" >&2
fi
