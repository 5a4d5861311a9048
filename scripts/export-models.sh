#!/usr/bin/env bash
# Export the models that only an exporter can make into .cache/models/export/: today a GPT-2
# small decoder with past_key_values, written by Hugging Face transformers + torch.onnx
# (scripts/export_gpt2.py), which tests/it/llm.rs checks the built-in `gpt2` preset against.
#
# The exporter stack (scripts/requirements-export.txt: torch, transformers) lives in its own
# venv, .venv-export/, as it is large (torch brings its CUDA libraries from PyPI: ~3 GB to
# download, ~5.6 GB installed; about 2.5 min on the CI machine) and only this step needs it.
#
# Idempotent: a stamp holds the sha256 of the requirements and of the export script; when both
# match and the model exists, nothing is installed or exported.
# Environment: PYTHON=... (interpreter for the venv; default python3), FORCE=1 (redo both).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-export"
REQ="$ROOT/scripts/requirements-export.txt"
SCRIPT="$ROOT/scripts/export_gpt2.py"
OUT_DIR="$ROOT/.cache/models/export"
MODEL="$OUT_DIR/gpt2_hf_decoder.onnx"
PYTHON="${PYTHON:-python3}"

log() { echo "[export-models] $*" >&2; }

venv_stamp="$VENV/.roofline-requirements.sha256"
req_hash="$(sha256sum "$REQ" | cut -d' ' -f1)"
model_stamp="$OUT_DIR/.gpt2_hf_decoder.sha256"
model_hash="$(cat "$REQ" "$SCRIPT" | sha256sum | cut -d' ' -f1)"

if [ "${FORCE:-0}" != "1" ] && [ -f "$MODEL" ] && [ -f "$model_stamp" ] \
    && [ "$(cat "$model_stamp")" = "$model_hash" ]; then
    log "up to date: $MODEL"
    exit 0
fi

if [ "${FORCE:-0}" = "1" ] || [ ! -x "$VENV/bin/python" ] || [ ! -f "$venv_stamp" ] \
    || [ "$(cat "$venv_stamp")" != "$req_hash" ]; then
    log "creating $VENV (torch + transformers, a few minutes)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
    echo "$req_hash" > "$venv_stamp"
fi

mkdir -p "$OUT_DIR"
log "exporting GPT-2 small with past_key_values"
"$VENV/bin/python" -W ignore "$SCRIPT" "$MODEL.tmp"
mv "$MODEL.tmp" "$MODEL"
echo "$model_hash" > "$model_stamp"
log "wrote $MODEL ($(du -h "$MODEL" | cut -f1))"
