#!/usr/bin/env python3
"""Per-layer gain of the Winograd convolutions the roofline chose, measured against direct.

Runs `roofline bench MODEL --optimize --format json` with the roofline's choice of algorithm and
with `--no-winograd`, alternated for several rounds in one run (the host drifts; alternating
spreads it over both), and prints for every convolution the analysis considered for Winograd:
the algorithm chosen and why, the measured time of each variant (median over rounds of the
per-op medians), the measured gain direct ÷ chosen, and the gain the roofline predicted
(direct bound ÷ chosen bound; expected-time ratio too when the device is calibrated).

Usage (release binary built):
    python3 scripts/winograd_gain.py [--model builtin:resnet50] [--threads 1] [--rounds 3] [--runs 10]
"""
import argparse
import json
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/roofline"


def bench(model: str, threads: int, runs: int, direct: bool, extra: list) -> dict:
    cmd = [str(BIN), "bench", model, "--optimize", "--format", "json", "--runs", str(runs),
           "--threads", str(threads)] + extra
    if direct:
        cmd.append("--no-winograd")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="builtin:resnet50")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="local")
    args = parser.parse_args()
    extra = ["--device", args.device]
    per_op = {True: {}, False: {}}
    latency = {True: [], False: []}
    chosen_report = direct_report = None
    for _ in range(args.rounds):
        for direct in (False, True):
            report = bench(args.model, args.threads, args.runs, direct, extra)
            latency[direct].append(report["latency_ms"]["median"])
            for op in report["ops"]:
                per_op[direct].setdefault(op["node_index"], []).append(op["measured_s"])
            if direct:
                direct_report = report
            else:
                chosen_report = report
    nodes = {n["index"]: n for n in chosen_report["analysis"]["nodes"]}
    direct_nodes = {n["index"]: n for n in direct_report["analysis"]["nodes"]}
    print(f"{args.model}, {args.threads} thread(s), {args.rounds} rounds alternated, "
          f"{args.runs} runs each")
    print(f"{'node':<24} {'input':<16} {'algorithm':<20} {'direct':>9} {'chosen':>9} "
          f"{'gain':>6} {'bound gain':>10} {'exp. gain':>9}")
    gains = []
    for index, node in sorted(nodes.items()):
        choice = node.get("algorithm")
        if not choice or "3x3 stride-1" in choice["reason"]:
            continue
        direct_s = statistics.median(per_op[True].get(index, [float("nan")]))
        chosen_s = statistics.median(per_op[False].get(index, [float("nan")]))
        bound_gain = choice["direct_s"] / choice["chosen_s"]
        # The direct variant's expected time comes from the direct run's analysis.
        expected = node.get("expected_s")
        direct_expected = direct_nodes.get(index, {}).get("expected_s")
        expected_gain = (f"{direct_expected / expected:>8.2f}x"
                         if expected and direct_expected else f"{'-':>9}")
        name = choice["algorithm"]
        gain = direct_s / chosen_s
        if name != "direct":
            gains.append(gain)
        print(f"{node['name']:<24} {node['input_shapes'][0]:<16} {name:<20} "
              f"{direct_s * 1e3:>7.3f}ms {chosen_s * 1e3:>7.3f}ms {gain:>5.2f}x "
              f"{bound_gain:>9.2f}x {expected_gain}")
    d, c = statistics.median(latency[True]), statistics.median(latency[False])
    print(f"end to end: direct {d:.2f} ms, chosen {c:.2f} ms, gain {d / c:.3f}x "
          f"(medians of the rounds)")
    if gains:
        print(f"Winograd layers: median measured gain {statistics.median(gains):.2f}x")


if __name__ == "__main__":
    main()
