"""gauge's repetition penalty for llama-cpp-python, two ways.

1. A logits processor for the high-level ``Llama`` (numpy, no extra library)::

       from llama_cpp import Llama, LogitsProcessorList
       from gauge_sampling.llama_cpp import RepetitionPenaltyLogitsProcessor

       llm = Llama("model.gguf")
       llm("Once upon a time", repeat_penalty=1.0,          # llama.cpp's own penalty off
           logits_processor=LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3)]))

   llama-cpp-python runs ``logits_processor`` as a custom sampler *before* llama.cpp's
   ``penalties`` sampler (``Llama._init_sampler``, llama_cpp/llama.py, 0.3.36), so with
   ``repeat_penalty=1.0`` gauge's penalty is the only one. Its default scope is llama-cpp-python's
   own: the last 64 *generated* tokens (``Llama(last_n_tokens_size=64)``; the prompt is never
   accepted into llama.cpp's penalty window). ``mode="ctrl"`` is llama.cpp's sign-branched rule
   (``<= 0`` multiplies, else divides) in the same float32 operations, token-identical to
   ``repeat_penalty=θ``; ``mode="normalized"`` (the default) penalises log-probabilities, so a
   constant added to every logit changes nothing. As every face of the wheel: the fix by default,
   over the seen set of the host's own penalty. ``LogitsProcessor`` is the same class under its
   former name.

2. libgauge's C sampler in a llama.cpp chain through llama-cpp-python's low-level API
   (:func:`c_penalties` / :func:`greedy_chain`, docs/c-api.md): no Python on the per-token path.
"""

from __future__ import annotations

import ctypes
import os
from typing import Iterable, Optional

import numpy as np

from ._settings import PenaltySettings


class RepetitionPenaltyLogitsProcessor(PenaltySettings):
    """gauge's repeat / presence / frequency penalties as a llama-cpp-python logits processor:
    ``(input_ids: np.ndarray[intc], scores: np.ndarray[float32]) -> np.ndarray[float32]``.

    Args:
        penalty: θ (> 0; 1 = off), once per seen token.
        mode: ``"normalized"`` (log-softmax over the row first) or ``"ctrl"`` (llama.cpp's rule).
        last_n: the window: the last ``last_n`` tokens of the scope; ``-1`` all of it, ``0`` off.
        include_prompt: False (default, llama-cpp-python's scope): only generated tokens count;
            the first call of a generation fixes the prompt (``input_ids`` then), and a call
            whose ``input_ids`` do not extend it starts a new generation (or call :meth:`reset`).
            True: every token of ``input_ids`` counts (llama-server's scope, the protocol's).
        presence_penalty, frequency_penalty: subtracted as llama.cpp does (after θ).
        exempt: token ids never penalised (they still take their place in the window).
    """

    def __init__(
        self,
        penalty: float,
        mode: str = "normalized",
        last_n: int = 64,
        include_prompt: bool = False,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        exempt: Iterable[int] = (),
    ):
        super().__init__(penalty, mode, last_n, presence_penalty, frequency_penalty, exempt)
        self.include_prompt = bool(include_prompt)
        self._prompt: Optional[np.ndarray] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_fields()}, include_prompt={self.include_prompt})"

    def reset(self) -> None:
        """Forget the prompt: the next call starts a generation."""
        self._prompt = None

    def window(self, input_ids: np.ndarray) -> np.ndarray:
        """The token ids that count as seen for this call (with repeats)."""
        ids = np.asarray(input_ids)
        if not self.include_prompt:
            p = self._prompt
            if p is None or len(ids) < len(p) or not np.array_equal(ids[: len(p)], p):
                self._prompt = p = ids.copy()
            ids = ids[len(p) :]
        if self.last_n > 0:
            ids = ids[-self.last_n :]
        return ids

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        ids = self.window(input_ids)
        if self.is_off or len(ids) == 0:
            return scores
        z = np.asarray(scores, dtype=np.float32)
        if self.mode == "normalized":
            m = z.max()
            out = z - m
            out = out - np.float32(np.log(np.exp(out, dtype=np.float32).sum(dtype=np.float32)))
        else:
            out = z.copy()
        uniq, counts = self.seen(ids, len(z))
        theta = np.float32(self.penalty)
        v = out[uniq]
        if self.mode == "normalized":
            v = v * theta
        else:
            v = np.where(v <= 0, v * theta, v / theta)
        frequency, presence = np.float32(self.frequency_penalty), np.float32(self.presence_penalty)
        v = v - counts.astype(np.float32) * frequency - (counts > 0).astype(np.float32) * presence
        out[uniq] = v.astype(np.float32)
        return out


# --- the C sampler route: libgauge through llama-cpp-python's low-level API --------------------


def libgauge(path: Optional[str] = None) -> ctypes.CDLL:
    """libgauge (``cargo build --release -p gauge-capi``: ``target/release/libgauge.so``; or
    ``path`` / env ``GAUGE_LIBGAUGE``), opened so that its ``llama_sampler_init`` resolves to the
    libllama llama-cpp-python loaded (which ctypes opened ``RTLD_LOCAL``: reopened here
    ``RTLD_GLOBAL``). libgauge fills the ``llama_sampler_i`` of the llama.h it was built against
    (``gauge_llama_sampler_i_size()``); llama-cpp-python's binding declares that struct opaque, so
    the two headers must agree (0.3.36's vendored llama.h and the workspace's llama-cpp-sys-2 one
    define it identically; python/tests/test_llama_cpp.py runs libgauge in its chains)."""
    import llama_cpp

    path = path or os.environ.get("GAUGE_LIBGAUGE")
    if not path:
        raise ValueError("libgauge: pass its path or set GAUGE_LIBGAUGE (target/release/libgauge.so)")
    ctypes.CDLL(llama_cpp.llama_cpp._lib._name, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    lib.gauge_sampler_init_penalties.restype = ctypes.c_void_p
    lib.gauge_sampler_init_penalties.argtypes = [
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_char_p,
    ]
    lib.gauge_last_error.restype = ctypes.c_char_p
    lib.gauge_llama_sampler_i_size.restype = ctypes.c_size_t
    lib.gauge_sampler_error.restype = ctypes.c_char_p
    lib.gauge_sampler_error.argtypes = [ctypes.c_void_p]
    return lib


def c_penalties(
    lib: ctypes.CDLL, n_vocab: int, last_n: int, theta: float, mode: str = "normalized"
) -> ctypes.c_void_p:
    """``gauge_sampler_init_penalties(n_vocab, last_n, θ, 0, 0, mode)``: a llama.cpp sampler (a
    ``llama_sampler *`` typed as llama-cpp-python's) for ``llama_cpp.llama_sampler_chain_add``;
    ``last_n = -1`` is the whole history."""
    import llama_cpp

    s = lib.gauge_sampler_init_penalties(n_vocab, last_n, theta, 0.0, 0.0, mode.encode())
    if not s:
        raise ValueError(lib.gauge_last_error().decode())
    return ctypes.cast(s, llama_cpp.llama_sampler_p_ctypes)


def greedy_chain(lib: ctypes.CDLL, n_vocab: int, last_n: int, theta: float, mode: str, shift: float = 0.0):
    """A llama.cpp chain ``[logit-bias +shift on every id] → gauge penalties → greedy`` (the
    caller frees it with ``llama_cpp.llama_sampler_free``)."""
    import llama_cpp

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if shift != 0.0:
        bias = (llama_cpp.llama_logit_bias * n_vocab)(
            *[llama_cpp.llama_logit_bias(i, shift) for i in range(n_vocab)]
        )
        llama_cpp.llama_sampler_chain_add(
            chain, llama_cpp.llama_sampler_init_logit_bias(n_vocab, n_vocab, bias)
        )
    llama_cpp.llama_sampler_chain_add(chain, c_penalties(lib, n_vocab, last_n, theta, mode))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    return chain


def generate_c(llm, lib: ctypes.CDLL, prompt: list[int], n: int, theta: float, mode: str, **kw) -> list[int]:
    """``n`` greedy tokens of ``llm`` (a ``llama_cpp.Llama``) from ``prompt`` through
    :func:`greedy_chain` (``last_n``: 64 by default, like ``Llama``; ``accept_prompt``: False by
    default, like ``Llama``; ``shift``: a logit bias on every id)."""
    import llama_cpp

    last_n = kw.get("last_n", 64)
    chain = greedy_chain(lib, llm.n_vocab(), last_n, theta, mode, kw.get("shift", 0.0))
    try:
        if kw.get("accept_prompt", False):
            for t in prompt:
                llama_cpp.llama_sampler_accept(chain, t)
        llm.reset()
        llm.eval(prompt)
        out: list[int] = []
        for i in range(n):
            tok = int(llama_cpp.llama_sampler_sample(chain, llm.ctx, -1))  # accepts tok
            out.append(tok)
            if i + 1 < n:
                llm.eval([tok])
        return out
    finally:
        llama_cpp.llama_sampler_free(chain)


#: The former name, kept: the same class.
LogitsProcessor = RepetitionPenaltyLogitsProcessor
