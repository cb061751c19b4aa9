"""``python -m gauge_sampling probe|json --engine hf|vllm ...``: see :mod:`gauge_sampling.lab.cli`."""

import sys

from .lab.cli import main

sys.exit(main())
