"""The note's harness style, as the baseline of bench_engine.py (a benchmark, not a test).

    .venv/bin/python python/bench/note_harness.py [--prefixes 20] [--tokens 64] [--threads N]

One run per decode, batched as well as HF `generate` allows: every run of the quick grid (per
prefix: θ = 1 at ±c; ctrl, normalized and subtractive at θ = 1.3 at ±c; c = 0 at θ = 1 and 1.3;
the own-median gauge c = −19.92, the median top-1 logit measured on this model) in ONE left-padded
batch, 11 runs × 20 prefixes = 220 rows, 64 greedy tokens each (EOS ignored). A per-row logits
processor adds each row's c, then applies its row's penalty: HF's RepetitionPenaltyLogitsProcessor
for ctrl, log-softmax × θ on seen tokens for normalized, − α for subtractive; the seen set is
`input_ids` (left padding included, as the note's harness had it). Prints the flip rates it finds
and its decode time; the whole process is what bench_engine.py times.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList, RepetitionPenaltyLogitsProcessor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import gauge_sampling._native as native  # noqa: E402
import models  # noqa: E402


class PerRow(LogitsProcessor):
    """Row r: + c[r], then its op at θ[r] (θ = 1: nothing)."""

    def __init__(self, c, ops, thetas, alpha=1.0):
        self.c = torch.tensor(c, dtype=torch.float32).unsqueeze(1)
        self.groups = {}
        for r, (op, th) in enumerate(zip(ops, thetas)):
            if th != 1.0:
                self.groups.setdefault((op, th), []).append(r)
        self.groups = {k: torch.tensor(v) for k, v in self.groups.items()}
        self.alpha = alpha
        self.ctrl = {}

    def __call__(self, input_ids, scores):
        scores = scores.float() + self.c
        for (op, th), rows in self.groups.items():
            ids, sub = input_ids[rows], scores[rows]
            if op == "ctrl":
                proc = self.ctrl.setdefault(th, RepetitionPenaltyLogitsProcessor(th))
                sub = proc(ids, sub)
            elif op == "normalized":
                sub = torch.log_softmax(sub, dim=-1)
                sub = sub.scatter(1, ids, sub.gather(1, ids) * th)
            else:
                sub = sub.scatter(1, ids, sub.gather(1, ids) - self.alpha)
            scores[rows] = sub
        return scores


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefixes", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--shift", type=float, default=5.0)
    ap.add_argument("--c-natural", type=float, default=-19.92)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = models.load_hf(models.gguf_path())
    texts = [t for _, t in native.a1_prefixes()[: args.prefixes]]
    s = args.shift
    specs = [("ctrl", 1.0, s), ("ctrl", 1.0, -s)]
    for op in ("ctrl", "normalized", "subtractive"):
        specs += [(op, 1.3, s), (op, 1.3, -s)]
    specs += [("ctrl", 1.0, 0.0), ("ctrl", 1.3, 0.0), ("ctrl", 1.3, args.c_natural)]
    rows = [(p, spec) for p in range(len(texts)) for spec in specs]
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    batch = tok([texts[p] for p, _ in rows], return_tensors="pt", padding=True)
    proc = PerRow([sp[2] for _, sp in rows], [sp[0] for _, sp in rows], [sp[1] for _, sp in rows])
    t0 = time.monotonic()
    with torch.inference_mode():
        out = model.generate(
            **batch,
            do_sample=False,
            max_new_tokens=args.tokens,
            min_new_tokens=args.tokens,
            logits_processor=LogitsProcessorList([proc]),
            pad_token_id=tok.pad_token_id,
        )
    decode_s = time.monotonic() - t0
    gen = out[:, batch["input_ids"].shape[1] :].tolist()
    by = {(p, sp): g for (p, sp), g in zip(rows, gen)}
    for op, th in [("ctrl", 1.0), ("ctrl", 1.3), ("normalized", 1.3), ("subtractive", 1.3)]:
        f = n = 0
        for p in range(len(texts)):
            a, b = by[(p, (op, th, s))], by[(p, (op, th, -s))]
            f += sum(x != y for x, y in zip(a, b))
            n += len(a)
        print(f"{op} θ={th}: flip {f}/{n} = {f / n:.4f}")
    print(f"harness: {len(rows)} runs in one batch, decode {decode_s:.1f} s")


if __name__ == "__main__":
    main()
