#!/usr/bin/env python3
"""ONNX operator conformance for `roofline analyze` and `roofline run`.

Usage (project venv):
    .venv/bin/python scripts/conformance.py --roofline target/release/roofline
        [--work .cache/conformance] [--jobs 2] [--json OUT.json] [--only SUBSTRING] [-v]

The node cases come from the installed `onnx` package's own generators
(`onnx.backend.test.case.node.collect_testcases`: one small model per case, numpy reference
inputs and outputs, each with its rtol/atol). Every case is written once into the work folder
(keyed by the onnx version), then:

  * shapes: `roofline analyze CASE.onnx -i NAME=FILE.npy ... --format json` on a copy of the
    model whose output shapes and value_info are erased, so the shapes come from the tool's
    inference and not from what the model declares (the inputs' values count only where shapes
    depend on integer inputs); a case passes when every graph output's inferred dtype and shape
    equal the reference output's.
  * run: `roofline run CASE.onnx -i NAME=FILE.npy ... -o DIR` on the same copy; a case passes
    when every output matches the reference within the case's tolerance
    (|got - want| <= atol + rtol * |want|, NaN where NaN is wanted).
  * onnxruntime runs every case the same way (cached per onnxruntime version): `run` is judged
    on the cases onnxruntime passes.

A panic is an exit status of 101 or "panicked" on stderr. Excluded cases (training-only ops,
random generators) are listed with their reason in EXCLUDED below. Two shape rates are printed:
over every judged case, and over the judged cases onnxruntime passes (the cases onnxruntime
fails too are mostly string, sequence and optional types and ops its CPU build does not
implement; they are counted in the first rate, not hidden). Prints pass rates per op and
overall; `--json` writes them with every failure's first line, for the Rust test that holds
the rates to their floors (tests/it/conformance.rs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

# Ops whose cases are not part of the judged set, with the reason. Matched against the op a
# case is filed under (see `case_op`).
EXCLUDED = {
    # Training-only optimisers and gradients: not inference.
    "Adagrad": "training optimiser",
    "Adam": "training optimiser",
    "Momentum": "training optimiser",
    "Gradient": "training gradient",
    # Random generators: outputs are not reproducible against numpy's.
    "Bernoulli": "random generator",
    "RandomNormal": "random generator",
    "RandomNormalLike": "random generator",
    "RandomUniform": "random generator",
    "RandomUniformLike": "random generator",
    "Multinomial": "random generator",
}

PANIC_STATUS = 101


def case_op(name: str, model) -> str:
    """The op a case is filed under: the longest schema name whose snake-case form prefixes the
    case name, else the model's single node type, else the name stem."""
    stem = name[len("test_"):] if name.startswith("test_") else name
    best, best_len = "", 0
    for op in _op_names():
        for form in (_snake(op), op.lower()):
            if (stem == form or stem.startswith(form + "_")) and len(form) > best_len:
                best, best_len = op, len(form)
    if best:
        return best
    kinds = sorted({n.op_type for n in model.graph.node})
    return kinds[0] if len(kinds) == 1 else stem


_OPS: list[str] | None = None


def _op_names() -> list[str]:
    global _OPS
    if _OPS is None:
        import onnx.defs

        _OPS = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()})
    return _OPS


def _snake(op: str) -> str:
    if not op:
        return ""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", op)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def generate(work: Path) -> list[dict]:
    """Writes every node case into `work` (once per onnx version) and returns their index."""
    import onnx
    from onnx import numpy_helper  # noqa: F401
    from onnx.backend.test.case.node import collect_testcases

    index_path = work / "index.json"
    if index_path.exists():
        index = json.loads(index_path.read_text())
        if index.get("onnx") == onnx.__version__:
            return index["cases"]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    cases = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        testcases = collect_testcases(None)
    for tc in testcases:
        if not tc.data_sets:
            continue
        folder = work / tc.name
        folder.mkdir()
        model = tc.model
        onnx.save(model, folder / "declared.onnx")
        stripped = onnx.ModelProto()
        stripped.CopyFrom(model)
        del stripped.graph.value_info[:]
        for out in stripped.graph.output:
            if out.type.HasField("tensor_type"):
                out.type.tensor_type.ClearField("shape")
        onnx.save(stripped, folder / "model.onnx")
        inputs, outputs = tc.data_sets[0]
        graph_inputs = [i.name for i in model.graph.input]
        feeds = []
        # Optional inputs given as "" in the node, and inputs the data set omits, are left out.
        for name, value in zip(graph_inputs, inputs):
            path = folder / f"in_{len(feeds)}.npy"
            feed = {"name": name, "file": path.name, **_save(path, value)}
            if isinstance(value, onnx.TensorProto):
                # onnxruntime is fed the exact element type.
                (folder / f"in_{len(feeds)}.pb").write_bytes(value.SerializeToString())
                feed["pb"] = f"in_{len(feeds)}.pb"
            feeds.append(feed)
        expected = []
        for out, value in zip(model.graph.output, outputs):
            path = folder / f"want_{len(expected)}.npy"
            expected.append({"name": out.name, "file": path.name, **_save(path, value)})
        cases.append(
            {
                "name": tc.name,
                "op": case_op(tc.name, model),
                "rtol": float(tc.rtol),
                "atol": float(tc.atol),
                "inputs": feeds,
                "outputs": expected,
            }
        )
    index_path.write_text(json.dumps({"onnx": onnx.__version__, "cases": cases}))
    return cases


def _save(path: Path, value) -> dict:
    """Saves one reference value as .npy; notes what it is (sequences, maps, optionals and
    strings are not tensors the tool runs on, and are recorded as such)."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        # Element types numpy has no native form of (float8, int4, ...): the values are kept as
        # float32 (exact for these types), the type by its ONNX name.
        array = numpy_helper.to_array(value)
        name = _onnx_type_name(value.data_type)
        if array.dtype.kind in "OUS":
            return {"kind": "strings", "dtype": "string", "shape": list(array.shape)}
        np.save(path, array.astype(np.float32), allow_pickle=False)
        return {"kind": "tensor", "dtype": name, "shape": list(array.shape)}
    if isinstance(value, np.ndarray) or np.isscalar(value):
        array = np.asarray(value)
        if array.dtype.kind in "OUS":
            return {"kind": "strings", "dtype": "string", "shape": list(array.shape)}
        if array.dtype.kind == "V" or array.dtype.name not in np.sctypeDict:
            # An ml_dtypes array (bfloat16, float8...): stored as float32.
            np.save(path, array.astype(np.float32), allow_pickle=False)
        else:
            np.save(path, array, allow_pickle=False)
        return {"kind": "tensor", "dtype": _dtype_name(array.dtype), "shape": list(array.shape)}
    return {"kind": type(value).__name__, "dtype": None, "shape": None}


def _onnx_type_name(code: int) -> str:
    """The name `roofline analyze` prints for an ONNX element type code: every 8-bit float
    flavour is `f8`; complex, 2/4/6-bit types are `other` (the tool carries them for byte
    counts only, without telling them apart)."""
    import onnx

    name = onnx.TensorProto.DataType.Name(code)
    if name.startswith("FLOAT8"):
        return "f8"
    if name in ("UINT4", "INT4", "UINT2", "INT2", "FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2", "COMPLEX64", "COMPLEX128"):
        return "other"
    return {
        "FLOAT": "f32",
        "DOUBLE": "f64",
        "FLOAT16": "f16",
        "BFLOAT16": "bf16",
    }.get(name, _dtype_name(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))))


def _dtype_name(dtype) -> str:
    """The name `roofline analyze` prints for an element type."""
    name = str(dtype)
    if name.startswith("float8"):
        return "f8"
    if name in ("int4", "uint4", "int2", "uint2", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "complex64", "complex128"):
        return "other"
    return {
        "float32": "f32",
        "float64": "f64",
        "float16": "f16",
        "bfloat16": "bf16",
        "int64": "i64",
        "int32": "i32",
        "int16": "i16",
        "int8": "i8",
        "uint64": "u64",
        "uint32": "u32",
        "uint16": "u16",
        "uint8": "u8",
        "bool": "bool",
    }.get(name, name)


def _run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout:.0f} s"


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return ""


def _panicked(status: int, stderr: str) -> bool:
    return status == PANIC_STATUS or "panicked" in stderr


def check_shapes(binary: str, folder: Path, case: dict) -> dict:
    # The inputs are given as the case's .npy files: their shapes bind the inputs, and where the
    # output shapes depend on an integer input's values (Reduce axes, a Reshape's shape) analyze
    # uses those values, as it would for a user who passes them.
    cmd = [binary, "analyze", str(folder / "model.onnx"), "--format", "json"]
    for feed in case["inputs"]:
        if feed["kind"] == "tensor" and "pb" not in feed:
            cmd += ["-i", f"{feed['name']}={folder / feed['file']}"]
    status, stdout, stderr = _run(cmd, 120)
    result = {"panic": _panicked(status, stderr), "status": status}
    if status not in (0, 1):
        result.update(ok=False, why=f"exit {status}: {_first_line(stderr)}")
        return result
    try:
        analysis = json.loads(stdout)
    except json.JSONDecodeError:
        result.update(ok=False, why="output is not JSON")
        return result
    got = {o["name"]: o for o in analysis["model"]["outputs"]}
    for want in case["outputs"]:
        if want["kind"] != "tensor":
            continue
        out = got.get(want["name"])
        shape = "x".join(str(d) for d in want["shape"]) if want["shape"] else "scalar"
        if out is None:
            result.update(ok=False, why=f"output {want['name']} missing")
            return result
        if out["shape"] != shape and not (out["shape"] in ("", "[]", "scalar") and not want["shape"]):
            result.update(ok=False, why=f"{want['name']}: shape {out['shape']}, want {shape}")
            return result
        if out["dtype"] != want["dtype"]:
            result.update(ok=False, why=f"{want['name']}: dtype {out['dtype']}, want {want['dtype']}")
            return result
    if not any(w["kind"] == "tensor" for w in case["outputs"]):
        result.update(ok=False, why="no tensor output to compare")
        return result
    result.update(ok=True, why="")
    return result


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, want {list(want.shape)}"
    if want.dtype.kind in "biu" and got.dtype.kind in "biuf":
        if not np.array_equal(got.astype(np.float64), want.astype(np.float64)):
            bad = int(np.sum(got.astype(np.float64) != want.astype(np.float64)))
            return f"{bad} of {want.size} values differ"
        return ""
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    nan_ok = np.isnan(w) == np.isnan(g)
    finite = ~np.isnan(w)
    close = np.abs(g - w) <= atol + rtol * np.abs(w)
    close |= g == w  # infinities
    if not (nan_ok.all() and close[finite].all()):
        bad = int(np.sum(~(close | ~finite)) + np.sum(~nan_ok))
        worst = float(np.nanmax(np.abs(g - w))) if g.size else 0.0
        return f"{bad} of {want.size} values off (max abs diff {worst:.3g})"
    return ""


def check_run(binary: str, folder: Path, case: dict) -> dict:
    if any(f["kind"] != "tensor" for f in case["inputs"] + case["outputs"]):
        return {"panic": False, "status": None, "ok": False, "why": "non-tensor input or output (sequence, map, optional or string)"}
    out_dir = folder / "got"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    cmd = [binary, "run", str(folder / "model.onnx"), "-o", str(out_dir)]
    for feed in case["inputs"]:
        cmd += ["-i", f"{feed['name']}={folder / feed['file']}"]
    status, _, stderr = _run(cmd, 120)
    result = {"panic": _panicked(status, stderr), "status": status}
    if status not in (0, 1):
        result.update(ok=False, why=f"exit {status}: {_first_line(stderr)}")
        return result
    for want in case["outputs"]:
        path = out_dir / f"{_file_stem(want['name'])}.npy"
        if not path.exists():
            candidates = sorted(p.name for p in out_dir.glob("*.npy")) if out_dir.exists() else []
            result.update(ok=False, why=f"no output file for {want['name']} ({candidates})")
            return result
        why = _compare(np.load(path), np.load(folder / want["file"]), case["rtol"], case["atol"])
        if why:
            result.update(ok=False, why=f"{want['name']}: {why}")
            return result
    result.update(ok=True, why="")
    return result


def _file_stem(name: str) -> str:
    """The file name `roofline run` gives an output (see `cli/run.rs`)."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in name)


def check_ort(folder: Path, case: dict) -> dict:
    import onnxruntime as ort

    if any(f["kind"] != "tensor" for f in case["inputs"] + case["outputs"]):
        return {"ok": False, "why": "non-tensor input or output"}
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        session = ort.InferenceSession(str(folder / "declared.onnx"), options, providers=["CPUExecutionProvider"])
        feeds = {f["name"]: _feed(folder, f) for f in case["inputs"]}
        names = [o["name"] for o in case["outputs"]]
        outs = session.run(names, feeds)
    except Exception as e:  # noqa: BLE001 - any failure means onnxruntime does not pass the case
        return {"ok": False, "why": f"{type(e).__name__}: {_first_line(str(e))}"}
    for want, got in zip(case["outputs"], outs):
        why = _compare(np.asarray(got), np.load(folder / want["file"]), case["rtol"], case["atol"])
        if why:
            return {"ok": False, "why": f"{want['name']}: {why}"}
    return {"ok": True, "why": ""}


def _feed(folder: Path, feed: dict):
    if "pb" in feed:
        import onnx
        from onnx import numpy_helper

        proto = onnx.TensorProto()
        proto.ParseFromString((folder / feed["pb"]).read_bytes())
        return numpy_helper.to_array(proto)
    return np.load(folder / feed["file"])


def ort_results(work: Path, cases: list[dict], jobs: int) -> dict:
    import onnxruntime as ort

    path = work / f"ort-{ort.__version__}.json"
    if path.exists():
        cached = json.loads(path.read_text())
        if all(c["name"] in cached for c in cases):
            return cached
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda c: check_ort(work / c["name"], c), cases))
    cached = {c["name"]: r for c, r in zip(cases, results)}
    path.write_text(json.dumps(cached))
    return cached


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roofline", required=True, help="path of the roofline binary")
    ap.add_argument("--work", type=Path, default=Path(".cache/conformance"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--only", help="only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    args = ap.parse_args(argv)

    cases = generate(args.work)
    if args.only:
        cases = [c for c in cases if args.only in c["name"]]
    judged = [c for c in cases if c["op"] not in EXCLUDED]
    excluded = len(cases) - len(judged)
    ort_by_name = ort_results(args.work, judged, args.jobs)

    def one(case):
        folder = args.work / case["name"]
        return case, check_shapes(args.roofline, folder, case), check_run(args.roofline, folder, case)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(one, judged))

    per_op: dict[str, dict] = {}
    failures = []
    panics = []
    for case, shape, run in rows:
        ort_ok = ort_by_name[case["name"]]["ok"]
        stats = per_op.setdefault(case["op"], {"cases": 0, "shapes_ok": 0, "ort_ok": 0, "run_ok_of_ort": 0})
        stats["cases"] += 1
        stats["shapes_ok"] += shape["ok"]
        stats["ort_ok"] += ort_ok
        stats["run_ok_of_ort"] += ort_ok and run["ok"]
        for what, res in (("analyze", shape), ("run", run)):
            if res["panic"]:
                panics.append({"case": case["name"], "command": what, "why": res["why"]})
        if not shape["ok"] or (ort_ok and not run["ok"]):
            failures.append(
                {
                    "case": case["name"],
                    "op": case["op"],
                    "analyze": shape["why"],
                    "run": run["why"] if ort_ok else "(onnxruntime fails too)",
                }
            )

    total = len(judged)
    shapes_ok = sum(s["shapes_ok"] for s in per_op.values())
    # The same rate over the cases onnxruntime passes.
    shapes_ok_of_ort = sum(1 for case, shape, _ in rows if ort_by_name[case["name"]]["ok"] and shape["ok"])
    ort_ok = sum(s["ort_ok"] for s in per_op.values())
    run_ok = sum(s["run_ok_of_ort"] for s in per_op.values())
    summary = {
        "cases": len(cases),
        "excluded": excluded,
        "judged": total,
        "shapes_ok": shapes_ok,
        "shapes_rate": shapes_ok / total if total else 0.0,
        "ort_ok": ort_ok,
        "shapes_ok_of_ort": shapes_ok_of_ort,
        "shapes_rate_of_ort": shapes_ok_of_ort / ort_ok if ort_ok else 0.0,
        "run_ok_of_ort": run_ok,
        "run_rate": run_ok / ort_ok if ort_ok else 0.0,
        "panics": len(panics),
    }

    width = max((len(op) for op in per_op), default=2)
    print(f"{'op':<{width}}  cases  shapes  ort  run(of ort)")
    for op in sorted(per_op):
        s = per_op[op]
        print(f"{op:<{width}}  {s['cases']:>5}  {s['shapes_ok']:>6}  {s['ort_ok']:>3}  {s['run_ok_of_ort']:>4}")
    if args.verbose:
        for f in failures:
            print(f"FAIL {f['case']}: analyze: {f['analyze'] or 'ok'} | run: {f['run'] or 'ok'}")
    for p in panics:
        print(f"PANIC {p['case']} ({p['command']}): {p['why']}")
    print(
        f"\n{summary['cases']} cases, {excluded} excluded, {total} judged: "
        f"analyze shapes right {shapes_ok}/{total} ({100 * summary['shapes_rate']:.1f}%); "
        f"onnxruntime passes {ort_ok}; of those analyze shapes right on {shapes_ok_of_ort} "
        f"({100 * summary['shapes_rate_of_ort']:.1f}%), run right on {run_ok} ({100 * summary['run_rate']:.1f}%); "
        f"{len(panics)} panics"
    )
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "per_op": per_op, "failures": failures, "panics": panics}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
