#!/usr/bin/env python3
"""A seeded random-init causal LM of a config's shape, written as an HF folder.

    python3 scripts/random-init-model.py SHAPE_DIR OUT_DIR [--seed 0] [--device cuda]

SHAPE_DIR holds a model's config.json and tokenizer files (no weights: what
`scripts/gpu-check-offline.sh --prepare` copies from the default model's HF conversion). The
weights are transformers' own initialisation of that architecture under `torch.manual_seed(seed)`,
made on `--device`, saved as float32 safetensors; the tokenizer and generation files are copied.
It stands in for the default model where its 540 MB of weights cannot travel (the GPU machine
takes 64 MiB a call and has no network): same vocabulary, layers, heads and tokenizer, so the
engines, processors and probe run the real shapes; its tokens mean nothing.

Prints one line: the folder, the seed, the device and a fingerprint of the weights (the sum of
|w| over every tensor), so two runs can tell whether they built the same model.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

#: Copied beside the weights when present (the tokenizer, chat template and generation defaults).
SIDE_FILES = (
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def build(shape: Path, out: Path, seed: int, device: str) -> float:
    """Writes the model to ``out``; returns its weight fingerprint."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(shape)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    fingerprint = float(sum(p.detach().abs().double().sum() for p in model.state_dict().values()))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for name in SIDE_FILES:
        if (shape / name).is_file():
            shutil.copy2(shape / name, out / name)
    return fingerprint


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", type=Path, help="folder with config.json and the tokenizer files")
    ap.add_argument("out", type=Path, help="folder to write (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the weights are initialised (cpu, cuda)")
    args = ap.parse_args()
    if not (args.shape / "config.json").is_file():
        print(f"error: shape: {args.shape} has no config.json", file=sys.stderr)
        return 2
    fp = build(args.shape, args.out, args.seed, args.device)
    print(f"random-init model: {args.out} (seed {args.seed}, made on {args.device}, sum |w| = {fp:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
