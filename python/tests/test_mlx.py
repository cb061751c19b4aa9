"""mlx-lm, for real (mlx's CPU build), on the default model's float32 weights:

- `python -m gauge_sampling probe --engine mlx` on the tiny grid (4 × 16) reproduces the float32
  reference (data/engines-reference.json, measured through llama.cpp): gate and the invariant
  operators exactly 0, ctrl within ±0.03, the zero-point statistics; the run records the logits
  check against HF and the seen set;
- `gauge_sampling.mlx.RepetitionPenalty` through mlx-lm's own `generate_step`: `mode="ctrl"` is
  token-identical to mlx-lm's `make_repetition_penalty` on the same window, `normalized` is
  token-identical under a +5 and a −5 shift, and a request without it is untouched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import need_import
from test_probe_engines import MODEL, TINY, TOL, check_reference, probe

need_import("transformers")
mx = need_import("mlx.core")
need_import("mlx_lm")
need_import("gauge_sampling")

#: The float32 reference flip rate ± this (issue 20: each fp32 engine within ±0.03 of 0.668).
CTRL_TOL = 0.03
#: Greedy tokens per decode (mlx's CPU build is slow here: ~0.1-0.3 s a token on 2 cores).
N_TOKENS = 16


@pytest.fixture(scope="module")
def folder(gguf) -> Path:
    import models

    return models.safetensors_dir(gguf)


@pytest.fixture(scope="module")
def mlx_model(folder):
    import mlx_lm

    model, _ = mlx_lm.load(str(folder))
    return model


@pytest.fixture(scope="module")
def prompts(folder, a1_prefixes) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    return [tok(t)["input_ids"] for t in a1_prefixes[:2]]


def greedy(model, prompt, processors, n=N_TOKENS) -> list[int]:
    """mlx-lm's own decode loop (``generate_step``, greedy) with ``processors``."""
    from mlx_lm.generate import generate_step

    out = []
    for tok, _ in generate_step(mx.array(prompt), model, max_tokens=n, logits_processors=processors):
        out.append(int(tok))
    return out


def shift(c: float):
    return lambda tokens, logits: logits + c


#: "No window" for mlx-lm's penalty: longer than any sequence here.
WHOLE = 1 << 30
_own_decodes: dict = {}


def own_penalty(model, prompt, window: int, c: float) -> list[int]:
    """Greedy tokens under mlx-lm's own ``make_repetition_penalty(1.3, window)`` after a shift
    of ``c``; each decode runs once per module (mlx's CPU build takes ~0.3 s a token here)."""
    from mlx_lm.sample_utils import make_repetition_penalty

    key = (tuple(prompt), window, c)
    if key not in _own_decodes:
        procs = [shift(c), make_repetition_penalty(1.3, context_size=window)]
        _own_decodes[key] = greedy(model, prompt, procs)
    return _own_decodes[key]


def test_ctrl_mode_is_mlx_lms_own_penalty(mlx_model, prompts):
    from gauge_sampling.mlx import RepetitionPenalty

    # mlx-lm's default window (20) and the whole sequence, under both shifts.
    for window, last_n, c in ((20, 20, -5.0), (WHOLE, -1, 5.0), (WHOLE, -1, -5.0)):
        for p in prompts:
            own = own_penalty(mlx_model, p, window, c)
            ours = greedy(mlx_model, p, [shift(c), RepetitionPenalty(1.3, mode="ctrl", last_n=last_n)])
            assert ours == own, (window, c, p[:5])


def test_normalized_is_token_identical_under_the_shift(mlx_model, prompts):
    from gauge_sampling.mlx import RepetitionPenalty

    ctrl_moved = 0
    for p in prompts:
        pen = RepetitionPenalty(1.3)
        up = greedy(mlx_model, p, [shift(5.0), pen])
        down = greedy(mlx_model, p, [shift(-5.0), pen])
        assert up == down, p[:5]
        ctrl_moved += own_penalty(mlx_model, p, WHOLE, 5.0) != own_penalty(mlx_model, p, WHOLE, -5.0)
    # The point of the fix: mlx-lm's own penalty does move under the same shift.
    assert ctrl_moved >= 1


def test_a_request_without_it_is_untouched(mlx_model, prompts):
    from gauge_sampling.mlx import RepetitionPenalty

    p = prompts[0]
    plain = greedy(mlx_model, p, None)
    greedy(mlx_model, p, [RepetitionPenalty(1.3)])
    assert greedy(mlx_model, p, None) == plain, "no state carried into the next request"
    assert greedy(mlx_model, p, [RepetitionPenalty(1.0)]) == plain, "θ = 1 is off"
    # The processor leaves the caller's array alone and keeps its dtype.
    row = mx.array([[1.0, -2.0, 3.0]], dtype=mx.float16)
    out = RepetitionPenalty(1.3, mode="ctrl")(mx.array([1, 2]), row)
    assert row.tolist() == [[1.0, -2.0, 3.0]] and out.dtype == mx.float16
    got = out.tolist()[0]
    assert got[1] == pytest.approx(-2.6, abs=1e-2) and got[2] == pytest.approx(3.0 / 1.3, abs=1e-2)


def test_engine_default_seen_set_is_mlx_lms_own(mlx_model, prompts):
    """--seen engine is mlx-lm as shipped: the engine's ctrl run is token-identical to
    ``generate_step`` with ``make_logits_processors(repetition_penalty=θ)`` (its default
    ``repetition_context_size`` 20 of prompt + output), and differs from the protocol's seen set
    (no window) on these prompts."""
    from gauge_sampling.lab.mlx_engine import MlxEngine
    from mlx_lm.sample_utils import make_logits_processors

    spec = {"op": "ctrl", "theta": 1.3, "c": 5.0, "alpha": 1.0, "role": "flip"}
    engine, protocol = MlxEngine(mlx_model, None, "engine"), MlxEngine(mlx_model, None, "protocol")
    as_shipped = [shift(5.0), *make_logits_processors(repetition_penalty=1.3)]
    moved = 0
    for p in prompts:
        (ours,) = engine.decode([p], [spec], N_TOKENS)[0]
        assert ours.tokens == greedy(mlx_model, p, as_shipped), p[:5]
        moved += protocol.decode([p], [spec], N_TOKENS)[0][0].tokens != ours.tokens
    assert moved > 0, "the window changed nothing: the as-shipped scope shows nothing here"


@pytest.fixture(scope="module")
def mlx_run(tmp_path_factory, gguf):
    out = tmp_path_factory.mktemp("probe-mlx")
    r = probe("mlx", out, grid=TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), out


def test_mlx_reproduces_the_float32_reference(mlx_run):
    summary, out = mlx_run
    assert summary["sampler"] == "mlx" and summary["model"] == MODEL
    check_reference(summary, CTRL_TOL, TINY)
    assert summary["forward_tokens"] * 3 < summary["naive_forward_tokens"], summary
    conds = {(c["op"], c["theta"]): c for c in summary["conditions"]}
    rate = conds[("ctrl", 1.3)]["flip_rate"]
    print(f"mlx: ctrl θ=1.3 flip rate {rate} (reference {TINY['ctrl_flip_theta_1_3']})")
    (d,) = [d for d in out.iterdir() if (d / "config.json").exists()]
    eng = json.loads((d / "config.json").read_text())["engine"]
    assert {"mlx", "mlx_lm", "python", "gauge_sampling"} <= set(eng["versions"])
    assert eng["options"]["seen"].startswith("protocol")
    # Which BLAS ran mlx's matmuls is part of the record (scripts/setup-python.sh may swap it).
    blas = eng["options"]["blas"]
    print(f"mlx: BLAS {blas}")
    assert blas.endswith("(bundled)") or "openblas" in blas, eng["options"]
    assert float(eng["options"]["logits_vs_hf_max_abs"]) <= 1e-3
    assert TOL["positive_fraction"] > 0 and TINY["positions"] == 64


def test_a_model_read_differently_is_refused(folder, prompts):
    """mlx-lm 0.32.2 ignores transformers 5's ``rope_parameters`` (rope_theta 100000 read as
    mlx-lm's default 10000): loaded as is it computes another model, and the check refuses it;
    with the engine's override it passes."""
    import mlx_lm
    from gauge_sampling.lab.logits_check import check_engine_logits
    from gauge_sampling.lab.mlx_engine import MlxEngine, rope_overrides

    assert rope_overrides(folder) == {"rope_theta": 100000.0}
    as_is, _ = mlx_lm.load(str(folder))
    with pytest.raises(ValueError, match="does not compute the same model"):
        check_engine_logits("mlx", folder, prompts, MlxEngine(as_is, None, "protocol").next_row)
    fixed, _ = mlx_lm.load(str(folder), model_config=rope_overrides(folder))
    assert check_engine_logits("mlx", folder, prompts, MlxEngine(fixed, None, "protocol").next_row) <= 1e-3
