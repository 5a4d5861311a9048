#!/usr/bin/env python3
"""Give the onnx package's light models real (random) weights.

The light models in .cache/models/light/ produce every weight with a ConstantOfShape node, so
all weights are one repeated value and any runtime's outputs are trivially equal. For kernel
correctness tests this script replaces each such generator by a seeded random initializer:
tensors of rank >= 2 get He-normal values (std = sqrt(2 / fan_in)); rank-1 tensors (biases, BN
scale/variance, Mul scales) get uniform values in [0.5, 1.5], positive so that BN variances
stay valid, except additive ones (BN bias and mean, Add operands) which get N(0, 0.1): a
positive bias in every layer would saturate the final softmax and make the comparison vacuous.
The input of a final Softmax is added as an extra graph output so logits are compared too.
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
    additive = set()
    for node in graph.node:
        if node.op_type == "BatchNormalization":
            additive.update(node.input[2:4])
        if node.op_type in ("Add", "Sub"):
            additive.update(node.input)
    # Unsqueeze/Reshape of a generated constant feeding an Add: follow one level back.
    for node in graph.node:
        if node.op_type in ("Unsqueeze", "Reshape") and node.output[0] in additive:
            additive.add(node.input[0])
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]])]
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                values = rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
            elif node.output[0] in additive:
                values = (rng.standard_normal(shape) * 0.1).astype(np.float32)
            else:
                values = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(values, name=node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    last = keep[-1] if keep else None
    if last is not None and last.op_type == "Softmax" and last.output[0] in {o.name for o in graph.output}:
        logits = onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)
        graph.output.append(logits)
    onnx.save(model, str(out))


def main() -> int:
    if not SRC.is_dir():
        print(f"{SRC} missing: run scripts/fetch-models.sh first", file=sys.stderr)
        return 1
    DST.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(sorted(SRC.glob("*.onnx"))):
        out = DST / path.name
        if out.exists() and out.stat().st_mtime >= max(path.stat().st_mtime, Path(__file__).stat().st_mtime):
            continue
        materialise(path, out, seed=i)
        print(f"materialised {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
