#!/usr/bin/env python3
"""Single-op sweep: each op of a list, at a shape real models use, timed with `roofline bench`
and with onnxruntime (same thread count, same process-free inputs), ratio printed slowest first.

A kernel whose time is a multiple of onnxruntime's on one op is found here before it hides in a
model's total (PRelu through a per-element dispatch was 14x onnxruntime and 50x its roof).

    .venv/bin/python scripts/op_sweep.py [--threads 1] [--filter NAME] [--runs 20]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_ort import ort_latency  # noqa: E402
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

F = T.FLOAT
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(0)


def const(name, array):
    return nh.from_array(np.asarray(array), name)


def single(op, shapes, attrs=None, consts=(), opset=17, out_type=F, inputs=None, domain=""):
    """A model of one node: `shapes` are the run-time inputs (float), `consts` initializers."""
    names = inputs or [f"x{i}" for i in range(len(shapes))] + [c.name for c in consts]
    node = h.make_node(op, names, ["y"], domain=domain, **(attrs or {}))
    graph = h.make_graph(
        [node],
        op,
        [h.make_tensor_value_info(f"x{i}", F, s) for i, s in enumerate(shapes)],
        [h.make_tensor_value_info("y", out_type, None)],
        list(consts),
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def cases():
    img = [1, 64, 56, 56]
    seq = [1, 128, 768]
    r = lambda *s: RNG.standard_normal(s).astype(np.float32)
    yield "Relu", single("Relu", [img])
    for op in ["Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Abs", "Neg", "Reciprocal",
               "Floor", "Round", "Sign", "Softplus", "Softsign", "Elu", "Selu", "HardSigmoid",
               "HardSwish", "Mish", "Sin", "Cos", "Gelu"]:
        opset = 20 if op == "Gelu" else 18
        yield op, single(op, [img], opset=opset)
    yield "LeakyRelu", single("LeakyRelu", [img], {"alpha": 0.1})
    yield "Clip", single("Clip", [img], consts=[const("lo", np.float32(0)), const("hi", np.float32(6))])
    for op in ["Add", "Mul", "Sub", "Div", "Max", "Min", "Pow"]:
        yield f"{op} same", single(op, [img, img])
    yield "Add channel", single("Add", [img], consts=[const("c", r(64, 1, 1))])
    yield "Mul row", single("Mul", [seq], consts=[const("c", r(768))])
    yield "Pow 2", single("Pow", [seq], consts=[const("c", np.float32(2))])
    yield "Div scalar", single("Div", [seq], consts=[const("c", np.float32(3))])
    yield "PRelu channel", single("PRelu", [img], consts=[const("s", r(64, 1, 1))])
    yield "Add outer bcast", single("Add", [[1, 12, 128, 128], [1, 1, 128, 128]])
    yield "Add col bcast", single("Add", [[1, 12, 128, 128], [1, 12, 128, 1]])
    yield "Where", h.make_model(h.make_graph(
        [h.make_node("Where", ["m", "x0", "x1"], ["y"])], "w",
        [h.make_tensor_value_info("m", T.BOOL, [1, 12, 128, 128]),
         h.make_tensor_value_info("x0", F, [1, 12, 128, 128]),
         h.make_tensor_value_info("x1", F, [1, 12, 128, 128])],
        [h.make_tensor_value_info("y", F, None)]), opset_imports=[h.make_opsetid("", 17)])
    yield "Equal", single("Equal", [img, img], out_type=T.BOOL)
    yield "Cast f->i64", single("Cast", [img], {"to": T.INT64}, out_type=T.INT64)
    # One-hot by comparison, as JAX exports write it (magika: bytes against 0..256).
    yield "Equal one-hot i32", h.make_model(h.make_graph(
        [h.make_node("Equal", ["a", "b"], ["y"])], "e",
        [h.make_tensor_value_info("a", T.INT32, [1, 2048, 1]),
         h.make_tensor_value_info("b", T.INT32, [1, 1, 257])],
        [h.make_tensor_value_info("y", T.BOOL, None)]), opset_imports=[h.make_opsetid("", 17)])
    yield "Cast bool->f", h.make_model(h.make_graph(
        [h.make_node("Cast", ["m"], ["y"], to=F)], "c",
        [h.make_tensor_value_info("m", T.BOOL, [1, 2048, 257])],
        [h.make_tensor_value_info("y", F, None)]), opset_imports=[h.make_opsetid("", 17)])
    for axis, name in [(-1, "last"), (1, "middle")]:
        yield f"Softmax {name}", single("Softmax", [[1, 12, 128, 128]], {"axis": axis})
    yield "Softmax 2-class", single("Softmax", [[1, 8400, 2]], {"axis": -1})
    yield "LogSoftmax", single("LogSoftmax", [[128, 1000]], {"axis": -1})
    for op in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2"]:
        yield f"{op} last", single(op, [seq], {"keepdims": 1},
                                   consts=[const("axes", np.array([-1], np.int64))], opset=18)
    yield "ReduceMean HW", single("ReduceMean", [img], {"keepdims": 1},
                                  consts=[const("axes", np.array([2, 3], np.int64))], opset=18)
    yield "ReduceSum C", single("ReduceSum", [img], {"keepdims": 1},
                                consts=[const("axes", np.array([1], np.int64))], opset=18)
    yield "ArgMax", single("ArgMax", [[1, 1000, 64]], {"axis": 1}, out_type=T.INT64)
    yield "GlobalAveragePool", single("GlobalAveragePool", [[1, 512, 14, 14]])
    yield "GlobalMaxPool", single("GlobalMaxPool", [[1, 512, 14, 14]])
    yield "MaxPool 3x3s2", single("MaxPool", [[1, 64, 112, 112]],
                                  {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
    yield "MaxPool 2x2s2", single("MaxPool", [[1, 64, 112, 112]], {"kernel_shape": [2, 2], "strides": [2, 2]})
    yield "AveragePool 3x3s1", single("AveragePool", [[1, 192, 28, 28]],
                                      {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    yield "MaxPool 5x5s1", single("MaxPool", [[1, 256, 20, 20]],
                                  {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]})
    yield "LayerNorm", single("LayerNormalization", [seq], {"axis": -1},
                              consts=[const("g", r(768)), const("b", r(768))])
    yield "InstanceNorm", single("InstanceNormalization", [img],
                                 consts=[const("g", r(64)), const("b", r(64))])
    yield "BatchNorm", single("BatchNormalization", [img], consts=[
        const("g", r(64)), const("b", r(64)), const("m", r(64)),
        const("v", np.abs(r(64)) + 1)])
    yield "GroupNorm", single("GroupNormalization", [[1, 256, 32, 32]], {"num_groups": 32},
                              consts=[const("g", r(256)), const("b", r(256))], opset=21)
    yield "LRN", single("LRN", [[1, 96, 55, 55]], {"size": 5})
    yield "Transpose 0213", single("Transpose", [[1, 128, 12, 64]], {"perm": [0, 2, 1, 3]})
    yield "Transpose 0231", single("Transpose", [img], {"perm": [0, 2, 3, 1]})
    yield "Transpose 0312", single("Transpose", [[1, 56, 56, 64]], {"perm": [0, 3, 1, 2]})
    yield "Transpose last2", single("Transpose", [[12, 128, 64]], {"perm": [0, 2, 1]})
    yield "Concat C", single("Concat", [img, img], {"axis": 1})
    yield "Concat W", single("Concat", [img, img], {"axis": 3})
    yield "Split C", h.make_model(h.make_graph(
        [h.make_node("Split", ["x0"], ["a", "b"], axis=1, num_outputs=2)], "s",
        [h.make_tensor_value_info("x0", F, img)],
        [h.make_tensor_value_info("a", F, None), h.make_tensor_value_info("b", F, None)]),
        opset_imports=[h.make_opsetid("", 18)])
    yield "Slice W step2", single("Slice", [img], consts=[
        const("st", np.array([0], np.int64)), const("en", np.array([56], np.int64)),
        const("ax", np.array([3], np.int64)), const("sp", np.array([2], np.int64))])
    yield "Gather rows", single("Gather", [[30522 // 4, 768]], {"axis": 0},
                                consts=[const("i", RNG.integers(0, 7000, (1, 128)).astype(np.int64))])
    yield "Gather axis1", single("Gather", [img], {"axis": 1},
                                 consts=[const("i", np.arange(0, 64, 2).astype(np.int64))])
    yield "Pad reflect", single("Pad", [img], {"mode": "reflect"},
                                consts=[const("p", np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64))])
    yield "Pad constant", single("Pad", [img],
                                 consts=[const("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    yield "Resize nearest x2", single("Resize", [[1, 128, 40, 40]], {"mode": "nearest"},
                                      consts=[const("roi", np.array([], np.float32)),
                                              const("sc", np.array([1, 1, 2, 2], np.float32))],
                                      inputs=["x0", "", "sc"])
    yield "Resize linear x2", single("Resize", [[1, 128, 40, 40]], {"mode": "linear"},
                                     consts=[const("sc", np.array([1, 1, 2, 2], np.float32))],
                                     inputs=["x0", "", "sc"])
    yield "Resize bilinear down", single(
        "Resize", [[1, 32, 224, 224]], {"mode": "linear"},
        consts=[const("sz", np.array([1, 32, 160, 160], np.int64))], inputs=["x0", "", "", "sz"])
    yield "Expand", single("Expand", [[1, 64, 1, 56]],
                           consts=[const("s", np.array([1, 64, 56, 56], np.int64))])
    yield "Tile", single("Tile", [[1, 64, 28, 28]],
                         consts=[const("r", np.array([1, 1, 2, 2], np.int64))])
    yield "DepthToSpace", single("DepthToSpace", [[1, 256, 28, 28]], {"blocksize": 2})
    yield "SpaceToDepth", single("SpaceToDepth", [[1, 64, 56, 56]], {"blocksize": 2})
    yield "CumSum", single("CumSum", [seq], consts=[const("a", np.array(1, np.int64))])
    yield "TopK", h.make_model(h.make_graph(
        [h.make_node("TopK", ["x0", "k"], ["y", "i"], axis=-1)], "t",
        [h.make_tensor_value_info("x0", F, [64, 1000])],
        [h.make_tensor_value_info("y", F, None), h.make_tensor_value_info("i", T.INT64, None)],
        [const("k", np.array([5], np.int64))]), opset_imports=[h.make_opsetid("", 17)])
    yield "MatMul 128x768x768", single("MatMul", [seq], consts=[const("w", r(768, 768))])
    yield "MatMul batched QK", single("MatMul", [[12, 128, 64], [12, 64, 128]])
    yield "MatMul GEMV", single("MatMul", [[1, 1024]], consts=[const("w", r(1024, 4096))])
    yield "Gemm fc", single("Gemm", [[1, 2048]], {"transB": 1},
                            consts=[const("w", r(1000, 2048)), const("b", r(1000))])
    yield "Conv 3x3 64", single("Conv", [img], {"pads": [1, 1, 1, 1]},
                                consts=[const("w", r(64, 64, 3, 3)), const("b", r(64))])
    yield "Conv 1x1 64->256", single("Conv", [img], consts=[const("w", r(256, 64, 1, 1))])
    # MobileNetV2's narrow pointwise convolutions (K or M of 16-32 channels on large planes)
    # and its stem: small-K GEMMs whose tiles do little work per store.
    for cin, cout, side in [(16, 96, 112), (24, 144, 56), (144, 24, 56), (96, 24, 56),
                            (192, 32, 28), (32, 16, 112)]:
        yield f"Conv 1x1 {cin}->{cout} {side}²", single(
            "Conv", [[1, cin, side, side]], consts=[const("w", r(cout, cin, 1, 1))])
    yield "Conv 3x3 s2 3->32 stem", single("Conv", [[1, 3, 224, 224]],
                                           {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                           consts=[const("w", r(32, 3, 3, 3))])
    yield "Conv 3x3 s2", single("Conv", [img], {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                consts=[const("w", r(128, 64, 3, 3))])
    yield "Conv dw 3x3", single("Conv", [[1, 144, 56, 56]], {"pads": [1, 1, 1, 1], "group": 144},
                                consts=[const("w", r(144, 1, 3, 3))])
    yield "Conv dw 5x5 s2", single("Conv", [[1, 240, 28, 28]],
                                   {"pads": [2, 2, 2, 2], "group": 240, "strides": [2, 2]},
                                   consts=[const("w", r(240, 1, 5, 5))])
    yield "Conv grouped g4", single("Conv", [img], {"pads": [1, 1, 1, 1], "group": 4},
                                    consts=[const("w", r(64, 16, 3, 3))])
    yield "Conv 7x7 s2 stem", single("Conv", [[1, 3, 224, 224]],
                                     {"pads": [3, 3, 3, 3], "strides": [2, 2]},
                                     consts=[const("w", r(64, 3, 7, 7))])
    yield "Conv 1d k3", single("Conv", [[1, 256, 400]], {"pads": [1, 1]},
                               consts=[const("w", r(256, 256, 3))])
    yield "Conv dilated 3x3 d2", single("Conv", [[1, 128, 32, 32]],
                                        {"pads": [2, 2, 2, 2], "dilations": [2, 2]},
                                        consts=[const("w", r(128, 128, 3, 3))])
    yield "ConvTranspose 2x2s2", single("ConvTranspose", [[1, 128, 28, 28]], {"strides": [2, 2]},
                                        consts=[const("w", r(128, 64, 2, 2))])
    yield "ConvTranspose 4x4s2", single("ConvTranspose", [[1, 64, 32, 32]],
                                        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
                                        consts=[const("w", r(64, 32, 4, 4))])
    yield "Einsum bhqd,bhkd", single("Einsum", [[1, 12, 128, 64], [1, 12, 128, 64]],
                                     {"equation": "bhqd,bhkd->bhqk"})


def ours(path, threads, runs):
    out = subprocess.run(
        [os.path.join(ROOT, "target/release/roofline"), "bench", path, "--format", "json",
         "--threads", str(threads), "--runs", str(runs), "--min-time", "0"],
        capture_output=True, text=True)
    if out.returncode:
        return None, out.stderr.strip().splitlines()[-1][:90]
    return json.loads(out.stdout)["latency_ms"]["median"] * 1e3, None


def onnxruntime_us(path, threads, runs):
    """onnxruntime's median in µs, timed as `bench_vs_ort.py` times whole models."""
    return ort_latency(Path(path), {}, threads, runs) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    # Enough runs that a second thread is spinning when the op starts (at 15, a 2-thread
    # Exp took its 1-thread time: the worker was asleep at most starts).
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--filter", default="")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in cases():
            if args.filter.lower() not in name.lower():
                continue
            path = os.path.join(tmp, name.replace(" ", "_").replace(">", "") + ".onnx")
            onnx.save(model, path)
            try:
                reference = onnxruntime_us(path, args.threads, args.runs)
            except Exception as err:  # an op this onnxruntime lacks is skipped, not fatal
                print(f"{name}: onnxruntime failed: {str(err).splitlines()[0][:80]}", file=sys.stderr)
                continue
            mine, error = ours(path, args.threads, args.runs)
            rows.append((name, mine, reference, error))
    rows.sort(key=lambda row: -(row[1] / row[2]) if row[1] else -1e9)
    print(f"{'op':28} {'roofline µs':>12} {'onnxruntime µs':>15} {'ratio':>7}   (threads {args.threads})")
    for name, mine, reference, error in rows:
        if mine is None:
            print(f"{name:28} {'FAILED':>12} {reference:15.1f}        {error}")
        else:
            print(f"{name:28} {mine:12.1f} {reference:15.1f} {mine / reference:7.2f}")
    ratios = sorted(m / r for _, m, r, _ in rows if m)
    if ratios:
        print(f"median ratio {ratios[len(ratios) // 2]:.2f} over {len(ratios)} ops; "
              f"{sum(r > 1.5 for r in ratios)} above 1.5")


if __name__ == "__main__":
    main()
