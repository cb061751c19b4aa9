"""The settings every host's repetition penalty takes, checked once by gauge's own parser.

The HF, mlx-lm and onnxruntime-genai penalties differ only in the arrays they compute on; what
they are asked for (θ, mode, window, presence and frequency penalties, exempt ids), how it is
checked (errors read exactly as the CLI's) and which history tokens count are the same.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from . import parse_params


class PenaltySettings:
    """θ, mode, window, presence / frequency penalties and exempt ids, validated."""

    def __init__(
        self,
        penalty: float,
        mode: str = "normalized",
        last_n: int = -1,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        exempt: Iterable[int] = (),
    ):
        p = parse_params(
            {
                "repeat_penalty": penalty,
                "repeat_penalty_mode": mode,
                "repeat_last_n": last_n,
                "presence_penalty": presence_penalty,
                "frequency_penalty": frequency_penalty,
                "penalty_exempt": list(exempt),
            }
        )
        self.penalty = float(penalty)
        self.mode = p["repeat_penalty_mode"]
        self.last_n = int(p["repeat_last_n"])
        self.presence_penalty = float(presence_penalty)
        self.frequency_penalty = float(frequency_penalty)
        self.exempt = tuple(sorted(int(t) for t in p["penalty_exempt"]))

    @property
    def is_off(self) -> bool:
        """True when the penalty returns its input unchanged."""
        no_op = self.penalty == 1.0 and self.presence_penalty == 0.0 and self.frequency_penalty == 0.0
        return self.last_n == 0 or no_op

    def seen(self, tokens, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, counts): the distinct ids of the window that count, with their occurrences."""
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self.last_n > 0:
            ids = ids[-self.last_n :]
        ids = ids[(ids >= 0) & (ids < n_vocab)]
        if self.exempt:
            ids = ids[~np.isin(ids, np.asarray(self.exempt, dtype=np.int64))]
        return np.unique(ids, return_counts=True)

    def _repr_fields(self) -> str:
        return (
            f"penalty={self.penalty}, mode={self.mode!r}, last_n={self.last_n}, "
            f"presence_penalty={self.presence_penalty}, frequency_penalty={self.frequency_penalty}, "
            f"exempt={self.exempt}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_fields()})"
