"""The instrument on HF transformers and vLLM: ``python -m gauge_sampling probe --engine hf|vllm``.

Python is the logit source and the stack's own sampler; the grid, the run plan, the run
directory (resumption), the analysis, ``REPORT.md`` and the plots are gauge-lab's, through the
binding (``gauge_sampling._native.ProbeRun``): one implementation for every stack.
"""
