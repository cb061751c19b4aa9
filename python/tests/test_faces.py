"""The wheel's faces agree: one rule for every host, the same numbers for the same settings.

The rule (docs/python.md, "One rule for every face"): each host's processor has the host's name
for it (the old name kept as an alias), defaults to the fix (``normalized``) and, by default, sees
what the host's own repetition penalty sees. The numbers: on the same row and history, every
face gives what gauge's Rust penalties stage gives, in both modes.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import need_import

gs = need_import("gauge_sampling")
torch = need_import("torch")
mx = need_import("mlx.core")
need_import("transformers")
need_import("vllm")

from gauge_sampling import hf, llama_cpp, mlx, ort_genai, vllm  # noqa: E402

V = 500
ROW = (np.random.default_rng(0).standard_normal(V) * 3 + 4).astype(np.float32)
HISTORY = [3, 7, 7, 19, 250, 499, 3, 42]


def rust(mode: str, last_n: int, **fields) -> np.ndarray:
    """gauge's Rust penalties stage on ROW after HISTORY."""
    chain = gs.Chain(
        {
            "samplers": ["penalties"],
            "repeat_penalty": 1.3,
            "repeat_penalty_mode": mode,
            "repeat_last_n": last_n,
            **fields,
        },
        V,
    )
    chain.accept_prompt(HISTORY)
    return np.asarray(chain.apply_stages(ROW.copy(), 1))


def test_host_names_and_old_names_are_one_class():
    assert hf.RepetitionPenalty is hf.RepetitionPenaltyLogitsProcessor
    assert vllm.RepetitionPenalty is vllm.RepetitionPenaltyLogitsProcessor
    assert llama_cpp.LogitsProcessor is llama_cpp.RepetitionPenaltyLogitsProcessor
    assert isinstance(mlx.make_repetition_penalty(1.3), mlx.RepetitionPenalty)


def test_every_face_defaults_to_the_fix_over_its_hosts_seen_set():
    # (face, the host's own window): HF and onnxruntime-genai see the whole sequence, mlx-lm the
    # last 20 tokens, llama-cpp-python the last 64 generated ones.
    for face, last_n in (
        (hf.RepetitionPenaltyLogitsProcessor(1.3), -1),
        (ort_genai.RepetitionPenalty(1.3), -1),
        (mlx.RepetitionPenalty(1.3), 20),
        (mlx.make_repetition_penalty(1.3), 20),
        (llama_cpp.RepetitionPenaltyLogitsProcessor(1.3), 64),
    ):
        assert (face.mode, face.last_n) == ("normalized", last_n), face
    assert llama_cpp.RepetitionPenaltyLogitsProcessor(1.3).include_prompt is False
    pen = vllm.request_penalty({"repeat_penalty": 1.3})
    assert (pen.normalized, pen.last_n) == (True, -1)
    assert vllm.request_penalty({"repeat_penalty": 1.3, "repeat_penalty_mode": "ctrl"}).normalized is False


@pytest.mark.parametrize("mode", ["ctrl", "normalized"])
def test_every_face_computes_the_rust_stage(mode):
    want = rust(mode, -1, presence_penalty=0.25, frequency_penalty=0.125, penalty_exempt=[42])
    kw = dict(mode=mode, last_n=-1, presence_penalty=0.25, frequency_penalty=0.125, exempt=[42])
    ids = np.asarray(HISTORY)
    got = {
        "hf": hf.RepetitionPenaltyLogitsProcessor(1.3, **kw)(
            torch.tensor([HISTORY]), torch.tensor(ROW).unsqueeze(0)
        )[0].numpy(),
        "mlx": np.asarray(mlx.RepetitionPenalty(1.3, **kw)(mx.array(ids), mx.array(ROW)[None])[0]),
        "ort-genai": ort_genai.RepetitionPenalty(1.3, **kw)(ids, ROW.copy()),
        "llama-cpp": llama_cpp.RepetitionPenaltyLogitsProcessor(1.3, include_prompt=True, **kw)(
            ids, ROW.copy()
        ),
    }
    for face, row in got.items():
        # A face may return the row unnormalized (normalized mode): softmax-equal rows differ by
        # a constant, so compare after subtracting each row's max.
        a, b = row - row.max(), want - want.max()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-5, err_msg=face)


def test_mlx_factory_is_mlx_lms_own_in_ctrl_and_refuses_a_zero_context():
    from mlx_lm.sample_utils import make_repetition_penalty as own

    row = mx.array(ROW)[None]
    toks = mx.array(np.asarray(list(range(30)) + HISTORY))
    ours = mlx.make_repetition_penalty(1.3, mode="ctrl")(toks, mx.array(row))
    theirs = own(1.3)(toks, mx.array(row))
    assert np.array_equal(np.asarray(ours), np.asarray(theirs))
    with pytest.raises(ValueError, match="context_size = 0"):
        mlx.make_repetition_penalty(1.3, context_size=0)


def test_the_operator_map_is_gauge_labs():
    """Engines ask gauge's processors for what gauge-lab's `Penalty::stage` maps each operator to."""
    from gauge_sampling.lab.engine import stage

    assert stage("ctrl", 1.3, 1.0) == {
        "repeat_penalty": 1.3,
        "repeat_penalty_mode": "ctrl",
        "presence_penalty": 0.0,
    }
    assert stage("normalized", 1.3, 1.0)["repeat_penalty_mode"] == "normalized"
    assert stage("subtractive", 1.3, 0.5) == {
        "repeat_penalty": 1.0,
        "repeat_penalty_mode": "ctrl",
        "presence_penalty": 0.5,
    }
    assert stage("subtractive", 1.0, 0.5)["presence_penalty"] == 0.0  # θ = 1 is off for every op
    with pytest.raises(ValueError, match="unknown operator .loud."):
        stage("loud", 1.3, 1.0)
