"""TimeBill's execution-time estimator (ETE) and its time-budgeted KV eviction ratio. numpy only.

    prefill(N_x)      = a N_x^2 + b N_x + c              (least squares on profiled prefills)
    decode step(N_kv) = p N_kv + q                        (least squares on profiled decode steps)
    WCET uses N_W = min(k N_hat, N_max), k = 5

After the prefill, with R = deadline - now left, the smallest eviction ratio of the prompt KV that fits N_W - 1
decode steps with N_kv_i = (1 - alpha) N_x + i - 1 is (sum the steps, solve for alpha):

    alpha* = clamp(1 - R / (p N_x (N_W - 1)) + (N_W - 2) / (2 N_x) + q / (p N_x),  0, alpha_max)

This is the corrected form: the printed Eq. 11 multiplies the middle term by a stray p and has no lower clamp
(printed_eq11 below keeps it for the test that shows where the two disagree).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def mape(measured: Sequence[float], predicted: Sequence[float]) -> float:
    m, p = np.asarray(measured, float), np.asarray(predicted, float)
    return float(np.mean(np.abs(p - m) / m))


@dataclass(frozen=True)
class ExecTimeEstimator:
    """Fitted ETE coefficients (seconds)."""

    a: float
    b: float
    c: float
    p: float
    q: float

    def prefill_s(self, n_x: int) -> float:
        return self.a * n_x * n_x + self.b * n_x + self.c

    def decode_step_s(self, n_kv: int) -> float:
        return self.p * n_kv + self.q

    def decode_phase_s(self, n_x: int, alpha: float, n_tokens: int) -> float:
        """sum_{i=1}^{N-1} p ((1 - alpha) N_x + i - 1) + q."""
        steps = max(n_tokens - 1, 0)
        return steps * (self.p * (1 - alpha) * n_x + self.q) + self.p * steps * (steps - 1) / 2

    @classmethod
    def fit(cls, prefill: Sequence[tuple[int, float]], decode: Sequence[tuple[int, float]]
            ) -> tuple["ExecTimeEstimator", dict[str, float]]:
        """Least squares on (N_x, seconds) and (N_kv, seconds) points; returns the estimator and its MAPEs."""
        n = np.array([x for x, _ in prefill], float)
        t = np.array([y for _, y in prefill], float)
        a, b, c = np.linalg.lstsq(np.stack([n * n, n, np.ones_like(n)], 1), t, rcond=None)[0]
        k = np.array([x for x, _ in decode], float)
        s = np.array([y for _, y in decode], float)
        p, q = np.linalg.lstsq(np.stack([k, np.ones_like(k)], 1), s, rcond=None)[0]
        est = cls(float(a), float(b), float(c), float(p), float(q))
        return est, {"prefill_mape": mape(t, [est.prefill_s(x) for x in n]),
                     "decode_step_mape": mape(s, [est.decode_step_s(x) for x in k])}


def wcet_tokens(n_hat: int, n_max: int, k: float = 5.0) -> int:
    """N_W = min(k N_hat, N_max)."""
    return int(min(k * n_hat, n_max))


def alpha_star(remaining_s: float, n_x: int, n_w: int, p: float, q: float, alpha_max: float = 0.95) -> float:
    """Corrected closed form (module docstring); 0 when nothing needs evicting or there is no prompt."""
    if n_x <= 0 or n_w <= 1 or p <= 0:
        return 0.0
    a = 1 - remaining_s / (p * n_x * (n_w - 1)) + (n_w - 2) / (2 * n_x) + q / (p * n_x)
    return min(max(a, 0.0), alpha_max)


def printed_eq11(remaining_s: float, n_x: int, n_w: int, p: float, q: float, alpha_max: float = 0.95) -> float:
    """TimeBill's Eq. 11 as printed (stray p in the middle term, no lower clamp): for comparison only."""
    return min(alpha_max, 1 - remaining_s / (p * n_x * (n_w - 1)) + p * (n_w - 2) / (2 * n_x) + q / (p * n_x))
