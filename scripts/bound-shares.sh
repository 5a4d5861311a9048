#!/usr/bin/env bash
# Prints, per model, the share of predicted time that is memory-, compute- and overhead-bound
# (the README's literature check). Usage: scripts/bound-shares.sh [DEVICE] [PRECISION] [BATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-rtx2080ti}
precision=${2:-fp32}
batch=${3:-1}
bin=target/release/roofline
[ -x "$bin" ] || cargo build --release --quiet
printf '| model | batch | predicted | memory-bound | compute-bound | overhead-bound | memory-bound, overhead excluded |\n|---|---:|---:|---:|---:|---:|---:|\n'
for model in builtin:vgg16 .cache/models/light/light_vgg19.onnx builtin:resnet50 \
             .cache/models/light/light_densenet121.onnx builtin:mobilenetv2 .cache/models/light/light_shufflenet.onnx; do
    [ -e "$model" ] || [[ "$model" == builtin:* ]] || continue
    args=(--batch "$batch")
    # The light models fix their input to batch 1: use them only at batch 1.
    if [[ "$model" != builtin:* ]]; then
        [ "$batch" = 1 ] || continue
        args=()
    fi
    "$bin" analyze "$model" --device "$device" --precision "$precision" "${args[@]}" --format json |
    python3 -c '
import json, sys
a = json.load(sys.stdin); s = a["summary"]
mem = sum(n["memory_s"] for n in a["nodes"] if n["status"] == "costed")
comp = sum(n["compute_s"] for n in a["nodes"] if n["status"] == "costed")
mem_only = sum(n["memory_s"] for n in a["nodes"] if n["status"] == "costed" and n["memory_s"] > n["compute_s"])
roof_total = sum(max(n["memory_s"], n["compute_s"]) for n in a["nodes"] if n["status"] == "costed")
print("| %s | %s | %.3f ms | %.0f%% | %.0f%% | %.0f%% | %.0f%% |" % (sys.argv[1], sys.argv[2],
      s["predicted_latency_s"] * 1e3, abs(100 * s["memory_bound_share"]), abs(100 * s["compute_bound_share"]),
      abs(100 * s["overhead_bound_share"]), 100 * mem_only / roof_total if roof_total else 0))
' "$model" "$batch"
done
