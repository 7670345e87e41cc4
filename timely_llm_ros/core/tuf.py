"""Time-utility functions (TimelyLLM Eq. 1) and named urgency classes.

A class also says what the server does with a request of it that can no longer earn positive utility (``late``):
"drop" ends it DROPPED (the time-utility objective: a late plan counts below none), "serve" plans it anyway,
after the requests that can still earn utility (docs/scheduling.md, "Late plan or no plan").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from timely_llm_ros.core.errors import ErrorCode, RequestError

LATE_CHOICES = ("drop", "serve")


@dataclass(frozen=True)
class TimeUtility:
    """TUF(t) = min(beta, alpha * (t - ert) + beta); t is a response/waiting time in seconds."""

    ert: float     # expected response time (s), >= 0
    alpha: float   # slope (utility per second), <= 0
    beta: float    # maximum utility, > 0
    late: str = "drop"   # a request that can no longer earn positive utility: "drop" | "serve" (LATE_CHOICES)

    @property
    def serves_late(self) -> bool:
        """True when a request that can no longer earn positive utility is planned anyway, never dropped."""
        return self.late == "serve"

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
        if self.late not in LATE_CHOICES:
            return f"late must be one of {', '.join(LATE_CHOICES)}, got {self.late!r}"
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


# The paper's presets, with its drop rule for both (the simulator's figures use these); the server's classes come
# from config/urgency_classes.yaml, whose `late` choices were measured (docs/scheduling.md).
DEFAULT_URGENCY_CLASSES: Mapping[str, TimeUtility] = {
    "normal": TimeUtility(ert=1.0, alpha=-2.0, beta=1.0),
    "urgent": TimeUtility(ert=0.2, alpha=-6.67, beta=2.0),
}


def urgency_classes_from_config(cfg: Mapping[str, Mapping[str, object]]) -> dict[str, TimeUtility]:
    """Build named classes from {name: {ert, alpha, beta, late}} (e.g. config/urgency_classes.yaml; late is
    optional, default "drop")."""
    out: dict[str, TimeUtility] = {}
    for name, p in cfg.items():
        out[name] = TimeUtility(float(p["ert"]), float(p["alpha"]), float(p["beta"]), str(p.get("late", "drop")))
    return out
