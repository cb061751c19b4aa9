"""The repeat / frequency / presence penalties on a batch of logit rows, in torch.

One implementation for the HF and vLLM processors, with the definitions of gauge's ``penalties``
stage (crates/gauge-sampling/src/samplers/penalties.rs):

- the seen set is the (windowed) history, minus positions marked invalid (padding, exempt ids);
- ``ctrl``: a seen logit ``z`` becomes ``z * theta`` when ``z < 0`` and ``z / theta`` otherwise
  (HF's exact expression; llama.cpp's ``z <= 0`` gives the same value at 0);
- ``normalized``: the whole row becomes ``log_softmax(z)`` (float32) and a seen entry ``l``
  becomes ``l * theta``: ``p -> p**theta`` before renormalisation, whatever the row's offset;
- then ``count * frequency + (count > 0) * presence`` is subtracted from every seen entry
  (the repeat penalty applies once per token, the frequency penalty once per occurrence).

Everything is gather/scatter over the history positions plus, for ``normalized``, one
log-softmax over the row: no Python loop over rows or the vocabulary, on any device and dtype.
"""

from __future__ import annotations

from typing import Union

import torch

Scalar = Union[float, torch.Tensor]  # a float, or a [B, 1] tensor of per-row values


def valid_positions(
    ids: torch.Tensor, exempt: torch.Tensor | None, pad_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The history positions that count as seen: not padding and not an exempt id."""
    valid = torch.ones_like(ids, dtype=torch.bool) if pad_mask is None else ~pad_mask
    if exempt is not None and exempt.numel() > 0:
        valid &= ~torch.isin(ids, exempt)
    return valid


def penalize(
    logits: torch.Tensor,
    ids: torch.Tensor,
    valid: torch.Tensor,
    theta: Scalar,
    normalized: bool,
    frequency: Scalar = 0.0,
    presence: Scalar = 0.0,
    inplace: bool = False,
) -> torch.Tensor:
    """Penalised copy of ``logits`` [B, V] (or ``logits`` itself, changed, when ``inplace``).

    ``ids`` [B, L] (int64, on the logits' device) is each row's history window and ``valid``
    [B, L] says which positions count. ``theta``, ``frequency`` and ``presence`` are floats or
    [B, 1] tensors.
    """
    if normalized:
        base = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    elif inplace:
        base = logits
    else:
        base = logits.clone()
    if ids.shape[1] > 0:
        # Positions that do not count write the value of a position that does (the first valid
        # one), so duplicate scatter indices always carry equal values; a row with no valid
        # position writes its own unchanged value back.
        has_valid = valid.any(dim=1, keepdim=True)
        anchor = ids.gather(1, valid.to(torch.uint8).argmax(dim=1, keepdim=True))
        ids_eff = torch.where(valid, ids, anchor)
        z = base.gather(1, ids_eff)
        if normalized:
            pen = z * theta
        else:
            pen = torch.where(z < 0, z * theta, z / theta)
        if _nonzero(frequency) or _nonzero(presence):
            counts = torch.zeros(base.shape, dtype=torch.float32, device=base.device)
            counts.scatter_add_(1, ids_eff, valid.to(torch.float32))
            n = counts.gather(1, ids_eff)
            pen = pen - (n * frequency + (n > 0).to(torch.float32) * presence).to(pen.dtype)
        pen = torch.where(has_valid, pen, z)
        base.scatter_(1, ids_eff, pen)
    if normalized:
        base = base.to(logits.dtype)
        if inplace:
            logits.copy_(base)
            return logits
    return base


def _nonzero(x: Scalar) -> bool:
    if isinstance(x, torch.Tensor):
        return bool((x != 0).any())
    return x != 0.0
