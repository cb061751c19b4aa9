"""The hf engine: HF transformers computes the logits and its own processors decide.

Per run and step the row goes through the stack's processors, in the note's order:
``Shift(c)`` (adds c to every logit) → the penalty → greedy (first index of the maximum):

- ctrl: transformers' ``RepetitionPenaltyLogitsProcessor(θ)`` (the note's driver);
- normalized: ``gauge_sampling.hf.RepetitionPenaltyLogitsProcessor(θ, mode="normalized")``;
- subtractive: a presence penalty α
  (``gauge_sampling.hf.RepetitionPenaltyLogitsProcessor(1, presence_penalty=α)``);
- θ = 1: no penalty (every op is switched off there, the validity gate).

The seen set is the whole prompt + output (HF's processors see all of ``input_ids``).

Sharing, as ``gauge probe`` does it: all runs of a prefix start as one sequence with one prefill;
at each step the runs of a group (same history) are decided on the group's row, and a group whose
runs pick different tokens splits: its KV-cache row is copied for each new group
(``Cache.reorder_cache`` with repeated indices). All groups of all prefixes of a chunk run as one
batch: left-padded prefill with an attention mask and position ids counted over real tokens only,
then one token per group per step (the command line switches the model's decode attention to
``hf_attention``'s grouped form, which reads each KV head once). Work is charged to the first run
of each group, as in the Rust decode (``forward_tokens``).

A2 (``json``) decodes the same way with a stop rule: a run whose ``stop`` callback says so leaves
its group after that token, an empty group leaves the batch (its KV-cache row is dropped), and
the others go on until ``tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from transformers import LogitsProcessor, RepetitionPenaltyLogitsProcessor

from ..hf import RepetitionPenaltyLogitsProcessor as GaugePenalty
from .engine import Loaded, RunOut, stage


class Shift(LogitsProcessor):
    """The gauge shift: ``c`` added to every logit of each row (``c`` is a [B] tensor or a float),
    in the scores' dtype, before any penalty."""

    def __init__(self, c):
        self.c = c

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        c = self.c
        if isinstance(c, torch.Tensor):
            c = c.to(device=scores.device, dtype=scores.dtype).unsqueeze(1)
        return scores + c


def penalty_processor(op: str, theta: float, alpha: float) -> Optional[LogitsProcessor]:
    """The stack's processor for one (op, θ): None when the penalty is off (θ = 1). ctrl is
    transformers' own processor; the others are gauge's, with the settings gauge-lab maps the
    operator to (``stage``)."""
    s = stage(op, theta, alpha)
    if theta == 1.0:
        return None
    if op == "ctrl":
        return RepetitionPenaltyLogitsProcessor(theta)
    return GaugePenalty(
        s["repeat_penalty"],
        mode=s["repeat_penalty_mode"],
        last_n=-1,
        presence_penalty=s["presence_penalty"],
    )


@dataclass
class _Group:
    job: int
    runs: list[int]
    history: list[int]  # prompt + generated


class HfEngine:
    """Decodes chunks of the probe's plan with a transformers causal LM (see the module doc)."""

    name = "hf"
    #: Chunks are decoded one at a time (the resumption unit).
    whole_phase = False
    raw_logits = True

    def __init__(self, model, device: str, tokenizer=None):
        self.model = model
        self.device = torch.device(device)
        self.tokenizer = tokenizer
        self._procs: dict = {}

    def decode_json(self, prompts: list[list[int]], plan: list[dict], max_tokens: int) -> list[list]:
        """A2: every run of ``plan`` from every prompt under ``gauge json``'s stop rule (see
        ``jsonrun``); the runs of a schema share its prefill and their sequence until they
        diverge, and leave the batch independently."""
        from .jsonrun import eog_ids
        from .tree_decode import decode_json

        eog = eog_ids(self.tokenizer, getattr(self.model, "generation_config", None))
        return decode_json(self, prompts, plan, max_tokens, eog)

    def _proc(self, op: str, theta: float, alpha: float):
        key = (op, theta, alpha)
        if key not in self._procs:
            self._procs[key] = penalty_processor(op, theta, alpha)
        return self._procs[key]

    @torch.inference_mode()
    def decode(
        self,
        prompts: list[list[int]],
        plan: list[dict],
        tokens: int,
        on_step: Callable[[int], None] = lambda n: None,
        stop: Optional[Callable[[int, int, list[int]], bool]] = None,
    ) -> list[list[RunOut]]:
        """Decode every run of ``plan`` from every prompt, ``tokens`` greedy tokens each, or until
        ``stop(job, run, tokens so far)`` is true after a token (that token kept)."""
        dev = self.device
        n_jobs = len(prompts)
        outs = [[RunOut() for _ in plan] for _ in prompts]
        for j, spec in enumerate(plan):
            if spec.get("role") == "zero_point":
                for o in outs:
                    o[j].zero_point = {"top1": [], "seen_positive": 0, "seen_total": 0}
        c_all = torch.tensor([float(s["c"]) for s in plan], dtype=torch.float32)
        # Prefill: one left-padded row per prompt.
        width = max(len(p) for p in prompts)
        ids = torch.zeros((n_jobs, width), dtype=torch.long)
        mask = torch.zeros((n_jobs, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
            outs[i][0].forward_tokens += len(p)
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        # Only the last position's logits are used (every row ends at its real last token):
        # the full-vocabulary head over every prompt position would be most of the prefill.
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1
        )
        cache = out.past_key_values
        logits = out.logits[:, -1, :].float()
        next_pos = mask.sum(-1)  # [G] position of each group's next token
        groups = [_Group(i, list(range(len(plan))), list(p)) for i, p in enumerate(prompts)]

        for t in range(tokens):
            picks = self._decide(groups, plan, c_all, logits, outs)
            new_groups: list[_Group] = []
            parents: list[int] = []
            new_tokens: list[int] = []
            for gi, g in enumerate(groups):
                order: list[int] = []
                by_tok: dict[int, list[int]] = {}
                for r, tok in zip(g.runs, picks[gi]):
                    outs[g.job][r].tokens.append(tok)
                    if stop is not None and stop(g.job, r, outs[g.job][r].tokens):
                        continue
                    if tok not in by_tok:
                        by_tok[tok] = []
                        order.append(tok)
                    by_tok[tok].append(r)
                for tok in order:
                    sub = by_tok[tok]
                    new_groups.append(_Group(g.job, sub, g.history + [tok]))
                    parents.append(gi)
                    new_tokens.append(tok)
            on_step(n_jobs)
            if t + 1 == tokens or not new_groups:
                break
            for g in new_groups:
                outs[g.job][g.runs[0]].forward_tokens += 1
            if parents != list(range(len(groups))):
                idx = torch.tensor(parents, dtype=torch.long, device=dev)
                cache.reorder_cache(idx)
                mask = mask.index_select(0, idx)
                next_pos = next_pos.index_select(0, idx)
            groups = new_groups
            mask = torch.cat([mask, torch.ones((len(groups), 1), dtype=mask.dtype, device=dev)], 1)
            step_ids = torch.tensor(new_tokens, dtype=torch.long, device=dev).unsqueeze(1)
            out = self.model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=next_pos.unsqueeze(1),
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1
        return outs

    def _decide(self, groups, plan, c_all, logits, outs) -> list[list[int]]:
        """Each run's greedy token on its group's row: Shift(c) → the op's processor → argmax.
        Runs of one (op, θ) go through their processor together; histories of unequal length
        are left-padded with the row's own first token, which changes no seen set (the
        penalties count membership; the presence penalty once per token)."""
        dev = logits.device
        row_of: list[int] = []
        run_of: list[tuple[int, int]] = []
        for gi, g in enumerate(groups):
            for r in g.runs:
                row_of.append(gi)
                run_of.append((gi, r))
        rows_idx = torch.tensor(row_of, dtype=torch.long, device=dev)
        plan_idx = torch.tensor([r for _, r in run_of], dtype=torch.long)
        scores = Shift(c_all[plan_idx])(None, logits.index_select(0, rows_idx))
        classes: dict[tuple, list[int]] = {}
        for k, (_, r) in enumerate(run_of):
            s = plan[r]
            if float(s["theta"]) != 1.0:
                classes.setdefault((s["op"], float(s["theta"]), float(s["alpha"])), []).append(k)
        for key, ks in classes.items():
            proc = self._proc(*key)
            hist = [groups[run_of[k][0]].history for k in ks]
            width = max(len(h) for h in hist)
            ids = torch.tensor([[h[0]] * (width - len(h)) + h for h in hist], dtype=torch.long, device=dev)
            sel = torch.tensor(ks, dtype=torch.long, device=dev)
            scores[sel] = proc(ids, scores.index_select(0, sel))
        picks_flat = scores.argmax(dim=-1).tolist()
        # Zero-point facts of the c = 0, θ = 1 run: raw max logit, seen logits above zero.
        for gi, r in run_of:
            zp = outs[groups[gi].job][r].zero_point
            if zp is not None:
                row = logits[gi]
                zp["top1"].append(float(row.max()))
                seen = torch.tensor(sorted(set(groups[gi].history)), dtype=torch.long, device=dev)
                zp["seen_positive"] += int((row.index_select(0, seen) > 0).sum())
                zp["seen_total"] += int(seen.numel())
        picks: list[list[int]] = [[] for _ in groups]
        for k, (gi, _) in enumerate(run_of):
            picks[gi].append(picks_flat[k])
        return picks


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """The hf engine on ``ref`` (a GGUF through its cached float32 conversion); records the
    attention implementation it switched the model to."""
    from . import models
    from .hf_attention import use_grouped_attention

    model, tok = models.load_engine_model(ref, dtype, device)
    use_grouped_attention(model)
    info["options"]["attention"] = model.config._attn_implementation
    return Loaded(HfEngine(model, device, tok), tok, int(model.get_output_embeddings().weight.shape[0]))
