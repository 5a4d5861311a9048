#!/usr/bin/env python3
"""Give the onnx package's light models real (random) weights.

The light models in .cache/models/light/ produce every weight with a ConstantOfShape node, so
all weights are one repeated value and any runtime's outputs are trivially equal. For kernel
correctness tests this script replaces each such generator by a seeded random initializer:
tensors of rank >= 2 get He-normal values (std = sqrt(2 / fan_in)); rank-1 tensors (biases, BN
scale/mean/variance) get uniform values in [0.5, 1.5], positive so that BN variances stay valid.
Output: .cache/models/light-random/<name>.onnx. Idempotent; run with the project venv.
"""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / ".cache/models/light"
DST = ROOT / ".cache/models/light-random"


def materialise(path: Path, out: Path, seed: int) -> None:
    model = onnx.load(str(path))
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    rng = np.random.default_rng(seed)
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]])]
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                values = rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
            else:
                values = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(values, name=node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    onnx.save(model, str(out))


def main() -> int:
    if not SRC.is_dir():
        print(f"{SRC} missing: run scripts/fetch-models.sh first", file=sys.stderr)
        return 1
    DST.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(sorted(SRC.glob("*.onnx"))):
        out = DST / path.name
        if out.exists() and out.stat().st_mtime >= path.stat().st_mtime:
            continue
        materialise(path, out, seed=i)
        print(f"materialised {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
