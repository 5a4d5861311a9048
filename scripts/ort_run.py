#!/usr/bin/env python3
"""Run an ONNX model with onnxruntime on seeded random inputs and dump everything.

Usage (project venv):
    .venv/bin/python scripts/ort_run.py MODEL.onnx OUTDIR [--input NAME=SHAPE ...] [--seed N]
                                        [--int-range LO,HI] [--no-opt]

  --input NAME=SHAPE  shape for a graph input, e.g. x=1x3x640x640 (',' also
                      accepted as separator). Required for inputs whose shape
                      has symbolic/unknown dims; overrides static shapes too.
  --seed N            numpy Generator seed (default 0).
  --int-range LO,HI   integer inputs are drawn uniformly from [LO, HI) (default 0,10).
  --no-opt            disable onnxruntime graph optimizations.

Float inputs are standard normal, integer inputs uniform in --int-range, bool
inputs fair coin flips. Inputs are generated in graph-input order from one
numpy.random.default_rng(seed), so a given (model, shapes, seed) always gives
the same data. onnxruntime runs on the CPU provider with 1 intra-op and 1
inter-op thread, sequential execution.

OUTDIR receives one .npy per input and output (file names are the tensor names
with characters outside [A-Za-z0-9._-] replaced by '_', prefixed "input." or
"output.") and manifest.json:
    {"model": ..., "model_sha256": ..., "seed": ..., "onnxruntime_version": ...,
     "inputs":  [{"name", "file", "shape", "dtype"}, ...],
     "outputs": [{"name", "file", "shape", "dtype"}, ...]}
Exit status 0 on success, 1 on any failure (message on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np

# onnxruntime type string -> numpy dtype
ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


def parse_shape(text: str) -> list[int]:
    parts = [p for p in re.split(r"[x,]", text.strip()) if p != ""]
    if not parts:
        return []  # scalar
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"bad shape {text!r} (expected e.g. 1x3x224x224)") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"bad shape {text!r}: negative dim")
    return dims


def parse_input_args(items: list[str] | None) -> dict[str, list[int]]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--input expects NAME=SHAPE, got {item!r}")
        name, shape = item.rsplit("=", 1)
        out[name] = parse_shape(shape)
    return out


def make_session(model_path_or_bytes, optimize: bool = True):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = str(model_path_or_bytes) if isinstance(model_path_or_bytes, Path) else model_path_or_bytes
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def resolve_shapes(sess, overrides: dict[str, list[int]], default_dim: int | None = None) -> dict[str, list[int]]:
    """Concrete shape per session input; raises ValueError listing unresolved inputs."""
    names = [i.name for i in sess.get_inputs()]
    unknown = [n for n in overrides if n not in names]
    if unknown:
        raise ValueError(f"--input for unknown input(s) {unknown}; model inputs are {names}")
    shapes, missing = {}, []
    for i in sess.get_inputs():
        if i.name in overrides:
            if i.shape is not None and len(overrides[i.name]) != len(i.shape):
                raise ValueError(f"input {i.name!r}: rank {len(overrides[i.name])} given, model has {i.shape}")
            shapes[i.name] = overrides[i.name]
            continue
        dims = []
        for d in i.shape or []:
            if isinstance(d, int) and d >= 0:
                dims.append(d)
            elif default_dim is not None:
                dims.append(default_dim)
            else:
                dims = None
                break
        if dims is None:
            missing.append(f"{i.name} {i.shape}")
        else:
            shapes[i.name] = dims
    if missing:
        raise ValueError("symbolic dims need --input NAME=SHAPE for: " + ", ".join(missing))
    return shapes


def make_inputs(sess, shapes: dict[str, list[int]], seed: int, int_range=(0, 10)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for i in sess.get_inputs():
        dt = ORT_TYPES.get(i.type)
        if dt is None:
            raise ValueError(f"input {i.name!r} has unsupported type {i.type}")
        shape = shapes[i.name]
        if dt == np.bool_:
            arr = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dt, np.integer):
            arr = rng.integers(int_range[0], int_range[1], size=shape).astype(dt)
        else:
            arr = rng.standard_normal(size=shape).astype(dt)
        feed[i.name] = arr
    return feed


def safe_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return s or "_"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="run a model with onnxruntime on seeded random inputs")
    ap.add_argument("model", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--input", action="append", metavar="NAME=SHAPE")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--int-range", default="0,10", metavar="LO,HI")
    ap.add_argument("--no-opt", action="store_true")
    args = ap.parse_args(argv)

    try:
        lo, hi = (int(v) for v in args.int_range.split(","))
        overrides = parse_input_args(args.input)
        data = args.model.read_bytes()
        sess = make_session(data, optimize=not args.no_opt)
        shapes = resolve_shapes(sess, overrides)
        feed = make_inputs(sess, shapes, args.seed, (lo, hi))
        out_names = [o.name for o in sess.get_outputs()]
        outs = sess.run(out_names, feed)
    except Exception as e:
        print(f"ort_run: {args.model}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1

    import onnxruntime as ort

    args.outdir.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()

    def fname(prefix: str, name: str) -> str:
        base = f"{prefix}.{safe_name(name)}"
        f, k = base + ".npy", 1
        while f in used:
            f, k = f"{base}.{k}.npy", k + 1
        used.add(f)
        return f

    manifest = {
        "model": str(args.model),
        "model_sha256": hashlib.sha256(data).hexdigest(),
        "seed": args.seed,
        "int_range": [lo, hi],
        "graph_optimizations": not args.no_opt,
        "onnxruntime_version": ort.__version__,
        "numpy_version": np.__version__,
        "inputs": [],
        "outputs": [],
    }
    for name, arr in feed.items():
        f = fname("input", name)
        np.save(args.outdir / f, arr)
        manifest["inputs"].append({"name": name, "file": f, "shape": list(arr.shape), "dtype": arr.dtype.name})
    for name, arr in zip(out_names, outs):
        arr = np.asarray(arr)
        f = fname("output", name)
        np.save(args.outdir / f, arr)
        manifest["outputs"].append({"name": name, "file": f, "shape": list(arr.shape), "dtype": arr.dtype.name})
    (args.outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for kind in ("inputs", "outputs"):
        for e in manifest[kind]:
            print(f"{kind[:-1]:6s} {e['name']}: {e['dtype']} {e['shape']} -> {e['file']}")
    print(f"wrote {args.outdir / 'manifest.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
