"""The openai engine (``--engine openai --url URL``): any running OpenAI- or llama-server-compatible
server decodes (vLLM: ``/v1/completions`` with ``return_token_ids``; gauge serve and llama-server:
their ``/completion`` route with ``return_tokens``, where the token ids come back).

The gauge shift is a full-vocabulary ``logit_bias`` (+c on every token id), the penalty is the
server's own (``repeat_penalty`` / ``repetition_penalty``), greedy (``temperature: 0``),
``ignore_eos`` so that every run has its ``tokens``. The prompt goes as token ids (the HF
tokenizer of ``--model``, as the other engines).

Valid only where the server applies the logit bias *before* its penalty; established from each
server's source and recorded in the run (``ORDER``), the server identified by ``GET /v1/models``'
``owned_by``:

- gauge serve and llama-server: llama.cpp's chain puts ``logit-bias`` first
  (llama.cpp ``common/sampling.cpp`` ``common_sampler_init``; gauge: ``crates/gauge-sampling/src/
  chain.rs``, "logit-bias first when there is any bias");
- vLLM (v1): ``vllm/v1/sample/sampler.py`` ``Sampler.apply_logits_processors`` runs the
  non-argmax-invariant processors (the built-in ``LogitBiasLogitsProcessor`` first, then custom
  ones such as gauge's) at step 5, then ``apply_penalties`` (step 6);
- refused: SGLang (``python/sglang/srt/sampling/sampling_batch_info.py``
  ``SamplingBatchInfo.apply_logits_bias`` applies its penalizers, then the vocabulary mask, then
  ``logit_bias``), and every server whose order is not established here (mistral.rs answers
  ``owned_by: "local"``; its penalties run before the logit bias too).

Raw logits are not available over HTTP: the zero-point statistics are left out of the plan and
the report says so (``raw_logits = False``), and there is no logits check against HF; the model
is checked as far as the server tells (its vocabulary size against ``--model``'s).

Operators per server:

- ctrl: the server's own penalty (gauge serve / llama-server ``repeat_penalty``, vLLM
  ``repetition_penalty``);
- normalized: gauge serve's ``repeat_penalty_mode: "normalized"``; on vLLM gauge's processor
  through ``vllm_xargs`` (the server must run it: ``--logits-processors
  gauge_sampling.vllm:RepetitionPenalty`` or the wheel's entry point; checked before the run);
  refused on llama-server;
- subtractive: a presence penalty α (gauge serve / llama-server ``presence_penalty`` in the
  penalty window; vLLM's own ``presence_penalty`` counts output tokens only, so under the
  protocol's seen set vLLM gets gauge's presence penalty through ``vllm_xargs`` instead).

Seen set: ``protocol`` asks for prompt + every generated token (gauge serve / llama-server:
``repeat_last_n: -1``, gauge serve also ``penalize_prompt: true``; vLLM's ``repetition_penalty``
always sees prompt + output); ``engine`` sends no window, so the server's default applies (read
from gauge serve's / llama-server's ``GET /props`` and recorded: the last 64 tokens of prompt +
output unless the server was started otherwise; vLLM: prompt + output, presence output only).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
        "python/sglang/srt/sampling/sampling_batch_info.py SamplingBatchInfo.apply_logits_bias: "
        "penalizers, then the vocabulary mask, then logit_bias",
        False,
    ),
}

#: Requests in flight at once (a server with fewer slots queues the rest).
WORKERS = 8


class HttpError(ValueError):
    """A non-2xx answer (the CLI's exit 2), with its status and body."""

    def __init__(self, url: str, code: int, body: str):
        super().__init__(f"{url}: HTTP {code}: {body[:500]}")
        self.code = code
        self.body = body


def _http(url: str, body=None, timeout: float = 600.0):
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise HttpError(url, e.code, e.read().decode(errors="replace")) from None
    except urllib.error.URLError as e:
        raise ValueError(f"--url {url}: {e.reason}") from None


@dataclass
class Server:
    """What the engine learned about the server before the run."""

    url: str
    owned: str
    name: str
    order: str
    model_id: str
    meta: dict = field(default_factory=dict)


def identify(url: str) -> Server:
    """The server at ``url`` from ``GET /v1/models``; ValueError for a server that applies the
    logit bias after its penalty, or one whose order is unknown."""
    models = _http(f"{url}/v1/models", timeout=30)
    first = (models.get("data") or [{}])[0]
    owned = str(first.get("owned_by", "")).lower()
    if owned not in ORDER:
        raise ValueError(
            f"--engine openai: the server at {url} (owned_by {owned!r}) is not one whose order of "
            f"logit bias and penalty is established (owned_by: {', '.join(sorted(ORDER))}); a shift "
            f"applied after its penalty would measure nothing, so the probe does not run there"
        )
    name, where, valid = ORDER[owned]
    if not valid:
        raise ValueError(
            f"--engine openai: {name} applies the logit bias after its penalty ({where}); the gauge "
            f"shift would not reach the penalty, so the probe cannot run there"
        )
    return Server(url, owned, name, where, str(first.get("id", "")), dict(first.get("meta") or {}))


def server_version(srv: Server) -> str:
    """gauge serve / llama-server: ``/props`` ``build_info``; vLLM: ``/version``."""
    try:
        if srv.owned == "vllm":
            return str(_http(f"{srv.url}/version", timeout=30).get("version", "unknown"))
        return str(_http(f"{srv.url}/props", timeout=30).get("build_info", "unknown"))
    except ValueError:
        return "unknown"


def default_scope(srv: Server) -> str:
    """The server's own seen set (what ``--seen engine`` measures), as the server reports it."""
    if srv.owned == "vllm":
        return "vLLM's own: prompt + output, no window (presence_penalty: output only)"
    params = _http(f"{srv.url}/props", timeout=30).get("default_generation_settings", {}).get("params", {})
    n = params.get("repeat_last_n", 64)
    what = "prompt + output" if params.get("penalize_prompt", True) else "output"
    window = "no window" if n == -1 else f"the last {n} tokens"
    return f"the server's default: {window} of {what} (repeat_last_n from /props)"


def has_gauge_processor(srv: Server) -> bool:
    """Whether a vLLM server runs gauge's processor: it answers a bad ``vllm_xargs`` field with
    HTTP 400 naming the field; without the processor vLLM ignores the field."""
    body = {"model": srv.model_id, "prompt": [1], "max_tokens": 1, "vllm_xargs": {"repeat_last_n": -9}}
    try:
        _http(f"{srv.url}/v1/completions", body, timeout=120)
    except HttpError as e:
        if e.code == 400 and "repeat_last_n" in e.body:
            return True
        raise
    return False


class OpenaiEngine:
    """Decodes the plan by one completion request per run (see the module doc)."""

    name = "openai"
    whole_phase = False
    raw_logits = False

    def __init__(self, srv: Server, n_vocab: int, tokenizer, seen: str):
        self.srv = srv
        self.url = srv.url
        self.owned = srv.owned
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
        protocol = self.seen == "protocol"
        body: dict = {"prompt": list(prompt), "temperature": 0.0, "seed": 0}
        body["ignore_eos"] = not stop_eos
        if c != 0.0:
            body["logit_bias"] = self._logit_bias(c)
        vllm = self.owned == "vllm"
        if vllm:
            body["model"] = self.srv.model_id
            body["max_tokens"] = max_tokens
            body["return_token_ids"] = True
        else:
            # llama-server's own route (/completion): the token ids come back with return_tokens.
            body["n_predict"] = max_tokens
            body["return_tokens"] = True
            if protocol:
                body["repeat_last_n"] = -1
                if self.owned == "gauge":
                    body["penalize_prompt"] = True
        if theta == 1.0:
            return body
        if op == "ctrl":
            body["repetition_penalty" if vllm else "repeat_penalty"] = theta
        elif op == "subtractive":
            alpha = float(spec["alpha"])
            if vllm and protocol:
                body["vllm_xargs"] = {"presence_penalty": alpha, "repeat_last_n": -1}
            else:
                body["presence_penalty"] = alpha
        elif op == "normalized":
            if vllm:
                # prompt + output under either --seen: vLLM's own scope is that too.
                body["vllm_xargs"] = {
                    "repeat_penalty": theta,
                    "repeat_penalty_mode": "normalized",
                    "repeat_last_n": -1,
                }
            elif self.owned == "gauge":
                body["repeat_penalty"] = theta
                body["repeat_penalty_mode"] = "normalized"
            else:
                raise ValueError(f"--engine openai: {self.srv.name} has no normalized penalty (--ops)")
        else:
            raise ValueError(f"op: unknown operator {op!r} (allowed: ctrl, normalized, subtractive)")
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


def planned_ops(args) -> list[str]:
    """The operators the run will ask the server for (``--ops`` or the command's default)."""
    from .. import _native

    if args.ops:
        return list(args.ops)
    if getattr(args, "command", "probe") == "json":
        return list(json.loads(_native.json_defaults_json())["ops"])
    return list(json.loads(_native.probe_grids_json())["quick"]["ops"])


def check_operators(srv: Server, ops: list[str], seen: str) -> str:
    """ValueError when the server cannot run one of ``ops`` as this engine sends it; returns
    what was checked (recorded in the run)."""
    if "normalized" in ops and srv.owned == "llamacpp":
        raise ValueError(
            "--engine openai: llama-server has no normalized penalty; run with --ops ctrl,subtractive"
        )
    if srv.owned != "vllm":
        return "server's own"
    need = [o for o in ops if o == "normalized" or (o == "subtractive" and seen == "protocol")]
    if not need:
        return "vLLM's own"
    if not has_gauge_processor(srv):
        raise ValueError(
            f"--engine openai: the vLLM server at {srv.url} does not run gauge's processor, which "
            f"{' and '.join(need)} need here (start it with --logits-processors "
            "gauge_sampling.vllm:RepetitionPenalty, or install the gauge-sampling wheel beside it); "
            "or run with --ops ctrl"
        )
    return "gauge_sampling.vllm:RepetitionPenalty present (vllm_xargs answered with HTTP 400 for a bad field)"


def load(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024) -> Loaded:
    """The server at ``--url`` (identified by ``GET /v1/models``' ``owned_by``), with the HF
    tokenizer of ``--model`` (the model the server must be running)."""
    from . import models

    if not args.url:
        raise ValueError("--engine openai needs --url (the server's base URL, http://host:port)")
    url = args.url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    srv = identify(url)
    processors = check_operators(srv, planned_ops(args), args.seen)
    from transformers import AutoConfig, AutoTokenizer  # after the refusals: its import is slow

    folder = models.hf_folder(ref)
    tok = AutoTokenizer.from_pretrained(folder)
    n_vocab = int(getattr(AutoConfig.from_pretrained(folder), "vocab_size", 0) or len(tok))
    served = srv.meta.get("n_vocab")
    if served is not None and int(served) != n_vocab:
        raise ValueError(
            f"--engine openai: the server's model has a vocabulary of {served}, --model {ref.label}'s "
            f"{n_vocab}: not the same model"
        )
    info["device"] = "server"
    info["dtype"] = "server's"
    info["versions"]["server"] = server_version(srv)
    opts = info["options"]
    opts["server"] = srv.name
    opts["url"] = url
    opts["order"] = f"logit bias before the penalty ({srv.order})"
    opts["logits_check"] = "none: no logits over HTTP"
    opts["processors"] = processors
    opts["seen"] = (
        "protocol: prompt + all generated" if args.seen == "protocol" else f"engine: {default_scope(srv)}"
    )
    return Loaded(OpenaiEngine(srv, n_vocab, tok, args.seen), tok, n_vocab)
