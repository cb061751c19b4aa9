"""`python -m gauge_sampling json --engine hf|vllm` end to end on the default model (a small
grid): every output follows `gauge json`'s stop rule, θ = 1 ctrl and normalized decide
identically, and the outputs and verdicts match llama.cpp's on the same float32 weights
(data/engines-json-reference.json, recorded by scripts/engines-json-reference.py, not computed
here); the run directory has gauge-lab's outputs and resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, need_import

need_import("torch")
need_import("transformers")
gs = need_import("gauge_sampling")

REF = json.loads((DATA / "engines-json-reference.json").read_text())
MODEL = "smollm2-135m-instruct"
STOPS = ("\n\n", "```")
#: Outputs token-identical to llama.cpp's, at least (measured: hf 32/32, vllm 32/32 on this grid;
#: float32 on the same weights, but a different kernel order can move a near-tie: one output
#: of slack per engine).
MIN_IDENTICAL = {"hf": 31, "vllm": 31}
#: Valid outputs per (op, θ) may differ from llama.cpp's by this much (the slack above: one
#: output moved can change one verdict).
VALID_TOL = 1


def json_cmd(engine: str, out: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "gauge_sampling", "json", "--engine", engine, "--model", MODEL]
    return cmd + REF["flags"] + ["--out", str(out), "--json", *extra]


def run(engine: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = json_cmd(engine, out, *extra)
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=1800)


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("json-engines")


@pytest.fixture(scope="module")
def hf_run(out_root, gguf):
    r = run("hf", out_root)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def vllm_run(out_root, gguf, hf_run):
    need_import("vllm")
    r = run("vllm", out_root)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def run_dir_of(root: Path, stack: str) -> Path:
    dirs = [d for d in root.iterdir() if (d / "config.json").exists()]
    found = [d for d in dirs if json.loads((d / "config.json").read_text()).get("sampler") == stack]
    assert len(found) == 1, [d.name for d in dirs]
    return found[0]


def lines_of(root: Path, stack: str) -> list[dict]:
    raw = (run_dir_of(root, stack) / "raw.jsonl").read_text().splitlines()
    return sorted((json.loads(x) for x in raw if x.strip()), key=lambda x: (x["schema"], x["run"]))


def check_stack(summary: dict, lines: list[dict], stack: str) -> None:
    assert summary["sampler"] == stack and summary["model"] == MODEL
    max_tokens = int(REF["flags"][REF["flags"].index("--max-tokens") + 1])
    # gauge json's stop rule, as recorded.
    for line in lines:
        n, out = len(line["tokens"]), line["output"]
        assert 1 <= n <= max_tokens, line
        if line["stop"] == "stop_string":
            assert any(s in out for s in STOPS), line
        if line["stop"] == "max_tokens":
            assert n == max_tokens and not any(s in out for s in STOPS), line
    # Determinism: θ = 1 switches every penalty off, so ctrl and normalized decide identically.
    by = {(x["schema"], x["op"], x["theta"]): x for x in lines}
    schemas = sorted({x["schema"] for x in lines})
    for s in schemas:
        assert by[(s, "ctrl", 1.0)]["tokens"] == by[(s, "normalized", 1.0)]["tokens"], s
    # Against llama.cpp on the same weights.
    ref = {(o["schema"], o["op"], o["theta"]): o for o in REF["outputs"]}
    assert set(ref) == set(by), "the grid of the reference"
    same = sum(by[k]["tokens"] == ref[k]["tokens"] for k in ref)
    # The same tokens give the same stop reason and verdict: the stack's text of them is the text
    # llama.cpp's pieces give (control tokens as nothing), and the line is gauge json's.
    for k in ref:
        if by[k]["tokens"] == ref[k]["tokens"]:
            assert (by[k]["stop"], by[k]["valid"], by[k]["reason"]) == (
                ref[k]["stop"],
                ref[k]["valid"],
                ref[k]["reason"],
            ), (stack, k)
    # An output ended by end-of-generation keeps that token, as gauge json's do.
    eog_tokens = {o["tokens"][-1] for o in REF["outputs"] if o["stop"] == "eog"}
    assert eog_tokens, "the reference grid has an output ended by end-of-generation"
    for line in lines:
        if line["stop"] == "eog":
            assert line["tokens"][-1] in eog_tokens, line
    print(f"{stack}: {same}/{len(ref)} outputs token-identical to llama.cpp's")
    assert same >= MIN_IDENTICAL[stack], (stack, same)
    conds = {(c["op"], c["theta"]): c for c in summary["conditions"]}
    for c in REF["conditions"]:
        got = conds[(c["op"], c["theta"])]
        assert got["n"] == c["n"], (c, got)
        assert abs(got["n_valid"] - c["n_valid"]) <= VALID_TOL, (stack, c, got)


def test_hf_matches_llama_cpp_on_the_float32_weights(hf_run, out_root):
    check_stack(hf_run, lines_of(out_root, "hf"), "hf")
    # Sharing: fewer tokens evaluated than one decode per output.
    assert hf_run["forward_tokens"] < hf_run["naive_forward_tokens"], hf_run


def test_hf_writes_gauge_labs_outputs_and_resumes(hf_run, out_root):
    d = run_dir_of(out_root, "hf")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["engine"]["device"] == "cpu" and cfg["engine"]["dtype"] == "float32"
    assert {"torch", "transformers", "python", "gauge_sampling"} <= set(cfg["engine"]["versions"])
    assert not cfg.get("chat_template", False), "--no-chat"
    report = (d / "REPORT.md").read_text()
    assert "(sampler: hf)" in report and "RepetitionPenaltyLogitsProcessor" in report
    assert (d / "summary.json").exists() and list(d.glob("*.svg")) and list(d.glob("*.png"))
    # Resumption: drop the last chunk's lines (a run killed before writing it) and run again.
    raw = d / "raw.jsonl"
    full = raw.read_bytes()
    lines = full.splitlines(keepends=True)
    last_chunk = json.loads(lines[-1])["chunk"]
    kept = [x for x in lines if json.loads(x)["chunk"] != last_chunk]
    assert 0 < len(kept) < len(lines)
    raw.write_bytes(b"".join(kept) + b'{"torn": ')
    again = run("hf", out_root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout) == hf_run
    assert raw.read_bytes() == full, "the resumed run decodes the missing chunk only, identically"


def test_vllm_matches_llama_cpp_on_the_float32_weights(vllm_run, out_root):
    lines = lines_of(out_root, "vllm")
    check_stack(vllm_run, lines, "vllm")
    hf = lines_of(out_root, "hf")
    same = sum(a["tokens"] == b["tokens"] for a, b in zip(hf, lines))
    print(f"hf vs vllm: {same}/{len(lines)} outputs token-identical")
    assert same >= min(MIN_IDENTICAL.values()) - 1, same


def test_bad_flags_name_the_field(tmp_path):
    for flag, field in ((["--window", "64"], "`window`"), (["--constrained"], "`constrained`")):
        r = subprocess.run(
            json_cmd("hf", tmp_path, *flag), capture_output=True, text=True, env=dict(os.environ), timeout=600
        )
        assert r.returncode == 2 and field in r.stderr, r.stderr[-2000:]
        assert not list(tmp_path.iterdir()), "refused before any run directory"
