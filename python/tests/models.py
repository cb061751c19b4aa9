"""The default model for the Python tests and benchmarks: its GGUF (from gauge's cache), HF
transformers loading it, and the safetensors folder vLLM needs, converted once and cached."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"


def gauge_binary() -> Path:
    """The gauge CLI built by `cargo build --release` / `cargo test --workspace --release`."""
    return ROOT / "target" / "release" / "gauge"


def gguf_path() -> Path:
    """The default model's GGUF, pulled into gauge's cache by the CLI if needed."""
    binary = gauge_binary()
    if binary.exists():
        cmd = [str(binary)]
    else:
        cmd = ["cargo", "run", "--release", "-q", "-p", "gauge-cli", "--"]
    out = subprocess.run(
        cmd + ["models", "path", MODEL], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def load_hf(gguf: Path):
    """(model, tokenizer) from the GGUF, weights dequantized to float32, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    return model, tok


def _cache_root() -> Path:
    home = os.environ.get("GAUGE_HOME")
    return Path(home) if home else Path.home() / ".cache" / "gauge"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def safetensors_dir(gguf: Path) -> Path:
    """The GGUF as an HF safetensors folder (float32) for vLLM, cached by the GGUF's hash."""
    target = _cache_root() / "hf-converted" / f"{gguf.stem}-{_sha256(gguf)[:16]}"
    if (target / "config.json").exists():
        return target
    model, tok = load_hf(gguf)
    # A GGUF-loaded model refuses save_pretrained ("not serializable"); its weights are plain
    # float32 tensors by now, so dropping the quantizer records makes it save as a normal model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    tmp.rename(target)
    return target
