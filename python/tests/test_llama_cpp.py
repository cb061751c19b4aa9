"""llama-cpp-python: the instrument's engine (`python -m gauge_sampling probe --engine
llama-cpp-python`, the tiny 4 × 16 grid against the float32 reference; its 8 × 32 run is in
docs/results.md) and the fix as a drop-in (`gauge_sampling.llama_cpp`: the LogitsProcessor, and
libgauge's C sampler through llama-cpp-python's low-level API), all on the real library and the
default model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, need, need_import
from test_probe_engines import TINY, TOL, check_reference
from test_probe_engines import probe as probe_engine

llama_cpp = need_import("llama_cpp")
gs = need_import("gauge_sampling")

from gauge_sampling.llama_cpp import RepetitionPenaltyLogitsProcessor as LogitsProcessor  # noqa: E402

PROMPTS = (
    "The history of the city begins in",
    "Once upon a time there was a little robot who",
    "The following is a list of the largest lakes:",
)
N = 32
THETA = 1.3


def probe(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return probe_engine("llama-cpp-python", out, *extra, grid=TINY)


@pytest.fixture(scope="module")
def llm(gguf):
    from gauge_sampling.lab.engine import usable_cpus

    m = llama_cpp.Llama(model_path=str(gguf), n_ctx=512, n_threads=usable_cpus(), seed=0, verbose=False)
    yield m
    m.close()


@pytest.fixture(scope="module")
def prompts(llm) -> list[list[int]]:
    return [llm.tokenize(p.encode()) for p in PROMPTS]


def greedy(llm, prompt, n=N, **kw) -> list[int]:
    out = []
    for t in llm.generate(prompt, temp=0.0, **kw):
        out.append(int(t))
        if len(out) == n:
            break
    return out


def shift(c: float):
    c = np.float32(c)
    return lambda ids, z: (z + c).astype(np.float32)


def procs(*ps):
    return llama_cpp.LogitsProcessorList(list(ps))


# --- the fix: gauge_sampling.llama_cpp.LogitsProcessor --------------------------------------------


def test_ctrl_processor_is_llamas_own_penalty_token_for_token(llm, prompts):
    """mode="ctrl" on llama-cpp-python's default scope (last 64 generated tokens) == its own
    repeat_penalty (llama.cpp's penalties sampler), and the penalty acts."""
    acted = 0
    for p in prompts:
        own = greedy(llm, p, repeat_penalty=THETA)
        ours = greedy(llm, p, repeat_penalty=1.0, logits_processor=procs(LogitsProcessor(THETA, "ctrl")))
        assert ours == own, (p, own, ours)
        acted += own != greedy(llm, p, repeat_penalty=1.0)
    assert acted > 0, "θ = 1.3 changed no token: the comparison tests nothing"


def test_normalized_processor_is_shift_invariant_and_ctrl_is_not(llm, prompts):
    diff_ctrl = 0
    for p in prompts:
        a = greedy(llm, p, repeat_penalty=1.0, logits_processor=procs(shift(5), LogitsProcessor(THETA)))
        b = greedy(llm, p, repeat_penalty=1.0, logits_processor=procs(shift(-5), LogitsProcessor(THETA)))
        assert a == b, (p, a, b)
        # llama.cpp's own penalty after the same shift (its logits_processor runs first).
        ca = greedy(llm, p, repeat_penalty=THETA, logits_processor=procs(shift(5)))
        cb = greedy(llm, p, repeat_penalty=THETA, logits_processor=procs(shift(-5)))
        diff_ctrl += sum(x != y for x, y in zip(ca, cb))
    assert diff_ctrl > 0, "ctrl flipped nothing under ±5: the invariance shows nothing"


def test_requests_without_the_processor_are_untouched(llm, prompts):
    for p in prompts:
        plain = greedy(llm, p, repeat_penalty=1.0)
        # θ = 1 is a no-op, and a request after one with the processor is plain greedy again.
        assert greedy(llm, p, repeat_penalty=1.0, logits_processor=procs(LogitsProcessor(1.0))) == plain
        greedy(llm, p, repeat_penalty=1.0, logits_processor=procs(LogitsProcessor(THETA)))
        assert greedy(llm, p, repeat_penalty=1.0) == plain


def test_logits_processor_is_what_llama_runs_before_its_penalties():
    """The plug-in point, read in the installed source: the custom sampler is added before
    add_penalties in Llama._init_sampler."""
    import inspect

    src = inspect.getsource(llama_cpp.Llama._init_sampler)
    assert src.index("add_custom") < src.index("add_penalties"), src


# --- the C sampler route: libgauge in a llama.cpp chain ------------------------------------------


@pytest.fixture(scope="module")
def libgauge():
    from gauge_sampling.llama_cpp import libgauge as load

    path = ROOT / "target" / "release" / "libgauge.so"
    need(path.exists(), f"{path} is missing: cargo build --release -p gauge-capi")
    return load(str(path))


def test_c_sampler_ctrl_is_llamas_own_penalty(llm, prompts, libgauge):
    from gauge_sampling.llama_cpp import generate_c

    for p in prompts:
        own = greedy(llm, p, repeat_penalty=THETA)
        assert generate_c(llm, libgauge, p, N, THETA, "ctrl") == own, p


def test_c_sampler_normalized_is_shift_invariant(llm, prompts, libgauge):
    from gauge_sampling.llama_cpp import generate_c

    diff_ctrl = 0
    for p in prompts:
        a = generate_c(llm, libgauge, p, N, THETA, "normalized", shift=5.0)
        b = generate_c(llm, libgauge, p, N, THETA, "normalized", shift=-5.0)
        assert a == b, p
        ca = generate_c(llm, libgauge, p, N, THETA, "ctrl", shift=5.0)
        cb = generate_c(llm, libgauge, p, N, THETA, "ctrl", shift=-5.0)
        diff_ctrl += sum(x != y for x, y in zip(ca, cb))
    assert diff_ctrl > 0


# --- the instrument's engine ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("llama-cpp-python")


@pytest.fixture(scope="module")
def protocol_run(out_root, gguf):
    r = probe(out_root)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def run_config(root: Path, seen_prefix: str) -> dict:
    for d in root.iterdir():
        f = d / "config.json"
        if f.exists():
            cfg = json.loads(f.read_text())
            seen = cfg.get("engine", {}).get("options", {}).get("seen", "")
            if cfg.get("sampler") == "llama-cpp-python" and seen.startswith(seen_prefix):
                return cfg | {"dir": str(d)}
    raise AssertionError(f"no llama-cpp-python run with seen {seen_prefix} under {root}")


def test_engine_reproduces_the_float32_reference(protocol_run, out_root):
    s = protocol_run
    check_reference(s, TOL["hf_ctrl_flip"], TINY)
    ctrl = {(c["op"], c["theta"]): c for c in s["conditions"]}[("ctrl", 1.3)]["flip_rate"]
    print(f"llama-cpp-python, protocol seen set: ctrl θ=1.3 flip {ctrl:.4f}")
    cfg = run_config(out_root, "protocol")
    opts = cfg["engine"]["options"]
    assert float(opts["logits_vs_hf_max_abs"]) <= 1e-3, opts
    assert "llama_cpp_python" in cfg["engine"]["versions"]
    report = (Path(cfg["dir"]) / "REPORT.md").read_text()
    assert "llama-cpp-python" in report and "llama.cpp's `penalties` sampler" in report


def test_engine_default_seen_set_is_llama_cpp_pythons_own(llm, prompts):
    """--seen engine is llama-cpp-python as shipped: the engine's ctrl run is token-identical to
    ``Llama.generate(repeat_penalty=θ)`` (last 64 sampled tokens, the prompt never accepted), and
    on these short prompts it differs from the protocol's seen set, which accepts the prompt."""
    from gauge_sampling.lab.llama_cpp_engine import LlamaCppEngine

    spec = {"op": "ctrl", "theta": THETA, "c": 5.0, "alpha": 1.0, "role": "flip"}
    engine, protocol = LlamaCppEngine(llm, None, "engine"), LlamaCppEngine(llm, None, "protocol")
    n = 16  # tokens: the prompt's absence from the window shows within them
    moved = 0
    for p in prompts[:2]:
        (ours,) = engine.decode([p], [spec], n)[0]
        assert ours.tokens == greedy(llm, p, n, repeat_penalty=THETA, logits_processor=procs(shift(5))), p
        moved += protocol.decode([p], [spec], n)[0][0].tokens != ours.tokens
    assert moved > 0, "the prompt in the window changed nothing: the scope shows nothing here"


def test_engine_default_seen_set_is_recorded(tmp_path, gguf):
    r = probe(tmp_path, "--seen", "engine", "--ops", "ctrl", "--prefixes", "1", "--tokens", "8")
    assert r.returncode == 0, r.stderr[-3000:]
    conds = {(c["op"], c["theta"]): c for c in json.loads(r.stdout)["conditions"]}
    assert conds[("ctrl", 1.0)]["flip_rate"] == 0.0
    cfg = run_config(tmp_path, "engine")
    assert cfg["engine"]["options"]["seen"] == "engine: last 64 sampled tokens, prompt not accepted"
    assert float(cfg["engine"]["options"]["logits_vs_hf_max_abs"]) <= 1e-3
