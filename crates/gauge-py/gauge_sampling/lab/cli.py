"""``python -m gauge_sampling probe|json --engine E --model M ...``: ``gauge probe``'s and
``gauge json``'s flags, grid, defaults, outputs and resumption, with an engine (HF transformers,
vLLM, llama-cpp-python, an OpenAI-compatible server, ...; ``lab/engine.py``) computing the logits
and deciding with its own sampler.

The grid defaults come from gauge-lab (``_native.probe_grids_json``, ``_native.json_defaults_json``),
the configuration is checked
by gauge-lab's validation (errors name the field), and the run id includes the stack, the device,
the dtype and the package versions, so the same command resumes the same directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from .. import _native
from .engine import ENGINES, SEEN, module_of, usable_cpus


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated numbers expected, got {text!r}") from None


def _ops(text: str) -> list[str]:
    ops = [x.strip() for x in text.split(",") if x.strip()]
    for o in ops:
        if o not in ("ctrl", "normalized", "subtractive"):
            raise argparse.ArgumentTypeError(
                f"unknown operator {o!r} (allowed: ctrl, normalized, subtractive)"
            )
    return ops


def _engine_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        "--sampler",
        dest="engine",
        choices=tuple(ENGINES),
        default="hf",
        help="who computes and decides (--sampler: the same flag, gauge probe's word)",
    )
    p.add_argument(
        "--seen",
        choices=SEEN,
        default="protocol",
        help="the penalty's seen set: the protocol's (prompt + all generated, no window) or the "
        "engine's own default scope (recorded in the run); hf and vllm: the same set",
    )
    p.add_argument("--url", default=None, help="--engine openai: the server's base URL (http://host:port)")
    p.add_argument(
        "--device", default=None, help="cpu or cuda (default: cuda when torch sees a GPU, else cpu)"
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="model dtype (default: float32 on cpu, bfloat16 on cuda)",
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM's tensor_parallel_size (GPUs)")
    p.add_argument(
        "--threads", "-t", type=int, default=0, help="torch CPU threads (0 = every core, as gauge probe)"
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m gauge_sampling", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="A1, the gauge probe (gauge probe's flags)")
    p.add_argument("--model", "-m", default=_native.default_model(), help="registry name, GGUF or HF folder")
    p.add_argument("--prefixes", type=int, default=None, help="the first N of the note's 200 prefixes (20)")
    p.add_argument("--tokens", type=int, default=None, help="greedy tokens per run (64)")
    p.add_argument("--theta", type=_floats, default=None, help="comma-separated θ values, with 1.0 (1.0,1.3)")
    p.add_argument("--ops", type=_ops, default=None, help="comma-separated: ctrl, normalized, subtractive")
    p.add_argument("--shift", type=float, default=None, help="the gauge shift c: runs add +c and −c (5)")
    p.add_argument("--alpha", type=float, default=None, help="α of the subtractive operator (1)")
    p.add_argument("--window", type=int, default=None, help="refused for the Python engines (see --seen)")
    p.add_argument("--full", action="store_true", help="the note's full grid (200 × 200, 4 θ)")
    p.add_argument("--out", default="results", help="results root; the run goes to <out>/<run-id>/")
    p.add_argument("--json", action="store_true", help="print the summary JSON on stdout")
    p.add_argument(
        "--n-seq-max",
        type=int,
        default=256,
        help="most runs decoded at once (fits the chunk; hf batches chunks up to it)",
    )
    _engine_flags(p)
    j = sub.add_parser("json", help="A2, JSON-schema validity (gauge json's flags)")
    j.add_argument("--model", "-m", default=_native.default_model(), help="registry name, GGUF or HF folder")
    j.add_argument("--schemas", type=int, default=None, help="the first N of the note's 200 schemas (200)")
    j.add_argument("--theta", type=_floats, default=None, help="comma-separated θ values (1.0,1.1,1.3)")
    j.add_argument(
        "--ops", type=_ops, default=None, help="comma-separated: ctrl, normalized (default), subtractive"
    )
    j.add_argument("--alpha", type=float, default=None, help="α of the subtractive operator (1)")
    j.add_argument("--window", type=int, default=None, help="refused for the Python engines (see --seen)")
    j.add_argument("--max-tokens", type=int, default=None, help="most new tokens per output (512)")
    j.add_argument(
        "--no-chat", action="store_true", help="send the prompt as is, not through the chat template"
    )
    j.add_argument(
        "--constrained", action="store_true", help="refused for the Python engines (gauge's decode only)"
    )
    j.add_argument("--out", default="results", help="results root; the run goes to <out>/<run-id>/")
    j.add_argument("--json", action="store_true", help="print the summary JSON on stdout")
    j.add_argument("--n-seq-max", type=int, default=64, help="live sequences (fits the chunk, as gauge json)")
    j.add_argument("--batch-schemas", type=int, default=None, help="schemas decoded together (4, fitted)")
    _engine_flags(j)
    return top


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def engine_info(engine: str, device: str, dtype: str, tp: int) -> dict:
    """The run's engine record (part of the run id). hf and vllm record torch and transformers
    here; the other engines record their own packages and options when they load."""
    versions = {"python": platform.python_version(), "gauge_sampling": _native.__version__}
    options = {}
    if engine in ("hf", "vllm"):
        import torch
        import transformers

        versions["torch"] = torch.__version__
        versions["transformers"] = transformers.__version__
    if engine == "vllm":
        import vllm

        versions["vllm"] = vllm.__version__
        options["tensor_parallel_size"] = str(tp)
    return {"device": device, "dtype": dtype, "versions": versions, "options": options}


def probe_config(args, label: str, info: dict) -> str:
    grids = json.loads(_native.probe_grids_json())
    if args.full:
        given = [f for f in ("prefixes", "tokens", "theta") if getattr(args, f) is not None]
        if given:
            raise ValueError(f"--full conflicts with --{given[0]}")
        cfg = grids["full"]
    else:
        cfg = grids["quick"]
        for flag, key in (("prefixes", "prefixes"), ("tokens", "tokens"), ("theta", "thetas")):
            if getattr(args, flag) is not None:
                cfg[key] = getattr(args, flag)
    for flag, key in (("ops", "ops"), ("shift", "shift"), ("alpha", "alpha"), ("window", "window")):
        if getattr(args, flag) is not None:
            cfg[key] = getattr(args, flag)
    cfg["model"] = label
    cfg["sampler"] = args.engine
    if info.get("raw_logits") is False:
        cfg["zero_point"] = False
    cfg["engine"] = {k: v for k, v in info.items() if k != "raw_logits"}
    return _native.probe_config_json(json.dumps(cfg), args.n_seq_max)


def json_config(args, label: str, info: dict, chat: bool) -> str:
    """``gauge json``'s configuration for these flags (gauge-lab's defaults and validation)."""
    cfg = json.loads(_native.json_defaults_json())
    for flag, key in (
        ("schemas", "schemas"),
        ("theta", "thetas"),
        ("ops", "ops"),
        ("alpha", "alpha"),
        ("window", "window"),
        ("max_tokens", "max_tokens"),
        ("batch_schemas", "batch_schemas"),
    ):
        if getattr(args, flag) is not None:
            cfg[key] = getattr(args, flag)
    cfg["model"] = label
    cfg["sampler"] = args.engine
    cfg["engine"] = {k: v for k, v in info.items() if k != "raw_logits"}
    cfg["chat_template"] = chat
    if args.constrained:
        cfg["constrained"] = True
    return _native.json_config_json(json.dumps(cfg), args.n_seq_max, args.batch_schemas is None)


def make_engine(args, ref, device: str, dtype: str, info: dict, max_model_len: int = 1024):
    """(engine, tokenizer, n_vocab) from the engine's module (``engine.ENGINES``); records in
    ``info`` what the loaded engine decided (the hf engine's attention implementation, a seen
    set, versions)."""
    import importlib

    mod = importlib.import_module(f"{__package__}.{module_of(args.engine)}")
    loaded = mod.load(args, ref, device, dtype, info, max_model_len)
    if not getattr(loaded[0], "raw_logits", True):
        info["raw_logits"] = False
    return loaded


def setup(args) -> tuple:
    """(model ref, device, dtype, engine info) after checking the engine flags."""
    from . import models

    if args.url is not None and args.engine != "openai":
        raise ValueError(f"--url: only for --engine openai (not {args.engine})")
    if args.engine == "openai" and not args.url:
        raise ValueError("--engine openai needs --url (the server's base URL, http://host:port)")
    if args.threads < 0:
        raise ValueError(f"invalid value for `threads`: {args.threads} (allowed: >= 0)")
    if args.engine == "openai":
        # The server computes: no torch here (its import alone takes seconds).
        device, dtype = args.device or "cpu", args.dtype or "float32"
    else:
        import torch

        device = args.device or default_device()
        dtype = args.dtype or ("float32" if device == "cpu" else "bfloat16")
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        elif "OMP_NUM_THREADS" not in os.environ:
            # Every core, as `gauge probe -t 0`; an explicit OMP_NUM_THREADS is left to torch.
            torch.set_num_threads(usable_cpus())
    ref = models.resolve(args.model)
    return ref, device, dtype, engine_info(args.engine, device, dtype, args.tensor_parallel_size)


@contextlib.contextmanager
def closing(engine):
    """The engine, closed (vLLM's workers) however the block ends."""
    try:
        yield engine
    finally:
        close = getattr(engine, "close", None)
        if close:
            close()


def print_summary(args, summary: dict, render) -> None:
    """The summary on stdout: its JSON with ``--json``, else gauge-lab's table."""
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        print(render(json.dumps(summary)), end="")


def run_json_command(args) -> int:
    from .jsonrun import prompt_tokens, run_json

    ref, device, dtype, info = setup(args)
    # Check the flags (window, constrained, ranges) before loading a model.
    json_config(args, ref.label, info, not args.no_chat)
    cfg = json.loads(json_config(args, ref.label, info, False))
    engine, tok, n_vocab = make_engine(args, ref, device, dtype, info, max_model_len=2048)
    with closing(engine):
        chat = not args.no_chat and getattr(tok, "chat_template", None) is not None
        cfg_json = json_config(args, ref.label, info, chat)
        texts = [t for _, t in _native.a2_prompts()[: cfg["schemas"]]]
        prompts = prompt_tokens(tok, texts, chat)
        t0 = time.monotonic()
        summary, run_dir = run_json(engine, prompts, cfg_json, Path(args.out), n_vocab)
    print_summary(args, summary, _native.render_json_table)
    print(
        f"json ({args.engine}, {device}, {dtype}): {time.monotonic() - t0:.1f} s "
        f"(chat template: {'yes' if chat else 'no'}); outputs and verdicts in {run_dir}",
        file=sys.stderr,
    )
    return 0


def run_probe_command(args) -> int:
    from .probe import run_probe

    ref, device, dtype, info = setup(args)
    # Checked before a model loads; made again after, with what the engine recorded.
    cfg = json.loads(probe_config(args, ref.label, info))
    engine, tok, n_vocab = make_engine(args, ref, device, dtype, info)
    with closing(engine):
        cfg_json = probe_config(args, ref.label, info)
        prompts = [tok(text)["input_ids"] for _, text in _native.a1_prefixes()[: cfg["prefixes"]]]
        t0 = time.monotonic()
        summary, run_dir = run_probe(
            engine, prompts, cfg_json, Path(args.out), n_vocab, max_runs=args.n_seq_max
        )
    print_summary(args, summary, _native.render_probe_table)
    print(
        f"probe ({args.engine}, {device}, {dtype}): {time.monotonic() - t0:.1f} s; "
        f"report, raw results and plots in {run_dir}",
        file=sys.stderr,
    )
    return 0


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "probe":
            return run_probe_command(args)
        if args.command == "json":
            return run_json_command(args)
    except _native.GateFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 2
