#!/usr/bin/env bash
# Create/refresh the project's Python virtualenv at .venv/ with the pinned
# packages from scripts/requirements-python.txt (onnx, onnxruntime, onnx-tool,
# numpy + their transitive deps).
#
# Idempotent: if .venv/ already matches the requirements file (checked via a
# stamp holding the file's sha256) and the packages import, it does nothing.
#
# Environment:
#   PYTHON=/path/to/python3   interpreter used to create the venv (default: python3)
#   FORCE=1                   recreate the venv from scratch
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
REQ="$ROOT/scripts/requirements-python.txt"
STAMP="$VENV/.roofline-requirements.sha256"
PYTHON="${PYTHON:-python3}"

log() { echo "[setup-python] $*"; }
die() { echo "[setup-python] ERROR: $*" >&2; exit 1; }

[ -f "$REQ" ] || die "missing $REQ"
command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found; install Python >= 3.11 or set PYTHON=..."

req_hash="$(sha256sum "$REQ" | cut -d' ' -f1)"

check_imports() {
    "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import numpy, onnx, onnxruntime, onnx_tool, PIL, sympy
PY
}

if [ "${FORCE:-0}" != "1" ] && [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] \
    && [ "$(cat "$STAMP")" = "$req_hash" ] && check_imports; then
    log "up to date: $VENV (requirements sha256 ${req_hash:0:12})"
    exit 0
fi

if [ "${FORCE:-0}" = "1" ] && [ -d "$VENV" ]; then
    log "FORCE=1: removing $VENV"
    rm -rf "$VENV"
fi

# numpy 2.4 / onnx 1.23 need CPython >= 3.11.
"$PYTHON" - <<'PY' || die "Python >= 3.11 required (got $("$PYTHON" -V 2>&1)); set PYTHON=..."
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv at $VENV with $("$PYTHON" -V 2>&1) ($(command -v "$PYTHON"))"
    if ! "$PYTHON" -m venv "$VENV"; then
        rm -rf "$VENV"
        die "'$PYTHON -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
else
    log "reusing existing venv at $VENV (requirements changed or stamp missing)"
fi

log "installing pinned packages from scripts/requirements-python.txt"
"$VENV/bin/python" -m pip install --disable-pip-version-check --no-input \
    --only-binary=:all: -r "$REQ" \
    || die "pip install failed (network access to PyPI needed on first run)"

check_imports || die "packages installed but imports fail; try FORCE=1 $0"
echo "$req_hash" > "$STAMP"

log "installed:"
"$VENV/bin/python" - <<'PY'
import numpy, onnx, onnxruntime, onnx_tool.utils as u, sys
print(f"  python      {sys.version.split()[0]}")
print(f"  numpy       {numpy.__version__}")
print(f"  onnx        {onnx.__version__}")
print(f"  onnxruntime {onnxruntime.__version__}")
print(f"  onnx-tool   {u.VERSION}")
PY
log "done; use $VENV/bin/python"
