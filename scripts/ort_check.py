#!/usr/bin/env python3
"""Check that an ONNX file loads and runs in onnxruntime (exit 0 = OK, 1 = broken).

Usage (project venv):
    .venv/bin/python scripts/ort_check.py MODEL.onnx [--input NAME=SHAPE ...] [--default-dim N]
                                          [--no-checker] [--seed N] [-q]

Used to validate ONNX files written by roofline. Steps:
  1. onnx.checker.check_model (structural/schema check; skip with --no-checker),
  2. create an onnxruntime CPU session (1 thread),
  3. run once on seeded random inputs (see ort_run.py; symbolic dims default to
     --default-dim, 1 unless given, or use --input NAME=SHAPE),
  4. fail if an output's shape disagrees with a static output shape declared
     in the graph.
Prints "OK ..." on success, "FAIL ..." with the reason on stderr otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ort_run import make_inputs, make_session, parse_input_args, resolve_shapes  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="load and run an ONNX model once with onnxruntime")
    ap.add_argument("model", type=Path)
    ap.add_argument("--input", action="append", metavar="NAME=SHAPE")
    ap.add_argument("--default-dim", type=int, default=1, help="value for symbolic dims (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-checker", action="store_true", help="skip onnx.checker.check_model")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)

    stage = "read"
    try:
        data = args.model.read_bytes()
        if not args.no_checker:
            stage = "onnx.checker"
            import onnx

            model = onnx.load_from_string(data)
            onnx.checker.check_model(model)
        stage = "session"
        sess = make_session(data)
        stage = "inputs"
        shapes = resolve_shapes(sess, parse_input_args(args.input), default_dim=args.default_dim)
        feed = make_inputs(sess, shapes, args.seed)
        stage = "run"
        outs = sess.run(None, feed)
        stage = "output shapes"
        for meta, arr in zip(sess.get_outputs(), outs):
            decl = meta.shape or []
            if len(decl) == getattr(arr, "ndim", len(decl)):
                for d, a in zip(decl, arr.shape):
                    if isinstance(d, int) and d >= 0 and d != a:
                        raise ValueError(f"output {meta.name!r}: declared {decl}, got {list(arr.shape)}")
            elif decl:
                raise ValueError(f"output {meta.name!r}: declared rank {len(decl)}, got shape {list(arr.shape)}")
    except Exception as e:
        print(f"FAIL {args.model} [{stage}]: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        desc = ", ".join(f"{m.name}{list(getattr(a, 'shape', ()))}" for m, a in zip(sess.get_outputs(), outs))
        print(f"OK {args.model}: outputs {desc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
