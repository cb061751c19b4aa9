"""`--engine hf` against the note's harness style, side by side in one run, whole process each
(a benchmark, not a test).

    .venv/bin/python python/bench/bench_engine.py [--rounds 2] [--threads 2] [--prefixes 20 --tokens 64]

Each round runs, in alternating order, `python python/bench/note_harness.py` (one run per
decode, the whole grid in one left-padded HF batch) and `python -m gauge_sampling probe --engine
hf` (shared decode tree) on the same grid and the same number of torch threads, each into a fresh
results directory (nothing resumed), and times the whole process (interpreter start, imports,
model load, decode, analysis, report). Prints a Markdown table with the ratio per round.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return dt, r.stdout + r.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--prefixes", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--keep", default=None, help="keep the engine's results under this root")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    grid = ["--prefixes", str(args.prefixes), "--tokens", str(args.tokens)]
    harness = [sys.executable, str(HERE / "note_harness.py"), "--threads", str(args.threads), *grid]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gauge-bench-engine-") as tmp:
        for i in range(args.rounds):
            out = Path(args.keep or tmp) / f"round{i}"
            engine = [sys.executable, "-m", "gauge_sampling", "probe", "--engine", "hf"]
            engine += [*grid, "--threads", str(args.threads), "--out", str(out)]
            order = [("harness", harness), ("engine", engine)]
            if i % 2:
                order.reverse()
            got = {}
            for name, cmd in order:
                got[name], log = timed(cmd, env)
                print(f"round {i + 1} {name}: {got[name]:.1f} s", file=sys.stderr)
                print(log.strip().splitlines()[-1], file=sys.stderr)
            rows.append((i + 1, order[0][0], got["harness"], got["engine"]))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"torch threads {args.threads}"
    )
    print(
        f"grid: {args.prefixes} prefixes × {args.tokens} tokens, θ {{1, 1.3}}, "
        "ctrl/normalized/subtractive, ±5\n"
    )
    print("| round | first | note harness (whole process) | `--engine hf` (whole process) | speed-up |")
    print("|---:|---|---:|---:|---:|")
    for r, first, h, e in rows:
        print(f"| {r} | {first} | {h:.1f} s | {e:.1f} s | {h / e:.2f}× |")


if __name__ == "__main__":
    main()
