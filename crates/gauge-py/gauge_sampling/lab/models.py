"""The model ``M`` of ``python -m gauge_sampling probe --model M``: a registry name (pulled into
gauge's cache as ``gauge models pull`` does), a GGUF file (loaded by transformers, dequantized) or
a local HF folder. The label in reports and run ids is the one ``gauge probe`` uses: the registry
name, the GGUF's file stem, or the folder's name."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import _native


@dataclass
class ModelRef:
    label: str
    #: The GGUF file, when the model is one (registry entries are).
    gguf: Optional[Path]
    #: The HF folder, when the model is one.
    folder: Optional[Path]


def resolve(model: str) -> ModelRef:
    p = Path(model)
    if p.is_dir():
        return ModelRef(label=p.resolve().name, gguf=None, folder=p)
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ValueError(f"--model: {model} is not a file")
        return ModelRef(label=p.stem, gguf=p, folder=None)
    # A registry name: pulled (and verified) by gauge's registry.
    path = Path(_native.resolve_model(model))
    return ModelRef(label=model, gguf=path, folder=None)


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_hf(ref: ModelRef, dtype: str, device: str):
    """(model, tokenizer) with transformers, in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if ref.gguf is not None:
        kw = dict(gguf_file=ref.gguf.name)
        where = ref.gguf.parent
    else:
        kw = {}
        where = ref.folder
    tok = AutoTokenizer.from_pretrained(where, **kw)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype(dtype), **kw)
    model.eval()
    return model.to(device), tok


def _cache_root() -> Path:
    home = os.environ.get("GAUGE_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gauge"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hf_folder(ref: ModelRef) -> Path:
    """An HF folder for vLLM: the folder itself, or the GGUF dequantized to float32 safetensors,
    converted once and cached under gauge's cache (``hf-converted/<stem>-<sha256[:16]>``)."""
    if ref.folder is not None:
        return ref.folder
    gguf = ref.gguf
    target = _cache_root() / "hf-converted" / f"{gguf.stem}-{_sha256(gguf)[:16]}"
    if (target / "config.json").exists():
        return target
    model, tok = load_hf(ref, "float32", "cpu")
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
    try:
        tmp.rename(target)
    except OSError:
        # Another process converted it meanwhile (two runs started on a fresh cache, or
        # scripts/test.sh's two lanes): its folder holds the same tensors.
        if not (target / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def f32_gguf(ref: ModelRef) -> Path:
    """The model's GGUF with every tensor dequantized to F32 and its metadata kept (what
    scripts/gguf-to-f32.py writes): the weights HF transformers computes in float32 after its own
    dequantization, for a GGUF engine (llama-cpp-python). Converted once and cached under gauge's
    cache (``f32-gguf/<stem>-<sha256[:16]>.F32.gguf``)."""
    import gguf
    import numpy as np

    src = ref.gguf
    if src is None:
        raise ValueError(f"--model {ref.label}: a GGUF engine needs a GGUF or a registry name")
    target = _cache_root() / "f32-gguf" / f"{src.stem}-{_sha256(src)[:16]}.F32.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(tmp), arch)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        if f.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, data, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(target)
    return target


def load_engine_model(ref: ModelRef, dtype: str, device: str):
    """(model, tokenizer) for the hf engine: a GGUF is read through its cached float32
    conversion (``hf_folder``, made on first use by transformers' own dequantization), which
    holds the same tensors and loads in a second instead of re-parsing and dequantizing the GGUF
    (~20 s on a 2-core machine) on every run."""
    if ref.gguf is None:
        return load_hf(ref, dtype, device)
    return load_hf(ModelRef(label=ref.label, gguf=None, folder=hf_folder(ref)), dtype, device)
