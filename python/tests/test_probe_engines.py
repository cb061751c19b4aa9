"""`python -m gauge_sampling probe --engine hf|vllm` end to end on the default model (a small
grid): the gate and the invariant operators flip exactly 0, ctrl's flip rate and the zero-point
statistics match the float32 reference in data/engines-reference.json (measured through llama.cpp,
not computed here), the run directory has gauge-lab's outputs and resumes, and the second stack's
REPORT.md carries the cross-stack table."""

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

REF = json.loads((DATA / "engines-reference.json").read_text())
SMALL = REF["grids"]["small"]
#: The engines whose one-sequence decode loops are slow here (mlx, llama-cpp-python, ort-genai)
#: run their CI check on this grid; their 8 x 32 runs are measured in docs/results.md.
TINY = REF["grids"]["tiny"]
TOL = REF["tolerance"]
MODEL = "smollm2-135m-instruct"


def probe(engine: str, out: Path, *extra: str, grid: dict = SMALL) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gauge_sampling", "probe", "--engine", engine, "--model", MODEL]
    cmd += grid["flags"] + ["--out", str(out), "--json", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=1800)


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("probe-engines")


@pytest.fixture(scope="module")
def hf_run(out_root, gguf):
    r = probe("hf", out_root)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), out_root


@pytest.fixture(scope="module")
def vllm_run(out_root, gguf, hf_run):
    need_import("vllm")
    r = probe("vllm", out_root)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), out_root


def run_dir_of(root: Path, stack: str) -> Path:
    dirs = [d for d in root.iterdir() if (d / "config.json").exists()]
    found = [d for d in dirs if json.loads((d / "config.json").read_text()).get("sampler") == stack]
    assert len(found) == 1, [d.name for d in dirs]
    return found[0]


def check_reference(summary: dict, flip_tol: float, grid: dict = SMALL) -> None:
    conds = {(c["op"], c["theta"]): c for c in summary["conditions"]}
    for op in ("ctrl", "normalized", "subtractive"):
        assert conds[(op, 1.0)]["flip_rate"] == 0.0, f"gate: {op} flipped at θ = 1"
        assert conds[(op, 1.0)]["positions"] == grid["positions"]
    for op in ("normalized", "subtractive"):
        assert conds[(op, 1.3)]["flip_rate"] == 0.0, f"{op} is shift-invariant"
    ctrl = conds[("ctrl", 1.3)]["flip_rate"]
    assert abs(ctrl - grid["ctrl_flip_theta_1_3"]) <= flip_tol, (ctrl, grid)
    zp = summary["zero_point"]
    assert abs(zp["positive_fraction"] - grid["positive_fraction"]) <= TOL["positive_fraction"], zp
    assert abs(zp["median_top1_logit"] - grid["median_top1_logit"]) <= TOL["median_top1_logit"], zp


def test_hf_reproduces_the_float32_reference(hf_run):
    summary, _ = hf_run
    assert summary["sampler"] == "hf" and summary["model"] == MODEL
    check_reference(summary, TOL["hf_ctrl_flip"])
    # Sharing: far fewer tokens evaluated than one decode per run.
    assert summary["forward_tokens"] * 3 < summary["naive_forward_tokens"], summary


def test_hf_writes_gauge_labs_outputs_and_resumes(hf_run, out_root):
    summary, _ = hf_run
    d = run_dir_of(out_root, "hf")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["engine"]["device"] == "cpu" and cfg["engine"]["dtype"] == "float32"
    assert {"torch", "transformers", "python", "gauge_sampling"} <= set(cfg["engine"]["versions"])
    # The decode attention the engine switched to (hf_attention) is part of the record.
    assert cfg["engine"]["options"] == {"attention": "gauge_grouped_sdpa"}
    lines = (d / "raw.jsonl").read_text().splitlines()
    assert len(lines) == 8 * 14 + 8  # 14 runs per prefix in phase 1, the own-median run in phase 2
    report = (d / "REPORT.md").read_text()
    assert "(sampler: hf)" in report or "hf" in report
    assert (d / "summary.json").exists() and list(d.glob("*.svg")) and list(d.glob("*.png"))
    before = (d / "raw.jsonl").read_bytes()
    again = probe("hf", out_root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout) == summary
    assert (d / "raw.jsonl").read_bytes() == before, "a complete run decodes nothing again"


def test_vllm_reproduces_the_float32_reference(vllm_run, out_root):
    summary, _ = vllm_run
    assert summary["sampler"] == "vllm"
    check_reference(summary, TOL["vllm_ctrl_flip"])
    # The logits check ran (vLLM's raw rows against HF float32) and is in the run record.
    cfg = json.loads((run_dir_of(out_root, "vllm") / "config.json").read_text())
    assert float(cfg["engine"]["options"]["logits_vs_hf_max_abs"]) <= 1e-3, cfg["engine"]


def test_the_second_stacks_report_has_the_cross_stack_table(vllm_run, out_root):
    report = (run_dir_of(out_root, "vllm") / "REPORT.md").read_text()
    assert "## Cross-stack" in report, report[-2000:]
    assert "| hf (cpu, float32, attention=gauge_grouped_sdpa) |" in report, report[-2000:]
    assert "vllm (cpu, float32, logits_vs_hf_max_abs=" in report, report[-2000:]
    assert "tensor_parallel_size=1) (this run)" in report, report[-2000:]


def test_bad_flags_name_the_field(tmp_path):
    r = probe("hf", tmp_path, "--theta", "1.3")
    assert r.returncode == 2 and "`theta`" in r.stderr, r.stderr[-2000:]
    r = probe("hf", tmp_path, "--window", "64")
    assert r.returncode == 2 and "`window`" in r.stderr, r.stderr[-2000:]
