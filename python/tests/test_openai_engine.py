"""`python -m gauge_sampling probe --engine openai --url URL` against real servers on loopback.

- `gauge serve` (target/release/gauge, the default model's weights as F32; its chain is
  llama.cpp's: logit-bias first, then penalties): every run of a tiny grid is token-identical to
  `gauge probe --sampler llama-cpp` (llama.cpp's own chain in-process) on the same weights, under
  the protocol's seen set; under the server's own default window (read from its /props) every
  run equals a request naming that window, and differs from the protocol's; the
  zero-point statistics are left out and the report says so; the run resumes.
- A server that applies the logit bias after its penalty (SGLang, identified by owned_by) and one
  whose order is not established are refused with the reason, before any completion is sent
  (a real HTTP server of the test's own answering /v1/models).

vLLM (`vllm serve`) is driven in test_vllm_serve.py, beside the server it starts.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import need_import

gs = need_import("gauge_sampling")
need_import("transformers")

MODEL = "smollm2-135m-instruct"
#: Small enough for CI (2 prefixes × 12 tokens × 12 runs), large enough that ctrl flips.
GRID = ["--prefixes", "2", "--tokens", "12"]
#: The server's default penalty window, set below its 64 so that on this grid (prompts of 30 and
#: 40 tokens) the default is seen to bind, and the engine is seen to read it from /props.
SERVER_LAST_N = 16
STARTUP_SECONDS = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server not up after {STARTUP_SECONDS} s:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def probe(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gauge_sampling", "probe", "--engine", "openai", "--url", url]
    cmd += ["--model", MODEL, *GRID, "--out", str(out), "--json", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=900)


def llama_cpp_probe(gauge_bin: Path, f32: Path, out: Path, *extra: str) -> dict:
    """`gauge probe --sampler llama-cpp`: llama.cpp's own chain (logit-bias → penalties → greedy)
    in-process, on the same F32 weights."""
    cmd = [str(gauge_bin), "probe", "--model", str(f32), "--sampler", "llama-cpp", *GRID]
    cmd += ["--out", str(out), "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def run_dir(root: Path, sampler: str) -> Path:
    found = [
        d
        for d in root.iterdir()
        if (d / "config.json").exists() and json.loads((d / "config.json").read_text())["sampler"] == sampler
    ]
    assert len(found) == 1, [d.name for d in root.iterdir()]
    return found[0]


def flip_runs(d: Path) -> dict:
    """(prefix, op, θ, c) → (prompt ids, greedy tokens) of every ±c run of a run directory."""
    out = {}
    for line in (d / "raw.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["role"] == "flip":
            out[(r["prefix"], r["op"], r["theta"], r["c"])] = (r["prompt"], r["tokens"])
    return out


def conditions(summary: dict) -> dict:
    return {(c["op"], c["theta"]): c for c in summary["conditions"]}


@pytest.fixture(scope="module")
def f32(gguf) -> Path:
    from gauge_sampling.lab.models import ModelRef, f32_gguf

    return f32_gguf(ModelRef(label=gguf.stem, gguf=gguf, folder=None))


@pytest.fixture(scope="module")
def gauge_server(gauge_bin, f32, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("gauge-serve") / "server.log"
    cmd = [str(gauge_bin), "serve", "--model", str(f32), "--port", str(port), "--parallel", "8"]
    cmd += ["--repeat-last-n", str(SERVER_LAST_N)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def protocol_run(gauge_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("openai-protocol")
    r = probe(gauge_server, out)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), out


def test_gauge_serve_is_llama_cpps_chain_token_for_token(protocol_run, gauge_bin, f32, tmp_path):
    summary, out = protocol_run
    conds = conditions(summary)
    for op in ("ctrl", "normalized", "subtractive"):
        assert conds[(op, 1.0)]["flip_rate"] == 0.0, f"gate: {op}"
    assert conds[("normalized", 1.3)]["flip_rate"] == 0.0
    assert conds[("subtractive", 1.3)]["flip_rate"] == 0.0
    ctrl = conds[("ctrl", 1.3)]["flip_rate"]
    assert ctrl > 0, "ctrl flipped nothing: the comparison below would show little"
    print(f"openai → gauge serve (F32), {' '.join(GRID)}: ctrl θ=1.3 flip {ctrl:.4f}")

    llama_cpp_probe(gauge_bin, f32, tmp_path)
    ours, theirs = flip_runs(run_dir(out, "openai")), flip_runs(run_dir(tmp_path, "llama-cpp"))
    assert set(ours) == set(theirs) and len(ours) == 2 * 12
    # normalized: gauge serve's repeat_penalty_mode vs gauge probe's gauge operator (llama.cpp
    # has none); ctrl and subtractive: llama.cpp's penalties sampler in both.
    for key in sorted(ours):
        assert ours[key] == theirs[key], key


def test_the_record_and_report_say_what_ran(protocol_run, gauge_server):
    summary, out = protocol_run
    assert "zero_point" not in summary, "no logits over HTTP: no zero-point statistics"
    d = run_dir(out, "openai")
    cfg = json.loads((d / "config.json").read_text())
    opts = cfg["engine"]["options"]
    assert opts["server"] == "gauge serve" and opts["url"] == gauge_server
    assert opts["logits_check"].startswith("none") and "logit bias before the penalty" in opts["order"]
    assert opts["seen"] == "protocol: prompt + all generated"
    assert cfg["engine"]["versions"]["server"].startswith("gauge-")
    assert cfg["zero_point"] is False
    report = (d / "REPORT.md").read_text()
    assert "Zero-point statistics not measured (the engine gives no raw logits" in report
    # Resumes: the same command decodes nothing again.
    before = (d / "raw.jsonl").read_bytes()
    again = probe(gauge_server, out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout) == summary and (d / "raw.jsonl").read_bytes() == before


def _complete(url: str, prompt: list[int], c: float, theta: float, last_n: int) -> list[int]:
    """One greedy llama-server /completion request, written out here (not the engine's)."""
    body = {"prompt": prompt, "n_predict": 12, "temperature": 0.0, "ignore_eos": True, "return_tokens": True}
    body |= {"logit_bias": [[i, c] for i in range(49152)], "repeat_penalty": theta, "repeat_last_n": last_n}
    req = urllib.request.Request(
        f"{url}/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["tokens"]


def test_gauge_serve_as_shipped_is_its_default_window(protocol_run, gauge_server, tmp_path):
    """--seen engine sends no window: the server's default (here SERVER_LAST_N, as its /props
    says) applies: every run equals a request that names that window, and on this grid it
    differs from the protocol's seen set."""
    r = probe(gauge_server, tmp_path, "--seen", "engine", "--ops", "ctrl")
    assert r.returncode == 0, r.stderr[-3000:]
    d = run_dir(tmp_path, "openai")
    opts = json.loads((d / "config.json").read_text())["engine"]["options"]
    want = f"engine: the server's default: the last {SERVER_LAST_N} tokens of prompt + output"
    assert opts["seen"].startswith(want), opts["seen"]
    ours = flip_runs(d)
    assert len(ours) == 2 * 4
    for (prefix, _, theta, c), (prompt, tokens) in sorted(ours.items()):
        assert tokens == _complete(gauge_server, prompt, c, theta, SERVER_LAST_N), (prefix, theta, c)
    protocol = flip_runs(run_dir(protocol_run[1], "openai"))
    moved = [k for k in ours if k[2] != 1.0 and ours[k] != protocol[k]]
    assert moved, "the default window changed no ctrl run: the as-shipped scope shows nothing"


class _Models(http.server.BaseHTTPRequestHandler):
    """Answers GET /v1/models as a server with ``owned_by`` does; anything else is a 500, so a
    completion sent before the refusal would fail the test another way."""

    owned_by = "sglang"

    def do_GET(self):  # noqa: N802
        if self.path != "/v1/models":
            self.send_error(500)
            return
        body = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": self.owned_by}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        self.send_error(500)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize(
    "owned_by,why",
    [
        ("sglang", "SGLang applies the logit bias after its penalty (python/sglang/srt/sampling"),
        ("local", "owned_by 'local') is not one whose order of logit bias and penalty is established"),
    ],
)
def test_servers_that_bias_after_the_penalty_are_refused(tmp_path, owned_by, why):
    handler = type("H", (_Models,), {"owned_by": owned_by})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        r = probe(f"http://127.0.0.1:{srv.server_address[1]}", tmp_path)
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 2 and why in r.stderr, r.stderr[-2000:]
    assert not list(tmp_path.iterdir()), "refused before a run directory was made"


def test_url_is_required_and_only_for_openai(tmp_path):
    base = [sys.executable, "-m", "gauge_sampling", "probe", "--out", str(tmp_path)]
    for extra in (["--engine", "openai", "--model", MODEL], ["--engine", "hf", "--url", "http://x"]):
        r = subprocess.run(base + extra, capture_output=True, text=True)
        assert r.returncode == 2 and "--url" in r.stderr, r.stderr[-2000:]
