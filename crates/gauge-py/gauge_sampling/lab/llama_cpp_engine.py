"""The llama-cpp-python engine: its ``Llama`` computes the logits (the model's GGUF dequantized to
F32, ``models.f32_gguf``) and llama.cpp's own sampler chain, built by ``Llama._init_sampler``,
decides.

Per run and step the chain is llama-cpp-python's: its ``logits_processor`` custom sampler (which
it installs *before* the penalties, llama_cpp/llama.py ``_init_sampler``) adds the plan's ``c``
to every logit (and, for normalized, runs ``gauge_sampling.llama_cpp.LogitsProcessor``), then
llama.cpp's ``penalties`` sampler (ctrl: ``repeat_penalty=θ``, llama.cpp's ``<= 0`` branch;
subtractive: ``presence_penalty=α``), then ``greedy``.

Seen set (``--seen``):
- ``protocol``: prompt + all generated, no window: the penalty window is the context
  (``last_n_tokens_size = n_ctx``) and the prompt is accepted into the chain before the first step;
- ``engine``: llama-cpp-python's default, the last 64 sampled tokens (``last_n_tokens_size=64``;
  ``Llama.generate`` never accepts the prompt); normalized gets the same scope.

Prompts are the stack-independent HF tokenizer's ids (the same as the hf run's). Each prompt is
evaluated once; every run of it re-evaluates only the prompt's last token on the kept KV cache,
so all runs start from bit-identical logits. Before the first run the engine checks that it
computes HF's model (``logits_check``: the next-token rows of a few prompts against HF fp32 on
the same weights, recorded, refused above its tolerance). The KV cache is F32
(``type_k``/``type_v``): llama.cpp's default f16 cache moves the logits by ~0.02.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .engine import JsonOut, Loaded, RunOut, usable_cpus

#: llama-cpp-python's default ``last_n_tokens_size``.
ENGINE_LAST_N = 64


def _llama_logits(llm, n_vocab: int) -> np.ndarray:
    import llama_cpp

    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()


class LlamaCppEngine:
    """Decodes chunks of the probe's plan with llama-cpp-python (see the module doc)."""

    name = "llama-cpp-python"
    whole_phase = False
    raw_logits = True

    def __init__(self, llm, tokenizer, seen: str):
        self.llm = llm
        self.tokenizer = tokenizer
        self.seen = seen
        self.n_vocab = llm.n_vocab()

    def close(self) -> None:
        self.llm.close()

    def next_row(self, prompt: list[int]) -> np.ndarray:
        """The float32 row of the token after ``prompt`` (the logits check)."""
        self.llm.reset()
        self.llm.eval(prompt)
        return _llama_logits(self.llm, self.n_vocab)

    def _sampler(self, spec: dict):
        """llama-cpp-python's own chain for one run: logits_processor (shift [+ normalized]) →
        penalties → greedy."""
        from llama_cpp import LogitsProcessorList

        from ..llama_cpp import LogitsProcessor

        c = np.float32(spec["c"])
        theta, op = float(spec["theta"]), spec["op"]
        procs = [lambda ids, z: (z + c).astype(np.float32)]
        repeat, present = 1.0, 0.0
        if theta != 1.0:
            if op == "ctrl":
                repeat = theta
            elif op == "subtractive":
                present = float(spec["alpha"])
            elif op == "normalized":
                if self.seen == "protocol":
                    procs.append(LogitsProcessor(theta, "normalized", last_n=-1, include_prompt=True))
                else:
                    procs.append(LogitsProcessor(theta, "normalized", last_n=ENGINE_LAST_N))
            else:
                raise ValueError(f"op: unknown operator {op!r}")
        llm = self.llm
        llm.last_n_tokens_size = llm.n_ctx() if self.seen == "protocol" else ENGINE_LAST_N
        return llm._init_sampler(
            temp=0.0,
            repeat_penalty=repeat,
            presence_penalty=present,
            frequency_penalty=0.0,
            logits_processor=LogitsProcessorList(procs),
        )

    def _run(self, prompt: list[int], spec: dict, tokens: int, out: RunOut, stop=None) -> None:
        llm = self.llm
        llm.n_tokens = len(prompt) - 1  # keep the prompt's KV but its last token
        llm.eval(prompt[-1:])
        out.forward_tokens += 1
        sampler = self._sampler(spec)
        try:
            if self.seen == "protocol":
                for t in prompt:
                    sampler.accept(t)
            history = set(prompt)
            for i in range(tokens):
                if out.zero_point is not None:
                    row = _llama_logits(llm, self.n_vocab)
                    out.zero_point["top1"].append(float(row.max()))
                    seen = np.fromiter(sorted(history), dtype=np.int64)
                    out.zero_point["seen_positive"] += int((row[seen] > 0).sum())
                    out.zero_point["seen_total"] += len(seen)
                tok = int(sampler.sample(llm._ctx, -1))  # llama_sampler_sample accepts it
                out.tokens.append(tok)
                history.add(tok)
                if i + 1 == tokens or (stop is not None and stop(out.tokens)):
                    break
                llm.eval([tok])
                out.forward_tokens += 1
        finally:
            sampler.close()

    def decode(
        self,
        prompts: list[list[int]],
        plan: list[dict],
        tokens: int,
        on_step: Callable[[int], None] = lambda n: None,
        stop: Optional[Callable[[int, int, list[int]], bool]] = None,
    ) -> list[list[RunOut]]:
        outs = [[RunOut() for _ in plan] for _ in prompts]
        for j, prompt in enumerate(prompts):
            self.llm.reset()
            self.llm.eval(prompt[:-1])
            outs[j][0].forward_tokens += len(prompt) - 1
            for r, spec in enumerate(plan):
                o = outs[j][r]
                if spec.get("role") == "zero_point":
                    o.zero_point = {"top1": [], "seen_positive": 0, "seen_total": 0}
                st = None if stop is None else (lambda toks, j=j, r=r: stop(j, r, toks))
                self._run(prompt, spec, tokens, o, st)
            on_step(tokens)
        return outs

    def decode_json(self, prompts: list[list[int]], plan: list[dict], max_tokens: int) -> list[list[JsonOut]]:
        from .jsonrun import STOP_STRINGS, eog_ids, generated_text

        tok = self.tokenizer
        eog = eog_ids(tok) | {self.llm.token_eos()}
        ended: dict[tuple[int, int], bool] = {}

        def stop(job: int, run: int, tokens: list[int]) -> bool:
            if tokens[-1] in eog:
                ended[(job, run)] = True
                return True
            return any(s in generated_text(tok, tokens) for s in STOP_STRINGS)

        outs = self.decode(prompts, plan, max_tokens, stop=stop)
        return [
            [
                JsonOut(o.tokens, generated_text(tok, o.tokens), ended.get((j, r), False), o.forward_tokens)
                for r, o in enumerate(per_run)
            ]
            for j, per_run in enumerate(outs)
        ]


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """llama-cpp-python's ``Llama`` on the model's F32 GGUF, checked against HF fp32."""
    import llama_cpp
    from transformers import AutoTokenizer

    from . import logits_check, models

    if device != "cpu" or dtype != "float32":
        raise ValueError(
            f"--engine llama-cpp-python: cpu and float32 only (the F32 GGUF), not {device}/{dtype}"
        )
    if ref.gguf is None:
        raise ValueError("--engine llama-cpp-python: --model must be a GGUF or a registry name")
    f32 = models.f32_gguf(ref)
    folder = models.hf_folder(ref)
    tok = AutoTokenizer.from_pretrained(folder)
    threads = args.threads or usable_cpus()
    llm = llama_cpp.Llama(
        model_path=str(f32),
        n_ctx=max_model_len + 64,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        seed=0,
        verbose=False,
        # float32 end to end: llama.cpp's default KV cache is f16, which moves logits by ~0.02.
        type_k=0,  # GGML_TYPE_F32
        type_v=0,
    )
    eng = LlamaCppEngine(llm, tok, args.seen)
    try:
        prompts = logits_check.check_prompts(tok)
        diff = logits_check.check_engine_logits("llama-cpp-python", folder, prompts, eng.next_row)
    except BaseException:
        llm.close()
        raise
    logits_check.record(info, diff)
    info["versions"]["llama_cpp_python"] = llama_cpp.__version__
    info["options"]["seen"] = (
        "protocol: prompt + all generated"
        if args.seen == "protocol"
        else f"engine: last {ENGINE_LAST_N} sampled tokens, prompt not accepted"
    )
    info["options"]["weights"] = "F32 GGUF, F32 KV cache"
    return Loaded(eng, tok, llm.n_vocab())
