"""The ort-genai engine: onnxruntime-genai (CPU) computes the logits, its own
``repetition_penalty`` decides ctrl.

The model is the default model's float32 HF folder exported by onnxruntime-genai's own builder
(``python -m onnxruntime_genai.models.builder -i HF_DIR -o OUT -p fp32 -e cpu``), once, cached
under gauge's cache (``ort-genai/<hf folder>-fp32-cpu``) as the HF conversion is.

Per step, as a user's loop does it: ``get_logits`` → the gauge shift c added to every logit →
``set_logits`` → ``generate_next_token``, which applies the generator's search options to the row
it was given (``src/generators.cpp`` ``Generator::GenerateNextToken`` →
``StandardDecodingStrategy::Step``: ``ApplyMinLength``, ``ApplyRepetitionPenalty``, then greedy
``SelectTop``). The penalty is ``Search_Cpu::ApplyRepetitionPenalty`` →
``ApplyRepetitionPenaltyToLogits`` (``src/sampling_distribution.h``): every distinct id of the
whole sequence (prompt + generated), ``score < 0 ? score * θ : score / θ``: ``< 0`` multiplies.

- ctrl (θ ≠ 1): a generator with ``repetition_penalty = θ`` decides (its own penalty);
- normalized: ``gauge_sampling.ort_genai.RepetitionPenalty(θ)`` on the shifted row, greedy;
- subtractive: a presence penalty α on every seen token (onnxruntime-genai has none; gauge's);
- θ = 1: no penalty (the validity gate), greedy on the shifted row.

Seen set: onnxruntime-genai's default scope *is* the protocol's (the whole sequence, no window),
so ``--seen engine`` runs the same operator (recorded as such).

The runs of a prompt share its prefill and their tokens until they diverge (``tree_decode``):
one generator per prompt at penalty 1.0 for the runs gauge's code decides, rewound with
``rewind_to`` to walk their decode tree depth first, batch 1, and one generator per ctrl run at
θ ≠ 1 (``set_logits`` is taken once per computed row, so a generator decides one run per node):
``set_logits`` → ``generate_next_token`` → ``get_next_tokens``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .engine import Loaded, RunOut
from .tree_decode import decode_prompt


class _Source:
    def __init__(self, engine: OrtGenaiEngine, plan: list[dict], penalty: float, tokens: int):
        self.engine = engine
        self.plan = plan
        self.penalty = penalty
        self.tokens = tokens
        self.gen = None

    def start(self, prompt):
        import onnxruntime_genai as og

        params = og.GeneratorParams(self.engine.model)
        params.set_search_options(
            max_length=len(prompt) + self.tokens + 2,
            repetition_penalty=self.penalty,
            do_sample=False,
        )
        self.gen = og.Generator(self.engine.model, params)
        self.gen.append_tokens(np.asarray(prompt, dtype=np.int32))
        return self._logits()

    def _logits(self) -> np.ndarray:
        return np.array(self.gen.get_logits(), dtype=np.float32).reshape(-1)

    def extend(self, token):
        self.gen.append_tokens(np.asarray([token], dtype=np.int32))
        return self._logits()

    def rewind(self, length):
        if self.gen.token_count() > length:
            self.gen.rewind_to(length)

    def decide(self, row, history, runs):
        from ..ort_genai import RepetitionPenalty

        picks = []
        for r in runs:
            s = self.plan[r]
            x = row + np.float32(s["c"])
            theta = float(s["theta"])
            if _own_penalty(s):
                assert theta == self.penalty and len(runs) == 1
                # The engine's own penalty on the shifted row, then its greedy pick.
                self.gen.set_logits(x.reshape(1, 1, -1))
                self.gen.generate_next_token()
                picks.append(int(self.gen.get_next_tokens()[0]))
                self.gen.rewind_to(len(history))
                continue
            if theta != 1.0 and s["op"] == "normalized":
                x = RepetitionPenalty(theta, mode="normalized")(history, x)
            elif theta != 1.0 and s["op"] == "subtractive":
                x = RepetitionPenalty(1.0, mode="ctrl", presence_penalty=float(s["alpha"]))(history, x)
            picks.append(int(np.argmax(x)))
        return picks

    def zero_point(self, row, history):
        seen = np.unique(np.asarray(history, dtype=np.int64))
        return float(row.max()), int((row[seen] > 0).sum()), int(seen.size)


def _own_penalty(spec: dict) -> bool:
    """Is this run decided by onnxruntime-genai's own repetition_penalty (ctrl, θ ≠ 1)?"""
    return spec["op"] == "ctrl" and float(spec["theta"]) != 1.0


class OrtGenaiEngine:
    """Decodes chunks of the probe's plan with an onnxruntime-genai model (see the module doc)."""

    name = "ort-genai"
    whole_phase = False
    raw_logits = True

    def __init__(self, model, tokenizer, eos_ids=()):
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = set(eos_ids)

    def next_row(self, prompt: list[int]) -> np.ndarray:
        """The float32 row of the token after ``prompt`` (the logits check)."""
        return _Source(self, [], 1.0, 1).start(prompt)

    def decode(self, prompts, plan, tokens, on_step=lambda n: None, stop=None):
        outs = [[RunOut() for _ in plan] for _ in prompts]
        # One generator (and decode tree) for the runs gauge's code decides (penalty 1.0), and
        # one per ctrl run with θ ≠ 1 (its own repetition_penalty = θ): onnxruntime-genai takes
        # set_logits only once per computed row, so one generator decides one run per node.
        shared = [r for r, s in enumerate(plan) if not _own_penalty(s)]
        classes = [(1.0, shared)] if shared else []
        classes += [(float(s["theta"]), [r]) for r, s in enumerate(plan) if _own_penalty(s)]
        for j, p in enumerate(prompts):
            st = None if stop is None else (lambda r, toks, j=j: stop(j, r, toks))
            for pen, runs in classes:
                decode_prompt(_Source(self, plan, pen, tokens), p, plan, runs, tokens, outs[j], st)
            for _ in range(tokens):
                on_step(1)
        return outs

    def decode_json(self, prompts, plan, max_tokens):
        from .tree_decode import decode_json

        return decode_json(self, prompts, plan, max_tokens, self.eos_ids)

    def close(self) -> None:
        self.model = None


def exported_model(folder: Path) -> Path:
    """``folder`` (an HF float32 folder) exported by onnxruntime-genai's builder (fp32, CPU), once,
    cached under gauge's cache beside the HF conversion."""
    from .models import _cache_root

    target = _cache_root() / "ort-genai" / f"{Path(folder).resolve().name}-fp32-cpu"
    if (target / "genai_config.json").exists():
        return target
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(folder), "-o", str(tmp)]
    cmd += ["-p", "fp32", "-e", "cpu", "-c", str(tmp) + ".cache"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(str(tmp) + ".cache", ignore_errors=True)
    if r.returncode != 0 or not (tmp / "genai_config.json").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(f"onnxruntime-genai's builder failed ({' '.join(cmd)}):\n{r.stderr[-3000:]}")
    tmp.rename(target)
    return target


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """onnxruntime-genai on ``ref``'s float32 export, checked against HF transformers' logits
    before it is trusted."""
    if device != "cpu":
        raise ValueError(f"--device: the ort-genai engine runs on the CPU provider here (not {device})")
    if dtype != "float32":
        raise ValueError(f"--dtype: the ort-genai engine is measured in float32 (not {dtype})")
    import onnxruntime
    import onnxruntime_genai as og
    from transformers import AutoTokenizer, GenerationConfig

    from . import logits_check, models

    folder = models.hf_folder(ref)
    model = og.Model(str(exported_model(folder)))
    tok = AutoTokenizer.from_pretrained(folder)
    eos = set()
    try:
        gen_cfg = GenerationConfig.from_pretrained(folder)
    except OSError:
        gen_cfg = None
    for src in (tok, gen_cfg):
        v = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(v, int):
            eos.add(v)
        elif isinstance(v, (list, tuple)):
            eos.update(int(x) for x in v)
    eng = OrtGenaiEngine(model, tok, eos)
    info["versions"].update({"onnxruntime_genai": og.__version__, "onnxruntime": onnxruntime.__version__})
    seen = getattr(args, "seen", "protocol")
    info["options"]["seen"] = (
        "engine (whole sequence, = protocol)" if seen == "engine" else "protocol (prompt + output)"
    )
    prompts = logits_check.check_prompts(tok)
    diff = logits_check.check_engine_logits("ort-genai", folder, prompts, eng.next_row)
    logits_check.record(info, diff)
    return Loaded(eng, tok, int(eng.next_row(prompts[0]).shape[-1]))
