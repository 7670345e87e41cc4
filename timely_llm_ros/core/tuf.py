"""Time-utility functions (TimelyLLM Eq. 1) and named urgency classes."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from .errors import ErrorCode, RequestError


@dataclass(frozen=True)
class TimeUtility:
    """TUF(t) = min(beta, alpha * (t - ert) + beta); t is a response/waiting time in seconds."""

    ert: float     # expected response time (s), >= 0
    alpha: float   # slope (utility per second), <= 0
    beta: float    # maximum utility, > 0

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise RequestError(ErrorCode.INVALID_TIME_REQUIREMENT, problem)

    def problem(self) -> str | None:
        """A reason these parameters are invalid, or None."""
        for name in ("ert", "alpha", "beta"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                return f"{name} must be a finite number, got {v!r}"
        if self.ert < 0:
            return f"ert must be >= 0 s, got {self.ert}"
        if self.alpha > 0:
            return f"alpha must be <= 0 (utility cannot grow with delay), got {self.alpha}"
        if self.beta <= 0:
            return f"beta must be > 0, got {self.beta}"
        return None

    def __call__(self, t: float) -> float:
        """TUF_0: utility of a first segment whose waiting (response) time is t."""
        return min(self.beta, self.alpha * (t - self.ert) + self.beta)

    def resumed(self, t: float) -> float:
        """TUF_1: utility of a later segment waiting t after the previous execution ended (ERT 0)."""
        return min(self.beta, self.alpha * max(t, 0.0) + self.beta)

    def zero_crossing(self) -> float:
        """Response time at which TUF_0 reaches 0 (inf when alpha == 0)."""
        return math.inf if self.alpha == 0 else self.ert + self.beta / -self.alpha


DEFAULT_URGENCY_CLASSES: Mapping[str, TimeUtility] = {
    "normal": TimeUtility(ert=1.0, alpha=-2.0, beta=1.0),
    "urgent": TimeUtility(ert=0.2, alpha=-6.67, beta=2.0),
}


def urgency_classes_from_config(cfg: Mapping[str, Mapping[str, float]]) -> dict[str, TimeUtility]:
    """Build named classes from {name: {ert, alpha, beta}} (e.g. config/urgency_classes.yaml)."""
    out: dict[str, TimeUtility] = {}
    for name, p in cfg.items():
        out[name] = TimeUtility(float(p["ert"]), float(p["alpha"]), float(p["beta"]))
    return out
