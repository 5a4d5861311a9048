#!/usr/bin/env bash
# Regenerates the sample reports committed under reports/:
#   reports/resnet50-rtx2080ti.{html,svg}, reports/mobilenetv2-rtx2080ti.{html,svg},
#   reports/resnet50-rtx2080ti-vs-a100.html (two devices side by side),
#   reports/gpt2-prefill-decode-a100.html (LLM phases side by side, tokens/s by batch),
#   reports/resnet50-local.{html,svg}, reports/mobilenetv2-advise-local.html (the advisor's
#   before/after view, measured here) and reports/mobilenetv2-compress-local.html (the
#   compression search, measured here) when a probed profile of this machine exists
#   (`roofline probe` saves it; pass SKIP_LOCAL=1 to leave it out).
# Usage: scripts/gen-reports.sh            (from anywhere in the repository)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/roofline
out=reports
mkdir -p "$out"

# `analyze` exits with 1/2 when it raised warnings or errors (--strict, unknown ops); the
# report is still written, so only a missing file counts as a failure here.
render() {
    local file=$1
    shift
    rm -f "$out/$file"
    "$bin" analyze "$@" -o "$out/$file" || true
    if [[ ! -s "$out/$file" ]]; then
        echo "gen-reports: $out/$file was not written" >&2
        exit 1
    fi
    printf '%-40s %8d bytes\n' "$out/$file" "$(wc -c <"$out/$file")"
}

for model in resnet50 mobilenetv2; do
    render "$model-rtx2080ti.html" "builtin:$model" --device rtx2080ti --format html
    render "$model-rtx2080ti.svg" "builtin:$model" --device rtx2080ti --format svg
done
render resnet50-rtx2080ti-vs-a100.html builtin:resnet50 --device rtx2080ti --device a100 --format html
render gpt2-prefill-decode-a100.html builtin:gpt2 --device a100 \
    --precision fp16 --phase both --format html

# The local CPU, from the profile `roofline probe` saved (skipped when there is none yet).
if [[ -z "${SKIP_LOCAL:-}" ]] && "$bin" analyze builtin:resnet50 --device local --format json -o /dev/null 2>/dev/null; then
    render resnet50-local.html builtin:resnet50 --device local --format html
    render resnet50-local.svg builtin:resnet50 --device local --format svg
    # The advisor's before/after view, measured on this CPU (float rewrites and int8).
    rm -f "$out/mobilenetv2-advise-local.html"
    "$bin" advise builtin:mobilenetv2 --device local --verify --runs 10 \
        --apply fold,bn-fold,fuse,eltwise,int8 --format html --report "$out/mobilenetv2-advise-local.html"
    printf '%-40s %8d bytes\n' "$out/mobilenetv2-advise-local.html" "$(wc -c <"$out/mobilenetv2-advise-local.html")"
    # The compression search toward 2x, measured on this CPU (pruning only, with baselines).
    rm -f "$out/mobilenetv2-compress-local.html"
    "$bin" compress builtin:mobilenetv2 --device local --speedup 2 --precisions fp32 \
        --compare-baselines --format html --report "$out/mobilenetv2-compress-local.html" \
        || [[ $? -eq 3 ]] # 3: the target was not reached; the report is still written
    printf '%-40s %8d bytes\n' "$out/mobilenetv2-compress-local.html" "$(wc -c <"$out/mobilenetv2-compress-local.html")"
else
    echo "gen-reports: no probed profile of this machine (run \`roofline probe\`); skipped resnet50-local" >&2
fi
