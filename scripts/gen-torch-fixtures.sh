#!/usr/bin/env bash
# gen-torch-fixtures.sh regenerates the torch-made test models
# (testdata/models/torch-m3, torch-m3-heads, torch-m3-reference.json) and the
# .pt files of internal/torchpt/testdata with scripts/gen-torch-fixtures.py.
# It needs Debian's python3-torch (1.13) and python3-onnx: when they are
# missing it installs them with apt-get if it can (root, or sudo without a
# password), else it says so and exits 0, and the committed files stay.
#
# Usage: scripts/gen-torch-fixtures.sh [OUT]   (make torch-fixtures)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}

have() { "$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("onnx")))' 2>/dev/null; }

if ! have; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null && { [ -z "$sudo" ] || sudo -n true 2>/dev/null; }; then
    echo "gen-torch-fixtures: apt-get install python3-torch python3-onnx" >&2
    $sudo apt-get install -y --no-install-recommends python3-torch python3-onnx >&2 ||
      { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends python3-torch python3-onnx >&2; }
  fi
fi
if ! have; then
  echo "gen-torch-fixtures: skipped: $PY has no torch and onnx (apt-get install python3-torch python3-onnx); the committed fixtures stay" >&2
  exit 0
fi
exec "$PY" scripts/gen-torch-fixtures.py "$@"
