"""Environment for vLLM's CPU build in tests: in-process engine, offline, small KV cache.
Imported before vllm (its settings are read from the environment)."""

import os

for key, value in {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(key, value)

ENGINE_ARGS = dict(dtype="float32", max_model_len=512, enforce_eager=True, seed=0)
