#!/usr/bin/env python3
"""End-to-end latency of roofline's executor against onnxruntime, side by side in one run.

For each model and thread count: onnxruntime (CPU, all graph optimisations, intra-op threads =
N, sequential execution) and `roofline bench --optimize` (same N; the advisor's float rewrites,
the counterpart of onnxruntime's graph optimisations) on the same input shapes; prints the
median latencies and the ratio roofline / onnxruntime (lower is better for roofline), and the
ratio of the two runtimes' fastest runs: on a shared host whose speed moves between spells of
seconds, a slow spell lengthens a median but seldom every run of a side, so the minima say
more about the kernels and the medians about what a user of that host sees.

Usage (project venv, release binary built):
    .venv/bin/python scripts/bench_vs_ort.py [--runs 20] [--threads 1,2] [--rounds 3] [--models resnet50,...]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/roofline"
CACHE = ROOT / ".cache/models"
EXPORTS = ROOT / "target/bench-models"

# name -> (model path or builtin, {input: shape}); VALUES: inputs given by value (both runtimes
# the same, so a model whose branches follow an input takes the same one in each)
MODELS = {
    "resnet50": ("builtin:resnet50", {"input": [1, 3, 224, 224]}),
    "mobilenetv2": ("builtin:mobilenetv2", {"input": [1, 3, 224, 224]}),
    "densenet121": (str(CACHE / "light-random/light_densenet121.onnx"), {}),
    "vgg19": (str(CACHE / "light-random/light_vgg19.onnx"), {}),
    "alexnet": (str(CACHE / "light-random/light_bvlc_alexnet.onnx"), {}),
    "zfnet512": (str(CACHE / "light-random/light_zfnet512.onnx"), {}),
    "inception_v1": (str(CACHE / "light-random/light_inception_v1.onnx"), {}),
    "inception_v2": (str(CACHE / "light-random/light_inception_v2.onnx"), {}),
    "shufflenet": (str(CACHE / "light-random/light_shufflenet.onnx"), {}),
    "squeezenet": (str(CACHE / "light-random/light_squeezenet.onnx"), {}),
    "bert-base": ("builtin:bert-base", {"input_ids": [1, 128]}),
    "yolov8n": ("builtin:yolov8n", {"images": [1, 3, 640, 640]}),
    "ppocr-det": (str(CACHE / "ppocr/ch_PP-OCRv4_det_infer.onnx"), {"x": [1, 3, 640, 640]}),
    "ppocr-rec": (str(CACHE / "ppocr/ch_PP-OCRv4_rec_infer.onnx"), {"x": [1, 3, 48, 320]}),
    "ppocr-cls": (str(CACHE / "ppocr/ch_ppocr_mobile_v2.0_cls_infer.onnx"), {"x": [1, 3, 48, 192]}),
    "resnet50-zoo": (str(CACHE / "light-random/light_resnet50.onnx"), {}),
    "magika": (str(CACHE / "extra/magika_standard_v3_3.onnx"), {"bytes": [1, 2048]}),
    "smart-turn-int8": (str(CACHE / "audio/smart-turn-v3.2-cpu.onnx"), {"input_features": [1, 80, 800]}),
    "silero-vad": (str(CACHE / "audio/silero_vad_16k_op15.onnx"), {"input": [1, 512], "state": [2, 1, 128]}),
    "vgg16": ("builtin:vgg16", {"input": [1, 3, 224, 224]}),
    "bert-tiny": ("builtin:bert-tiny", {"input_ids": [1, 128]}),
    # One decode step of the exported Hugging Face GPT-2 (scripts/export-models.sh) with 127
    # cached positions: the serving workload (an empty past, the prefill, is refused by the
    # executor as a zero-sized tensor).
    "gpt2-decode": (str(CACHE / "export/gpt2_hf_decoder.onnx"), {
        "input_ids": [1, 1],
        **{f"past_key_values.{layer}.{kind}": [1, 12, 127, 64]
           for layer in range(12) for kind in ("key", "value")},
    }),
}
VALUES = {
    # The sample rate selects the network's branch (its If nodes): the 16 kHz one.
    "silero-vad": {"sr": np.array(16000, dtype=np.int64)},
    # Every position attended (the mask's values do not change the work, only the numbers).
    "gpt2-decode": {"attention_mask": np.ones((1, 128), dtype=np.int64)},
}


def model_file(spec: str) -> Path:
    if not spec.startswith("builtin:"):
        return Path(spec)
    EXPORTS.mkdir(parents=True, exist_ok=True)
    path = EXPORTS / (spec.split(":", 1)[1] + ".onnx")
    if not path.exists():
        subprocess.run([str(BIN), "export", spec, "-o", str(path)], check=True)
    return path


def ort_latency(path: Path, shapes: dict, threads: int, runs: int,
                values: dict | None = None) -> tuple[float, float]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in session.get_inputs():
        shape = shapes.get(inp.name) or [d if isinstance(d, int) else 1 for d in inp.shape]
        if "bool" in inp.type:
            feeds[inp.name] = rng.random(shape) > 0.5
        elif "int" in inp.type:
            feeds[inp.name] = rng.integers(0, 10, size=shape).astype(np.int64 if "int64" in inp.type else np.int32)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    feeds.update(values or {})
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def roofline_latency(spec: str, path: Path, shapes: dict, threads: int, runs: int, device: str,
                     values: dict | None = None) -> tuple[float, float]:
    cmd = [str(BIN), "bench", spec if spec.startswith("builtin:") else str(path), "--threads", str(threads),
           "--runs", str(runs), "--format", "json", "--device", device, "--optimize",
           # As many runs as onnxruntime gets: the same sample size on both sides.
           "--min-time", "0"]
    for name, shape in shapes.items():
        cmd += ["--input", f"{name}={'x'.join(map(str, shape))}"]
    for name, value in (values or {}).items():
        given = EXPORTS / f"{path.stem}.{name}.npy"
        if not given.exists() or not np.array_equal(np.load(given), value):
            EXPORTS.mkdir(parents=True, exist_ok=True)
            np.save(given, value)
        cmd += ["--input", f"{name}={given}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    latency = json.loads(out)["latency_ms"]
    return latency["median"], latency["min"]


def milliseconds(value: float) -> str:
    """Three significant digits, without exponents for long runs."""
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--device", default="local")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate the two runtimes this many times per model; each row is "
                             "the median of its rounds' ratios")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}; runs {args.runs}; rounds {args.rounds}; "
          f"ratio = roofline / onnxruntime of the median runs (median over rounds); "
          f"min ratio = of the fastest runs (fastest over rounds)")
    print(f"| model | threads | onnxruntime ms | roofline ms | ratio | min ratio |")
    print(f"|---|---:|---:|---:|---:|---:|")
    ratios = {}
    min_ratios = {}
    for name in args.models.split(","):
        spec, shapes = MODELS[name]
        values = VALUES.get(name)
        path = model_file(spec)
        if not path.exists():
            print(f"| {name} | - | missing {path} | | |")
            continue
        for threads in [int(t) for t in args.threads.split(",")]:
            # The two runtimes alternate within each round, so a slow spell of a shared host
            # lands on both sides of a ratio rather than on one.
            rounds = []
            ort_min = ours_min = float("inf")
            for _ in range(args.rounds):
                ort_ms, ort_fastest = ort_latency(path, shapes, threads, args.runs, values)
                ours, ours_fastest = roofline_latency(spec, path, shapes, threads, args.runs, args.device,
                                                      values)
                rounds.append((ort_ms, ours, ours / ort_ms))
                ort_min, ours_min = min(ort_min, ort_fastest), min(ours_min, ours_fastest)
            ort_ms = statistics.median(r[0] for r in rounds)
            ours = statistics.median(r[1] for r in rounds)
            ratio = statistics.median(r[2] for r in rounds)
            ratios.setdefault(threads, []).append(ratio)
            min_ratios.setdefault(threads, []).append(ours_min / ort_min)
            print(f"| {name} | {threads} | {milliseconds(ort_ms)} | {milliseconds(ours)} | {ratio:.2f} | "
                  f"{ours_min / ort_min:.2f} |", flush=True)
    for threads, model_ratios in ratios.items():
        fastest = min_ratios[threads]
        print(f"{threads} thread(s): median ratio {statistics.median(model_ratios):.2f}, "
              f"highest {max(model_ratios):.2f}; min ratio median {statistics.median(fastest):.2f}, "
              f"highest {max(fastest):.2f}; over {len(model_ratios)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
