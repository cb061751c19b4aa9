"""The vllm engine: vLLM computes the logits and decides; every run of a phase goes to ONE
``LLM.generate`` (vLLM batches the requests and caches their shared prompts itself).

Per request (one run of one prefix), in the order vLLM's sampler applies them:

1. ``ProbeProcessor`` (a custom logits processor, v1 interface), for requests whose
   ``extra_args["gauge_probe"]`` asks: records the zero-point facts of the raw row (c = 0, θ = 1
   run), adds the gauge shift c to every logit, then applies gauge's penalty where the op is
   gauge's: ``normalized`` (θ on log-softmax) and ``subtractive`` (presence α on every seen token,
   prompt included, as the note defines it: vLLM's own ``presence_penalty`` counts output tokens
   only);
2. vLLM's own ``repetition_penalty`` = θ for ctrl (prompt ∪ output, ``> 0`` divides): the stack's
   sign-branched penalty, applied after every custom processor;
3. greedy (temperature 0).

The processor is a class of this module rather than gauge's ``RepetitionPenalty`` plugin because
vLLM runs entry-point plugins before the processors given to ``LLM``: the shift must come first.
Zero-point facts are appended to a file named in the request (so they also arrive from vLLM's
worker processes under tensor parallelism), one line per (request, step); the last line of a step
wins (a recomputed step rewrites it).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

import torch

from .engine import Loaded, RunOut, stage


def _configure_env(device: str, tp: int) -> None:
    """vLLM reads these at import: in-process engine on one CPU, offline."""
    # vLLM logs to stdout by default; stdout is the table or `--json`'s summary.
    defaults = {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    }
    if device == "cpu":
        defaults.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "2"})
    if tp == 1:
        defaults["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    for k, v in defaults.items():
        os.environ.setdefault(k, v)


def _processor_class():
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

    from ..vllm import RequestPenalty, _apply_group

    class ProbeProcessor(V1LogitsProcessor):
        """Shift c, zero-point recording and gauge's penalties for the probe's requests."""

        def __init__(self, vllm_config, device, is_pin_memory) -> None:
            self.rows: dict[int, tuple[dict, object, list]] = {}

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            probe = (getattr(sampling_params, "extra_args", None) or {}).get("gauge_probe")
            if probe is not None and not isinstance(probe.get("c"), (int, float)):
                raise ValueError("gauge_probe.c: a number expected")

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: Optional[BatchUpdate]) -> None:
            if batch_update is None:
                return
            for index in batch_update.removed:
                self.rows.pop(index, None)
            for index, params, prompt_ids, output_ids in batch_update.added:
                probe = (getattr(params, "extra_args", None) or {}).get("gauge_probe")
                if probe is None:
                    self.rows.pop(index, None)
                else:
                    self.rows[index] = (probe, prompt_ids or (), output_ids)
            for a, b, direction in batch_update.moved:
                ea, eb = self.rows.pop(a, None), self.rows.pop(b, None)
                if ea is not None:
                    self.rows[b] = ea
                if direction == MoveDirectionality.SWAP and eb is not None:
                    self.rows[a] = eb

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if not self.rows:
                return logits
            dev = logits.device
            rows = sorted(i for i in self.rows if i < logits.shape[0])
            for i in rows:
                probe, prompt, out = self.rows[i]
                if probe.get("dump") and not out:
                    # The logits check (``VllmEngine.next_row``): the raw first row, before the shift.
                    torch.save(logits[i].detach().float().cpu().clone(), probe["dump"])
                if probe.get("record"):
                    row = logits[i]
                    seen = torch.tensor(sorted(set(prompt) | set(out)), dtype=torch.long, device=dev)
                    line = {
                        "key": probe["key"],
                        "step": len(out),
                        "top1": float(row.max()),
                        "pos": int((row.index_select(0, seen) > 0).sum()),
                        "tot": int(seen.numel()),
                    }
                    with open(probe["record"], "a") as f:
                        f.write(json.dumps(line) + "\n")
            idx = torch.tensor(rows, dtype=torch.long, device=dev)
            c = torch.tensor([float(self.rows[i][0]["c"]) for i in rows], dtype=logits.dtype, device=dev)
            logits.index_copy_(0, idx, logits.index_select(0, idx) + c.unsqueeze(1))
            for normalized in (True, False):
                stages = {i: self.rows[i][0].get("stage") for i in rows}
                sel = [
                    i
                    for i, st in stages.items()
                    if st and (st["repeat_penalty_mode"] == "normalized") == normalized
                ]
                if not sel:
                    continue
                pens = [
                    RequestPenalty(
                        theta=stages[i]["repeat_penalty"],
                        normalized=normalized,
                        last_n=-1,
                        frequency=0.0,
                        presence=stages[i]["presence_penalty"],
                        exempt=(),
                    )
                    for i in sel
                ]
                hist = [list(self.rows[i][1]) + list(self.rows[i][2]) for i in sel]
                width = max(1, max(len(h) for h in hist))
                ids = torch.tensor([h + [-1] * (width - len(h)) for h in hist], dtype=torch.long)
                valid = ids >= 0
                ids.clamp_(min=0, max=logits.shape[1] - 1)
                _apply_group(logits, sel, pens, ids.to(dev), valid.to(dev), normalized)
            return logits

    return ProbeProcessor


def probe_request(spec: dict, key: str) -> tuple[dict, float]:
    """One run's ``gauge_probe`` request for ``ProbeProcessor`` (the shift, and gauge's stage for
    normalized and subtractive, as gauge-lab maps the op: ``stage``) and the ``repetition_penalty``
    vLLM's own sampler applies (ctrl's θ; 1 otherwise)."""
    s = stage(spec["op"], float(spec["theta"]), float(spec.get("alpha", 1.0)))
    probe = {"c": float(spec["c"]), "key": key}
    if spec["op"] == "ctrl":
        return probe, s["repeat_penalty"]
    if s["repeat_penalty"] != 1.0 or s["presence_penalty"] != 0.0:
        probe["stage"] = s
    return probe, 1.0


class VllmEngine:
    """Decodes every pending chunk of a phase in one ``LLM.generate`` (see the module doc)."""

    name = "vllm"
    whole_phase = True
    raw_logits = True

    def __init__(
        self, folder: Path, dtype: str, device: str, tensor_parallel_size: int = 1, max_model_len: int = 1024
    ):
        _configure_env(device, tensor_parallel_size)
        from vllm import LLM

        kw = dict(
            model=str(folder),
            dtype=dtype,
            max_model_len=max_model_len,
            seed=0,
            tensor_parallel_size=tensor_parallel_size,
            logits_processors=[_processor_class()],
        )
        if device == "cpu":
            kw["enforce_eager"] = True
        if tensor_parallel_size == 1:
            kw["distributed_executor_backend"] = "uni"
        self.llm = LLM(**kw)
        self.tokenizer = self.llm.get_tokenizer()
        self.n_vocab = int(self.llm.llm_engine.model_config.get_vocab_size())
        self.max_model_len = max_model_len
        self._tmp = tempfile.TemporaryDirectory(prefix="gauge-vllm-")

    def close(self) -> None:
        self._tmp.cleanup()

    def next_row(self, prompt: list[int]):
        """vLLM's raw next-token logits after ``prompt`` (as its sampler receives them, before any
        processor or penalty), for the logits check against HF."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        path = str(Path(self._tmp.name) / f"row-{len(prompt)}-{abs(hash(tuple(prompt)))}.pt")
        params = SamplingParams(
            temperature=0.0,
            max_tokens=1,
            detokenize=False,
            extra_args={"gauge_probe": {"c": 0.0, "key": "row", "dump": path}},
        )
        self.llm.generate([TokensPrompt(prompt_token_ids=list(prompt))], [params], use_tqdm=False)
        row = torch.load(path).numpy()
        os.remove(path)
        return row

    def _params(self, spec: dict, tokens: int, key: str, record: Optional[str]):
        from vllm import SamplingParams

        probe, repetition_penalty = probe_request(spec, key)
        if record:
            probe["record"] = record
        return SamplingParams(
            temperature=0.0,
            max_tokens=tokens,
            min_tokens=tokens,
            ignore_eos=True,
            repetition_penalty=repetition_penalty,
            detokenize=False,
            extra_args={"gauge_probe": probe},
        )

    def decode(
        self,
        prompts: list[list[int]],
        plan: list[dict],
        tokens: int,
        on_step: Callable[[int], None] = lambda n: None,
    ) -> list[list[RunOut]]:
        from vllm.inputs import TokensPrompt

        longest = max(len(p) for p in prompts) + tokens
        if longest > self.max_model_len:
            raise ValueError(
                f"tokens: prompt + {tokens} tokens = {longest} > max_model_len {self.max_model_len}"
            )
        record = str(Path(self._tmp.name) / f"zp-{os.getpid()}-{id(prompts)}.jsonl")
        reqs, params, keys = [], [], []
        for j, p in enumerate(prompts):
            for r, spec in enumerate(plan):
                key = f"{j}:{r}"
                rec = record if spec["role"] == "zero_point" else None
                reqs.append(TokensPrompt(prompt_token_ids=list(p)))
                params.append(self._params(spec, tokens, key, rec))
                keys.append((j, r))
        results = self.llm.generate(reqs, params, use_tqdm=False)
        on_step(len(prompts) * tokens)
        zp = _read_records(record)
        outs = [[RunOut() for _ in plan] for _ in prompts]
        for (j, r), res in zip(keys, results):
            o = outs[j][r]
            o.tokens = [int(t) for t in res.outputs[0].token_ids]
            cached = int(getattr(res, "num_cached_tokens", 0) or 0)
            o.forward_tokens = max(len(prompts[j]) - cached, 0) + tokens - 1
            if plan[r]["role"] == "zero_point":
                steps = zp.get(f"{j}:{r}", {})
                if sorted(steps) != list(range(tokens)):
                    raise RuntimeError(f"zero-point record of prefix job {j}: steps {sorted(steps)[:5]}…")
                o.zero_point = {
                    "top1": [steps[s]["top1"] for s in range(tokens)],
                    "seen_positive": sum(steps[s]["pos"] for s in range(tokens)),
                    "seen_total": sum(steps[s]["tot"] for s in range(tokens)),
                }
        if os.path.exists(record):
            os.remove(record)
        return outs

    def decode_json(self, prompts: list[list[int]], plan: list[dict], max_tokens: int) -> list[list]:
        """A2: every run of every prompt in ONE ``LLM.generate``, greedy, ending at vLLM's
        end-of-generation tokens, at ``gauge json``'s stop strings or at ``max_tokens``.

        vLLM matches stop strings in the detokenized generated text (prompt excluded), as
        ``gauge json`` does, and ends the request at the token that completes one; with
        ``include_stop_str_in_output`` its *text* is still cut right after the stop string,
        whereas ``gauge json`` keeps that token's whole text. So the recorded tokens are vLLM's
        and the recorded text is the tokenizer's decode of them (``jsonrun.generated_text``)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from .engine import JsonOut
        from .jsonrun import STOP_STRINGS, generated_text

        longest = max(len(p) for p in prompts) + max_tokens
        if longest > self.max_model_len:
            raise ValueError(
                f"max_tokens: prompt + {max_tokens} tokens = {longest} > max_model_len {self.max_model_len}"
            )
        reqs, params, keys = [], [], []
        for j, p in enumerate(prompts):
            for r, spec in enumerate(plan):
                probe, repetition_penalty = probe_request(spec, f"{j}:{r}")
                reqs.append(TokensPrompt(prompt_token_ids=list(p)))
                params.append(
                    SamplingParams(
                        temperature=0.0,
                        max_tokens=max_tokens,
                        repetition_penalty=repetition_penalty,
                        stop=list(STOP_STRINGS),
                        include_stop_str_in_output=True,
                        skip_special_tokens=True,
                        extra_args={"gauge_probe": probe},
                    )
                )
                keys.append((j, r))
        results = self.llm.generate(reqs, params, use_tqdm=False)
        outs: list[list] = [[None for _ in plan] for _ in prompts]
        for (j, r), res in zip(keys, results):
            tokens = [int(t) for t in res.outputs[0].token_ids]
            cached = int(getattr(res, "num_cached_tokens", 0) or 0)
            outs[j][r] = JsonOut(
                tokens=tokens,
                output=generated_text(self.tokenizer, tokens),
                # vLLM's own verdict: "stop" without a stop string = an EOS / stop token id.
                eog=res.outputs[0].finish_reason == "stop"
                and not isinstance(res.outputs[0].stop_reason, str),
                forward_tokens=max(len(prompts[j]) - cached, 0) + max(len(tokens) - 1, 0),
            )
        return outs


def _read_records(path: str) -> dict:
    out: dict = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            out.setdefault(d["key"], {})[d["step"]] = d
    return out


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """vLLM's ``LLM`` on the model's HF folder (a GGUF through its cached float32 conversion)."""
    from . import models

    folder = models.hf_folder(ref)
    eng = VllmEngine(folder, dtype, device, args.tensor_parallel_size, max_model_len)
    if dtype == "float32":
        from . import logits_check

        prompts = logits_check.check_prompts(eng.tokenizer)
        logits_check.record(info, logits_check.check_engine_logits("vllm", folder, prompts, eng.next_row))
    else:
        info["options"]["logits_vs_hf_max_abs"] = f"not checked ({dtype}: the tolerance is float32's)"
    return Loaded(eng, eng.tokenizer, eng.n_vocab)
