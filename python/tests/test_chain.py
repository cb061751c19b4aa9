"""gauge_sampling.Chain against llama.cpp's recorded outputs (data/), the CLI's messages and
trace replay; the row is read in place from numpy arrays and CPU torch tensors."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from conftest import DATA, need_import

gs = need_import("gauge_sampling")


def f32(values) -> np.ndarray:
    """Floats from the data files, where non-finite values are the strings "-inf", "inf", "nan"."""
    return np.array([float(v) for v in values], dtype=np.float32)


def vectors(test: str) -> list[dict]:
    d = json.loads((DATA / "test-sampling-vectors.json").read_text())
    return [v for v in d["vectors"] if v["test"] == test]


@pytest.mark.parametrize("rec", vectors("test_penalties"), ids=lambda r: f"id{r['id']}")
def test_penalties_then_dist_pick_llama_cpps_token(rec):
    p = rec["params"]
    chain = gs.Chain(
        {
            "seed": 0,
            "samplers": ["penalties"],
            "repeat_last_n": p["penalty_last_n"],
            "repeat_penalty": p["penalty_repeat"],
            "frequency_penalty": p["penalty_freq"],
            "presence_penalty": p["penalty_present"],
        },
        p["n_vocab"],
    )
    for t in rec["history"]:
        chain.accept(t)
    actual = rec["actual"]
    want = actual["ids"][actual["selected"]]
    assert chain.sample(f32(rec["input_logits"])) == want


def test_dist_draws_match_llama_cpps_rng():
    (rec,) = vectors("test_dist_singleton_rng")
    n = rec["then"]["n_vocab"]
    chain = gs.Chain({"seed": rec["params"]["seed"], "samplers": []}, n)
    first = np.full(n, -np.inf, dtype=np.float32)
    first[rec["first_call"]["singleton_selected_id"]] = 0.0
    got = [chain.sample(first)] + [chain.sample(np.zeros(n, np.float32)) for _ in range(4)]
    assert got == [rec["first_call"]["singleton_selected_id"], *rec["then"]["singleton_ids"]]


def _sort_ties_params(rec: dict) -> dict:
    """A sort-ties pipeline as request fields: one sampler slot per stage, in order."""
    names = {
        "top_k": "top_k",
        "top_p": "top_p",
        "min_p": "min_p",
        "typical": "typ_p",
        "temp_ext": "temperature",
    }
    params: dict = {"seed": rec["dist_seed"], "samplers": []}
    for st in rec["pipeline"]:
        kind = st["sampler"]
        params["samplers"].append(names[kind])
        if kind == "top_k":
            params["top_k"] = st["k"]
        elif kind == "temp_ext":
            params.update(temperature=st["t"], dynatemp_range=st["delta"], dynatemp_exponent=st["exponent"])
        else:
            params[{"typical": "typical_p"}.get(kind, kind)] = st["p"]
        if "min_keep" in st:
            params["min_keep"] = st["min_keep"]
    return params


def _sort_ties() -> list[dict]:
    return json.loads((DATA / "sort-ties-vectors.json").read_text())["samplers"]


@pytest.mark.parametrize("rec", _sort_ties(), ids=lambda r: r["name"])
def test_tie_heavy_chains_pick_libllamas_token(rec):
    logits = f32(rec["logits"])
    params = _sort_ties_params(rec)
    mins = {st.get("min_keep") for st in rec["pipeline"] if "min_keep" in st}
    if np.isposinf(logits).any():
        # The chain refuses +inf logits (llama.cpp's behaviour there is undefined): say so by name.
        with pytest.raises(ValueError, match="inf"):
            gs.Chain(params, len(logits)).sample(logits)
        return
    if any(st["sampler"] == "min_p" and st["p"] > 1 for st in rec["pipeline"]):
        # llama.cpp's stage takes min_p > 1; gauge's request validation refuses it, by name.
        with pytest.raises(ValueError, match="min_p"):
            gs.Chain(params, len(logits))
        return
    assert len(mins) <= 1, "one min_keep per request"
    chain = gs.Chain(params, len(logits))
    out = rec["out"]
    assert chain.sample(logits) == out["ids"][out["selected"]]


# -- the CLI's messages -----------------------------------------------------------------------

BAD = [
    {"top_p": 2.5},
    {"repeat_penalty": -1.0},
    {"repeat_penalty_mode": "loud"},
    {"repeat_last_n": -7},
    {"samplers": ["top_k", "nonsense"]},
    {"seed": 1 << 40},
]


@pytest.mark.parametrize("params", BAD, ids=lambda p: next(iter(p)))
def test_bad_params_raise_the_clis_message(params, gauge_bin, tmp_path):
    with pytest.raises(ValueError) as err:
        gs.Chain(params, 32000)
    path = tmp_path / "params.json"
    path.write_text(json.dumps(params))
    cli = subprocess.run(
        [str(gauge_bin), "chain", "--params", str(path), "--n-vocab", "32000"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode != 0
    assert str(err.value) in cli.stderr, (str(err.value), cli.stderr)
    assert next(iter(params)) in str(err.value) or "sampler" in str(err.value)


def test_json_text_and_dict_build_the_same_chain():
    params = {"top_k": 3, "temperature": 0.7, "repeat_penalty": 1.2, "repeat_penalty_mode": "normalized"}
    a = gs.Chain(params, 6)
    b = gs.Chain(json.dumps(params), 6)
    assert a.describe() == b.describe()
    assert a.describe().startswith("logits -> penalties")
    with pytest.raises(ValueError, match="malformed JSON"):
        gs.Chain("{not json", 6)
    with pytest.raises(ValueError, match="temperature"):
        gs.Chain({"temperature": float("inf")}, 6)


def test_parse_params_fills_gauges_defaults():
    p = gs.parse_params({"repeat_penalty": 1.3, "repeat_penalty_mode": "normalized"})
    assert p["repeat_penalty"] == pytest.approx(1.3)
    assert p["repeat_penalty_mode"] == "normalized"
    assert p["repeat_last_n"] == 64  # llama.cpp's default window
    with pytest.raises(ValueError, match="penalty_exempt"):
        gs.parse_params({"penalty_exempt": [5]}, n_vocab=4)


# -- rows: numpy, torch, and what is refused --------------------------------------------------


def _rows(n_rows: int, n_vocab: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 3, size=(n_rows, n_vocab)).astype(np.float32)


def test_numpy_and_torch_rows_give_the_same_tokens():
    torch = need_import("torch")
    params = {"seed": 11, "repeat_penalty": 1.3, "repeat_penalty_mode": "normalized", "top_k": 20}
    rows = _rows(30, 500)
    a, b = gs.Chain(params, 500), gs.Chain(params, 500)
    a.accept_prompt([1, 2, 3])
    b.accept_prompt([1, 2, 3])
    ta = [a.sample(r) for r in rows]
    tb = [b.sample(torch.from_numpy(r)) for r in rows]
    assert ta == tb
    # after reset both start over: a row of a 2-D tensor (a view) reads the same values
    a.reset()
    b.reset()
    a.accept_prompt([1, 2, 3])
    b.accept_prompt([1, 2, 3])
    assert a.sample(rows[0]) == b.sample(torch.from_numpy(rows.copy())[0]) == ta[0]


def test_rows_that_are_not_1d_contiguous_float32_are_refused_by_name():
    torch = need_import("torch")
    chain = gs.Chain({"seed": 1}, 8)
    with pytest.raises(ValueError, match="float32"):
        chain.sample(np.zeros(8, dtype=np.float64))
    with pytest.raises(ValueError, match="float32"):
        chain.sample(torch.zeros(8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="1-D"):
        chain.sample(np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        chain.sample(np.zeros(16, dtype=np.float32)[::2])
    with pytest.raises(ValueError, match="n_vocab = 8"):
        chain.sample(np.zeros(9, dtype=np.float32))
    with pytest.raises(ValueError, match="finite"):
        chain.sample(np.array([0, 1, np.nan, 0, 0, 0, 0, 0], dtype=np.float32))


def test_unaligned_rows_are_read_correctly():
    buf = np.zeros(4 * 9 + 1, dtype=np.uint8)
    row = buf[1:].view(np.float32)  # 1-byte offset: not 4-byte aligned
    row[:] = np.arange(9, dtype=np.float32)
    greedy = gs.Chain({"temperature": 0.0}, 9)
    assert greedy.sample(row) == 8


def test_sample_no_accept_then_accept_is_sample():
    params = {"seed": 5, "repeat_penalty": 1.5, "repeat_last_n": 8}
    rows = _rows(20, 64, seed=3)
    a, b = gs.Chain(params, 64), gs.Chain(params, 64)
    for r in rows:
        t = b.sample_no_accept(r)
        b.accept(t)
        assert a.sample(r) == t


def test_check_gauge_tells_ctrl_from_normalized():
    rows = _rows(1, 2000, seed=1)[0] + 1.0
    history = list(range(0, 2000, 3))
    # penalties -> dist: the final distribution is the whole penalised row
    base = {"seed": 3, "samplers": ["penalties"], "repeat_penalty": 1.5, "repeat_last_n": -1}
    ctrl = gs.Chain(base, 2000)
    norm = gs.Chain({**base, "repeat_penalty_mode": "normalized"}, 2000)
    rc = ctrl.check_gauge(rows, history, 5.0)
    rn = norm.check_gauge(rows, history, 5.0)
    penalties = [s for s in rc["stages"] if s["name"] == "penalties"][0]
    assert not penalties["shift_invariant"] and "sign" in penalties["why"]
    assert all(s["shift_invariant"] for s in rn["stages"])
    assert rn["tokens_agree"] and rn["max_abs_dp"] < 1e-4
    assert rc["max_abs_dp"] > 1e-3
    with pytest.raises(ValueError, match="`c`"):
        norm.check_gauge(rows, history, float("nan"))


def test_apply_stages_is_the_penalties_stage():
    rows = _rows(1, 100, seed=2)[0]
    chain = gs.Chain({"samplers": ["penalties"], "repeat_penalty": 2.0, "repeat_last_n": -1}, 100)
    chain.accept_prompt([4, 7])
    out = np.array(chain.apply_stages(rows, 1), dtype=np.float32)
    want = rows.copy()
    for t in (4, 7):
        want[t] = want[t] * 2 if want[t] <= 0 else want[t] / 2
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(np.array(chain.apply_stages(rows, 0), np.float32), rows)
    with pytest.raises(ValueError, match="n_stages"):
        chain.apply_stages(rows, 3)


# -- replay -----------------------------------------------------------------------------------


def test_replay_matches_the_chain_and_the_cli(gauge_bin, tmp_path):
    rows = _rows(12, 300, seed=9)
    params = {"seed": 77, "repeat_penalty": 1.3, "repeat_penalty_mode": "normalized", "top_k": 40}
    history = [5, 6, 7, 5]
    np.save(tmp_path / "rows.npy", rows)
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"n_vocab": 300, "params": params, "history": history, "logits": "rows.npy"}))

    chain = gs.Chain(params, 300)
    chain.accept_prompt(history)
    want = [chain.sample(r) for r in rows]
    assert gs.replay(str(trace)) == want
    cli = subprocess.run(
        [str(gauge_bin), "replay", "--trace", str(trace)], capture_output=True, text=True, check=True
    )
    assert json.loads(cli.stdout)["tokens"] == want

    with pytest.raises(OSError):
        gs.replay(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"n_vocab": 300, "params": {"top_p": 7}, "logits": "rows.npy"}))
    with pytest.raises(ValueError, match="top_p"):
        gs.replay(str(bad))


class CharVocab:
    """A toy tokenizer: one token per character, id = code point."""

    def tokenize(self, text):
        return [ord(c) for c in text]

    def token_bytes(self, token):
        return chr(token).encode()

    def eog_tokens(self):
        return [0]


def test_text_fields_need_and_use_a_vocab():
    params = {"samplers": ["top_k"], "top_k": 1, "logit_bias": [["b", False]]}  # argmax after the bias
    with pytest.raises(ValueError, match="needs a vocabulary"):
        gs.Chain(params, 128)
    chain = gs.Chain(params, 128, vocab=CharVocab())
    row = np.zeros(128, dtype=np.float32)
    row[ord("b")] = 5.0
    row[ord("a")] = 4.0
    assert chain.sample(row) == ord("a")  # "b" is banned through the vocab

    class Broken(CharVocab):
        def tokenize(self, text):
            raise RuntimeError("tokenizer down")

    with pytest.raises(RuntimeError, match="tokenizer down"):
        gs.Chain(params, 128, vocab=Broken())
