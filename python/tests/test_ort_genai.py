"""onnxruntime-genai, for real (CPU), on the default model's float32 weights exported by its own
builder:

- `python -m gauge_sampling probe --engine ort-genai` on the tiny grid (4 × 16) reproduces the float32
  reference (data/engines-reference.json, measured through llama.cpp): gate and the invariant
  operators exactly 0, ctrl within ±0.03, the zero-point statistics; the run records the logits
  check against HF and the seen set;
- `gauge_sampling.ort_genai` in onnxruntime-genai's own generator loop: `mode="ctrl"` is
  token-identical to the generator's own `repetition_penalty` (whole sequence, its default),
  `normalized` is token-identical under a +5 and a −5 shift, and a request without it is
  untouched.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import need_import
from test_probe_engines import MODEL, TINY, check_reference, probe

need_import("transformers")
og = need_import("onnxruntime_genai")
need_import("onnx")
need_import("onnxscript")
need_import("gauge_sampling")

#: The float32 reference flip rate ± this (issue 20: each fp32 engine within ±0.03 of 0.668).
CTRL_TOL = 0.03
N_TOKENS = 24


@pytest.fixture(scope="module")
def folder(gguf) -> Path:
    import models

    return models.safetensors_dir(gguf)


@pytest.fixture(scope="module")
def ort_model(folder):
    from gauge_sampling.lab.ort_genai_engine import exported_model

    return og.Model(str(exported_model(folder)))


@pytest.fixture(scope="module")
def prompts(folder, a1_prefixes) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    return [tok(t)["input_ids"] for t in a1_prefixes[:3]]


def generator(model, prompt, repetition_penalty=1.0):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + N_TOKENS + 2, repetition_penalty=repetition_penalty)
    gen = og.Generator(model, params)
    gen.append_tokens(np.asarray(prompt, dtype=np.int32))
    return gen


def own(model, prompt, theta, shift=0.0) -> list[int]:
    """onnxruntime-genai's own penalty (search option) on the (shifted) rows."""
    from gauge_sampling.ort_genai import generate

    return generate(generator(model, prompt, theta), None, N_TOKENS, shift=shift)


def test_ctrl_mode_is_onnxruntime_genais_own_penalty(ort_model, prompts):
    from gauge_sampling.ort_genai import RepetitionPenalty, generate

    for c in (0.0, 5.0, -5.0):
        for p in prompts:
            ours = generate(generator(ort_model, p), RepetitionPenalty(1.3, mode="ctrl"), N_TOKENS, shift=c)
            assert ours == own(ort_model, p, 1.3, shift=c), (c, p[:5])


def test_normalized_is_token_identical_under_the_shift(ort_model, prompts):
    from gauge_sampling.ort_genai import RepetitionPenalty, generate

    ctrl_moved = 0
    for p in prompts:
        pen = RepetitionPenalty(1.3)
        up = generate(generator(ort_model, p), pen, N_TOKENS, shift=5.0)
        down = generate(generator(ort_model, p), pen, N_TOKENS, shift=-5.0)
        assert up == down, p[:5]
        ctrl_moved += own(ort_model, p, 1.3, 5.0) != own(ort_model, p, 1.3, -5.0)
    # The point of the fix: onnxruntime-genai's own penalty does move under the same shift.
    assert ctrl_moved >= 1


def test_a_request_without_it_is_untouched(ort_model, prompts):
    from gauge_sampling.ort_genai import RepetitionPenalty, generate

    p = prompts[0]
    gen = generator(ort_model, p)
    plain = []
    for _ in range(N_TOKENS):
        gen.generate_next_token()
        plain.append(int(gen.get_next_tokens()[0]))
    assert generate(generator(ort_model, p), None, N_TOKENS) == plain
    assert generate(generator(ort_model, p), RepetitionPenalty(1.0), N_TOKENS) == plain, "θ = 1 is off"
    generate(generator(ort_model, p), RepetitionPenalty(1.3), N_TOKENS)
    assert generate(generator(ort_model, p), None, N_TOKENS) == plain, "no state carried over"
    row = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    out = RepetitionPenalty(1.3, mode="ctrl")([1, 2], row)
    assert row.tolist() == [1.0, -2.0, 3.0], "the caller's row is not changed"
    assert out.tolist() == pytest.approx([1.0, -2.6, 3.0 / 1.3])


@pytest.fixture(scope="module")
def ort_run(tmp_path_factory, gguf):
    out = tmp_path_factory.mktemp("probe-ort-genai")
    r = probe("ort-genai", out, grid=TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), out


def test_ort_genai_reproduces_the_float32_reference(ort_run):
    summary, out = ort_run
    assert summary["sampler"] == "ort-genai" and summary["model"] == MODEL
    check_reference(summary, CTRL_TOL, TINY)
    assert summary["forward_tokens"] < summary["naive_forward_tokens"], summary
    conds = {(c["op"], c["theta"]): c for c in summary["conditions"]}
    rate = conds[("ctrl", 1.3)]["flip_rate"]
    print(f"ort-genai: ctrl θ=1.3 flip rate {rate} (reference {TINY['ctrl_flip_theta_1_3']})")
    (d,) = [d for d in out.iterdir() if (d / "config.json").exists()]
    eng = json.loads((d / "config.json").read_text())["engine"]
    assert {"onnxruntime_genai", "onnxruntime", "python", "gauge_sampling"} <= set(eng["versions"])
    assert eng["options"]["seen"].startswith("protocol")
    assert float(eng["options"]["logits_vs_hf_max_abs"]) <= 1e-3
