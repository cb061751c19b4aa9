"""gauge's sampler chain and its shift-invariant repetition penalty, for Python.

- :class:`Chain`: llama.cpp's sampler chain from gauge's request fields (the parser of the CLI and
  the server), sampling from numpy arrays or CPU torch tensors without copying them.
- :func:`replay`: the tokens a recorded trace replays to.
- :func:`parse_params`: request fields parsed and validated as the CLI and the server do.
- :mod:`gauge_sampling.hf`: ``RepetitionPenalty``, a ``LogitsProcessor`` for HF transformers.
- :mod:`gauge_sampling.vllm`: ``RepetitionPenalty``, a custom logits processor for vLLM.

The penalty's ``mode="normalized"`` applies the multiplicative penalty to log-softmax rather than
to raw logits, so it means the same whatever constant the model's logits are shifted by.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Union

from ._native import Chain, __version__, parse_params_json, replay

__all__ = ["Chain", "parse_params", "replay", "__version__"]


def parse_params(params: Union[Mapping[str, Any], str], n_vocab: Optional[int] = None) -> dict:
    """gauge's request fields parsed and validated exactly as the CLI and the server do, with
    every default filled in (canonical field names). Bad fields raise ``ValueError`` with the
    CLI's message; with ``n_vocab`` the token-id ranges are checked too."""
    return json.loads(parse_params_json(params, n_vocab))
