"""Per-step cost of the repetition-penalty processors (a benchmark, not a test).

    .venv/bin/python python/bench/bench_processors.py [--history 512] [--repeats 30] [--vllm-step]
        [--device cpu|cuda] [--dtype float32|bfloat16|float16] [--batch 1,8,64] [--vocab 49152,151936]

For each batch and vocabulary (default: batch 1, 8 and 64; vocabularies 49,152 (SmolLM2) and
151,936 (Qwen2)): the median time of one call of HF's RepetitionPenaltyLogitsProcessor and of
gauge_sampling.hf.RepetitionPenalty in both modes (same inputs, same run, rows in --dtype on
--device; on cuda each call is timed to its synchronize), with the ratios to HF's; gauge's vLLM
processor (v1 interface, every row opting in, CPU float32 rows only, where vLLM is installed), and
with --vllm-step the vLLM processor's share of a real decode step on the default model.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def median_ms(fn, repeats: int, device: str = "cpu") -> float:
    """Median wall time of one call; on cuda each call is timed up to a synchronize."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()  # warm-up (allocations, lazy init, kernel compiles)
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def machine(device: str = "cpu") -> str:
    cpu = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    where = f"{cpu}, {os.cpu_count()} cores"
    if device.startswith("cuda"):
        where = f"{torch.cuda.get_device_name(device)} (host: {where})"
    threads = f"{torch.get_num_threads()} CPU threads"
    return f"{where}, torch {torch.__version__} ({threads}), transformers {transformers.__version__}"


def has_vllm() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def vllm_processor(batch: int, history: int, vocab: int, mode: str):
    from gauge_sampling.vllm import RepetitionPenalty
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdateBuilder

    proc = RepetitionPenalty(object(), torch.device("cpu"), False)
    b = BatchUpdateBuilder()
    g = torch.Generator().manual_seed(1)
    extra = {"repeat_penalty": 1.3, "repeat_penalty_mode": mode, "repeat_last_n": -1}
    for i in range(batch):
        toks = torch.randint(0, vocab, (history,), generator=g).tolist()
        b.added.append((i, SamplingParams(extra_args=extra), toks[: history // 2], toks[history // 2 :]))
    proc.update_state(b.get_and_reset(batch))
    return proc


def processor_table(
    history: int,
    repeats: int,
    device: str = "cpu",
    dtype: str = "float32",
    batches: tuple[int, ...] = (1, 8, 64),
    vocabs: tuple[int, ...] = (49152, 151936),
) -> list[str]:
    """One Markdown row per (vocab, batch): HF's processor, gauge's in both modes and their
    ratios to HF's, measured on the same inputs in the same run."""
    from gauge_sampling.hf import RepetitionPenalty
    from transformers import RepetitionPenaltyLogitsProcessor

    # gauge's vLLM processor reads vLLM's CPU batch state; timed on CPU float32 rows only.
    with_vllm = device == "cpu" and dtype == "float32" and has_vllm()
    head = "| batch | vocab | HF `RepetitionPenaltyLogitsProcessor` | gauge hf `ctrl` | ratio "
    head += "| gauge hf `normalized` | ratio |"
    rule = "|---:|---:|---:|---:|---:|---:|---:|"
    if with_vllm:
        head += " vLLM proc `ctrl` | vLLM proc `normalized` |"
        rule += "---:|---:|"
    rows = [head, rule]
    print("\n".join(rows), flush=True)
    hf_ref = RepetitionPenaltyLogitsProcessor(1.3)
    ctrl = RepetitionPenalty(1.3, mode="ctrl")
    norm = RepetitionPenalty(1.3, mode="normalized")
    for vocab in vocabs:
        for batch in batches:
            g = torch.Generator().manual_seed(0)
            ids = torch.randint(0, vocab, (batch, history), generator=g).to(device)
            scores = (torch.randn(batch, vocab, generator=g) * 4).to(device=device, dtype=DTYPES[dtype])
            t_hf = median_ms(partial(hf_ref, ids, scores), repeats, device)
            t_ctrl = median_ms(partial(ctrl, ids, scores), repeats, device)
            t_norm = median_ms(partial(norm, ids, scores), repeats, device)
            row = (
                f"| {batch} | {vocab:,} | {t_hf:.3f} ms | {t_ctrl:.3f} ms | {t_ctrl / t_hf:.2f}× | "
                f"{t_norm:.3f} ms | {t_norm / t_hf:.2f}× |"
            )
            if with_vllm:
                vc = vllm_processor(batch, history, vocab, "ctrl")
                vn = vllm_processor(batch, history, vocab, "normalized")
                work = scores.clone()
                t_vc = median_ms(partial(vc.apply, work), repeats)
                t_vn = median_ms(partial(vn.apply, work), repeats)
                row += f" {t_vc:.3f} ms | {t_vn:.3f} ms |"
            rows.append(row)
            print(rows[-1], flush=True)
            del ids, scores
    return rows


def vllm_step_share(n_tokens: int, batches: tuple[int, ...]) -> list[str]:
    """The processor's share of real decode steps: its apply() time over the generate() time."""
    import models
    import vllm
    import vllm_env
    from gauge_sampling import vllm as gv
    from vllm import SamplingParams

    spent = {"apply": 0.0, "calls": 0}
    original = gv.RepetitionPenalty.apply

    def timed(self, logits, ctx=None):
        t0 = time.perf_counter()
        out = original(self, logits, ctx)
        if self.active:
            spent["apply"] += time.perf_counter() - t0
            spent["calls"] += 1
        return out

    gv.RepetitionPenalty.apply = timed
    llm = vllm.LLM(
        model=str(models.safetensors_dir(models.gguf_path())),
        distributed_executor_backend="uni",
        logits_processors=[gv.RepetitionPenalty],
        **vllm_env.ENGINE_ARGS,
    )
    rows = [
        "| mode | batch | apply() calls | generate() | processor apply() | share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(rows), flush=True)
    for batch in batches:
        prompts = ["The history of the Roman Empire is"] * batch
        for mode in ("ctrl", "normalized"):
            sp = SamplingParams(
                max_tokens=n_tokens,
                temperature=0.0,
                ignore_eos=True,
                extra_args={"repeat_penalty": 1.3, "repeat_penalty_mode": mode, "repeat_last_n": -1},
            )
            llm.generate(prompts, sp, use_tqdm=False)  # warm-up
            spent.update(apply=0.0, calls=0)
            t0 = time.perf_counter()
            llm.generate(prompts, sp, use_tqdm=False)
            total = time.perf_counter() - t0
            rows.append(
                f"| {mode} | {batch} | {spent['calls']} | {total * 1e3:.0f} ms | "
                f"{spent['apply'] * 1e3:.1f} ms | {spent['apply'] / total:.1%} |"
            )
            print(rows[-1], flush=True)
    return rows


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers expected, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"positive integers expected, got {text!r}")
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--history", type=int, default=512, help="tokens in each row's history")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--vllm-step", action="store_true", help="also measure the share of a vLLM decode step")
    ap.add_argument("--device", default="cpu", help="where the rows and histories live (cpu, cuda)")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="the rows' dtype")
    ap.add_argument("--batch", type=_ints, default=(1, 8, 64), help="comma-separated batch sizes")
    ap.add_argument("--vocab", type=_ints, default=(49152, 151936), help="comma-separated vocabularies")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: torch sees no CUDA device")
    print(
        f"machine: {machine(args.device)}; rows {args.dtype} on {args.device}; "
        f"history {args.history} tokens; median of {args.repeats} calls\n"
    )
    processor_table(args.history, args.repeats, args.device, args.dtype, args.batch, args.vocab)
    if args.vllm_step:
        print()
        vllm_step_share(64, (1, 8))


if __name__ == "__main__":
    main()
