"""gauge's repetition penalty as an mlx-lm logits processor (mx arrays in and out).

    from mlx_lm import load, generate
    from gauge_sampling.mlx import make_repetition_penalty

    model, tokenizer = load("path/to/model")
    text = generate(model, tokenizer, prompt, logits_processors=[make_repetition_penalty(1.3)])

mlx-lm calls every processor of ``logits_processors`` once per step as
``processor(tokens, logits)``: ``tokens`` the prompt and everything generated so far (an mx
array), ``logits`` the ``[1, V]`` row before the log-softmax. Use it *instead of*
``repetition_penalty=`` (``mlx_lm.sample_utils.make_repetition_penalty``), which multiplies a seen
logit by θ when it is below zero and divides it otherwise: that sign test makes θ's effect depend
on where the model's logits happen to sit.

``make_repetition_penalty(penalty, context_size=20)`` has mlx-lm's name, arguments and seen set
(the last 20 tokens of prompt + output) and, as every face of the wheel, the fix by default:
``mode="normalized"`` penalises log-probabilities instead, so a constant added to every logit
changes nothing; ``mode="ctrl"`` is mlx-lm's exact expression (same tokens on the same window).
It returns a :class:`RepetitionPenalty`, whose ``last_n`` is the context size.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ._settings import PenaltySettings


class RepetitionPenalty(PenaltySettings):
    """The repeat / presence / frequency penalties with gauge's definitions, for mlx-lm.

    Args:
        penalty: θ (> 0; 1 = off). A token seen in the window has its log-probability multiplied
            by θ (``normalized``) or its logit divided by θ when positive, multiplied when not
            (``ctrl``). Applied once per token however often it was seen.
        mode: ``"normalized"`` (log-softmax over the full row first, in float32) or ``"ctrl"``.
        last_n: the window, the last ``last_n`` tokens of ``tokens`` (prompt included; 20, as
            mlx-lm's own processors); ``-1`` is the whole sequence and ``0`` turns the penalties
            off.
        presence_penalty: subtracted once from every seen token.
        frequency_penalty: subtracted once per occurrence in the window.
        exempt: token ids never penalised (they still take their place in the window).

    The returned array has the logits' dtype.
    """

    def __init__(
        self,
        penalty: float,
        mode: str = "normalized",
        last_n: int = 20,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        exempt=(),
    ):
        super().__init__(penalty, mode, last_n, presence_penalty, frequency_penalty, exempt)

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


def make_repetition_penalty(
    penalty: float,
    context_size: int = 20,
    *,
    mode: str = "normalized",
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    exempt=(),
) -> RepetitionPenalty:
    """mlx-lm's ``make_repetition_penalty(penalty, context_size)``, the fix by default: the seen set
    is the last ``context_size`` tokens of prompt + output, as mlx-lm's. ``context_size=0`` is
    refused: mlx-lm reads it as the whole sequence (``tokens[-0:]``), gauge's window as off."""
    if context_size == 0:
        raise ValueError(
            "context_size = 0: mlx-lm's processors read it as the whole sequence and gauge's window "
            "as off; pass -1 for the whole sequence (allowed: -1 or a positive count)"
        )
    return RepetitionPenalty(penalty, mode, context_size, presence_penalty, frequency_penalty, exempt)
