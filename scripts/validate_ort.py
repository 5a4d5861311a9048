#!/usr/bin/env python3
"""Judges `roofline calibrate --from-profile` against onnxruntime (issue 13 item 4's acceptance):
calibrated on onnxruntime profiles of half of the corpus, is the expected latency of each model
of the other half within ±15% of onnxruntime's measured median?

Corpus: the built-in models (exported with `roofline export`), .cache/models/light-random/
(the light models with real random weights, scripts/materialise_light.py; .cache/models/light/
when missing) and .cache/models/ppocr/. Every model is profiled by scripts/ort_profile.py at
onnxruntime's `basic` level on --threads intra-op threads; the profile and the graph onnxruntime
ran (its saved optimised model) go to target/ort-validation/.

Why `basic` and the optimised graph: onnxruntime's node times cover what it fused into a node,
so a profile joins one for one only onto the graph onnxruntime ran. At `basic` that graph is
standard ONNX (constants folded, BatchNormalization and Add/Mul folded into Conv); at `extended`
and `all` it holds onnxruntime's contrib ops (FusedConv, the NCHWc Conv and Reorder nodes) that
the analyzer does not know, and the names of the NCHWc nodes are generated, so they join
nothing. The expected latency of a held-out model is `roofline analyze` of the graph onnxruntime
saved for it (the `optimised` column; a session creation, no profile of that model is used) and,
for reference, of the original file (the `original` column: onnxruntime's folds not applied).

Split (stated in PAIRS): the corpus is paired by family (the two ResNet-50s, the two VGGs, the
two transformers (BERT, PP-OCRv4 rec), AlexNet and ZFNet (large kernels, LRN), the two
Inceptions, the two depthwise classifiers, the two mobile OCR models, SqueezeNet and DenseNet)
and one of each pair goes to each half; tinycnn is in half A. Half A and half B hold the same
families, so a model is predicted from other models of its kind, never from itself. Fold 1
calibrates on A and judges B; fold 2 calibrates on B and judges A, so every model is judged
once, by a calibration that never saw it.

Measurement: every model is profiled in --rounds interleaved rounds over the whole corpus and
the quickest round of each is kept (see `profile_rounds`), so both halves are measured in the
same state of the machine.

Usage (release binary built, project venv):
    .venv/bin/python scripts/validate_ort.py [--device local] [--threads 1] [--runs 10] [--rounds 3]
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ort_profile import profile_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/roofline"
WORK = ROOT / "target/ort-validation"
TOLERANCE = 0.15

# Inputs bound for onnxruntime and the analysis (the shapes the models' packages use).
BINDINGS = {
    "ch_PP-OCRv4_det_infer": {"x": [1, 3, 640, 640]},
    "ch_PP-OCRv4_rec_infer": {"x": [1, 3, 48, 320]},
    "ch_ppocr_mobile_v2.0_cls_infer": {"x": [1, 3, 48, 192]},
    "builtin-mobilenetv2": {"input": [1, 3, 224, 224]},
    "builtin-resnet50": {"input": [1, 3, 224, 224]},
    "builtin-vgg16": {"input": [1, 3, 224, 224]},
    "builtin-tinycnn": {"input": [1, 3, 32, 32]},
    "builtin-bert-base": {"input_ids": [1, 128]},
}
BUILTINS = ["mobilenetv2", "resnet50", "vgg16", "bert-base", "tinycnn"]
# (half A, half B): one model of each family per half.
PAIRS = [
    ("builtin-resnet50", "light_resnet50"),
    ("light_vgg19", "builtin-vgg16"),
    ("builtin-bert-base", "ch_PP-OCRv4_rec_infer"),
    ("light_zfnet512", "light_bvlc_alexnet"),
    ("light_inception_v1", "light_inception_v2"),
    ("light_shufflenet", "builtin-mobilenetv2"),
    ("ch_ppocr_mobile_v2.0_cls_infer", "ch_PP-OCRv4_det_infer"),
    ("light_densenet121", "light_squeezenet"),
    ("builtin-tinycnn", None),
]


def corpus() -> dict:
    models = {}
    for name in BUILTINS:
        path = WORK / "models" / f"builtin-{name}.onnx"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([str(BIN), "export", f"builtin:{name}", "-o", str(path)], check=True,
                           capture_output=True)
        models[f"builtin-{name}"] = path
    light = ROOT / ".cache/models/light-random"
    if not light.is_dir():
        light = ROOT / ".cache/models/light"
    for folder in [light, ROOT / ".cache/models/ppocr"]:
        for path in sorted(folder.glob("*.onnx")):
            models[path.stem] = path
    return models


def input_args(name: str) -> list:
    return [f"{k}={'x'.join(map(str, v))}" for k, v in BINDINGS.get(name, {}).items()]


def analyze_expected(model: Path, name: str, device: str, threads: int):
    command = [str(BIN), "analyze", str(model), "--device", device, "--threads", str(threads),
               "--format", "json"]
    for binding in input_args(name):
        command += ["--input", binding]
    result = subprocess.run(command, capture_output=True, text=True)
    if not result.stdout.strip():
        return None, (result.stderr.strip().splitlines() or ["no output"])[-1]
    summary = json.loads(result.stdout)["summary"]
    return summary.get("expected_latency_s"), summary.get("expected_coverage")


def calibrate(names: list, runs: dict, device: str, threads: int, out: Path) -> str:
    command = [str(BIN), "calibrate", "--device", device, "--threads", str(threads), "-o",
               str(out)]
    for name in names:
        spec = f"{runs[name]['optimized']}={runs[name]['profile']}"
        spec += "".join("," + b for b in input_args(name))
        command += ["--from-profile", spec]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"calibrate failed: {result.stderr.strip()}")
    return result.stdout


def profile_rounds(models: dict, args) -> None:
    """Profiles every model `args.rounds` times, the corpus in turn each round, and keeps per
    model the round with the lowest latency (its profile and its latency together).

    The models are judged against one another (one half predicts the other), so they must be
    measured in the same state of the machine. Profiled one after the other, once each, they
    were not: on this shared host VGG-19's profile ran every convolution shape it shares with
    VGG-16 13-15% slower than VGG-16's profile of an hour before, so each predicted the other
    13-16% off whatever the model. Interleaved rounds spread the host's slow spells over all
    models, and the quickest round of each is the one least disturbed by them."""
    best = {}
    for round_index in range(args.rounds):
        for name, path in models.items():
            profile = WORK / f"{name}.round{round_index}.profile.json"
            optimized = WORK / f"{name}.ort-basic.onnx"
            inputs = {k: v for k, v in BINDINGS.get(name, {}).items()}
            result = profile_model(path, profile, inputs, runs=args.runs, threads=args.threads,
                                   level="basic", optimized_model=optimized)
            latency = result["latency_s"]
            print(f"round {round_index + 1}/{args.rounds} {name:<34} {latency * 1e3:9.2f} ms",
                  flush=True)
            if name not in best or latency < best[name][0]:
                best[name] = (latency, profile)
    for name, (latency, profile) in best.items():
        shutil.copyfile(profile, WORK / f"{name}.profile.json")
        (WORK / f"{name}.latency.json").write_text(json.dumps({"latency_s": latency}))
    for stale in WORK.glob("*.round*.profile.json"):
        stale.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="local", help="profile whose roofs bound the ops")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved profiling rounds over the corpus; the quickest is kept")
    parser.add_argument("--json", type=Path, help="write the per-model figures here")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the profiles and latencies of an earlier run (refit only)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)

    models = corpus()
    runs = {}
    reused = args.reuse and all(
        (WORK / f"{name}{suffix}").exists() for name in models
        for suffix in (".profile.json", ".ort-basic.onnx", ".latency.json"))
    if not reused:
        profile_rounds(models, args)
    for name, path in models.items():
        measured = json.loads((WORK / f"{name}.latency.json").read_text())["latency_s"]
        runs[name] = {"path": path, "profile": WORK / f"{name}.profile.json",
                      "optimized": WORK / f"{name}.ort-basic.onnx", "measured_s": measured}
        print(f"profiled {name:<34} {measured * 1e3:9.2f} ms", flush=True)

    halves = {"A": [a for a, _ in PAIRS if a in runs], "B": [b for _, b in PAIRS if b in runs]}
    unpaired = sorted(set(runs) - set(halves["A"]) - set(halves["B"]))
    if unpaired:
        print(f"not in PAIRS, not judged: {', '.join(unpaired)}")
    print(f"\nhalf A: {', '.join(halves['A'])}\nhalf B: {', '.join(halves['B'])}\n")
    rows = []
    for fit_half, judged_half in [("A", "B"), ("B", "A")]:
        calibrated = WORK / f"calibrated-{fit_half}.json"
        summary = calibrate(halves[fit_half], runs, args.device, args.threads, calibrated)
        print(f"--- calibrated on half {fit_half} ---\n{summary}")
        print(f"{'judged (half ' + judged_half + ')':<34} {'measured':>10} {'optimised':>10} "
              f"{'error':>7} {'covered':>8} {'original':>10} {'error':>7}")
        for name in halves[judged_half]:
            run = runs[name]
            measured = run["measured_s"]
            expected, coverage = analyze_expected(run["optimized"], name, str(calibrated),
                                                  args.threads)
            original, _ = analyze_expected(run["path"], name, str(calibrated), args.threads)
            if not isinstance(expected, float):
                print(f"{name:<34} analyze failed: {coverage}")
                continue
            error = (expected - measured) / measured
            original_error = (original - measured) / measured if isinstance(original, float) \
                else None
            rows.append({"model": name, "fold": f"{fit_half}->{judged_half}",
                         "measured_ms": measured * 1e3, "expected_ms": expected * 1e3,
                         "error": error, "coverage": coverage,
                         "expected_original_ms": None if original_error is None
                         else original * 1e3, "original_error": original_error})
            original_text = "-" if original_error is None else \
                f"{original * 1e3:10.2f} {original_error * 100:+6.0f}%"
            print(f"{name:<34} {measured * 1e3:10.2f} {expected * 1e3:10.2f} "
                  f"{error * 100:+6.0f}% {coverage * 100:7.0f}% {original_text}", flush=True)
        print()

    within = [r for r in rows if abs(r["error"]) <= TOLERANCE]
    print(f"optimised graph: {len(within)}/{len(rows)} held-out models within ±15% "
          f"({100 * len(within) / max(len(rows), 1):.0f}%)")
    for fold in ["A->B", "B->A"]:
        fold_rows = [r for r in rows if r["fold"] == fold]
        fold_within = [r for r in fold_rows if abs(r["error"]) <= TOLERANCE]
        print(f"  fold {fold}: {len(fold_within)}/{len(fold_rows)}")
    original_rows = [r for r in rows if r["original_error"] is not None]
    original_within = [r for r in original_rows if abs(r["original_error"]) <= TOLERANCE]
    print(f"original file:   {len(original_within)}/{len(original_rows)} within ±15%")
    if args.json:
        args.json.write_text(json.dumps({"halves": halves, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
