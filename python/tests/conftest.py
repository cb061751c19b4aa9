"""Shared fixtures. A test that needs a missing piece (the wheel, torch, the model, the gauge
binary) skips locally with the reason, and fails when the environment variable CI is set."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import models  # noqa: E402

ROOT = models.ROOT
DATA = ROOT / "data"
#: Where the HF and vLLM tests put their tensors and models (scripts/gpu-check.sh sets cuda).
DEVICE = os.environ.get("GAUGE_TEST_DEVICE", "cpu")
#: The HF model tests' model dtype (float32, bfloat16, float16; scripts/gpu-check-offline.sh runs each).
DTYPE = os.environ.get("GAUGE_TEST_DTYPE", "float32")
#: An HF folder for the HF model tests instead of the default model's GGUF (scripts/gpu-check-offline.sh
#: gives a seeded random-init model of the default model's shape, where no GGUF can be pulled).
HF_MODEL = os.environ.get("GAUGE_TEST_HF_MODEL")


def need(ok: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when a prerequisite is missing."""
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI: {reason}", pytrace=False)
    pytest.skip(reason)


def need_import(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        need(False, f"cannot import {module} ({e}); run scripts/setup-python.sh")


@pytest.fixture(scope="session")
def gauge_bin() -> Path:
    path = models.gauge_binary()
    need(path.exists(), f"{path} is missing: cargo build --release -p gauge-cli")
    return path


@pytest.fixture(scope="session")
def gguf(gauge_bin) -> Path:
    path = models.gguf_path()
    need(path.exists(), f"the default model is missing: gauge models pull {models.MODEL}")
    return path


@pytest.fixture(scope="session")
def hf(request):
    """(model, tokenizer) on DEVICE in DTYPE: the default model, or the folder HF_MODEL."""
    need_import("transformers")
    if HF_MODEL:
        need((Path(HF_MODEL) / "config.json").is_file(), f"GAUGE_TEST_HF_MODEL={HF_MODEL} has no config.json")
        return models.load_hf_folder(Path(HF_MODEL), DTYPE, DEVICE)
    model, tok = models.load_hf(request.getfixturevalue("gguf"), DTYPE)
    return model.to(DEVICE), tok


@pytest.fixture(scope="session")
def a1_prefixes() -> list[str]:
    """The A1 probe's WikiText-103 prefixes (data/a1-prefixes.json)."""
    d = json.loads((DATA / "a1-prefixes.json").read_text())
    items = d["prefixes"] if isinstance(d, dict) else d
    return [p["prefix_text"] for p in items]
