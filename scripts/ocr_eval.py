#!/usr/bin/env python3
"""Task agreement of a PP-OCR recogniser against the original: the accuracy `roofline compress
--eval` reads (its last printed number; higher is better).

Usage (project venv):
    .venv/bin/python scripts/ocr_eval.py CANDIDATE.onnx --reference ORIGINAL.onnx --lines DIR

Runs both models in onnxruntime (1 thread) on every DIR/line_*.npy (scripts/ocr_lines.py),
decodes each output greedily as CTC does (arg-max per time step, repeats merged, blank index 0
dropped) and compares the candidate's label sequence with the original's: the character error
rate is the summed edit distance over the summed length of the original's sequences. No
character dictionary is needed: the comparison is on label indices. Prints
`cer: X` and then `agreement: 1 - X`. The original's decodings are cached in DIR.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def decode(sess: ort.InferenceSession, x: np.ndarray) -> list[int]:
    name = sess.get_inputs()[0].name
    probs = sess.run(None, {name: x})[0]
    labels = probs.reshape(-1, probs.shape[-1]).argmax(axis=-1)
    out, previous = [], -1
    for label in labels.tolist():
        if label != previous and label != 0:
            out.append(label)
        previous = label
    return out


def edit_distance(a: list[int], b: list[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidate", type=Path)
    ap.add_argument("--reference", type=Path, required=True)
    ap.add_argument("--lines", type=Path, required=True)
    args = ap.parse_args()
    files = sorted(args.lines.glob("line_*.npy"))
    if not files:
        raise SystemExit(f"no line_*.npy in {args.lines}")
    cache = args.lines / "reference-decodings.json"
    lines_stamp = ",".join(f"{f.name}@{f.stat().st_mtime_ns}" for f in files)
    stamp = f"{args.reference.resolve()}:{args.reference.stat().st_mtime_ns}:{lines_stamp}"
    reference = None
    if cache.exists():
        saved = json.loads(cache.read_text())
        if saved.get("stamp") == stamp:
            reference = saved["labels"]
    if reference is None:
        ref = session(args.reference)
        reference = [decode(ref, np.load(f)) for f in files]
        cache.write_text(json.dumps({"stamp": stamp, "labels": reference}))
    cand = session(args.candidate)
    errors = total = 0
    for f, want in zip(files, reference):
        errors += edit_distance(decode(cand, np.load(f)), want)
        total += len(want)
    cer = errors / max(total, 1)
    print(f"lines: {len(files)}, reference characters: {total}")
    print(f"cer: {cer:.5f}")
    print(f"agreement: {1.0 - cer:.5f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
