"""gauge's repetition penalty as an mlx-lm logits processor (mx arrays in and out).

    from mlx_lm import load, generate
    from gauge_sampling.mlx import RepetitionPenalty

    model, tokenizer = load("path/to/model")
    text = generate(model, tokenizer, prompt, logits_processors=[RepetitionPenalty(1.3)])

mlx-lm calls every processor of ``logits_processors`` once per step as
``processor(tokens, logits)``: ``tokens`` the prompt and everything generated so far (an mx
array), ``logits`` the ``[1, V]`` row before the log-softmax. Use it *instead of*
``repetition_penalty=`` (``make_repetition_penalty``), which multiplies a seen logit by θ when it
is below zero and divides it otherwise: that sign test makes θ's effect depend on where the
model's logits happen to sit. ``mode="normalized"`` (the default) penalises log-probabilities
instead, so a constant added to every logit changes nothing; ``mode="ctrl"`` is
``make_repetition_penalty``'s exact expression (same tokens on the same window).
"""

from __future__ import annotations

from typing import Iterable

import mlx.core as mx
import numpy as np

from . import parse_params


class RepetitionPenalty:
    """The repeat / presence / frequency penalties with gauge's definitions, for mlx-lm.

    Args:
        penalty: θ (> 0; 1 = off). A token seen in the window has its log-probability multiplied
            by θ (``normalized``) or its logit divided by θ when positive, multiplied when not
            (``ctrl``). Applied once per token however often it was seen.
        mode: ``"normalized"`` (log-softmax over the full row first, in float32) or ``"ctrl"``.
        last_n: the window, the last ``last_n`` tokens of ``tokens`` (prompt included, as
            mlx-lm's own processors; theirs default to 20); ``-1`` is the whole sequence and
            ``0`` turns the penalties off.
        presence_penalty: subtracted once from every seen token.
        frequency_penalty: subtracted once per occurrence in the window.
        exempt: token ids never penalised (they still take their place in the window).

    The returned array has the logits' dtype.
    """

    def __init__(
        self,
        penalty: float,
        mode: str = "normalized",
        last_n: int = -1,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        exempt: Iterable[int] = (),
    ):
        # gauge's own parser checks every value, so errors read exactly as the CLI's.
        p = parse_params(
            {
                "repeat_penalty": penalty,
                "repeat_penalty_mode": mode,
                "repeat_last_n": last_n,
                "presence_penalty": presence_penalty,
                "frequency_penalty": frequency_penalty,
                "penalty_exempt": list(exempt),
            }
        )
        self.penalty = float(penalty)
        self.mode = p["repeat_penalty_mode"]
        self.last_n = int(p["repeat_last_n"])
        self.presence_penalty = float(presence_penalty)
        self.frequency_penalty = float(frequency_penalty)
        self.exempt = np.array(sorted(int(t) for t in p["penalty_exempt"]), dtype=np.int64)

    @property
    def is_off(self) -> bool:
        """True when the processor returns its input unchanged."""
        no_op = self.penalty == 1.0 and self.presence_penalty == 0.0 and self.frequency_penalty == 0.0
        return self.last_n == 0 or no_op

    def seen(self, tokens, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts): the distinct ids of the window that count, with their occurrences."""
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self.last_n > 0:
            ids = ids[-self.last_n :]
        ids = ids[(ids >= 0) & (ids < n_vocab)]
        if self.exempt.size:
            ids = ids[~np.isin(ids, self.exempt)]
        return np.unique(ids, return_counts=True)

    def __call__(self, tokens, logits: mx.array) -> mx.array:
        if self.is_off or len(tokens) == 0:
            return logits
        ids, counts = self.seen(tokens, logits.shape[-1])
        if ids.size == 0:
            return logits
        idx = mx.array(ids.astype(np.int32))
        if self.mode == "normalized":
            row = logits.astype(mx.float32)
            base = row - mx.logsumexp(row, axis=-1, keepdims=True)
            z = base[:, idx]
            pen = z * self.penalty
        else:
            base = logits
            z = base[:, idx]
            # make_repetition_penalty's expression.
            pen = mx.where(z < 0, z * self.penalty, z / self.penalty)
        if self.frequency_penalty != 0.0 or self.presence_penalty != 0.0:
            sub = mx.array(counts.astype(np.float32)) * self.frequency_penalty + self.presence_penalty
            pen = pen - sub.astype(pen.dtype)
        out = mx.array(base)
        out[:, idx] = pen
        return out.astype(logits.dtype)

    def __repr__(self) -> str:
        return (
            f"RepetitionPenalty(penalty={self.penalty}, mode={self.mode!r}, last_n={self.last_n}, "
            f"presence_penalty={self.presence_penalty}, frequency_penalty={self.frequency_penalty}, "
            f"exempt={tuple(int(t) for t in self.exempt)})"
        )
