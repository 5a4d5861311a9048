#!/usr/bin/env python3
"""Measures what an op pays at N threads when its input was written by an op that split the work
differently (issue 13's 2-thread under-prediction, issue 16's 2-thread losses).

Two models over [1, 64, 56, 56]: four BatchNormalizations in a row (each BN's threads read what
the previous BN's same threads wrote), and four Conv 1×1 → BatchNormalization pairs (the GEMM
splits its output differently from the BN, so part of each BN's input sits in another core's
caches). Prints each model's median BN time per thread count, alternated over rounds. A calibration
grid point is the first case; a model is the second.

Usage (project venv, release binary built):
    .venv/bin/python scripts/cross_core_locality.py [--device local] [--rounds 3] [--threads 1,2]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/roofline"
CHANNELS, SIDE, PAIRS = 64, 56, 4


def build(with_conv: bool, path: Path) -> None:
    rng = np.random.default_rng(0)
    inits, nodes, current = [], [], "x"
    for i in range(PAIRS):
        if with_conv:
            weight = (rng.random((CHANNELS, CHANNELS, 1, 1), dtype=np.float32) - 0.5) * 0.2
            inits.append(numpy_helper.from_array(weight, f"w{i}"))
            nodes.append(helper.make_node("Conv", [current, f"w{i}"], [f"c{i}"], name=f"conv{i}"))
            current = f"c{i}"
        params = [f"{name}{i}" for name in ("scale", "bias", "mean", "var")]
        for name in params:
            inits.append(numpy_helper.from_array(rng.random(CHANNELS, dtype=np.float32) + 0.5, name))
        nodes.append(helper.make_node("BatchNormalization", [current] + params, [f"d{i}"],
                                      name=f"bn{i}"))
        current = f"d{i}"
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(nodes, "locality",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, shape)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def bn_median_us(model: Path, threads: int, device: str, runs: int) -> float:
    out = subprocess.run([str(BIN), "bench", str(model), "--threads", str(threads), "--runs",
                          str(runs), "--device", device, "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    return statistics.median(op["measured_s"] * 1e6 for op in report["ops"]
                             if op["op_type"] == "BatchNormalization")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="local")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        alone, after_conv = Path(folder) / "bn_only.onnx", Path(folder) / "conv_bn.onnx"
        build(False, alone)
        build(True, after_conv)
        print("| threads | BN after BN, µs | BN after Conv 1×1, µs | ratio |")
        print("|---:|---:|---:|---:|")
        for threads in [int(t) for t in args.threads.split(",")]:
            rounds = [(bn_median_us(alone, threads, args.device, args.runs),
                       bn_median_us(after_conv, threads, args.device, args.runs))
                      for _ in range(args.rounds)]
            first = statistics.median(r[0] for r in rounds)
            second = statistics.median(r[1] for r in rounds)
            print(f"| {threads} | {first:.1f} | {second:.1f} | {second / first:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
