#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs the Python reference tools into .venv,
# fetches the real-model corpus into .cache/models, exports the models only an exporter can make
# (scripts/export-models.sh), then runs every Rust test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-python.sh
bash scripts/fetch-models.sh
bash scripts/export-models.sh
.venv/bin/python scripts/materialise_light.py
cargo test --all-targets "$@"
