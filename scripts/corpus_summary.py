#!/usr/bin/env python3
"""Summarise the ONNX model corpus (what the Rust analyzer has to cope with).

Usage (with the project venv):
    .venv/bin/python scripts/corpus_summary.py [MODEL.onnx | DIR ...] > tests/reference/corpus_summary.txt

Without arguments it walks .cache/models/**/*.onnx (see scripts/fetch-models.sh).

For each model it prints: ir_version, producer, opset imports, graph inputs and
outputs (dtype + shape, symbolic dims by name, '?' for unknown), how weights are
stored (initializers vs Constant nodes vs ConstantOfShape nodes, with element
counts), op types with counts (nodes inside subgraphs of Loop/If/Scan are
included and marked), the number-of-inputs variants per op type, every
attribute value seen per op type, and a NOTES list of things that are unusual
for a shape/FLOP analyzer (grouped/depthwise/dilated convs, auto_pad,
asymmetric pads, ceil_mode pooling, Resize/Upsample modes, Gemm transposes,
legacy attribute forms, non-default domains, ...). The end of the output has the
union of op types over the whole corpus with the models/opsets they occur in.

Only the onnx package is needed (no onnxruntime / onnx-tool).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import sys
from pathlib import Path

import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".cache" / "models"

MAX_VALUES_PER_ATTR = 8


def dtype_name(elem_type: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def dims_of(type_proto) -> str:
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return "<unranked>"
    out = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            out.append(str(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(repr(d.dim_param))
        else:
            out.append("?")
    return "[" + ", ".join(out) + "]"


def value_info_str(vi) -> str:
    t = vi.type
    if t.HasField("tensor_type"):
        return f"{vi.name}: {dtype_name(t.tensor_type.elem_type)} {dims_of(t)}"
    return f"{vi.name}: <{t.WhichOneof('value')}>"


def numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def attr_value_repr(a: onnx.AttributeProto) -> str:
    v = onnx.helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.TENSOR:
        arr = numpy_helper.to_array(v)
        if arr.size <= 4:
            return f"tensor<{arr.dtype.name}>{arr.tolist()}"
        return f"tensor<{arr.dtype.name}>{list(arr.shape)}"
    if a.type == onnx.AttributeProto.GRAPH:
        return f"<graph {v.name!r}: {len(v.node)} nodes>"
    if a.type == onnx.AttributeProto.GRAPHS:
        return f"<{len(v)} graphs>"
    if isinstance(v, bytes):
        return repr(v.decode("utf-8", "replace"))
    if isinstance(v, list):
        v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        if all(isinstance(x, float) for x in v):
            v = [float(f"{x:.6g}") for x in v]
        return str(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return repr(v)


def iter_nodes(graph, depth=0):
    """Yield (node, depth) for every node, recursing into subgraph attributes."""
    for node in graph.node:
        yield node, depth
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(a.g, depth + 1)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from iter_nodes(g, depth + 1)


class StaticShapes:
    """Shapes (and small values) of tensors that are compile-time constants:
    initializers, Constant outputs and ConstantOfShape outputs whose shape input
    is itself constant."""

    def __init__(self, graph):
        self.shape: dict[str, list[int]] = {}
        self.value: dict[str, object] = {}
        for init in graph.initializer:
            self.shape[init.name] = list(init.dims)
            if numel(init.dims) <= 16:
                self.value[init.name] = numpy_helper.to_array(init)
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                for a in node.attribute:
                    if a.name == "value":
                        self.shape[node.output[0]] = list(a.t.dims)
                        if numel(a.t.dims) <= 16:
                            self.value[node.output[0]] = numpy_helper.to_array(a.t)
                    elif a.name in ("value_float", "value_int"):
                        self.shape[node.output[0]] = []
                    elif a.name in ("value_floats", "value_ints"):
                        self.shape[node.output[0]] = [len(onnx.helper.get_attribute_value(a))]
            elif node.op_type == "ConstantOfShape" and node.input and node.input[0] in self.value:
                self.shape[node.output[0]] = [int(x) for x in self.value[node.input[0]].reshape(-1)]


def summarize(path: Path, rel: str, out) -> dict:
    data = path.read_bytes()
    model = onnx.load_from_string(data)
    g = model.graph
    p = lambda *a: print(*a, file=out)

    p("=" * 78)
    p(f"MODEL {rel}")
    p(f"  size {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}")
    p(f"  ir_version {model.ir_version}; producer {model.producer_name!r} {model.producer_version!r}; graph {g.name!r}")
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    p("  opset_import: " + ", ".join(f"{d}={v}" for d, v in sorted(opsets.items())))
    if model.functions:
        p(f"  local functions: {[f.name for f in model.functions]}")

    init_names = {i.name for i in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    p(f"  inputs ({len(real_inputs)}; {len(g.input) - len(real_inputs)} more graph inputs are initializers):")
    for i in real_inputs:
        p(f"    {value_info_str(i)}")
    p(f"  outputs ({len(g.output)}):")
    for o in g.output:
        p(f"    {value_info_str(o)}")
    p(f"  value_info entries: {len(g.value_info)}")

    # --- where the weights live ------------------------------------------
    static = StaticShapes(g)
    init_elems = sum(numel(i.dims) for i in g.initializer)
    init_dtypes = collections.Counter(dtype_name(i.data_type) for i in g.initializer)
    const_nodes = [n for n in g.node if n.op_type == "Constant"]
    const_elems = sum(numel(static.shape.get(n.output[0], [])) for n in const_nodes)
    const_dtypes = collections.Counter()
    for n in const_nodes:
        for a in n.attribute:
            if a.name == "value":
                const_dtypes[dtype_name(a.t.data_type)] += 1
            else:
                const_dtypes[a.name] += 1
    cos_nodes = [n for n in g.node if n.op_type == "ConstantOfShape"]
    cos_static = [n for n in cos_nodes if n.output[0] in static.shape]
    cos_elems = sum(numel(static.shape[n.output[0]]) for n in cos_static)
    p("  weights storage:")
    p(f"    initializers:          {len(g.initializer):5d}  ({init_elems} elements; dtypes {dict(init_dtypes)})")
    p(f"    Constant nodes:        {len(const_nodes):5d}  ({const_elems} elements; dtypes {dict(const_dtypes)})")
    p(f"    ConstantOfShape nodes: {len(cos_nodes):5d}  ({len(cos_static)} with constant shape input -> {cos_elems} elements)")
    if g.sparse_initializer:
        p(f"    sparse initializers:   {len(g.sparse_initializer)}")

    # --- op types ------------------------------------------------------------
    ops = collections.Counter()
    sub_ops = collections.Counter()
    arity = collections.defaultdict(collections.Counter)
    attrs = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    domains = collections.Counter()
    for node, depth in iter_nodes(g):
        key = node.op_type if not node.domain or node.domain == "ai.onnx" else f"{node.domain}::{node.op_type}"
        (ops if depth == 0 else sub_ops)[key] += 1
        domains[node.domain or "ai.onnx"] += 1
        n_in = len(node.input)
        n_empty = sum(1 for x in node.input if x == "")
        arity[key][f"{n_in}in" + (f"({n_empty} empty)" if n_empty else "") + f"/{len(node.output)}out"] += 1
        for a in node.attribute:
            if key == "Constant":
                if a.name == "value":
                    attrs[key]["value(rank)"][f"rank{len(a.t.dims)}:{dtype_name(a.t.data_type)}"] += 1
                else:
                    attrs[key][a.name]["present"] += 1
                continue
            attrs[key][a.name][attr_value_repr(a)] += 1

    p(f"  nodes: {sum(ops.values())} top-level" + (f", {sum(sub_ops.values())} in subgraphs" if sub_ops else ""))
    p(f"  node domains: {dict(domains)}")
    p(f"  op types ({len(ops)}): " + ", ".join(f"{k}x{v}" for k, v in sorted(ops.items())))
    if sub_ops:
        p(f"  op types inside subgraphs ({len(sub_ops)}): " + ", ".join(f"{k}x{v}" for k, v in sorted(sub_ops.items())))
    p("  per op type: input/output arity variants; attributes (value x count):")
    for key in sorted(set(ops) | set(sub_ops)):
        p(f"    {key}: arity {dict(arity[key])}")
        for an in sorted(attrs[key]):
            vals = attrs[key][an].most_common()
            shown = ", ".join(f"{v} x{c}" for v, c in vals[:MAX_VALUES_PER_ATTR])
            more = f", ... ({len(vals) - MAX_VALUES_PER_ATTR} more distinct)" if len(vals) > MAX_VALUES_PER_ATTR else ""
            p(f"      {an}: {shown}{more}")

    # --- notes: unusual things -------------------------------------------------
    notes = unusual_notes(model, static)
    p(f"  NOTES ({len(notes)}):")
    for n in notes:
        p(f"    - {n}")
    if not notes:
        p("    (none)")

    return {"opsets": opsets, "ops": ops, "sub_ops": sub_ops, "ir": model.ir_version}


def get_attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def unusual_notes(model, static: StaticShapes) -> list[str]:
    g = model.graph
    notes: list[str] = []
    c = collections.Counter()
    examples: dict[str, str] = {}

    def flag(key, node):
        c[key] += 1
        examples.setdefault(key, node.name or f"<unnamed {node.op_type}>")

    for node, depth in iter_nodes(g):
        op = node.op_type
        if node.domain not in ("", "ai.onnx"):
            flag(f"non-default domain node {node.domain}::{op}", node)
        if depth > 0:
            flag(f"{op} inside a subgraph", node)
        if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
            group = get_attr(node, "group", 1)
            wshape = static.shape.get(node.input[1]) if len(node.input) > 1 else None
            if group != 1:
                if wshape and len(wshape) > 1 and wshape[1] == 1 and op == "Conv":
                    flag(f"{op} depthwise (group=C_in, W[1]==1)", node)
                else:
                    flag(f"{op} grouped (group>1, not depthwise)", node)
            dil = get_attr(node, "dilations")
            if dil and any(d != 1 for d in dil):
                flag(f"{op} dilations != 1 ({dil})", node)
            ap = get_attr(node, "auto_pad")
            if ap and ap not in (b"NOTSET", "NOTSET"):
                flag(f"{op} auto_pad={ap.decode() if isinstance(ap, bytes) else ap}", node)
            pads = get_attr(node, "pads")
            if pads and len(pads) % 2 == 0 and list(pads[: len(pads) // 2]) != list(pads[len(pads) // 2:]):
                flag(f"{op} asymmetric pads", node)
            if get_attr(node, "kernel_shape") is None:
                flag(f"{op} without kernel_shape attribute (must come from W)", node)
            if wshape is None:
                flag(f"{op} weight shape not statically known from initializer/Constant/ConstantOfShape", node)
            elif len(wshape) != 4:
                flag(f"{op} with {len(wshape) - 2}-D kernel", node)
            if len(node.input) < 3 or node.input[2] == "":
                flag(f"{op} without bias", node)
            if op == "ConvTranspose":
                for an in ("output_padding", "output_shape"):
                    if get_attr(node, an) is not None:
                        flag(f"ConvTranspose with {an}={get_attr(node, an)}", node)
                if wshape:
                    flag(f"ConvTranspose W shape {wshape} (C_in, C_out/group, kH, kW), strides={get_attr(node, 'strides')}", node)
        elif op in ("MaxPool", "AveragePool", "LpPool"):
            if get_attr(node, "ceil_mode", 0):
                flag(f"{op} ceil_mode=1", node)
            ap = get_attr(node, "auto_pad")
            if ap and ap not in (b"NOTSET", "NOTSET"):
                flag(f"{op} auto_pad={ap.decode()}", node)
            pads = get_attr(node, "pads")
            if pads and list(pads[: len(pads) // 2]) != list(pads[len(pads) // 2:]):
                flag(f"{op} asymmetric pads {list(pads)}", node)
            if op == "AveragePool" and get_attr(node, "count_include_pad", 0):
                flag("AveragePool count_include_pad=1", node)
            dil = get_attr(node, "dilations")
            if dil and any(d != 1 for d in dil):
                flag(f"{op} dilations {dil}", node)
            if len(node.output) > 1:
                flag(f"{op} with indices output", node)
        elif op in ("Resize", "Upsample"):
            mode = get_attr(node, "mode", b"nearest")
            ctm = get_attr(node, "coordinate_transformation_mode", b"half_pixel" if op == "Resize" else None)
            nm = get_attr(node, "nearest_mode", b"round_prefer_floor" if op == "Resize" else None)
            desc = f"mode={mode.decode()}"
            if ctm:
                desc += f", coordinate_transformation_mode={ctm.decode()}"
            if mode in (b"nearest",) and nm:
                desc += f", nearest_mode={nm.decode()}"
            present = [n for n, x in zip(("X", "roi", "scales", "sizes"), node.input) if x != ""]
            scale_src = "scales" if "scales" in present and op == "Resize" else None
            if op == "Resize" and "sizes" in present:
                scale_src = "sizes"
            if op == "Upsample":
                scale_src = "scales" if len(node.input) > 1 else "attr scales"
            val = None
            if scale_src in ("scales", "sizes"):
                idx = 2 if (op == "Resize" and scale_src == "scales") else 3 if op == "Resize" else 1
                val = static.value.get(node.input[idx])
                vs = f"const {val.tolist()}" if val is not None else "computed at runtime"
                desc += f", {scale_src} {vs}"
            flag(f"{op} {desc}", node)
            if op == "Upsample":
                flag("Upsample (deprecated op) used", node)
        elif op == "Gemm":
            ta, tb = get_attr(node, "transA", 0), get_attr(node, "transB", 0)
            al, be = get_attr(node, "alpha", 1.0), get_attr(node, "beta", 1.0)
            if ta:
                flag("Gemm transA=1", node)
            if tb:
                flag("Gemm transB=1", node)
            if al != 1.0 or be != 1.0:
                flag(f"Gemm alpha={al} beta={be}", node)
            if len(node.input) < 3 or node.input[2] == "":
                flag("Gemm without C", node)
        elif op == "MatMul":
            ws = [static.shape.get(x) for x in node.input]
            if ws[1] is not None:
                flag(f"MatMul with constant B of rank {len(ws[1])}", node)
            elif ws[0] is not None:
                flag("MatMul with constant A", node)
            else:
                flag("MatMul with two runtime operands (activation x activation)", node)
        elif op == "BatchNormalization":
            if get_attr(node, "spatial") is not None:
                flag(f"BatchNormalization legacy 'spatial' attr={get_attr(node, 'spatial')}", node)
            if get_attr(node, "training_mode", 0):
                flag("BatchNormalization training_mode=1", node)
            if len(node.output) > 1:
                flag("BatchNormalization with >1 outputs", node)
        elif op == "Clip":
            if get_attr(node, "min") is not None or get_attr(node, "max") is not None:
                flag("Clip with min/max attributes (opset < 11 form)", node)
            else:
                bounds = []
                for x in node.input[1:]:
                    v = static.value.get(x) if x else None
                    bounds.append(None if v is None else float(v.reshape(-1)[0]))
                flag(f"Clip with bounds inputs {bounds}", node)
        elif op in ("Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "Split"):
            if get_attr(node, "axes") is not None or (op == "Split" and get_attr(node, "split") is not None):
                flag(f"{op} axes/split given as attribute", node)
            elif len(node.input) > 1:
                flag(f"{op} axes/split given as input", node)
        elif op == "Reshape":
            v = static.value.get(node.input[1])
            if v is None:
                flag("Reshape with runtime-computed shape", node)
            else:
                lst = v.reshape(-1).tolist()
                if 0 in lst:
                    flag("Reshape shape contains 0 (copy dim)", node)
                if -1 in lst:
                    flag("Reshape shape contains -1 (infer dim)", node)
            if get_attr(node, "allowzero", 0):
                flag("Reshape allowzero=1", node)
        elif op in ("Dropout",):
            flag(f"Dropout (ratio={get_attr(node, 'ratio')}, outputs={len(node.output)})", node)
        elif op in ("Loop", "If", "Scan"):
            flag(f"control flow {op}", node)
        elif op == "Pad":
            mode = get_attr(node, "mode", b"constant")
            flag(f"Pad mode={mode.decode()} ({'pads attr' if get_attr(node, 'pads') is not None else 'pads input'})", node)
        elif op == "Expand":
            flag("Expand (broadcast to runtime/constant shape)", node)
        elif op in ("Shape", "Size", "NonZero", "NonMaxSuppression", "TopK", "Range"):
            flag(f"{op}: data-dependent / shape-computing op", node)
        elif op == "Cast":
            to = get_attr(node, "to")
            flag(f"Cast to {dtype_name(to)}", node)

    for key in sorted(c):
        notes.append(f"{key}: x{c[key]} (e.g. {examples[key]!r})")

    # Names.
    names = [n.name for n in g.node]
    unnamed = sum(1 for n in names if not n)
    if unnamed:
        notes.append(f"{unnamed} unnamed nodes (onnx-tool names them <OpType>_<node index>)")
    dup = [k for k, v in collections.Counter(n for n in names if n).items() if v > 1]
    if dup:
        notes.append(f"duplicate node names: {dup[:5]}{' ...' if len(dup) > 5 else ''}")
    # Symbolic dims.
    for i in g.input:
        if i.name in static.shape:
            continue
        dims = i.type.tensor_type.shape.dim
        odd = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        neg = [d.dim_value for d in dims if d.HasField("dim_value") and d.dim_value <= 0]
        if odd:
            notes.append(f"input {i.name!r} has symbolic/unknown dims {odd}")
        if neg:
            notes.append(f"input {i.name!r} has non-positive dim_value {neg} (treated as dynamic by some tools)")
    init_names = {x.name for x in g.initializer}
    in_inputs = sum(1 for i in g.input if i.name in init_names)
    if in_inputs:
        notes.append(f"{in_inputs} initializers are also listed in graph.input (IR<4 style)")
    return notes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="model files or directories (default: .cache/models)")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.paths] or [DEFAULT_DIR]
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(p.rglob("*.onnx")))
        elif p.is_file():
            files.append(p)
        else:
            print(f"error: {p} does not exist (run scripts/fetch-models.sh?)", file=sys.stderr)
            return 2
    if not files:
        print("error: no .onnx files found (run scripts/fetch-models.sh)", file=sys.stderr)
        return 2

    out = sys.stdout
    print(f"# roofline model corpus summary (scripts/corpus_summary.py, onnx {onnx.__version__})", file=out)
    print(f"# {len(files)} models", file=out)
    union = collections.defaultdict(list)
    opset_rows = []
    for f in files:
        base = DEFAULT_DIR if DEFAULT_DIR in f.resolve().parents else f.parent
        rel = os.path.relpath(f.resolve(), base)
        info = summarize(f, rel, out)
        opset_rows.append((rel, info["ir"], info["opsets"]))
        main_opset = info["opsets"].get("ai.onnx", "?")
        for op, n in info["ops"].items():
            union[op].append((rel, main_opset, n, False))
        for op, n in info["sub_ops"].items():
            union[op].append((rel, main_opset, n, True))

    p = lambda *a: print(*a, file=out)
    p("=" * 78)
    p("CORPUS: ir_version / opset imports per model")
    for rel, ir, opsets in opset_rows:
        p(f"  {rel}: ir {ir}; " + ", ".join(f"{d}={v}" for d, v in sorted(opsets.items())))
    p("=" * 78)
    p(f"CORPUS: union of op types ({len(union)}), with [default-domain opset] and node count per model")
    for op in sorted(union):
        occ = union[op]
        opsets = sorted({o for _, o, _, _ in occ}, key=lambda x: (not isinstance(x, int), x if isinstance(x, int) else 0))
        total = sum(n for _, _, n, _ in occ)
        p(f"  {op:22s} total {total:5d}  opsets {opsets}  in: " + ", ".join(
            f"{Path(r).stem}{'(subgraph)' if s else ''}x{n}" for r, _, n, s in occ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
