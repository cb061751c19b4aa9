"""gauge's repetition penalty in an onnxruntime-genai decode loop (numpy rows in and out).

onnxruntime-genai has no logits-processor hook, but its ``Generator`` lets a loop read the next
row (``get_logits``), replace it (``set_logits``) and then pick the token
(``generate_next_token``), which applies the generator's own search options to the row it was
given. So: leave its ``repetition_penalty`` at 1.0 (its own is sign-branched: a seen logit below
zero is multiplied by θ, any other divided) and put gauge's in between::

    import onnxruntime_genai as og
    from gauge_sampling.ort_genai import RepetitionPenalty, generate

    model = og.Model("path/to/exported-model")
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=512)            # repetition_penalty stays 1.0
    gen = og.Generator(model, params)
    gen.append_tokens(prompt_ids)
    new_ids = generate(gen, RepetitionPenalty(1.3), max_new_tokens=64)

``mode="normalized"`` (the default) penalises log-probabilities, so a constant added to every
logit changes nothing; ``mode="ctrl"`` is onnxruntime-genai's own expression on the same window.
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from ._settings import PenaltySettings


class RepetitionPenalty(PenaltySettings):
    """The repeat / presence / frequency penalties with gauge's definitions, on numpy rows.

    Args:
        penalty: θ (> 0; 1 = off): a seen token's log-probability times θ (``normalized``), or
            its logit divided by θ when positive, multiplied when not (``ctrl``), once per token.
        mode: ``"normalized"`` (log-softmax over the full row first, float32) or ``"ctrl"``.
        last_n: the last ``last_n`` tokens of the sequence (prompt included); ``-1`` (default)
            the whole sequence, as onnxruntime-genai's own penalty; ``0`` off.
        presence_penalty: subtracted once from every seen token.
        frequency_penalty: subtracted once per occurrence in the window.
        exempt: token ids never penalised (they still take their place in the window).
    """

    def __call__(self, tokens, logits: np.ndarray) -> np.ndarray:
        """The penalised copy of ``logits`` (``[V]`` or ``[..., V]``, every row with the history
        ``tokens``), float32."""
        row = np.array(logits, dtype=np.float32)
        if self.is_off or len(tokens) == 0:
            return row
        ids, counts = self.seen(tokens, row.shape[-1])
        if ids.size == 0:
            return row
        if self.mode == "normalized":
            m = row.max(axis=-1, keepdims=True)
            lse = m + np.log(np.exp(row - m).sum(axis=-1, keepdims=True, dtype=np.float32))
            row = (row - lse).astype(np.float32)
            pen = row[..., ids] * self.penalty
        else:
            z = row[..., ids]
            # onnxruntime-genai's ApplyRepetitionPenaltyToLogits expression.
            pen = np.where(z < 0, z * self.penalty, z / self.penalty)
        if self.frequency_penalty != 0.0 or self.presence_penalty != 0.0:
            pen = pen - (counts * self.frequency_penalty + self.presence_penalty).astype(np.float32)
        row[..., ids] = pen
        return row


def search_penalty(generator_params) -> float:
    """The ``repetition_penalty`` search option of ``og.GeneratorParams``."""
    return float(generator_params.get_search_options().get("repetition_penalty", 1.0))


def generate(
    generator,
    penalty: Optional[RepetitionPenalty],
    max_new_tokens: int,
    eos: Iterable[int] = (),
    shift: float = 0.0,
) -> list[int]:
    """Decode up to ``max_new_tokens`` with ``generator`` (prompt appended already), each step
    ``get_logits`` → (+ ``shift``) → ``penalty(sequence, row)`` → ``set_logits`` →
    ``generate_next_token``; stops after an id of ``eos`` or when the generator is done. Returns
    the new tokens. The generator's own ``repetition_penalty`` must be 1.0 (or it would apply a
    second, sign-branched penalty on top of gauge's); ``penalty=None`` leaves the rows as they
    are (the generator's own options decide)."""
    eos = set(int(t) for t in eos)
    out: list[int] = []
    for _ in range(max_new_tokens):
        if generator.is_done():
            break
        logits = np.asarray(generator.get_logits(), dtype=np.float32)
        if penalty is not None or shift != 0.0:
            row = logits + np.float32(shift)
            if penalty is not None:
                row = penalty(generator.get_sequence(0), row)
            generator.set_logits(np.ascontiguousarray(row.reshape(logits.shape), dtype=np.float32))
        generator.generate_next_token()
        tok = int(generator.get_next_tokens()[0])
        out.append(tok)
        if tok in eos:
            break
    return out
