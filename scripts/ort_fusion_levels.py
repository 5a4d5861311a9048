#!/usr/bin/env python3
"""How much onnxruntime itself gains from its graph rewrites on this machine, per level.

For each model and thread count, one onnxruntime session per optimisation level (disable,
basic: constant folding and Conv+BatchNormalization folding; extended: also Conv+activation
and other fusions; all: also the NCHWc blocked layouts of its CPU kernels) runs the same input
in interleaved rounds; the printed figure per level is the median over rounds of
time(disable) / time(level). It puts the advisor's fold+fuse gains next to what an optimizing
runtime gets from the same kind of rewrites (basic/extended), as opposed to a layout and kernel
change (all).

Usage: .venv/bin/python scripts/ort_fusion_levels.py [--rounds 15] [--threads 1,2]
(release binary built; the built-in models are exported to target/bench-models/ when missing).
"""

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/roofline"
EXPORTS = ROOT / "target/bench-models"
MODELS = {"resnet50": [1, 3, 224, 224], "mobilenetv2": [1, 3, 224, 224]}
LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def model_path(name: str) -> Path:
    path = EXPORTS / f"{name}.onnx"
    if not path.exists():
        EXPORTS.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(BIN), "export", f"builtin:{name}", "-o", str(path)], check=True)
    return path


def session(path: Path, level, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}: time(disable) / time(level), median of {args.rounds} rounds")
    for name, shape in MODELS.items():
        path = model_path(name)
        for threads in [int(t) for t in args.threads.split(",")]:
            sessions = {level: session(path, value, threads) for level, value in LEVELS.items()}
            feed_name = sessions["all"].get_inputs()[0].name
            feeds = {feed_name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            ratios = {level: [] for level in LEVELS}
            for _ in range(args.rounds):
                seconds = {}
                for level, sess in sessions.items():
                    sess.run(None, feeds)  # warm this session's caches after the others ran
                    start = time.perf_counter()
                    sess.run(None, feeds)
                    seconds[level] = time.perf_counter() - start
                for level in LEVELS:
                    ratios[level].append(seconds["disable"] / seconds[level])
            summary = "  ".join(f"{level} {statistics.median(r):.3f}x" for level, r in ratios.items())
            print(f"{name:<12} {threads} thread(s): {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
