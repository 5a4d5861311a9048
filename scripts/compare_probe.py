#!/usr/bin/env python3
"""Checks `roofline probe` against third-party microbenchmarks measured in the same run
(issue 15's acceptance): likwid-bench (Debian package `likwid`) for the fp32 FMA peak and the
L1/L2 load bandwidth, and its 2 GB triad for main memory, STREAM's kernel. Also times the quick
and full probes with /usr/bin/time -v (wall time and peak RSS).

    python3 scripts/compare_probe.py [--binary target/release/roofline] [--skip-full]

Ratios printed: ours ÷ theirs on one pinned thread. likwid counts the bytes a kernel loads and
stores explicitly, as the probe does; its peakflops kernel includes one load per iteration.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_flags():
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cache_bytes(index):
    path = f"/sys/devices/system/cpu/cpu0/cache/index{index}/size"
    try:
        text = open(path).read().strip()
    except OSError:
        return None
    match = re.match(r"(\d+)([KMG]?)", text)
    if not match:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]
    return int(match.group(1)) * scale


def likwid(test, working_set):
    """Best of three likwid-bench runs of `test` on one thread of CPU 0: (MFlop/s, MByte/s)."""
    best = (0.0, 0.0)
    for _ in range(3):
        result = subprocess.run(["likwid-bench", "-t", test, "-w", f"S0:{working_set}:1"],
                                capture_output=True, text=True)
        flops = re.search(r"MFlops/s:\s+([\d.]+)", result.stdout)
        bandwidth = re.search(r"MByte/s:\s+([\d.]+)", result.stdout)
        best = (max(best[0], float(flops.group(1)) if flops else 0.0),
                max(best[1], float(bandwidth.group(1)) if bandwidth else 0.0))
    return best


def timed_probe(binary, quick, out_path):
    command = ["/usr/bin/time", "-v", binary, "probe", "-o", out_path]
    if quick:
        command.insert(4, "--quick")
    result = subprocess.run(command, capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", result.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    seconds = 0.0
    if wall:
        for part in wall.group(1).split(":"):
            seconds = seconds * 60 + float(part)
    return seconds, (int(rss.group(1)) * 1024 if rss else 0), result.returncode


def figures(profile_path):
    with open(profile_path) as profile_file:
        profile = json.load(profile_file)
    record = profile["probe"]
    fp32 = max((m["flops_per_s"] for m in record["compute"]
                if m["precision"] == "fp32" and m["mix"] == "fma" and m["threads"] == 1),
               default=0.0)
    levels = {}
    for level in record["memory_levels"]:
        if level["threads"] == 1 and level["kernel"] == "read":
            levels[level["level"]] = max(levels.get(level["level"], 0.0), level["bytes_per_s"])
    theory = {m["precision"]: m.get("fraction_of_theoretical") for m in record["compute"]
              if m["threads"] == 1 and m["mix"] == "fma"}
    return fp32, levels, theory


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "roofline"))
    parser.add_argument("--skip-full", action="store_true")
    args = parser.parse_args()
    if shutil.which("likwid-bench") is None:
        print("likwid-bench not found: apt-get install likwid", file=sys.stderr)
        return 1
    flags = cpu_flags()
    wide = "avx512f" in flags
    suffix = "avx512" if wide else "avx"
    l1 = cache_bytes(0) or (32 << 10)
    l2 = cache_bytes(2) or (1 << 20)
    tmp = tempfile.mkdtemp()
    quick_path = os.path.join(tmp, "quick.json")
    full_path = os.path.join(tmp, "full.json")

    quick_s, quick_rss, quick_rc = timed_probe(args.binary, True, quick_path)
    print(f"probe --quick: {quick_s:.1f} s, peak RSS {quick_rss / 1e6:.0f} MB (exit {quick_rc}); "
          f"limits 5 s and 512 MB")
    profile_path = quick_path
    if not args.skip_full:
        full_s, full_rss, full_rc = timed_probe(args.binary, False, full_path)
        print(f"probe (full):  {full_s:.1f} s, peak RSS {full_rss / 1e6:.0f} MB (exit {full_rc}); "
              f"limits 30 s and 1 GB")
        profile_path = full_path

    peak_sp, _ = likwid(f"peakflops_sp_{suffix}_fma", "32kB")
    _, load_l1 = likwid(f"load_{suffix}", f"{l1 // 2 // 1024}kB")
    _, load_l2 = likwid(f"load_{suffix}", f"{l2 // 2 // 1024}kB")
    _, triad_dram = likwid(f"triad_{suffix}", "2GB")
    fp32, levels, theory = figures(profile_path)

    def ratio(ours, theirs):
        return f"{ours / theirs:.2f}" if theirs > 0 else "-"

    print(f"fp32 FMA   ours {fp32 / 1e9:8.1f} GFLOP/s   likwid peakflops_sp_{suffix}_fma "
          f"{peak_sp / 1e3:8.1f}   ratio {ratio(fp32, peak_sp * 1e6)} (want ≥ 1)")
    print(f"L1 read    ours {levels.get('l1', 0) / 1e9:8.1f} GB/s     likwid load_{suffix} "
          f"{l1 // 2 // 1024} kB {load_l1 / 1e3:8.1f}   ratio "
          f"{ratio(levels.get('l1', 0), load_l1 * 1e6)} (want ≥ 0.95)")
    print(f"L2 read    ours {levels.get('l2', 0) / 1e9:8.1f} GB/s     likwid load_{suffix} "
          f"{l2 // 2 // 1024} kB {load_l2 / 1e3:8.1f}   ratio "
          f"{ratio(levels.get('l2', 0), load_l2 * 1e6)} (want ≥ 0.95)")
    print(f"DRAM read  ours {levels.get('dram', 0) / 1e9:8.1f} GB/s     likwid triad_{suffix} "
          f"2 GB {triad_dram / 1e3:8.1f}   ratio {ratio(levels.get('dram', 0), triad_dram * 1e6)} "
          f"(want ≥ 1)")
    shown = ", ".join(f"{p} {100 * f:.1f}%" for p, f in sorted(theory.items()) if f)
    print(f"1-thread compute of theory: {shown} (want 95-102%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
