"""gauge's sampler chain and its shift-invariant repetition penalty, for Python.

- :class:`Chain`: llama.cpp's sampler chain from gauge's request fields (the parser of the CLI and
  the server), sampling from numpy arrays or CPU torch tensors without copying them.
- :func:`replay`: the tokens a recorded trace replays to.
- :func:`parse_params`: request fields parsed and validated as the CLI and the server do.
- :func:`request_fields`: every request field gauge knows (the table the parser reads).
- :mod:`gauge_sampling.hf`: ``RepetitionPenalty``, a ``LogitsProcessor`` for HF transformers.
- :mod:`gauge_sampling.vllm`: ``RepetitionPenalty``, a custom logits processor for vLLM.

The penalty's ``mode="normalized"`` applies the multiplicative penalty to log-softmax rather than
to raw logits, so it means the same whatever constant the model's logits are shifted by.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Union

from ._native import Chain, __version__, parse_params_json, replay, request_fields_json

__all__ = ["Chain", "parse_params", "replay", "request_fields", "__version__"]


def parse_params(params: Union[Mapping[str, Any], str], n_vocab: Optional[int] = None) -> dict:
    """gauge's request fields parsed and validated exactly as the CLI and the server do, with
    every default filled in (canonical field names). Bad fields raise ``ValueError`` with the
    CLI's message; with ``n_vocab`` the token-id ranges are checked too."""
    return json.loads(parse_params_json(params, n_vocab))


def request_fields() -> dict:
    """Every request field gauge knows, from the table its parser reads (the same rows as
    docs/server.md and C's ``gauge_request_fields()``): ``sampling`` holds one dict per field
    (``name``, ``aliases`` [{``name``, ``from``}], ``json`` types, ``takes``, ``gguf``,
    ``read_with``, ``doc``) in the order they are read; ``refused``, ``constraint`` and
    ``no_effect`` the names gauge refuses unless neutral, hands to the constraint stage, or
    accepts with no effect."""
    return json.loads(request_fields_json())
