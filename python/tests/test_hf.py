"""gauge_sampling.hf.RepetitionPenalty: HF's own processor bit for bit in ctrl mode, gauge's Rust
penalties stage in both modes, and on the default model: greedy tokens equal to HF's processor,
and normalized tokens unmoved by a ±5 shift of every logit (ctrl's are moved)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DEVICE, DTYPE, need_import

torch = need_import("torch")
transformers = need_import("transformers")
gs = need_import("gauge_sampling")
from gauge_sampling.hf import RepetitionPenalty  # noqa: E402
from transformers import LogitsProcessor, LogitsProcessorList, RepetitionPenaltyLogitsProcessor  # noqa: E402

THETA = 1.3


def _batch(b: int, length: int, vocab: int, seed: int, offset: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (b, length), generator=g)
    scores = torch.randn(b, vocab, generator=g) * 4 + offset
    return ids.to(DEVICE), scores.to(DEVICE)


# -- against HF's own processor ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("theta", [1.3, 0.7])
def test_ctrl_is_hfs_processor_bit_for_bit(dtype, theta):
    ids, scores = _batch(8, 200, 3000, seed=1)
    scores = scores.to(dtype)
    want = RepetitionPenaltyLogitsProcessor(theta)(ids, scores.clone())
    got = RepetitionPenalty(theta, mode="ctrl")(ids, scores.clone())
    assert got.dtype == dtype and got.shape == scores.shape
    assert torch.equal(got, want)


def test_off_settings_return_the_input():
    ids, scores = _batch(2, 10, 50, seed=2)
    assert RepetitionPenalty(1.0)(ids, scores) is scores
    assert RepetitionPenalty(1.5, last_n=0)(ids, scores) is scores


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"penalty": 0.0}, "repeat_penalty"),
        ({"penalty": 1.2, "mode": "loud"}, "repeat_penalty_mode"),
        ({"penalty": 1.2, "last_n": -3}, "repeat_last_n"),
        ({"penalty": 1.2, "presence_penalty": float("nan")}, "presence_penalty"),
        ({"penalty": 1.2, "exempt": [-1]}, "penalty_exempt"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RepetitionPenalty(**kwargs)


# -- against gauge's Rust penalties stage -----------------------------------------------------


def _rust_penalties(row: np.ndarray, history: list[int], **fields) -> np.ndarray:
    chain = gs.Chain({"samplers": ["penalties"], **fields}, len(row))
    chain.accept_prompt(history)
    return np.array(chain.apply_stages(row, 1), dtype=np.float32)


CASES = [
    dict(penalty=THETA, last_n=-1),
    dict(penalty=THETA, last_n=16),
    dict(penalty=0.8, last_n=-1),
    dict(penalty=THETA, last_n=32, presence_penalty=0.5, frequency_penalty=0.25),
    dict(penalty=THETA, last_n=-1, exempt=(3, 7, 11)),
]


@pytest.mark.parametrize("mode", ["ctrl", "normalized"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_matches_the_rust_penalties_stage(mode, case):
    ids, scores = _batch(4, 60, 400, seed=3, offset=1.5)
    ids[:, :20] = torch.arange(20, device=DEVICE)  # force repeats, and the exempt ids, into every window
    got = RepetitionPenalty(mode=mode, **case)(ids, scores.clone())
    for b in range(ids.shape[0]):
        want = _rust_penalties(
            scores[b].cpu().numpy(),
            ids[b].tolist(),
            repeat_penalty=case["penalty"],
            repeat_penalty_mode=mode,
            repeat_last_n=case["last_n"],
            presence_penalty=case.get("presence_penalty", 0.0),
            frequency_penalty=case.get("frequency_penalty", 0.0),
            penalty_exempt=list(case.get("exempt", ())),
        )
        np.testing.assert_allclose(got[b].cpu().numpy(), want, rtol=2e-6, atol=2e-5)


def test_normalized_is_unmoved_by_a_shift_and_ctrl_is_moved():
    ids, scores = _batch(4, 100, 1000, seed=4, offset=0.5)
    norm = RepetitionPenalty(THETA, mode="normalized")
    ctrl = RepetitionPenalty(THETA, mode="ctrl")
    up, down = norm(ids, scores + 5), norm(ids, scores - 5)
    torch.testing.assert_close(up, down, rtol=0, atol=1e-5)
    cu, cd = ctrl(ids, scores + 5), ctrl(ids, scores - 5)
    gap = (torch.log_softmax(cu, -1) - torch.log_softmax(cd, -1)).abs().max()
    assert gap > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_normalized_is_unmoved_by_an_exact_shift_in_every_dtype(dtype):
    """Rows of eighths within ±26: every x, x + 5 and x − 5 is exact in bfloat16 and float16, so
    the rows differ by the shift alone and the outputs by at most one rounding to ``dtype``
    (rtol = the dtype's epsilon); ctrl's outputs move by whole units."""
    ids, scores = _batch(4, 100, 1000, seed=7)
    scores = (scores * 8).round().clamp(-208, 208) / 8
    up, down = (scores + 5).to(dtype), (scores - 5).to(dtype)
    assert torch.equal(up.float() - 5, scores) and torch.equal(down.float() + 5, scores)
    norm = RepetitionPenalty(THETA, mode="normalized")
    got_up, got_down = norm(ids, up), norm(ids, down)
    assert got_up.dtype == dtype
    torch.testing.assert_close(got_up.float(), got_down.float(), rtol=torch.finfo(dtype).eps, atol=0)
    ctrl = RepetitionPenalty(THETA, mode="ctrl")
    cu, cd = ctrl(ids, up).float(), ctrl(ids, down).float()
    assert (torch.log_softmax(cu, -1) - torch.log_softmax(cd, -1)).abs().max() > 0.1


def test_left_padding_is_not_seen_when_the_pad_id_is_given():
    ids, scores = _batch(1, 12, 100, seed=5)
    pad = 99
    ids[ids == pad] = 0
    padded = torch.cat([torch.full((1, 5), pad, device=DEVICE), ids], dim=1)
    proc = RepetitionPenalty(THETA, mode="normalized", pad_token_id=pad)
    torch.testing.assert_close(proc(padded, scores.clone()), proc(ids, scores.clone()), rtol=0, atol=0)
    # without the pad id, the pad token counts as seen
    plain = RepetitionPenalty(THETA, mode="normalized")(padded, scores.clone())
    assert not torch.equal(plain[0, pad], proc(ids, scores.clone())[0, pad])


def test_half_precision_rows_keep_their_dtype_and_values():
    ids, scores = _batch(3, 50, 500, seed=6)
    proc = RepetitionPenalty(THETA, mode="normalized", frequency_penalty=0.1)
    full = proc(ids, scores)
    for dtype in (torch.bfloat16, torch.float16):
        half = proc(ids, scores.to(dtype))
        assert half.dtype == dtype
        torch.testing.assert_close(half.float(), full, rtol=1e-2, atol=5e-2)


# -- on the default model ---------------------------------------------------------------------

#: The small grid's size (8 prefixes x 32 tokens; 20 x 64 before, 4x the CPU time for the same checks).
N_PREFIXES, N_TOKENS = 8, 32


class Shift(LogitsProcessor):
    """Adds a constant to every logit: softmax ignores it, ctrl's sign branch does not."""

    def __init__(self, c: float):
        self.c = c

    def __call__(self, input_ids, scores):
        return scores + self.c


@pytest.fixture(scope="module")
def greedy(hf, a1_prefixes):
    """generate(processors) -> the new tokens for the first N_PREFIXES A1 prefixes (one left-padded batch)."""
    model, tok = hf
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    enc = tok(a1_prefixes[:N_PREFIXES], return_tensors="pt", padding=True).to(DEVICE)

    def run(processors) -> torch.Tensor:
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=N_TOKENS,
                min_new_tokens=N_TOKENS,
                do_sample=False,
                logits_processor=LogitsProcessorList(processors),
                pad_token_id=tok.pad_token_id,
            )
        return out[:, enc["input_ids"].shape[1] :]

    return run


def test_model_ctrl_tokens_are_hfs(greedy):
    ours = greedy([RepetitionPenalty(THETA, mode="ctrl")])
    theirs = greedy([RepetitionPenaltyLogitsProcessor(THETA)])
    assert ours.shape == (N_PREFIXES, N_TOKENS)
    assert torch.equal(ours, theirs)


def test_model_normalized_tokens_ignore_a_shift(greedy):
    norm_up = greedy([Shift(5.0), RepetitionPenalty(THETA, mode="normalized")])
    norm_down = greedy([Shift(-5.0), RepetitionPenalty(THETA, mode="normalized")])
    assert torch.equal(norm_up, norm_down)


def test_model_ctrl_tokens_move_with_a_shift(greedy):
    """A fact of the default model's rows (on a random-init model of its shape the ±5 shift
    moved none of 128 probe positions: scripts/gpu-check-offline.sh deselects this test)."""
    ctrl_up = greedy([Shift(5.0), RepetitionPenalty(THETA, mode="ctrl")])
    ctrl_down = greedy([Shift(-5.0), RepetitionPenalty(THETA, mode="ctrl")])
    assert not torch.equal(ctrl_up, ctrl_down)


def test_model_rows_match_the_rust_stage(hf, a1_prefixes):
    model, tok = hf
    for text in a1_prefixes[:3]:
        ids = tok(text, return_tensors="pt")["input_ids"].to(DEVICE)
        with torch.no_grad():
            row = model(ids).logits[:, -1, :].float()
        for mode in ("ctrl", "normalized"):
            got = RepetitionPenalty(THETA, mode=mode)(ids, row.clone())[0].cpu().numpy()
            want = _rust_penalties(
                row[0].cpu().numpy(),
                ids[0].tolist(),
                repeat_penalty=THETA,
                repeat_penalty_mode=mode,
                repeat_last_n=-1,
            )
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-5)


def test_the_engines_grouped_attention_is_sdpas(hf, a1_prefixes, monkeypatch):
    """The hf engine's decode attention (``lab/hf_attention.py``) regroups the query instead of
    copying KV heads: the same logits as transformers' sdpa within float rounding, the same
    greedy tokens, on a left-padded batch; only the prefill is handed to sdpa."""
    from gauge_sampling.lab import hf_attention

    if DTYPE != "float32":
        pytest.skip(f"the tolerance below is float32's (GAUGE_TEST_DTYPE={DTYPE})")
    model, tok = hf
    rows = [tok(t)["input_ids"][: 12 + 7 * i] for i, t in enumerate(a1_prefixes[:4])]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows], device=DEVICE)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=DEVICE)

    def decode(steps: int = 12) -> torch.Tensor:
        m, pos = mask, (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=m, position_ids=pos, use_cache=True)
            nxt, got = m.sum(-1), []
            for _ in range(steps):
                tok_ids = out.logits[:, -1].argmax(-1, keepdim=True)
                m = torch.cat([m, torch.ones_like(tok_ids)], 1)
                out = model(
                    input_ids=tok_ids,
                    attention_mask=m,
                    position_ids=nxt.unsqueeze(1),
                    past_key_values=out.past_key_values,
                    use_cache=True,
                )
                nxt = nxt + 1
                got.append(out.logits[:, -1].float())
        return torch.stack(got)

    want = decode()
    handed = []
    plain = hf_attention.sdpa_attention_forward

    def counted(module, query, *args, **kwargs):
        handed.append(query.shape[2])
        return plain(module, query, *args, **kwargs)

    monkeypatch.setattr(hf_attention, "sdpa_attention_forward", counted)
    assert hf_attention.use_grouped_attention(model)
    try:
        got = decode()
    finally:
        model.set_attn_implementation("sdpa")
    layers = model.config.num_hidden_layers
    assert handed == [width] * layers, "only the prefill goes to transformers' sdpa"
    torch.testing.assert_close(got, want, rtol=0, atol=1e-3)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
