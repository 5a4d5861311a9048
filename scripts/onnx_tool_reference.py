#!/usr/bin/env python3
"""Reference MAC / parameter counts from onnx-tool for the model corpus.

Usage (project venv, after scripts/setup-python.sh and scripts/fetch-models.sh):
    .venv/bin/python scripts/onnx_tool_reference.py [--models-dir .cache/models]
                                                    [--out tests/reference/onnx_tool.json]

For every .cache/models/**/*.onnx it runs onnx-tool (Model -> Graph.shape_infer
-> Graph.profile, i.e. the same steps as onnx_tool.model_profile but with no op
types hidden) and writes one JSON keyed by model file name with:
  inputs                  shapes/dtypes bound for shape inference
  conv_gemm_matmul_macs   sum of onnx-tool MACs over Conv, ConvTranspose, Gemm, MatMul
  per_node_macs           {node name: MACs} for those four op types
  macs_by_op_type         onnx-tool MACs summed per op type (all op types)
  total_macs              onnx-tool's graph total (all nodes)
  params                  onnx-tool's parameter total (default config)
  params_constant_folding the same with ModelConfig constant_folding=True
  ...plus onnx-tool/onnx versions, sha256 and notes.

Input shapes: models whose graph inputs are fully static use them as-is.
Models with symbolic dims are bound here (input names are discovered from the
model, shapes given in graph-input order): PP-OCRv4 det 1x3x640x640, PP-OCRv4
rec 1x3x48x320, PP-OCR mobile v2 cls 1x3x48x192, Magika 1x2048 (int32).

WHAT ONNX-TOOL 1.0.1 COUNTS (read from its source and checked by the
self-test in check_conventions(), whose results are stored in the JSON under
"conventions_checked"):

MACs (node.py):
  * Conv:  volume(Y) * volume(W.shape[1:])  (= N*Cout*Ho*Wo * Cin/group*kH*kW)
           + volume(Y) extra if a bias input is present, i.e. ONE MAC PER
           OUTPUT ELEMENT FOR THE BIAS ADD.
  * ConvTranspose: same formula, volume(Y) * volume(W.shape[1:]) (+ volume(Y)
           with bias). NOTE W is (Cin, Cout/group, kH, kW) here, so this is
           N*Cout*Ho*Wo * Cout/group*kH*kW -- not the true
           N*Cin*Hi*Wi * Cout/group*kH*kW. It is off by a factor
           (Ho*Wo*Cout)/(Hi*Wi*Cin); e.g. PP-OCRv4 det ConvTranspose.0
           (24->24ch, 2x2 s2) gets 4x the true count and ConvTranspose.2
           (24->1ch) gets 1/6 of it.
  * Gemm:  volume(Y) * K, K taken from B's shape (B[-1] if transB else B[-2];
           transA is ignored for K), + volume(Y) if a C input is present
           (one MAC per output element for the bias, regardless of C's shape
           or beta). alpha/beta scaling is not counted.
  * MatMul: volume(Y) * B.shape[-2] (B rank >= 2); no bias term. Batch dims
           broadcast: Y's batch is the larger of A's/B's batch volumes.
  * Other ops (not part of conv_gemm_matmul_macs): elementwise ops count
    per output element (Add/Sub/Mul/Relu/Clip... 1 or 2, Div 1, Exp/Tanh/Pow
    32-ish, Sqrt, Sigmoid=EXP+DIV...), BatchNormalization 2 per element,
    pools per window element, Softmax with EXP+DIV, Resize nearest 0, data
    movement (Reshape, Concat, Transpose, Constant...) 0.
  * Ops with no onnx-tool class get 0 MACs and 0 params; if such an op is
    needed for shape inference onnx-tool raises. The only one in this
    corpus is GlobalMaxPool (magika); this script registers a minimal shim
    for it (shape N,C,1,1; MACs = volume(X) compares) and lists it under
    "shims" for the affected model.

Params (graph.py Graph.profile):
  * Default config (constant_folding=False): params are counted ONLY for
    tensors in graph.initializer that are inputs of profiled nodes; each
    initializer once even if shared; size = product of dims, and a rank-0
    (scalar) initializer counts 0 (onnx-tool's volume([]) == 0).
    - Constant-node outputs are NOT counted (PP-OCR stores all weights in
      Constant nodes -> params 0).
    - ConstantOfShape outputs are NOT counted; only the int64 *shape*
      initializer feeding each ConstantOfShape is counted (rank-1, so the
      light_* models report tiny params like 36 = sum of the shape-vector
      lengths, plus any real float initializers such as BN stats).
    - int64 initializers (Reshape shapes etc.) count like weights.
    - This script profiles all node types; onnx_tool.model_profile by
      default hides NoMacsOps (Reshape, Constant, ConstantOfShape, Concat,
      Slice, Gather, ...) and would then skip initializers consumed only by
      those ops (e.g. the light_* shape vectors).
  * constant_folding=True: Constant / ConstantOfShape subgraphs are folded
    into static tensors, and every static tensor consumed by a remaining
    node counts (Conv weights+biases, BN scale/bias/mean/var, Reshape shape
    vectors, Clip bounds (scalar -> 0)). This gives "real" weight counts
    (e.g. resnet50 25.6M incl. BN mean/var) and is stored as
    params_constant_folding. MACs are identical in both modes here.

Node names: onnx-tool keeps NodeProto.name; unnamed nodes become
"<OpType>_<index of the node in graph.node>" (0-based over all nodes).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import sys
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_tool
from onnx_tool import node as ot_node
from onnx_tool.utils import NODE_REGISTRY, VERSION as ONNX_TOOL_VERSION

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = ROOT / ".cache" / "models"
DEFAULT_OUT = ROOT / "tests" / "reference" / "onnx_tool.json"

MATMUL_LIKE = ("Conv", "ConvTranspose", "Gemm", "MatMul")

# Shapes for graph inputs with symbolic dims, in graph-input order (names are
# discovered from the model).
BINDINGS: dict[str, list[list[int]]] = {
    "ch_PP-OCRv4_det_infer.onnx": [[1, 3, 640, 640]],
    "ch_PP-OCRv4_rec_infer.onnx": [[1, 3, 48, 320]],
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": [[1, 3, 48, 192]],
    "magika_standard_v3_3.onnx": [[1, 2048]],
}


# --------------------------------------------------------------------------
# Shim for ops onnx-tool lacks but which are needed for shape inference.
SHIMMED_OPS: set[str] = set()


def install_shims() -> None:
    if NODE_REGISTRY.get("GlobalMaxPoolNode") is None:

        class GlobalMaxPoolNode(ot_node.Node):
            def shape_infer(self, intensors, outtensors):
                s = intensors[0].get_shape()
                outtensors[0].update_shape(list(s[:2]) + [1] * (len(s) - 2))
                outtensors[0].update_dtype(intensors[0].dtype)

            def value_infer(self, intensors, outtensors):
                x = intensors[0].get_numpy()
                outtensors[0].update_tensor(x.max(axis=tuple(range(2, x.ndim)), keepdims=True))

            def profile(self, intensors, outtensors):
                return [ot_node.volume(intensors[0].get_shape()) * ot_node.CMP_MACS, 0]

        NODE_REGISTRY.register(GlobalMaxPoolNode)
        SHIMMED_OPS.add("GlobalMaxPool")


# --------------------------------------------------------------------------
def graph_inputs(model: onnx.ModelProto):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def bind_inputs(path: Path, model: onnx.ModelProto) -> dict[str, dict]:
    """Return {input name: {"shape": [...], "dtype": str}} for shape inference."""
    ins = graph_inputs(model)
    bound = BINDINGS.get(path.name)
    if bound is not None and len(bound) != len(ins):
        raise SystemExit(f"{path.name}: BINDINGS has {len(bound)} shapes but model has {len(ins)} inputs")
    out = {}
    for k, vi in enumerate(ins):
        tt = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if bound is not None:
            shape = list(bound[k])
            if len(shape) != len(tt.shape.dim):
                raise SystemExit(f"{path.name}: bound shape {shape} has wrong rank for input {vi.name}")
        else:
            shape = []
            for d in tt.shape.dim:
                if not d.HasField("dim_value") or d.dim_value <= 0:
                    raise SystemExit(
                        f"{path.name}: input {vi.name!r} has symbolic dims; add it to BINDINGS in {__file__}")
                shape.append(int(d.dim_value))
        out[vi.name] = {"shape": shape, "dtype": np.dtype(dtype).name}
    return out


def run_onnx_tool(model_or_path, inputs: dict[str, dict], constant_folding: bool):
    """Load + shape_infer + profile (all op types). Returns the onnx_tool Graph."""
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        m = onnx_tool.Model(model_or_path, {"verbose": False, "constant_folding": constant_folding})
        g = m.graph
        g.graph_reorder_nodes()
        feed = {name: np.zeros(spec["shape"], dtype=spec["dtype"]) for name, spec in inputs.items()}
        g.shape_infer(feed)
        g.profile()
    return g


def profile_model(path: Path, models_dir: Path) -> dict:
    data = path.read_bytes()
    model = onnx.load_from_string(data)
    inputs = bind_inputs(path, model)
    op_types = collections.Counter(n.op_type for n in model.graph.node)
    # Relative to stock onnx-tool (shimmed ops count as unregistered).
    unregistered = sorted(op for op in op_types
                          if NODE_REGISTRY.get(op + "Node") is None or op in SHIMMED_OPS)

    g = run_onnx_tool(str(path), inputs, constant_folding=False)
    per_node = {}
    by_op = collections.Counter()
    bias_macs = 0
    ot_shapes = {}
    for name, node in g.nodemap.items():
        macs = int(round(node.macs[0]))
        by_op[node.op_type] += macs
        if node.op_type in MATMUL_LIKE:
            per_node[name] = macs
            yshape = [int(v) for v in g.tensormap[node.output[0]].get_shape()]
            ot_shapes[node.output[0]] = (name, yshape)
            if len(node.input) > 2 and node.input[2] != "":
                bias_macs += int(np.prod(yshape))
    cgm = sum(per_node.values())
    # Exact multiply count for ConvTranspose (N*Cin*Hi*Wi * Cout/group*kH*kW, + volume(Y) with
    # bias to match onnx-tool's bias convention) for comparison with onnx-tool's formula.
    ct_true = {}
    for name, node in g.nodemap.items():
        if node.op_type == "ConvTranspose":
            xs = [int(v) for v in g.tensormap[node.input[0]].get_shape()]
            ws = [int(v) for v in g.tensormap[node.input[1]].get_shape()]
            ys = [int(v) for v in g.tensormap[node.output[0]].get_shape()]
            t = int(np.prod(xs)) * int(np.prod(ws[1:]))
            if len(node.input) > 2 and node.input[2] != "":
                t += int(np.prod(ys))
            ct_true[name] = t
    shape_check = crosscheck_shapes(model, inputs, ot_shapes)

    g_cf = run_onnx_tool(str(path), inputs, constant_folding=True)
    cgm_cf = sum(int(round(n.macs[0])) for n in g_cf.nodemap.values() if n.op_type in MATMUL_LIKE)

    notes = []
    names = [n.name for n in model.graph.node if n.name]
    dups = sorted(k for k, v in collections.Counter(names).items() if v > 1)
    if dups:
        notes.append(f"duplicate node names (per_node_macs keeps the last): {dups[:10]}")
    n_mm = sum(op_types[o] for o in MATMUL_LIKE)
    if len(per_node) != n_mm:
        notes.append(f"{n_mm} Conv/ConvTranspose/Gemm/MatMul nodes but {len(per_node)} per-node entries")
    if ct_true:
        ot = sum(per_node[n] for n in ct_true)
        tr = sum(ct_true.values())
        notes.append(f"ConvTranspose: onnx-tool counts {ot} MACs, exact N*Cin*Hi*Wi*Cout/g*kH*kW(+bias) is {tr} "
                     f"({ct_true}); conv_gemm_matmul_macs with exact ConvTranspose = {cgm - ot + tr}")
    if cgm_cf != cgm:
        notes.append(f"conv_gemm_matmul_macs with constant_folding=True differs: {cgm_cf}")

    entry = {
        "path": os.path.relpath(path, models_dir),
        "sha256": hashlib.sha256(data).hexdigest(),
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "inputs": inputs,
        "conv_gemm_matmul_macs": cgm,
        "conv_gemm_matmul_bias_macs": bias_macs,
        "total_macs": int(round(g.macs[0])),
        "params": int(g.params),
        "params_constant_folding": int(g_cf.params),
        "macs_by_op_type": dict(sorted((k, v) for k, v in by_op.items())),
        "unregistered_op_types": unregistered,
        "shims": sorted(SHIMMED_OPS & set(op_types)),
        "notes": notes,
        "ort_output_shape_check": shape_check,
        "per_node_macs": per_node,
    }
    return entry


def crosscheck_shapes(model: onnx.ModelProto, inputs: dict[str, dict], ot_shapes: dict) -> str:
    """Run onnxruntime with the Conv/ConvTranspose/Gemm/MatMul outputs exposed as
    graph outputs and compare their real shapes with onnx-tool's inferred ones."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    existing = {o.name for o in m.graph.output}
    for t in ot_shapes:
        if t not in existing:
            m.graph.output.append(onnx.ValueInfoProto(name=t))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feed = {}
        for name, spec in inputs.items():
            if np.issubdtype(np.dtype(spec["dtype"]), np.integer):
                feed[name] = rng.integers(0, 256, size=spec["shape"]).astype(spec["dtype"])
            else:
                feed[name] = rng.standard_normal(spec["shape"]).astype(spec["dtype"])
        names = list(ot_shapes)
        outs = sess.run(names, feed)
    except Exception as e:  # pragma: no cover - reported in the JSON
        return f"ort failed: {type(e).__name__}: {str(e)[:200]}"
    bad = []
    for t, arr in zip(names, outs):
        node, ot = ot_shapes[t]
        if list(arr.shape) != ot:
            bad.append(f"{node}: onnx-tool {ot} vs ort {list(arr.shape)}")
    if bad:
        return f"MISMATCH in {len(bad)}/{len(names)} nodes: " + "; ".join(bad[:10])
    return f"ok ({len(names)} nodes)"


# --------------------------------------------------------------------------
# Self-test of the counting conventions on tiny synthetic models.
def _tiny_model(nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "t", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, et=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, et, shape)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def check_conventions() -> dict:
    f32 = np.float32
    res = {}
    x_in = {"x": {"shape": [1, 4, 8, 8], "dtype": "float32"}}
    W = np.ones((6, 2, 3, 3), f32)  # group=2: Cin/group = 2
    B = np.ones((6,), f32)

    def prof(m, inputs, cf=False):
        return run_onnx_tool(m, inputs, cf)

    # Conv with / without bias.
    outvol = 1 * 6 * 6 * 6
    for bias in (False, True):
        ins = ["x", "W"] + (["B"] if bias else [])
        inits = [_init("W", W)] + ([_init("B", B)] if bias else [])
        m = _tiny_model([helper.make_node("Conv", ins, ["y"], name="c", group=2, kernel_shape=[3, 3])],
                        [_vi("x", [1, 4, 8, 8])], [_vi("y", None)], inits)
        g = prof(m, x_in)
        res[f"conv_{'bias' if bias else 'nobias'}_macs"] = {
            "got": int(g.nodemap["c"].macs[0]), "mul_only": outvol * 2 * 9, "params": int(g.params)}
    # Gemm with C, transB.
    a_in = {"a": {"shape": [2, 5], "dtype": "float32"}}
    m = _tiny_model([helper.make_node("Gemm", ["a", "B", "C"], ["y"], name="g", transB=1, alpha=2.0, beta=3.0)],
                    [_vi("a", [2, 5])], [_vi("y", None)],
                    [_init("B", np.ones((7, 5), f32)), _init("C", np.ones((7,), f32))])
    g = prof(m, a_in)
    res["gemm_bias_macs"] = {"got": int(g.nodemap["g"].macs[0]), "mul_only": 2 * 7 * 5, "params": int(g.params)}
    # MatMul.
    m = _tiny_model([helper.make_node("MatMul", ["a", "B"], ["y"], name="mm")],
                    [_vi("a", [2, 5])], [_vi("y", None)], [_init("B", np.ones((5, 7), f32))])
    g = prof(m, a_in)
    res["matmul_macs"] = {"got": int(g.nodemap["mm"].macs[0]), "mul_only": 2 * 7 * 5, "params": int(g.params)}
    # ConvTranspose (Cin=4 -> Cout=2, k2 s2) on 1x4x8x8 -> 1x2x16x16.
    m = _tiny_model([helper.make_node("ConvTranspose", ["x", "W"], ["y"], name="ct", kernel_shape=[2, 2],
                                      strides=[2, 2])],
                    [_vi("x", [1, 4, 8, 8])], [_vi("y", None)], [_init("W", np.ones((4, 2, 2, 2), f32))])
    g = prof(m, x_in)
    res["convtranspose_macs"] = {"got": int(g.nodemap["ct"].macs[0]),
                                 "true_mul_count": 1 * 4 * 8 * 8 * 2 * 2 * 2,
                                 "onnx_tool_formula_outvol_x_W1_kh_kw": (2 * 16 * 16) * 2 * 2 * 2}
    # Weights in a Constant node vs ConstantOfShape vs initializer; scalar init; shared init.
    nodes = [
        helper.make_node("Constant", [], ["Wc"], value=numpy_helper.from_array(W, "Wc")),
        helper.make_node("ConstantOfShape", ["wshape"], ["Wz"], value=numpy_helper.from_array(np.array([0.5], f32))),
        helper.make_node("Conv", ["x", "Wc"], ["y1"], name="c1", group=2, kernel_shape=[3, 3]),
        helper.make_node("Conv", ["x", "Wz"], ["y2"], name="c2", group=2, kernel_shape=[3, 3]),
        helper.make_node("Mul", ["y1", "s"], ["y3"], name="m1"),
        helper.make_node("Add", ["y3", "bb"], ["y4"], name="a1"),
        helper.make_node("Add", ["y2", "bb"], ["y5"], name="a2"),
    ]
    inits = [_init("wshape", np.array([6, 2, 3, 3], np.int64)), _init("s", np.array(2.0, f32)),
             _init("bb", np.ones((1, 6, 1, 1), f32))]
    m = _tiny_model(nodes, [_vi("x", [1, 4, 8, 8])], [_vi("y4", None), _vi("y5", None)], inits)
    g = prof(m, x_in)
    g_cf = prof(m, x_in, cf=True)
    res["params_storage"] = {
        "graph": "Conv(W from Constant 108 el) + Conv(W from ConstantOfShape([6,2,3,3])) + Mul(scalar init) "
                 "+ 2x Add(shared 6-el init)",
        "params_default": int(g.params),
        "expected_if_only_initializers_rank0_as_0_shared_once": 4 + 0 + 6,
        "params_constant_folding": int(g_cf.params),
        "expected_with_folding": 108 + 108 + 0 + 6,
    }
    res["summary"] = {
        "conv_bias_adds_one_mac_per_output": res["conv_bias_macs"]["got"] - res["conv_nobias_macs"]["got"] == outvol,
        "gemm_bias_adds_one_mac_per_output": res["gemm_bias_macs"]["got"] - 70 == 14,
        "matmul_no_bias_term": res["matmul_macs"]["got"] == 70,
        "convtranspose_uses_outvol_x_W1": res["convtranspose_macs"]["got"]
        == res["convtranspose_macs"]["onnx_tool_formula_outvol_x_W1_kh_kw"],
        "default_params_ignore_constant_and_constantofshape_outputs":
            res["params_storage"]["params_default"] == 10,
        "constant_folding_counts_folded_weights": res["params_storage"]["params_constant_folding"] == 222,
    }
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="onnx-tool reference counts for the model corpus")
    ap.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    files = sorted(args.models_dir.rglob("*.onnx"))
    if not files:
        print(f"error: no .onnx under {args.models_dir} (run scripts/fetch-models.sh)", file=sys.stderr)
        return 2
    seen = collections.Counter(f.name for f in files)
    if any(v > 1 for v in seen.values()):
        print(f"error: duplicate model file names: {[k for k, v in seen.items() if v > 1]}", file=sys.stderr)
        return 2

    install_shims()
    conv = check_conventions()
    models = {}
    for f in files:
        print(f"profiling {os.path.relpath(f, args.models_dir)} ...", file=sys.stderr)
        e = profile_model(f, args.models_dir)
        models[f.name] = e
        print(f"  conv_gemm_matmul_macs={e['conv_gemm_matmul_macs']} params={e['params']} "
              f"params_constant_folding={e['params_constant_folding']}", file=sys.stderr)

    doc = {
        "generator": "scripts/onnx_tool_reference.py",
        "onnx_tool_version": ONNX_TOOL_VERSION,
        "onnx_version": onnx.__version__,
        "numpy_version": np.__version__,
        "op_types_in_macs_sum": list(MATMUL_LIKE),
        "conventions": {
            "conv": "MACs = volume(Y) * volume(W[1:]) + volume(Y) if bias input present",
            "conv_transpose": "MACs = volume(Y) * volume(W[1:]) + volume(Y) if bias (W is Cin x Cout/g x k..., so "
                              "this is NOT the true Cin-based count)",
            "gemm": "MACs = volume(Y) * K (K from B and transB; transA ignored) + volume(Y) if C present; "
                    "alpha/beta ignored",
            "matmul": "MACs = volume(Y) * B.shape[-2]; no bias",
            "params": "default: product of dims of each graph.initializer consumed by a node, once each, scalars 0; "
                      "Constant-node and ConstantOfShape outputs not counted (only ConstantOfShape's shape "
                      "initializer). params_constant_folding: every folded static tensor consumed by a non-constant "
                      "node (incl. Constant/ConstantOfShape results, int64 shape tensors; scalars 0).",
            "unnamed_nodes": "named '<OpType>_<index in graph.node>'",
            "profiled_ops": "all op types (no NoMacsOps hiding)",
        },
        "conventions_checked": conv,
        "models": models,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text)} bytes, {len(models)} models)", file=sys.stderr)
    bad = [k for k, v in conv["summary"].items() if not v]
    if bad:
        print(f"warning: onnx-tool conventions differ from the documented ones: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
