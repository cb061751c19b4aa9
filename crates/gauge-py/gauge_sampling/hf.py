"""gauge's repetition penalty as an HF transformers ``LogitsProcessor``.

    from transformers import LogitsProcessorList
    from gauge_sampling.hf import RepetitionPenaltyLogitsProcessor

    model.generate(**inputs, logits_processor=LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3)]))

A drop-in for transformers' own ``RepetitionPenaltyLogitsProcessor(penalty)``: the same name, the
same first argument, the same seen set (the whole of ``input_ids``, prompt included), and the fix
by default. As every face of the wheel: ``mode="normalized"`` (the default) penalises
log-probabilities instead of raw logits, so a constant added to every logit changes nothing;
``mode="ctrl"`` is transformers' processor (same tensor, bit for bit, when no window, exemption or
padding applies). ``RepetitionPenalty`` is the same class under its former name.
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch
from transformers import LogitsProcessor

from ._penalty import penalize, valid_positions
from ._settings import PenaltySettings


class RepetitionPenaltyLogitsProcessor(PenaltySettings, LogitsProcessor):
    """The repeat / presence / frequency penalties with gauge's definitions.

    Args:
        penalty: θ (> 0; 1 = off). A token seen in the window has its logit divided by θ
            (``ctrl``, when positive; multiplied when negative) or its log-probability
            multiplied by θ (``normalized``). Applied once per token however often it was seen.
        mode: ``"normalized"`` (log-softmax over the full row first) or ``"ctrl"``.
        last_n: window of the last ``last_n`` tokens of ``input_ids`` (prompt included, as
            llama.cpp and HF do); ``-1`` is the whole sequence and ``0`` turns the penalties off.
        presence_penalty: subtracted once from every seen token.
        frequency_penalty: subtracted once per occurrence in the window.
        exempt: token ids never penalised (they still take their place in the window).
        pad_token_id: when given, leading positions holding it (left padding of a batch) are not
            part of any window's seen set.

    The returned tensor has the dtype and device of ``scores``; ``normalized`` computes its
    log-softmax in float32.
    """

    def __init__(
        self,
        penalty: float,
        mode: str = "normalized",
        last_n: int = -1,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        exempt: Iterable[int] = (),
        pad_token_id: Optional[int] = None,
    ):
        super().__init__(penalty, mode, last_n, presence_penalty, frequency_penalty, exempt)
        self.pad_token_id = pad_token_id
        self._exempt_tensors: dict[torch.device, torch.Tensor] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.is_off:
            return scores
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        pad_mask = None
        if self.pad_token_id is not None:
            # Left padding: the run of pad tokens at the start of each row.
            pad_mask = (input_ids == self.pad_token_id).to(torch.int32).cumprod(dim=1).bool()
        ids = input_ids
        if self.last_n > 0:
            ids = ids[:, -self.last_n :]
            pad_mask = None if pad_mask is None else pad_mask[:, -self.last_n :]
        # Ids the output row cannot hold (an embedding table larger than the head) match nothing.
        in_row = ids < scores.shape[-1]
        ids = ids.clamp(max=scores.shape[-1] - 1)
        valid = valid_positions(ids, self._exempt_on(ids.device), pad_mask) & in_row
        return penalize(
            scores,
            ids,
            valid,
            self.penalty,
            normalized=self.mode == "normalized",
            frequency=self.frequency_penalty,
            presence=self.presence_penalty,
        )

    def _exempt_on(self, device: torch.device) -> Optional[torch.Tensor]:
        if not self.exempt:
            return None
        if device not in self._exempt_tensors:
            self._exempt_tensors[device] = torch.tensor(self.exempt, dtype=torch.long, device=device)
        return self._exempt_tensors[device]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_fields()}, pad_token_id={self.pad_token_id})"


#: The former name, kept: the same class.
RepetitionPenalty = RepetitionPenaltyLogitsProcessor
