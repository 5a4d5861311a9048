#!/usr/bin/env python3
"""Profile a model with onnxruntime: the per-node JSON `roofline analyze --measured` joins and
`roofline calibrate --from-profile` fits, and the model's median end-to-end latency.

Usage (project venv):
    .venv/bin/python scripts/ort_profile.py MODEL.onnx OUT.json [--input NAME=SHAPE ...]
        [--runs N] [--warmup W] [--threads T] [--level all|extended|basic|disable]
        [--optimized-model PATH] [--seed S]

onnxruntime runs on the CPU provider with sequential execution, T intra-op threads (default 1)
and one inter-op thread, at the graph optimisation level asked (default all, what a deployment
runs). Inputs are seeded random values (scripts/ort_run.py's generator); --input binds symbolic
dims. W warm-up runs (default 2) then N profiled runs (default 10).

OUT.json is onnxruntime's own profile (a JSON array of trace events; onnxruntime writes it under
a generated name, moved here) with two changes: the events of the warm-up runs and of runs
another process preempted (process CPU time under 90% of threads × wall time) are removed, so
each node has one event per timed run, and a metadata event (`"ph": "M"`, `"name": "metadata"`)
is added first, naming the runtime, its version, the level, threads, inputs, runs and the
latency (onnxruntime states none of these in the file).

--optimized-model PATH saves the graph onnxruntime ran after its rewrites
(`SessionOptions.optimized_model_filepath`). Its node names are the profile's, one for one, so
analysing it joins every node; at `basic` it holds standard ONNX ops only (constant folding,
Conv+BatchNormalization/Add/Mul folding, redundant nodes removed), while `extended` and `all`
add onnxruntime's contrib ops (FusedConv, the NCHWc layout's Conv and Reorder nodes) that
`roofline analyze` does not know.

The latency printed (and returned by `profile_model`) is measured in a second session of the
same options with profiling off, its runs alternating with the profiled ones so that both see
the same spell of the machine: the median of N undisturbed runs after the warm-up.
Exit status 0 on success, 1 on any failure (message on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ort_run import make_inputs, parse_input_args, resolve_shapes  # noqa: E402

LEVELS = ("disable", "basic", "extended", "all")


def session_options(level: str, threads: int):
    import onnxruntime as ort

    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[level]
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def keep_runs(events: list, kept: list) -> list:
    """The events outside every `model_run` span and inside the spans whose flag in `kept` (in
    run order) is true: the warm-up runs and the disturbed runs are dropped."""
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    dropped = [(r["ts"], r["ts"] + r["dur"]) for r, keep in zip(runs, kept) if not keep]
    dropped += [(r["ts"], r["ts"] + r["dur"]) for r in runs[len(kept):]]

    def wanted(event) -> bool:
        ts = event.get("ts")
        return ts is None or not any(start <= ts <= end + 1 for start, end in dropped)

    return [e for e in events if wanted(e)]


def timed_run(session, feed, threads: int):
    """(wall seconds, whether the run had the CPU to itself): a run whose process CPU time is
    under 90% of threads × wall time was preempted by another process."""
    wall, cpu = time.perf_counter(), time.process_time()
    session.run(None, feed)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu >= 0.9 * threads * wall


def profile_model(model: Path, out: Path, inputs: dict[str, list[int]], runs: int = 10,
                  warmup: int = 2, threads: int = 1, level: str = "all",
                  optimized_model: Path | None = None, seed: int = 0) -> dict:
    """Profiles `model` into `out`; returns the metadata with the median latency in seconds.

    A profiled session and one with profiling off run alternately, so both see the same spell of
    the machine, until each has `runs` undisturbed runs (at most 5 × runs attempts; then the
    runs there are, disturbed ones included when none was clean)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as scratch:
        options = session_options(level, threads)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(scratch, "ort_profile")
        if optimized_model is not None:
            options.optimized_model_filepath = str(optimized_model)
        profiled = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        plain = ort.InferenceSession(str(model), session_options(level, threads),
                                     providers=["CPUExecutionProvider"])
        shapes = resolve_shapes(profiled, inputs)
        feed = make_inputs(profiled, shapes, seed)
        for _ in range(warmup):
            profiled.run(None, feed)
            plain.run(None, feed)
        kept = [False] * warmup  # per profiled run, in order
        clean, disturbed = [], []
        for _ in range(5 * runs):
            if kept.count(True) >= runs and len(clean) >= runs:
                break
            if kept.count(True) < runs:
                kept.append(timed_run(profiled, feed, threads)[1])
            if len(clean) < runs:
                wall, quiet = timed_run(plain, feed, threads)
                (clean if quiet else disturbed).append(wall)
        if not any(kept[warmup:]):
            kept = [False] * warmup + [True] * (len(kept) - warmup)
        latencies = clean or disturbed
        written = profiled.end_profiling()
        with open(written) as handle:
            events = json.load(handle)
    latency = statistics.median(latencies)
    metadata = {
        "runtime": "onnxruntime",
        "runtime_version": ort.__version__,
        "provider": "CPUExecutionProvider",
        "graph_optimization_level": level,
        "execution_mode": "sequential",
        "intra_op_threads": str(threads),
        "model": str(model),
        "inputs": ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in shapes.items()),
        "runs": str(kept.count(True)),
        "runs_removed": f"{warmup} warm-up, {len(kept) - warmup - kept.count(True)} disturbed",
        "latency_s": f"{latency:.9f}",
    }
    events = [{"cat": "Session", "ph": "M", "name": "metadata", "pid": os.getpid(),
               "tid": 0, "args": metadata}] + keep_runs(events, kept)
    partial = out.with_name(out.name + ".partial")
    with open(partial, "w") as handle:
        json.dump(events, handle)
    shutil.move(partial, out)
    return dict(metadata, latency_s=latency, latency_min_s=min(latencies),
                latency_runs=len(latencies), latency_clean=bool(clean))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--input", action="append", metavar="NAME=SHAPE")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--level", choices=LEVELS, default="all")
    parser.add_argument("--optimized-model", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.threads < 1:
        print("ort_profile: --runs and --threads must be at least 1, --warmup at least 0",
              file=sys.stderr)
        return 1
    try:
        result = profile_model(args.model, args.out, parse_input_args(args.input), args.runs,
                               args.warmup, args.threads, args.level, args.optimized_model,
                               args.seed)
    except Exception as error:  # one line per failure, as the other scripts do
        print(f"ort_profile: {args.model}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} (onnxruntime {result['runtime_version']}, level {args.level}, "
          f"{args.threads} thread(s), {args.runs} profiled runs)")
    if args.optimized_model:
        print(f"wrote {args.optimized_model} (the graph onnxruntime ran)")
    print(f"median end-to-end latency {result['latency_s'] * 1e3:.3f} ms "
          f"(min {result['latency_min_s'] * 1e3:.3f} ms, {result['latency_runs']} "
          f"{'undisturbed ' if result['latency_clean'] else ''}runs, profiling off)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
