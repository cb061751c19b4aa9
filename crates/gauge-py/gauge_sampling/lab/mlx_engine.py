"""The mlx engine: mlx-lm (on mlx's CPU build here) computes the logits and its own logits
processors decide.

mlx-lm's ``generate_step`` runs the processors of ``logits_processors`` in list order on the
``[1, V]`` row, each as ``processor(tokens, logits)`` with ``tokens`` = prompt + generated, before
the log-softmax and the sampler (``mlx_lm/generate.py``, ``generate_step._step``). The probe's
list per run is the same: ``Shift(c)`` first, then the penalty, then greedy (argmax):

- ctrl: mlx-lm's ``make_repetition_penalty(θ, context_size)`` (``mlx_lm/sample_utils.py``:
  ``mx.where(z < 0, z * θ, z / θ)`` on the seen logits: ``< 0`` multiplies);
- normalized: ``gauge_sampling.mlx.RepetitionPenalty(θ, mode="normalized")``;
- subtractive: mlx-lm's ``make_presence_penalty(α, context_size)``;
- θ = 1: no penalty (the validity gate).

Seen set: ``--seen protocol`` (default) is the whole prompt + output (``context_size`` larger
than any sequence); ``--seen engine`` is mlx-lm's default, the last 20 tokens of prompt + output
(``repetition_context_size=20``), for every op.

The runs of a prompt share its prefill and their tokens until they diverge (``tree_decode``):
one KV cache per prompt (``make_prompt_cache``), trimmed back (``trim_prompt_cache``) to walk the
decode tree depth first, batch 1.
"""

from __future__ import annotations

import numpy as np

from .engine import Loaded, RunOut
from .tree_decode import decode_prompt

#: mlx-lm's default window for its penalties (``repetition_context_size`` etc.).
ENGINE_WINDOW = 20
#: "No window": longer than any sequence.
NO_WINDOW = 1 << 30


class _Source:
    def __init__(self, engine: MlxEngine, plan: list[dict]):
        import mlx.core as mx

        self.mx = mx
        self.engine = engine
        self.plan = plan
        self.cache = None

    def _row(self, ids):
        mx = self.mx
        logits = self.engine.model(mx.array(ids, dtype=mx.int32)[None], cache=self.cache)
        return logits[:, -1, :].astype(mx.float32)

    def start(self, prompt):
        from mlx_lm.models.cache import make_prompt_cache

        self.cache = make_prompt_cache(self.engine.model)
        if len(prompt) > 1:
            # As mlx-lm's generate_step prefills: all but the last token into the cache only (the
            # head's output is never evaluated: ~45 ms a position on mlx's CPU build here), then
            # the last token's row.
            self.engine.model(self.mx.array(prompt[:-1], dtype=self.mx.int32)[None], cache=self.cache)
            self.mx.eval([c.state for c in self.cache])
        return self._row(prompt[-1:])

    def extend(self, token):
        return self._row([token])

    def rewind(self, length):
        from mlx_lm.models.cache import trim_prompt_cache

        cur = self.cache[0].offset
        if cur > length:
            trim_prompt_cache(self.cache, cur - length)

    def decide(self, row, history, runs):
        mx = self.mx
        tokens = mx.array(history, dtype=mx.int32)
        rows = [row + float(self.plan[r]["c"]) for r in runs]
        classes: dict[tuple, list[int]] = {}
        for k, r in enumerate(runs):
            s = self.plan[r]
            if float(s["theta"]) != 1.0:
                classes.setdefault((s["op"], float(s["theta"]), float(s["alpha"])), []).append(k)
        for key, ks in classes.items():
            proc = self.engine.processor(*key)
            out = proc(tokens, mx.concatenate([rows[k] for k in ks], axis=0))
            for i, k in enumerate(ks):
                rows[k] = out[i : i + 1]
        return mx.argmax(mx.concatenate(rows, axis=0), axis=-1).tolist()

    def zero_point(self, row, history):
        r = np.array(row[0])
        seen = np.unique(np.asarray(history, dtype=np.int64))
        return float(r.max()), int((r[seen] > 0).sum()), int(seen.size)


class MlxEngine:
    """Decodes chunks of the probe's plan with an mlx-lm model (see the module doc)."""

    name = "mlx"
    whole_phase = False
    raw_logits = True

    def __init__(self, model, tokenizer, seen: str, eos_ids=()):
        self.model = model
        self.tokenizer = tokenizer
        self.window = ENGINE_WINDOW if seen == "engine" else NO_WINDOW
        self.eos_ids = set(eos_ids)
        self._procs: dict = {}

    def processor(self, op: str, theta: float, alpha: float):
        """mlx-lm's own processor for ctrl and subtractive, gauge's for normalized."""
        key = (op, theta, alpha)
        if key not in self._procs:
            from mlx_lm.sample_utils import make_presence_penalty, make_repetition_penalty

            from ..mlx import RepetitionPenalty

            if op == "ctrl":
                p = make_repetition_penalty(theta, context_size=self.window)
            elif op == "normalized":
                last_n = -1 if self.window == NO_WINDOW else self.window
                p = RepetitionPenalty(theta, mode="normalized", last_n=last_n)
            elif op == "subtractive":
                p = make_presence_penalty(alpha, context_size=self.window)
            else:
                raise ValueError(f"op: unknown operator {op!r} (allowed: ctrl, normalized, subtractive)")
            self._procs[key] = p
        return self._procs[key]

    def next_row(self, prompt: list[int]) -> np.ndarray:
        """The float32 row of the token after ``prompt`` (the logits check)."""
        src = _Source(self, [])
        return np.array(src.start(prompt)[0])

    def decode(self, prompts, plan, tokens, on_step=lambda n: None, stop=None):
        outs = [[RunOut() for _ in plan] for _ in prompts]
        for j, p in enumerate(prompts):
            st = None if stop is None else (lambda r, toks, j=j: stop(j, r, toks))
            decode_prompt(_Source(self, plan), p, plan, list(range(len(plan))), tokens, outs[j], st)
            for _ in range(tokens):
                on_step(1)
        return outs

    def decode_json(self, prompts, plan, max_tokens):
        from .tree_decode import decode_json

        return decode_json(self, prompts, plan, max_tokens, self.eos_ids)

    def close(self) -> None:
        self.model = None


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """mlx-lm on ``ref``'s float32 HF folder (a GGUF through the cached conversion), checked
    against HF transformers' logits before it is trusted."""
    if device != "cpu":
        raise ValueError(f"--device: the mlx engine runs on mlx's CPU build here (not {device})")
    if dtype != "float32":
        raise ValueError(f"--dtype: the mlx engine is measured in float32 (not {dtype})")
    import mlx.core as mx
    import mlx_lm
    from transformers import AutoTokenizer, GenerationConfig

    from . import logits_check, models

    folder = models.hf_folder(ref)
    overrides = rope_overrides(folder)
    model, _ = mlx_lm.load(str(folder), model_config=overrides)
    if overrides:
        info["options"]["model_config"] = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    tok = AutoTokenizer.from_pretrained(folder)
    eos = set()
    for src in (tok, _generation_config(GenerationConfig, folder)):
        v = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(v, int):
            eos.add(v)
        elif isinstance(v, (list, tuple)):
            eos.update(int(x) for x in v)
    seen = getattr(args, "seen", "protocol")
    eng = MlxEngine(model, tok, seen, eos)
    info["versions"].update({"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__})
    info["options"]["blas"] = mlx_blas()
    info["options"]["seen"] = (
        "engine (last 20 of prompt + output)" if seen == "engine" else "protocol (prompt + output)"
    )
    diff = logits_check.check_engine_logits("mlx", folder, logits_check.check_prompts(tok), eng.next_row)
    logits_check.record(info, diff)
    n_vocab = int(eng.next_row(logits_check.check_prompts(tok)[0][:1]).shape[-1])
    return Loaded(eng, tok, n_vocab)


def mlx_blas() -> str:
    """The BLAS behind mlx's CPU matmuls: the wheel's bundled netlib reference BLAS, or the path
    of the library ``scripts/setup-python.sh`` pointed it at (the system's OpenBLAS, ~40x faster
    here). Only the order of the float32 sums differs, which the logits check bounds."""
    import os
    from pathlib import Path

    import mlx.core as mx

    libs = Path(mx.__file__).parent.parent / "mlx_cpu.libs"
    found = sorted(libs.glob("libblas-*.so*"))
    if not found:
        return "unknown"
    real = os.path.realpath(found[0])
    return f"{found[0].name} (bundled)" if real == str(found[0]) else real


def rope_overrides(folder) -> dict:
    """The rope settings mlx-lm would miss. transformers 5 writes them as ``rope_parameters``
    (``{"rope_theta": ..., "rope_type": ...}``); mlx-lm's llama ``ModelArgs`` reads the
    top-level ``rope_theta`` (default 10000) and ``rope_scaling`` only, so it would silently
    compute another model (measured: logits off by 0.79 on the default model, whose rope_theta is
    100000). Given to ``mlx_lm.load(..., model_config=...)``; the logits check confirms."""
    import json
    from pathlib import Path

    cfg = json.loads((Path(folder) / "config.json").read_text())
    rp = cfg.get("rope_parameters")
    if not isinstance(rp, dict) or "rope_theta" in cfg:
        return {}
    out = {"rope_theta": float(rp["rope_theta"])}
    rest = {k: v for k, v in rp.items() if k != "rope_theta"}
    if rest.get("rope_type", "default") != "default" and "rope_scaling" not in cfg:
        out["rope_scaling"] = rest
    return out


def _generation_config(cls, folder):
    try:
        return cls.from_pretrained(folder)
    except OSError:
        return None
