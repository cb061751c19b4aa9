"""The openai engine (``--engine openai --url URL``): any running OpenAI- or llama-server-compatible
server decodes (vLLM: ``/v1/completions`` with ``return_token_ids``; gauge serve and llama-server:
their ``/completion`` route with ``return_tokens``, where the token ids come back).

The gauge shift is a full-vocabulary ``logit_bias`` (+c on every token id), the penalty is the
server's own (``repeat_penalty`` / ``repetition_penalty``; subtractive its ``presence_penalty``),
greedy (``temperature: 0``), ``ignore_eos`` so that every run has its ``tokens``. The prompt goes
as token ids (the HF tokenizer of ``--model``, as the other engines).

Valid only where the server applies the logit bias *before* its penalty; established from each
server's source and recorded in the run (``ORDER``):

- gauge serve and llama-server: llama.cpp's chain puts ``logit-bias`` first
  (llama.cpp ``common/sampling.cpp`` ``common_sampler_init``; gauge: ``crates/gauge-sampling/src/
  chain.rs``, "logit-bias first when there is any bias");
- vLLM (v1): ``vllm/v1/sample/sampler.py`` ``Sampler.apply_logits_processors`` runs the
  non-argmax-invariant processors (``LogitBiasLogitsProcessor``) at step 5, then
  ``apply_penalties`` (step 6);
- refused: SGLang (its ``penaltylib`` penalizers run before ``logit_bias`` is added, in
  ``sampling_batch_info.apply_logits_bias``) and mistral.rs (``mistralrs-core/src/sampler.rs``
  applies its penalties, then the logit bias): a shift would land after the penalty there.

Raw logits are not available over HTTP: the zero-point statistics are left out of the plan and
the report says so (``raw_logits = False``). normalized: gauge serve's ``repeat_penalty_mode``,
vLLM's through gauge's processor in ``vllm_xargs`` (the server must run it:
``--logits-processors gauge_sampling.vllm:RepetitionPenalty``); refused elsewhere.

Seen set: ``protocol`` asks for prompt + every generated token (gauge serve / llama-server:
``repeat_last_n: -1``; vLLM's ``repetition_penalty`` always sees prompt + output); ``engine`` sends
no window, so the server's default applies (llama-server and gauge serve: the last 64 tokens of
prompt + output; vLLM: prompt + output).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .engine import JsonOut, Loaded, RunOut

#: owned_by of ``GET /v1/models`` → (server, where the order was read, valid?).
ORDER = {
    "gauge": ("gauge serve", "crates/gauge-sampling/src/chain.rs: logit-bias first, then penalties", True),
    "llamacpp": ("llama-server", "llama.cpp common/sampling.cpp common_sampler_init: logit-bias first", True),
    "vllm": (
        "vLLM",
        "vllm/v1/sample/sampler.py Sampler.apply_logits_processors: logit bias (step 5) before "
        "apply_penalties (step 6)",
        True,
    ),
    "sglang": (
        "SGLang",
        "python/sglang/srt/sampling/penaltylib: penalties applied before the logit bias",
        False,
    ),
    "mistral.rs": ("mistral.rs", "mistralrs-core/src/sampler.rs: penalties, then the logit bias", False),
    "mistralrs": ("mistral.rs", "mistralrs-core/src/sampler.rs: penalties, then the logit bias", False),
}

WORKERS = 8


def _http(url: str, body=None, timeout: float = 600.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ValueError(f"{url}: HTTP {e.code}: {e.read()[:500].decode(errors='replace')}") from None
    except urllib.error.URLError as e:
        raise ValueError(f"--url {url}: {e.reason}") from None


def identify(url: str) -> tuple[str, str, str]:
    """(owned_by, server name, where the order was read) of the server at ``url``; ValueError
    for a server that applies the logit bias after its penalty, or one whose order is unknown."""
    models = _http(f"{url}/v1/models", timeout=30)
    owned = str((models.get("data") or [{}])[0].get("owned_by", "")).lower()
    if owned not in ORDER:
        raise ValueError(
            f"--engine openai: the server at {url} (owned_by {owned!r}) is not one whose order of "
            f"logit bias and penalty is established ({', '.join(sorted(ORDER))}); a shift after the "
            f"penalty would measure nothing"
        )
    name, where, valid = ORDER[owned]
    if not valid:
        raise ValueError(
            f"--engine openai: {name} applies the logit bias after its penalty ({where}); the gauge "
            f"shift would not reach the penalty, so the probe cannot run there"
        )
    return owned, name, where


class OpenaiEngine:
    """Decodes the plan by one ``/v1/completions`` request per run (see the module doc)."""

    name = "openai"
    whole_phase = False
    raw_logits = False

    def __init__(self, url: str, owned: str, n_vocab: int, tokenizer, seen: str):
        self.url = url.rstrip("/")
        self.owned = owned
        self.n_vocab = n_vocab
        self.tokenizer = tokenizer
        self.seen = seen
        self._bias: dict[float, object] = {}

    def close(self) -> None:
        pass

    def _logit_bias(self, c: float):
        if c not in self._bias:
            if self.owned == "vllm":
                self._bias[c] = {str(i): c for i in range(self.n_vocab)}
            else:
                self._bias[c] = [[i, c] for i in range(self.n_vocab)]
        return self._bias[c]

    def request(self, prompt: list[int], spec: dict, max_tokens: int, stop_eos: bool = False) -> dict:
        """The completion request body of one run."""
        theta, op, c = float(spec["theta"]), spec["op"], float(spec["c"])
        body: dict = {"prompt": list(prompt), "temperature": 0.0, "seed": 0}
        body["ignore_eos"] = not stop_eos
        if c != 0.0:
            body["logit_bias"] = self._logit_bias(c)
        vllm = self.owned == "vllm"
        if vllm:
            body["max_tokens"] = max_tokens
            body["return_token_ids"] = True
        else:
            # llama-server's own route (/completion): the token ids come back with return_tokens.
            body["n_predict"] = max_tokens
            body["return_tokens"] = True
            if self.seen == "protocol":
                body["repeat_last_n"] = -1
        if theta != 1.0:
            if op == "ctrl":
                body["repetition_penalty" if vllm else "repeat_penalty"] = theta
            elif op == "subtractive":
                body["presence_penalty"] = float(spec["alpha"])
            elif op == "normalized":
                if vllm:
                    body["vllm_xargs"] = {
                        "repeat_penalty": theta,
                        "repeat_penalty_mode": "normalized",
                        "repeat_last_n": -1,
                    }
                elif self.owned == "gauge":
                    body["repeat_penalty"] = theta
                    body["repeat_penalty_mode"] = "normalized"
                else:
                    raise ValueError(f"--engine openai: {self.owned} has no normalized penalty (--ops)")
        return body

    def _complete(self, body: dict) -> list[int]:
        if self.owned == "vllm":
            toks = _http(f"{self.url}/v1/completions", body)["choices"][0].get("token_ids")
        else:
            toks = _http(f"{self.url}/completion", body).get("tokens")
        if toks is None:
            raise ValueError("--engine openai: the server returned no token ids")
        return [int(t) for t in toks]

    def decode(
        self,
        prompts: list[list[int]],
        plan: list[dict],
        tokens: int,
        on_step: Callable[[int], None] = lambda n: None,
    ) -> list[list[RunOut]]:
        jobs = [(j, r) for j in range(len(prompts)) for r in range(len(plan))]
        with ThreadPoolExecutor(WORKERS) as pool:
            got = list(
                pool.map(lambda jr: self._complete(self.request(prompts[jr[0]], plan[jr[1]], tokens)), jobs)
            )
        outs = [[RunOut() for _ in plan] for _ in prompts]
        for (j, r), toks in zip(jobs, got):
            if len(toks) != tokens:
                raise ValueError(f"--engine openai: {len(toks)} tokens for prefix {j} run {r}, not {tokens}")
            outs[j][r] = RunOut(tokens=toks, forward_tokens=len(prompts[j]) + tokens - 1)
        on_step(len(prompts) * tokens)
        return outs

    def decode_json(self, prompts: list[list[int]], plan: list[dict], max_tokens: int) -> list[list[JsonOut]]:
        from .jsonrun import STOP_STRINGS, eog_ids, generated_text

        tok = self.tokenizer
        eog = eog_ids(tok)

        def one(jr):
            j, r = jr
            toks = self._complete(self.request(prompts[j], plan[r], max_tokens, stop_eos=True))
            # gauge json's stop rule, applied to the server's output: cut after a stop string.
            for i in range(len(toks)):
                if toks[i] in eog:
                    return JsonOut(toks[: i + 1], generated_text(tok, toks[: i + 1]), True, 0)
                if any(s in generated_text(tok, toks[: i + 1]) for s in STOP_STRINGS):
                    return JsonOut(toks[: i + 1], generated_text(tok, toks[: i + 1]), False, 0)
            return JsonOut(toks, generated_text(tok, toks), False, 0)

        jobs = [(j, r) for j in range(len(prompts)) for r in range(len(plan))]
        with ThreadPoolExecutor(WORKERS) as pool:
            got = list(pool.map(one, jobs))
        outs: list[list] = [[None] * len(plan) for _ in prompts]
        for (j, r), o in zip(jobs, got):
            o.forward_tokens = len(prompts[j]) + len(o.tokens)
            outs[j][r] = o
        return outs


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """The server at ``--url`` (identified by ``GET /v1/models``' ``owned_by``), with the HF
    tokenizer of ``--model`` (the model the server must be running)."""
    from . import models

    if not args.url:
        raise ValueError("--engine openai needs --url (the server's base URL, http://host:port)")
    url = args.url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    owned, name, where = identify(url)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models.hf_folder(ref))
    n_vocab = len(tok)
    info["device"] = "server"
    info["dtype"] = "server's"
    info["options"]["server"] = name
    info["options"]["url"] = url
    info["options"]["order"] = f"logit bias before the penalty ({where})"
    info["options"]["logits_check"] = "none: no logits over HTTP"
    info["options"]["seen"] = (
        "protocol: prompt + all generated"
        if args.seen == "protocol"
        else "engine: the server's default window"
    )
    return Loaded(OpenaiEngine(url, owned, n_vocab, tok, args.seen), tok, n_vocab)
