"""A shared decode for batch-1 engines that can rewind their state (mlx-lm's trimmable KV cache,
onnxruntime-genai's ``rewind_to``): the runs of one prompt walk their decode tree depth first.

All runs of a prompt start as one group at the prompt; at each node the engine decides every
run of the group on the node's row, the runs that pick the same token go on as one child, and
each child is one forward step from the node's state (the state rewound to the node's length
first). So a token is evaluated once per tree node, charged to the first run of the group that
reaches it, as the hf engine's grouped decode does, with no copies of any cache.

An engine supplies a ``Source``:

- ``start(prompt) -> row``: reset the state to the prompt, the row of the next token;
- ``extend(token) -> row``: one token appended to the state (of length ``len(history)``);
- ``rewind(length)``: drop the state back to ``length`` tokens;
- ``decide(row, history, runs) -> tokens``: each run's greedy token at this node (the state is
  at ``len(history)`` and must be left there);
- ``zero_point(row, history) -> (top1, seen_positive, seen_total)``: the raw-row facts.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from .engine import RunOut


class Source(Protocol):
    def start(self, prompt: list[int]): ...

    def extend(self, token: int): ...

    def rewind(self, length: int) -> None: ...

    def decide(self, row, history: list[int], runs: list[int]) -> list[int]: ...

    def zero_point(self, row, history: list[int]) -> tuple[float, int, int]: ...


def decode_prompt(
    src: Source,
    prompt: list[int],
    plan: list[dict],
    runs: list[int],
    tokens: int,
    outs: list[RunOut],
    stop: Optional[Callable[[int, list[int]], bool]] = None,
) -> None:
    """Decode ``runs`` (indices into ``plan``) from ``prompt``, ``tokens`` greedy tokens each or
    until ``stop(run, tokens so far)`` after a token (kept), into ``outs`` (indexed by run)."""
    if not runs or tokens <= 0:
        return
    zp_runs = {r for r in runs if plan[r].get("role") == "zero_point"}
    for r in zp_runs:
        if outs[r].zero_point is None:
            outs[r].zero_point = {"top1": [], "seen_positive": 0, "seen_total": 0}
    row = src.start(list(prompt))
    outs[runs[0]].forward_tokens += len(prompt)
    # Pending children: (runs, parent history, token); the first popped is the first child.
    pending: list[tuple[list[int], list[int], Optional[int]]] = [(runs, list(prompt), None)]
    while pending:
        group, hist, tok = pending.pop()
        if tok is not None:
            src.rewind(len(hist))
            row = src.extend(tok)
            outs[group[0]].forward_tokens += 1
            hist = hist + [tok]
        picks = src.decide(row, hist, group)
        for r in group:
            if r in zp_runs:
                top1, pos, tot = src.zero_point(row, hist)
                zp = outs[r].zero_point
                zp["top1"].append(top1)
                zp["seen_positive"] += pos
                zp["seen_total"] += tot
        order: list[int] = []
        by_tok: dict[int, list[int]] = {}
        for r, t in zip(group, picks):
            outs[r].tokens.append(int(t))
            if stop is not None and stop(r, outs[r].tokens):
                continue
            if len(outs[r].tokens) >= tokens:
                continue
            if t not in by_tok:
                by_tok[t] = []
                order.append(t)
            by_tok[t].append(r)
        for t in reversed(order):
            pending.append((by_tok[t], hist, t))


def decode_json(engine, prompts: list[list[int]], plan: list[dict], max_tokens: int, eog: set[int]):
    """A2 for an engine whose ``decode`` takes ``stop(job, run, tokens)`` (the hf engine and the
    tree-decoding ones): ``gauge json``'s stop rule, an end-of-generation id of ``eog`` or a stop
    string in the generated text."""
    from .engine import JsonOut
    from .jsonrun import STOP_STRINGS, generated_text

    tok = engine.tokenizer
    ended: dict[tuple[int, int], bool] = {}

    def stop(job: int, run: int, tokens: list[int]) -> bool:
        if tokens[-1] in eog:
            ended[(job, run)] = True
            return True
        text = generated_text(tok, tokens[-4:])
        if not any(s[0] in text for s in STOP_STRINGS):
            return False
        return any(s in generated_text(tok, tokens) for s in STOP_STRINGS)

    outs = engine.decode(prompts, plan, max_tokens, stop=stop)
    return [
        [
            JsonOut(
                tokens=o.tokens,
                output=generated_text(tok, o.tokens),
                eog=ended.get((j, r), False),
                forward_tokens=o.forward_tokens,
            )
            for r, o in enumerate(per_run)
        ]
        for j, per_run in enumerate(outs)
    ]
