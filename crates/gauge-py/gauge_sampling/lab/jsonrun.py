"""A2's run loop for the Python engines: gauge-lab's plan and run directory
(``_native.JsonRun``), an engine's decode, gauge-lab's lines, summary, report and plot.

The stop rule is ``gauge json``'s: a run ends after an end-of-generation token of the stack's
tokenizer, when its generated text (the stack's tokenizer's decode of the generated tokens,
control tokens as nothing) contains a stop string (the token that completed it is kept), or at
``max_tokens``; gauge-lab checks every output against the rule when it is appended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import _native
from .engine import JsonOut  # noqa: F401  (re-exported: engines built it from here before engine.py)

STOP_STRINGS = tuple(_native.json_stop_strings())


def eog_ids(tokenizer, generation_config=None) -> set[int]:
    """The stack's end-of-generation tokens: the tokenizer's EOS and the generation config's
    (what ``generate`` stops at)."""
    ids: set[int] = set()
    for src in (tokenizer, generation_config):
        v = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(int(x) for x in v)
    return ids


def generated_text(tokenizer, tokens: list[int]) -> str:
    """The generated text as ``gauge json`` records it: control tokens render as nothing, no
    clean-up of spaces."""
    return tokenizer.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def prompt_tokens(tokenizer, texts: list[str], chat: bool) -> list[list[int]]:
    """The prompts: the user message through the tokenizer's own chat template (generation
    prompt added; the template writes any BOS itself) or as is, special-token text parsed."""
    out = []
    for text in texts:
        if chat:
            wrapped = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
            out.append(list(tokenizer(wrapped, add_special_tokens=False)["input_ids"]))
        else:
            out.append(list(tokenizer(text)["input_ids"]))
    return out


def progress_bar(total: int, initial: int, label: str):
    """A progress bar with ETA on stderr (tqdm; hidden when stderr is not a terminal)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with transformers and vLLM
        return None
    return tqdm(total=total, initial=initial, desc=label, unit="schemas", file=sys.stderr, disable=None)


def run_json(
    engine, prompts: list[list[int]], cfg_json: str, out_root: Path, n_vocab: int, plots: bool = True
):
    """Run (or resume) A2 of ``cfg_json`` on ``engine``; returns (summary dict, run dir)."""
    cfg = json.loads(cfg_json)
    run = _native.JsonRun(str(out_root), cfg_json, prompts, n_vocab)
    pending = run.pending_chunks()
    if pending:
        plan = json.loads(run.plan_json())
        done = cfg["schemas"] - sum(len(run.chunk_schemas(k)) for k in pending)
        bar = progress_bar(cfg["schemas"], done, "A2 json ")
        groups = [pending] if engine.whole_phase else [[k] for k in pending]
        for ks in groups:
            jobs = [(k, s) for k in ks for s in run.chunk_schemas(k)]
            outs = engine.decode_json([prompts[s] for _, s in jobs], plan, cfg["max_tokens"])
            for k in ks:
                runs = [
                    {
                        "schema": s,
                        "run": r,
                        "tokens": o.tokens,
                        "output": o.output,
                        "eog": o.eog,
                        "forward_tokens": o.forward_tokens,
                    }
                    for (kk, s), per_run in zip(jobs, outs)
                    if kk == k
                    for r, o in enumerate(per_run)
                ]
                run.append_chunk(k, json.dumps(runs))
                if bar is not None:
                    bar.update(len(run.chunk_schemas(k)))
        if bar is not None:
            bar.close()
    return json.loads(run.finish(plots)), Path(run.dir)
