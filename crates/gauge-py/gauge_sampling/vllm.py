"""gauge's repetition penalty as a vLLM custom logits processor, switched on per request.

    from vllm import LLM, SamplingParams
    from gauge_sampling.vllm import RepetitionPenaltyLogitsProcessor

    llm = LLM(model=..., logits_processors=[RepetitionPenaltyLogitsProcessor])
    llm.generate(prompts, SamplingParams(extra_args={"repeat_penalty": 1.3}))

Over HTTP (``vllm serve ... --logits-processors gauge_sampling.vllm:RepetitionPenaltyLogitsProcessor``,
or with no flag through the ``vllm.logits_processors`` entry point the wheel installs) the same
fields go in ``vllm_xargs``. The fields are gauge's names (``repeat_penalty`` θ, 1 = off;
``repeat_penalty_mode``; ``repeat_last_n``, -1 = prompt and output, 0 = off; ``presence_penalty``,
``frequency_penalty``, ``penalty_exempt`` token ids), checked by gauge's parser. As every face of
the wheel, the defaults are the fix over the host's own seen set: ``repeat_penalty_mode``
``"normalized"`` and ``repeat_last_n`` -1 (prompt + output, what vLLM's ``repetition_penalty``
sees); ask for ``"ctrl"`` to get vLLM's (and llama.cpp's) sign-branched operator. (gauge serve
reads the same names with llama-server's defaults, ctrl over the last 64 tokens, because there
they must mean what llama-server means.) Requests without any of these fields are not touched.
``RepetitionPenalty`` is the same class under its former name.

One class serves both of vLLM's processor interfaces: the v1 one
(``vllm.v1.sample.logits_processor.LogitsProcessor``, what vLLM's CPU build runs) and, where the
installed vLLM has it, Model Runner V2's (``vllm.v1.worker.gpu.sample.logits_processor``). vLLM
loads entry-point plugins into whichever runner is active and refuses a class of the other
interface, so a single-interface class would break the other runner for every user of the wheel.
The constructor's arguments say which runner built it.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch
from vllm.exceptions import VLLMValidationError
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

from . import parse_params
from ._penalty import penalize

try:  # Model Runner V2 (absent from older vLLM builds)
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - depends on the installed vLLM
    V2LogitsProcessor = None

#: The ``extra_args`` / ``vllm_xargs`` fields this processor reads (gauge's request names).
FIELDS = (
    "repeat_penalty",
    "repeat_penalty_mode",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "penalty_exempt",
)

#: Where the processor's defaults differ from gauge's request fields (see the module doc).
DEFAULTS = {"repeat_penalty_mode": "normalized", "repeat_last_n": -1}


@dataclass(frozen=True)
class RequestPenalty:
    """One request's penalty settings, resolved by gauge's parser."""

    theta: float
    normalized: bool
    last_n: int  # -1: everything
    frequency: float
    presence: float
    exempt: tuple[int, ...]


def request_penalty(extra_args: Optional[Mapping[str, Any]]) -> Optional[RequestPenalty]:
    """The request's settings, or None when it does not ask for a penalty (or asks for none).

    Raises ``VLLMValidationError`` naming the field for a bad value (vLLM answers HTTP 400)."""
    if not extra_args:
        return None
    fields = {k: extra_args[k] for k in FIELDS if k in extra_args}
    if not fields:
        return None
    fields = {**DEFAULTS, **fields}
    try:
        p = parse_params(fields)
    except ValueError as e:
        field = re.search(r"`(\w+)`", str(e))
        name = field.group(1) if field else None
        raise VLLMValidationError(
            f"gauge_sampling: {e}",
            parameter=name,
            value=fields.get(name) if name else None,
        ) from e
    exempt = p["penalty_exempt"]
    texts = [t for t in exempt if not isinstance(t, int)]
    if texts:
        raise VLLMValidationError(
            f"gauge_sampling: `penalty_exempt` holds text {texts[0]!r}: "
            "the vLLM processor takes token ids only",
            parameter="penalty_exempt",
            value=texts[0],
        )
    pen = RequestPenalty(
        theta=float(p["repeat_penalty"]),
        normalized=p["repeat_penalty_mode"] == "normalized",
        last_n=int(p["repeat_last_n"]),
        frequency=float(p["frequency_penalty"]),
        presence=float(p["presence_penalty"]),
        exempt=tuple(exempt),
    )
    no_op = pen.theta == 1.0 and pen.frequency == 0.0 and pen.presence == 0.0
    return None if pen.last_n == 0 or no_op else pen


def _validate(sampling_params) -> None:
    request_penalty(getattr(sampling_params, "extra_args", None))


def _history_window(prompt: Sequence[int], output: Sequence[int], last_n: int) -> list[int]:
    """The last ``last_n`` tokens of prompt + output (all of them for -1), without copying the
    prompt when the output alone fills the window."""
    if last_n < 0:
        return list(prompt) + list(output)
    if len(output) >= last_n:
        return list(output[len(output) - last_n :])
    need = last_n - len(output)
    return list(prompt[max(0, len(prompt) - need) :]) + list(output)


def _apply_group(
    logits: torch.Tensor,
    rows: list[int],
    pens: list[RequestPenalty],
    ids: torch.Tensor,
    valid: torch.Tensor,
    normalized: bool,
) -> None:
    """Penalise ``logits[rows]`` in place, one vectorised call for rows of one mode."""
    dev = logits.device
    exempt_width = max(len(p.exempt) for p in pens)
    if exempt_width:
        ex = torch.full((len(pens), exempt_width), -1, dtype=torch.long)
        for i, p in enumerate(pens):
            ex[i, : len(p.exempt)] = torch.tensor(p.exempt, dtype=torch.long)
        valid = valid & ~(ids.unsqueeze(2) == ex.to(dev).unsqueeze(1)).any(dim=2)

    def column(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32).to(dev).unsqueeze(1)

    subtract = any(p.frequency or p.presence for p in pens)
    row_index = torch.tensor(rows, dtype=torch.long).to(dev)
    sub = logits.index_select(0, row_index)
    out = penalize(
        sub,
        ids,
        valid,
        column([p.theta for p in pens]),
        normalized,
        column([p.frequency for p in pens]) if subtract else 0.0,
        column([p.presence for p in pens]) if subtract else 0.0,
        inplace=True,
    )
    logits.index_copy_(0, row_index, out.to(logits.dtype))


class _Requests(dict):
    """Batch row (v1) or request slot (Model Runner V2) -> what the processor keeps for it, for
    the requests that ask for a penalty. Both interfaces add through :meth:`set`; the v1 one
    also removes and moves rows, in the order ``BatchUpdate`` documents: removed, added, moved
    (vLLM's own sparse processors share ``process_dict_updates`` the same way)."""

    def set(self, index: int, sampling_params, history: tuple = ()) -> bool:
        """Record the request's settings (with ``history`` after them, when given); False, and
        nothing kept, when it asks for no penalty."""
        pen = request_penalty(getattr(sampling_params, "extra_args", None))
        if pen is None:
            self.pop(index, None)
            return False
        self[index] = (pen, *history) if history else pen
        return True

    def apply_update(self, batch_update: Optional[BatchUpdate]) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.pop(index, None)
        for index, params, prompt_ids, output_ids in batch_update.added:
            self.set(index, params, (prompt_ids or (), output_ids))
        for a, b, direction in batch_update.moved:
            entry_a = self.pop(a, None)
            entry_b = self.pop(b, None)
            if entry_a is not None:
                self[b] = entry_a
            if direction == MoveDirectionality.SWAP and entry_b is not None:
                self[a] = entry_b


class _V1State:
    """The v1 interface: batch row -> (settings, prompt ids, live output ids)."""

    def __init__(self) -> None:
        self.rows = _Requests()

    def update(self, batch_update: Optional[BatchUpdate]) -> None:
        self.rows.apply_update(batch_update)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for normalized in (False, True):
            rows = sorted(i for i, (p, _, _) in self.rows.items() if p.normalized == normalized)
            if not rows:
                continue
            pens = [self.rows[i][0] for i in rows]
            windows = [_history_window(pr, out, pen.last_n) for pen, pr, out in (self.rows[i] for i in rows)]
            width = max(1, max(len(w) for w in windows))
            # One tensor from the padded lists; -1 pads, and like any id the row cannot hold
            # (vLLM's placeholders included) it matches nothing.
            ids = torch.tensor([w + [-1] * (width - len(w)) for w in windows], dtype=torch.long)
            vocab = logits.shape[1]
            valid = (ids >= 0) & (ids < vocab)
            ids.clamp_(min=0, max=vocab - 1)
            dev = logits.device
            _apply_group(logits, rows, pens, ids.to(dev), valid.to(dev), normalized)
        return logits


class _V2State:
    """Model Runner V2 bookkeeping: request slot -> settings; history read from the runner."""

    def __init__(self, req_states) -> None:
        self.req_states = req_states
        self.slots = _Requests()

    def add(self, slot: int, sampling_params) -> bool:
        return self.slots.set(slot, sampling_params)

    def apply(self, logits: torch.Tensor, ctx) -> torch.Tensor:
        if not self.slots:
            return logits
        if logits.shape[0] == len(ctx.idx_mapping_np):
            row_slots = [int(s) for s in ctx.idx_mapping_np]  # host copy: no device sync
        else:  # speculative decoding: several rows per request
            row_slots = ctx.expanded_idx_mapping.tolist()
        dev = logits.device
        all_ids = self.req_states.all_token_ids.gpu
        total_len = self.req_states.total_len.gpu
        for normalized in (False, True):
            rows = [
                r
                for r, s in enumerate(row_slots)
                if s in self.slots and self.slots[s].normalized == normalized
            ]
            if not rows:
                continue
            pens = [self.slots[row_slots[r]] for r in rows]
            slots = torch.tensor([row_slots[r] for r in rows], dtype=torch.long).to(dev)
            lens = total_len.index_select(0, slots).to(torch.long)
            last_n = torch.tensor([p.last_n for p in pens], dtype=torch.long).to(dev)
            win = torch.where(last_n < 0, lens, torch.minimum(lens, last_n.clamp(min=0)))
            width = all_ids.shape[1]
            caps = [p.last_n if p.last_n >= 0 else width for p in pens]
            width = max(1, min(width, max(caps)))
            j = torch.arange(width, device=dev).unsqueeze(0)
            pos = (lens - win).unsqueeze(1) + j
            valid = j < win.unsqueeze(1)
            pos = pos.clamp(max=all_ids.shape[1] - 1)
            ids = all_ids[slots.unsqueeze(1), pos].to(torch.long)
            vocab = logits.shape[1]
            valid &= (ids >= 0) & (ids < vocab)
            ids = ids.clamp(min=0, max=vocab - 1)
            _apply_group(logits, rows, pens, ids, valid, normalized)
        return logits


# id(vllm_config) -> the instance serving that engine (which holds the config, so the id stays its).
_SERVING: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _claim(vllm_config, instance) -> bool:
    """True for the first instance built for an engine. The wheel's entry point loads the class
    into every engine, so an engine also given it in ``logits_processors`` builds it twice; only
    the first one acts, and the penalty is applied once."""
    first = _SERVING.get(id(vllm_config))
    if first is not None and first._vllm_config is vllm_config:
        return False
    instance._vllm_config = vllm_config
    _SERVING[id(vllm_config)] = instance
    return True


_BASES = (V1LogitsProcessor,) if V2LogitsProcessor is None else (V1LogitsProcessor, V2LogitsProcessor)


class RepetitionPenaltyLogitsProcessor(*_BASES):
    """gauge's repeat / presence / frequency penalties for the requests that ask for them.

    v1 runner: ``RepetitionPenaltyLogitsProcessor(vllm_config, device, is_pin_memory)``; Model
    Runner V2: ``RepetitionPenaltyLogitsProcessor(vllm_config, req_states)``.
    """

    def __init__(self, vllm_config, *args) -> None:
        if len(args) == 2:
            self._v1: Optional[_V1State] = _V1State()
            self._v2: Optional[_V2State] = None
        elif len(args) == 1:
            self._v1, self._v2 = None, _V2State(args[0])
        else:
            raise TypeError(
                "RepetitionPenaltyLogitsProcessor(vllm_config, device, is_pin_memory) (v1) or "
                "RepetitionPenaltyLogitsProcessor(vllm_config, req_states) (Model Runner V2)"
            )
        self.active = _claim(vllm_config, self)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Refuse bad gauge fields in ``extra_args`` (HTTP 400 naming the field)."""
        _validate(sampling_params)

    def is_argmax_invariant(self) -> bool:
        """The penalty changes which token is largest: greedy requests must run it too."""
        return False

    # -- v1 interface ------------------------------------------------------------------------
    def update_state(self, batch_update: Optional[BatchUpdate]) -> None:
        if self.active:
            self._v1.update(batch_update)

    # -- Model Runner V2 interface -----------------------------------------------------------
    def add_request(self, req_idx: int, sampling_params) -> bool:
        return self.active and self._v2.add(req_idx, sampling_params)

    def apply_staged_writes(self) -> None:
        """Nothing is staged: the settings stay on the host."""

    # -- both --------------------------------------------------------------------------------
    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        if not self.active:
            return logits
        if self._v2 is not None:
            return self._v2.apply(logits, ctx)
        if not self._v1.rows:
            return logits
        return self._v1.apply(logits)


#: The former name, kept: the same class (``--logits-processors gauge_sampling.vllm:RepetitionPenalty``
#: still works).
RepetitionPenalty = RepetitionPenaltyLogitsProcessor
