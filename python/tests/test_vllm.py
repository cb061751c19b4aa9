"""gauge_sampling.vllm.RepetitionPenalty: the v1 interface driven through vLLM's own
BatchUpdateBuilder, Model Runner V2's interface through its own request-state classes, and the
default model in one in-process LLM: one generate batch mixing requests with and without the
processor, different θ and modes, vLLM's own repetition_penalty, and ±5 shifts (logit_bias)."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
import vllm_env
from conftest import DEVICE, need_import

torch = need_import("torch")
vllm = need_import("vllm")
gs = need_import("gauge_sampling")
from gauge_sampling.vllm import RepetitionPenalty, RepetitionPenaltyLogitsProcessor  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.exceptions import VLLMValidationError  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdateBuilder, MoveDirectionality  # noqa: E402

THETA = 1.3
V = 300


def rust(row: torch.Tensor, history: list[int], **fields) -> torch.Tensor:
    """gauge's Rust penalties stage on one row."""
    chain = gs.Chain({"samplers": ["penalties"], **fields}, row.shape[0])
    chain.accept_prompt(history)
    return torch.tensor(chain.apply_stages(row.cpu().numpy(), 1), device=row.device)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-5)


NORM = {"repeat_penalty": THETA, "repeat_penalty_mode": "normalized", "repeat_last_n": -1}
CTRL4 = {"repeat_penalty": 2.0, "repeat_penalty_mode": "ctrl", "repeat_last_n": 4, "presence_penalty": 0.5}


# -- v1 interface, through vLLM's BatchUpdateBuilder ------------------------------------------


def test_theta_alone_is_the_fix_over_prompt_and_output():
    """The wheel's one rule: the defaults are the normalized penalty over the host's own seen set
    (vLLM's repetition_penalty sees prompt + output), not gauge serve's ctrl over 64 tokens."""
    assert RepetitionPenalty is RepetitionPenaltyLogitsProcessor
    proc = RepetitionPenaltyLogitsProcessor(object(), torch.device(DEVICE), False)
    logits = (torch.randn(1, V, generator=torch.Generator().manual_seed(1)) * 3).repeat(2, 1).to(DEVICE)
    prompt = list(range(10, 90))  # longer than gauge serve's 64-token window
    b = BatchUpdateBuilder()
    b.added.append((0, SamplingParams(extra_args={"repeat_penalty": THETA}), prompt, [5]))
    b.added.append((1, SamplingParams(extra_args={**NORM}), prompt, [5]))
    proc.update_state(b.get_and_reset(2))
    got = proc.apply(logits.clone())
    close(got[0], rust(logits[0], prompt + [5], **NORM))
    torch.testing.assert_close(got[0], got[1], rtol=0, atol=0)


def test_v1_add_move_swap_remove():
    proc = RepetitionPenalty(object(), torch.device(DEVICE), False)
    assert proc.is_argmax_invariant() is False
    logits = (torch.randn(3, V, generator=torch.Generator().manual_seed(0)) * 3).to(DEVICE)
    out_a: list[int] = []
    out_c: list[int] = [13]
    b = BatchUpdateBuilder()
    b.added.append((0, SamplingParams(extra_args=NORM), [1, 2, 3], out_a))
    b.added.append((1, SamplingParams(), [4, 5], []))
    b.added.append((2, SamplingParams(extra_args=CTRL4), [9, 9, 10, 11, 12], out_c))
    proc.update_state(b.get_and_reset(3))

    got = proc.apply(logits.clone())
    close(got[0], rust(logits[0], [1, 2, 3], **NORM))
    assert torch.equal(got[1], logits[1])  # no extra_args: untouched
    close(
        got[2], rust(logits[2], [10, 11, 12, 13], repeat_penalty=2.0, repeat_last_n=4, presence_penalty=0.5)
    )

    out_a.append(7)  # vLLM appends to the live output list
    got = proc.apply(logits.clone())
    close(got[0], rust(logits[0], [1, 2, 3, 7], **NORM))

    b.moved.append((0, 2, MoveDirectionality.SWAP))
    proc.update_state(b.get_and_reset(3))
    got = proc.apply(logits.clone())
    close(got[2], rust(logits[2], [1, 2, 3, 7], **NORM))
    close(
        got[0], rust(logits[0], [10, 11, 12, 13], repeat_penalty=2.0, repeat_last_n=4, presence_penalty=0.5)
    )

    b.moved.append((2, 1, MoveDirectionality.UNIDIRECTIONAL))
    proc.update_state(b.get_and_reset(3))
    got = proc.apply(logits.clone())
    close(got[1], rust(logits[1], [1, 2, 3, 7], **NORM))
    assert torch.equal(got[2], logits[2])

    b.removed_append(0)
    b.removed_append(1)
    proc.update_state(b.get_and_reset(1))
    assert torch.equal(proc.apply(logits.clone()), logits)


def test_validate_params_refuses_bad_fields_by_name():
    for bad, field in [
        ({"repeat_penalty": -1}, "repeat_penalty"),
        ({"repeat_penalty": 1.2, "repeat_penalty_mode": "loud"}, "repeat_penalty_mode"),
        ({"repeat_penalty": 1.2, "repeat_last_n": -5}, "repeat_last_n"),
        ({"repeat_penalty": 1.2, "penalty_exempt": ["{"]}, "penalty_exempt"),
    ]:
        with pytest.raises(VLLMValidationError, match=field) as err:
            RepetitionPenalty.validate_params(SamplingParams(extra_args=bad))
        assert err.value.parameter == field
    RepetitionPenalty.validate_params(SamplingParams())
    RepetitionPenalty.validate_params(SamplingParams(extra_args={"other_plugin": 1}))


def test_the_wheel_registers_the_entry_point():
    from vllm.v1.sample.logits_processor import _load_logitsprocs_plugins

    eps = importlib.metadata.entry_points(group="vllm.logits_processors")
    assert any(ep.value == "gauge_sampling.vllm:RepetitionPenaltyLogitsProcessor" for ep in eps)
    assert RepetitionPenalty in _load_logitsprocs_plugins()


def test_one_engine_loading_it_twice_applies_it_once():
    config = object()
    first = RepetitionPenalty(config, torch.device("cpu"), False)
    second = RepetitionPenalty(config, torch.device("cpu"), False)
    other = RepetitionPenalty(object(), torch.device("cpu"), False)
    assert first.active and not second.active and other.active


# -- Model Runner V2, through its own classes -------------------------------------------------


def test_model_runner_v2_interface(monkeypatch):
    v2 = need_import("vllm.v1.worker.gpu.sample.logits_processor")
    import vllm.v1.worker.gpu.buffer_utils as buffer_utils
    from vllm.v1.worker.gpu.states import RequestState

    if not torch.cuda.is_available():
        # The index's torch is a CUDA build: without a driver it cannot pin memory, so vLLM's
        # buffers take their own fallback for platforms without pinned memory.
        monkeypatch.setattr(buffer_utils, "is_uva_available", lambda: False)

    assert issubclass(RepetitionPenalty, v2.LogitsProcessor)
    rs = RequestState(
        max_num_reqs=4,
        max_model_len=64,
        max_num_batched_tokens=64,
        num_speculative_steps=0,
        vocab_size=V,
        device=torch.device(DEVICE),
    )
    # What the runner's staged writes leave on the device: committed tokens and lengths.
    hist = {2: [5, 6, 7, 6, 5, 40], 0: [1, 2, 3]}
    for slot, toks in hist.items():
        rs.all_token_ids.gpu[slot, : len(toks)] = torch.tensor(toks, dtype=rs.all_token_ids.gpu.dtype)
        rs.total_len.gpu[slot] = len(toks)
    proc = RepetitionPenalty(object(), v2.LogitsProcRequestState.from_request_state(rs))
    assert proc.add_request(2, SamplingParams(extra_args={**NORM, "repeat_last_n": 4})) is True
    assert proc.add_request(0, SamplingParams()) is False
    assert proc.add_request(1, SamplingParams(extra_args=CTRL4)) is True
    rs.all_token_ids.gpu[1, :2] = torch.tensor([8, 8], dtype=rs.all_token_ids.gpu.dtype)
    rs.total_len.gpu[1] = 2

    slots = np.array([2, 0, 1])
    lens = np.array([6, 3, 2])
    ctx = v2.LogitsContext(
        expanded_idx_mapping=torch.tensor(slots, device=DEVICE),
        idx_mapping=torch.tensor(slots, device=DEVICE),
        idx_mapping_np=slots,
        expanded_local_pos=torch.zeros(3, dtype=torch.long, device=DEVICE),
        input_ids=torch.zeros(3, dtype=torch.long, device=DEVICE),
        pos=torch.tensor(lens - 1, device=DEVICE),
        seq_lens_upper_bound_np=lens,
    )
    logits = (torch.randn(3, V, generator=torch.Generator().manual_seed(1)) * 3).to(DEVICE)
    got = proc.apply(logits.clone(), ctx)
    close(got[0], rust(logits[0], [7, 6, 5, 40], **{**NORM, "repeat_last_n": 4}))
    assert torch.equal(got[1], logits[1])
    close(got[2], rust(logits[2], [8, 8], repeat_penalty=2.0, repeat_last_n=4, presence_penalty=0.5))


# -- the default model, in-process ------------------------------------------------------------

N_TOKENS = 32
N_PROMPTS = 4


@pytest.fixture(scope="module")
def llm(gguf):
    from models import safetensors_dir

    engine = vllm.LLM(
        model=str(safetensors_dir(gguf)),
        distributed_executor_backend="uni",
        logits_processors=[RepetitionPenalty],
        **vllm_env.ENGINE_ARGS,
    )
    yield engine
    del engine


def params(**kw) -> SamplingParams:
    return SamplingParams(max_tokens=N_TOKENS, temperature=0.0, ignore_eos=True, **kw)


def shift(c: float, vocab: int) -> dict:
    """logit_bias adding c to every token (vLLM applies it before custom processors)."""
    return {t: c for t in range(vocab)}


def test_mixed_batch(llm, a1_prefixes):
    prompts = a1_prefixes[:N_PROMPTS]
    vocab = llm.llm_engine.model_config.get_vocab_size()
    ctrl = {"repeat_penalty": THETA, "repeat_penalty_mode": "ctrl", "repeat_last_n": -1}
    kinds = {
        "plain": params(),
        "ctrl": params(extra_args=ctrl),
        "vllm": params(repetition_penalty=THETA),
        "norm+5": params(extra_args=NORM, logit_bias=shift(5.0, vocab)),
        # θ alone: the processor's defaults are NORM's (the fix, over prompt + output).
        "norm-5": params(extra_args={"repeat_penalty": THETA}, logit_bias=shift(-5.0, vocab)),
        "ctrl+5": params(extra_args=ctrl, logit_bias=shift(5.0, vocab)),
        "ctrl-5": params(extra_args=ctrl, logit_bias=shift(-5.0, vocab)),
        "norm1.5w16": params(extra_args={**NORM, "repeat_penalty": 1.5, "repeat_last_n": 16}),
    }
    reqs = [(k, p) for k in kinds for p in prompts]
    outs = llm.generate([p for _, p in reqs], [kinds[k] for k, _ in reqs], use_tqdm=False)
    tokens: dict[str, list[list[int]]] = {k: [] for k in kinds}
    for (k, _), o in zip(reqs, outs):
        tokens[k].append(list(o.outputs[0].token_ids))
    assert all(len(t) == N_TOKENS for ts in tokens.values() for t in ts)

    assert tokens["ctrl"] == tokens["vllm"]
    assert tokens["norm+5"] == tokens["norm-5"]
    assert tokens["ctrl+5"] != tokens["ctrl-5"]  # the shift reaches the processor
    assert tokens["norm1.5w16"] != tokens["plain"]
    assert tokens["ctrl"] != tokens["plain"]

    # The same batch with every extra_args dropped: the processor has no row to touch, and the
    # batch shape (hence vLLM's numerics) is the same, so untouched requests must not move.
    bare = {
        k: params(**{f: getattr(v, f) for f in ("repetition_penalty", "logit_bias")})
        for k, v in kinds.items()
    }
    again = llm.generate([p for _, p in reqs], [bare[k] for k, _ in reqs], use_tqdm=False)
    untouched: dict[str, list[list[int]]] = {k: [] for k in kinds}
    for (k, _), o in zip(reqs, again):
        untouched[k].append(list(o.outputs[0].token_ids))
    assert untouched["plain"] == tokens["plain"]
    assert untouched["vllm"] == tokens["vllm"]


def test_a_bad_value_is_a_validation_error(llm):
    with pytest.raises(VLLMValidationError, match="repeat_penalty_mode"):
        llm.generate(
            ["Hello"],
            params(extra_args={"repeat_penalty": 1.2, "repeat_penalty_mode": "loud"}),
            use_tqdm=False,
        )
