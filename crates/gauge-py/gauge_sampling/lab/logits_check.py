"""Before an engine's flips are trusted: its logits against HF transformers float32 on the same
weights. A loader that reads a model's config differently (rope settings in another format, a
tied head, a norm epsilon) silently computes another model, and every flip count after it would
be meaningless; so the engine's next-token row after each of a few prompts must match HF's within
``TOLERANCE`` (absolute, in logit units), or the run is refused.

The one check of every engine with raw logits (llama-cpp-python, mlx, ort-genai, vllm: each gives a
``next_row(prompt)``); hf is the reference itself, and the openai engine has no logits."""

from __future__ import annotations

import gc
from typing import Callable

import numpy as np

#: Largest |engine − HF| over the compared rows that a float32 engine may show. Measured
#: differences are ~1e-5 (summation order); a model read differently is off by whole logits.
TOLERANCE = 1e-3
#: How many of the A1 prefixes are compared.
N_PROMPTS = 3


def check_prompts(tokenizer) -> list[list[int]]:
    """The first ``N_PROMPTS`` A1 prefixes, tokenized as the probe does."""
    from .. import _native

    return [list(tokenizer(t)["input_ids"]) for _, t in _native.a1_prefixes()[:N_PROMPTS]]


def hf_rows(folder, prompts: list[list[int]]) -> list[np.ndarray]:
    """HF transformers' float32 next-token rows (CPU) for ``prompts``; the model is freed after."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    rows = []
    with torch.inference_mode():
        for p in prompts:
            out = model(input_ids=torch.tensor([p]), use_cache=False)
            rows.append(out.logits[0, -1].float().numpy().copy())
    del model
    gc.collect()
    return rows


def check_engine_logits(
    engine: str, folder, prompts: list[list[int]], engine_row: Callable[[list[int]], np.ndarray]
) -> float:
    """The max |engine − HF| over ``prompts``' next-token rows; raises ``ValueError`` (the CLI's
    exit 2) when it exceeds ``TOLERANCE`` or the rows differ in size."""
    worst = 0.0
    for p, ref in zip(prompts, hf_rows(folder, prompts)):
        got = np.asarray(engine_row(p), dtype=np.float32).reshape(-1)
        if got.shape != ref.shape:
            raise ValueError(
                f"{engine}: its logit row has {got.size} entries, HF's {ref.size}: not the same model"
            )
        worst = max(worst, float(np.abs(got - ref).max()))
    if not worst <= TOLERANCE:
        raise ValueError(
            f"{engine}: its logits differ from HF transformers float32 on the same weights by up to "
            f"{worst:.3g} (tolerance {TOLERANCE:g}) over {len(prompts)} prompts: the engine does not "
            "compute the same model (a config field read differently?); refusing to measure it"
        )
    return worst


def record(info: dict, diff: float) -> None:
    """The measured difference in the run record (``engine.options``; two significant digits, so
    a rerun on the same machine resumes the same run)."""
    info["options"]["logits_vs_hf_max_abs"] = f"{diff:.1e}"
