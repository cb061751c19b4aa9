"""The one contract every Python engine of the instrument implements
(``python -m gauge_sampling probe|json --engine E``).

An engine is the logit source and the stack's own sampler; gauge-lab (through ``_native``) owns
the plan, the run directory and resumption, the analysis and the report. Adding an engine is:

1. a module ``lab/<module>_engine.py`` with ``load(args, ref, device, dtype, info,
   max_model_len) -> Loaded`` (``ENGINES`` below names the module), which records what can change
   the numbers in ``info`` (``info["versions"]``, ``info["options"]``: the seen set, URL, ...);
2. a class implementing :class:`Engine`;
3. the stack's name in gauge-lab's ``Stack`` (``crates/gauge-lab/src/stack.rs``).

Every engine decides greedily on the row ``penalty(shift(logits, c))``: ``shift`` adds the plan's
``c`` to every logit before the stack's penalty (ctrl: the stack's own sign-branched penalty;
normalized: gauge's, through the stack's plug-in point; subtractive: a presence penalty α), and
θ = 1 switches every op off (the validity gate). The seen set is the protocol's (prompt + every
generated token, no window) unless the engine runs with ``--seen engine``: then it is the
engine's own default scope, recorded in ``info["options"]["seen"]``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Protocol, runtime_checkable

from .. import _native


def usable_cpus() -> int:
    """The CPUs this process may run on. ``os.cpu_count()`` counts the machine's, so under
    ``taskset`` or a cpuset (``scripts/test.sh`` pins its Python tests to their own cores) it
    would start more threads than there are cores, and torch's and llama.cpp's threads spin at
    their barriers: a decode then takes many times longer."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity call (macOS)
        return os.cpu_count() or 1


#: ``--engine`` → the module under ``gauge_sampling.lab`` with its ``load`` function.
ENGINES: dict[str, str] = {
    "hf": "hf_engine",
    "vllm": "vllm_engine",
    "llama-cpp-python": "llama_cpp_engine",
    "openai": "openai_engine",
    "mlx": "mlx_engine",
    "ort-genai": "ort_genai_engine",
}

#: ``--seen``: the protocol's seen set, or the engine's own default scope.
SEEN = ("protocol", "engine")


@dataclass
class RunOut:
    """One probe run of one prompt: the greedy tokens, the tokens the model evaluated for it
    (shared work charged to the first run of a group), and for the plan's ``zero_point`` run the
    raw-logit facts ``{"top1": [...], "seen_positive": n, "seen_total": n}`` (None otherwise, and
    for an engine without raw logits, ``Engine.raw_logits = False``)."""

    tokens: list[int] = field(default_factory=list)
    forward_tokens: int = 0
    zero_point: Optional[dict] = None


@dataclass
class JsonOut:
    """One A2 run of one schema prompt under ``gauge json``'s stop rule (``jsonrun``)."""

    tokens: list[int]
    output: str
    eog: bool
    forward_tokens: int


@runtime_checkable
class Engine(Protocol):
    """What the probe and json loops (``probe.run_probe``, ``jsonrun.run_json``) call."""

    #: The ``--engine`` word, as in gauge-lab's ``Stack``.
    name: str
    #: True: the loops hand over a whole phase at once (the engine batches itself, vLLM);
    #: False: one chunk (the resumption unit) at a time.
    whole_phase: bool
    #: False for an engine that cannot see raw logits (a server over HTTP): the probe leaves the
    #: zero-point statistics out and the report says so.
    raw_logits: bool

    def decode(
        self,
        prompts: list[list[int]],
        plan: list[dict],
        tokens: int,
        on_step: Callable[[int], None] = ...,
    ) -> list[list[RunOut]]:
        """Every run of ``plan`` (gauge-lab's ``RunSpec``s: op, theta, c, alpha, role) from every
        prompt, ``tokens`` greedy tokens each; ``on_step(n)`` after each step of ``n`` prompts."""
        ...

    def decode_json(self, prompts: list[list[int]], plan: list[dict], max_tokens: int) -> list[list[JsonOut]]:
        """A2: every run of ``plan`` from every prompt under ``gauge json``'s stop rule."""
        ...

    def close(self) -> None:
        """Release workers, servers, memory (called however the run ends)."""
        ...


class Loaded(NamedTuple):
    """What an engine's ``load`` returns: the engine, the stack's tokenizer (an HF tokenizer:
    ``__call__``, ``decode``, ``apply_chat_template``, ``eos_token_id``) and the vocabulary size of
    the logit rows."""

    engine: Engine
    tokenizer: Any
    n_vocab: int


def module_of(name: str) -> str:
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"--engine: unknown engine {name!r} (allowed: {', '.join(ENGINES)})") from None


def stage(op: str, theta: float, alpha: float) -> dict:
    """The ``penalties`` stage an operator asks for, in gauge's request fields
    (``repeat_penalty``, ``repeat_penalty_mode``, ``presence_penalty``): gauge-lab's one map from
    the note's operators to settings, so an engine that runs gauge's processor asks it for exactly
    what ``gauge probe`` runs. ``ValueError`` naming an unknown op."""
    return json.loads(_native.op_stage(op, theta, alpha))
