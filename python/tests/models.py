"""The default model for the Python tests and benchmarks: its GGUF (from gauge's cache), HF
transformers loading it, and the safetensors folder vLLM needs, converted once and cached."""

from __future__ import annotations

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


def _ref(gguf: Path):
    from gauge_sampling.lab.models import ModelRef

    return ModelRef(label=gguf.stem, gguf=gguf, folder=None)


def load_hf(gguf: Path, dtype: str = "float32"):
    """(model, tokenizer) from the GGUF, weights dequantized to float32 (then ``dtype``), in eval
    mode on CPU."""
    from gauge_sampling.lab.models import load_hf as load

    return load(_ref(gguf), dtype, "cpu")


def load_hf_folder(folder: Path, dtype: str, device: str):
    """(model, tokenizer) from an HF folder, in eval mode on ``device``."""
    from gauge_sampling.lab.models import ModelRef
    from gauge_sampling.lab.models import load_hf as load

    return load(ModelRef(label=folder.name, gguf=None, folder=folder), dtype, device)


def safetensors_dir(gguf: Path) -> Path:
    """The GGUF as an HF safetensors folder (float32) for vLLM, converted once and cached by the
    package (``gauge_sampling.lab.models.hf_folder``)."""
    from gauge_sampling.lab.models import hf_folder

    return hf_folder(_ref(gguf))
