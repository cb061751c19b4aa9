#!/usr/bin/env python3
"""Serving throughput of two or more `gauge` binaries, side by side in one run.

Why: the llama.cpp build settings (optimisation level, OpenMP) change how fast `gauge serve`
answers; this measures them the way users meet them, over HTTP, with concurrent clients. Each
round starts every binary in turn (A, B, A, B, ...) so that load from other processes falls on
all of them, and sends `--clients` concurrent `/completion` requests of `--tokens` tokens each
(greedy, `ignore_eos`, distinct prompts). It also checks that every binary generated the same
text for the same prompt: a build setting must not change results.

    scripts/serve-bench.py BIN_A BIN_B [--rounds 3 --clients 8 --parallel 8 --tokens 128]

Stdlib only; prints a Markdown table (median tokens/s per binary and the ratio to the first).
"""

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

PROMPTS = [
    "The history of the printing press",
    "How to bake bread at home",
    "A short story about a lighthouse keeper",
    "Explain how a compiler works",
    "The rules of chess, briefly",
    "Why the sky is blue",
    "A letter to a friend about travel",
    "The life cycle of a star",
    "Tips for learning a new language",
    "What makes a good cup of coffee",
    "The causes of the French Revolution",
    "How vaccines train the immune system",
    "A poem about autumn rain",
    "The basics of double-entry bookkeeping",
    "How bridges carry their load",
    "The migration of arctic terns",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait_healthy(port: int, proc: subprocess.Popen, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve-bench: server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("serve-bench: server not healthy after 300 s")


def one_round(binary: str, args) -> tuple[float, dict]:
    """Starts `binary serve`, sends the clients at once, returns (tokens/s, {prompt: text})."""
    port = free_port()
    cmd = [binary, "serve", "--port", str(port), "--parallel", str(args.parallel), "-m", args.model]
    if args.threads is not None:
        cmd += ["-t", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port, proc)
        post(port, {"prompt": "Warm up", "n_predict": 8, "temperature": 0})
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.clients)]
        results: list = [None] * len(prompts)

        def client(i: int) -> None:
            body = {"prompt": prompts[i], "n_predict": args.tokens, "temperature": 0, "ignore_eos": True}
            results[i] = post(port, body)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        if any(r is None for r in results):
            raise SystemExit(f"serve-bench: a request to {binary} failed")
        tokens = sum(r["tokens_predicted"] for r in results)
        return tokens / wall, {p: r["content"] for p, r in zip(prompts, results)}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="+", help="gauge binaries to compare (the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8, help="concurrent requests per round")
    ap.add_argument("--parallel", type=int, default=8, help="`gauge serve --parallel` (slots)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens generated per request")
    ap.add_argument("--threads", type=int, default=None, help="`gauge serve -t` (default: gauge's)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()

    bins = list(enumerate(args.binaries))  # the same binary may be listed twice (a noise check)
    rates: dict[int, list[float]] = {i: [] for i, _ in bins}
    texts: dict[int, dict] = {}
    for r in range(args.rounds):
        for i, b in bins:
            rate, out = one_round(b, args)
            rates[i].append(rate)
            texts.setdefault(i, out)
            print(f"round {r + 1}/{args.rounds}  {b}: {rate:.1f} tokens/s", file=sys.stderr, flush=True)

    same = {i: texts[i] == texts[0] for i, _ in bins}
    load = os.getloadavg()
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.1f} at the end; {args.clients} clients x {args.tokens} tokens, "
        f"--parallel {args.parallel}, {args.rounds} rounds, model {args.model}\n"
    )
    print("| binary | tokens/s (median) | per round | vs first | same text as first |")
    print("|---|---|---|---|---|")
    first = statistics.median(rates[0])
    for i, b in bins:
        med = statistics.median(rates[i])
        rounds = ", ".join(f"{x:.1f}" for x in rates[i])
        print(f"| `{b}` | {med:.1f} | {rounds} | {med / first:.3f} | {'yes' if same[i] else 'NO'} |")
    if not all(same.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
