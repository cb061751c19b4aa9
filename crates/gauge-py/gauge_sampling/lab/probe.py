"""The probe's run loop for the Python engines: gauge-lab's plan and run directory
(``_native.ProbeRun``), an engine's decode, gauge-lab's analysis and report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import _native


def progress_bar(total: int, initial: int, label: str):
    """A progress bar with ETA on stderr (tqdm; hidden when stderr is not a terminal)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with transformers and vLLM
        return None
    return tqdm(total=total, initial=initial, desc=label, unit="prefix-pos", file=sys.stderr, disable=None)


def batches(run, pending: list[int], runs_per_prompt: int, max_runs: int) -> list[list[int]]:
    """Pending chunks grouped into decode batches of at most ``max_runs`` runs (a chunk that is
    larger on its own is still one batch). Fewer, larger batches stream the weights through
    fewer forward passes; each chunk is still written (and resumed) on its own."""
    out: list[list[int]] = []
    cur: list[int] = []
    n = 0
    for k in pending:
        m = len(run.chunk_prefixes(k)) * runs_per_prompt
        if cur and n + m > max_runs:
            out.append(cur)
            cur, n = [], 0
        cur.append(k)
        n += m
    if cur:
        out.append(cur)
    return out


def run_probe(
    engine,
    prompts: list[list[int]],
    cfg_json: str,
    out_root: Path,
    n_vocab: int,
    plots: bool = True,
    max_runs: int = 256,
):
    """Run (or resume) the probe of ``cfg_json`` on ``engine``; returns (summary dict, run dir).
    Runs are decoded in batches of at most ``max_runs`` (``--n-seq-max``), or a whole phase at
    once for an engine that batches itself. Raises ``_native.GateFailed`` after writing every
    output if an op flips at θ = 1."""
    cfg = json.loads(cfg_json)
    run = _native.ProbeRun(str(out_root), cfg_json, prompts, n_vocab)
    tokens = cfg["tokens"]
    for phase in (0, 1):
        pending = run.pending_chunks(phase)
        if not pending:
            continue
        plan = json.loads(run.plan_json(phase))
        total = cfg["prefixes"] * tokens
        done = total - sum(len(run.chunk_prefixes(k)) for k in pending) * tokens
        label = f"A1 {run.grid_label} " if phase == 0 else "A1 own-median gauge "
        bar = progress_bar(total, done, label)
        step = bar.update if bar is not None else (lambda n: None)
        groups = [pending] if engine.whole_phase else batches(run, pending, len(plan), max_runs)
        for ks in groups:
            jobs = [(k, p) for k in ks for p in run.chunk_prefixes(k)]
            outs = engine.decode([prompts[p] for _, p in jobs], plan, tokens, step)
            for k in ks:
                runs = []
                for (kk, p), per_run in zip(jobs, outs):
                    if kk != k:
                        continue
                    for r, o in enumerate(per_run):
                        d = {"prefix": p, "run": r, "tokens": o.tokens, "forward_tokens": o.forward_tokens}
                        if o.zero_point is not None:
                            d["zero_point"] = o.zero_point
                        runs.append(d)
                run.append_chunk(phase, k, json.dumps(runs))
        if bar is not None:
            bar.close()
    return json.loads(run.finish(plots)), Path(run.dir)
