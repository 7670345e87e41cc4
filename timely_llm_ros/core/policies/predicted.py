"""Helpers shared by the policies that rank by a hard deadline and a predicted response length
(TimeBill, RT-LM, semantic scheduling)."""
from __future__ import annotations

import math
from typing import Any

from timely_llm_ros.core.request import Generation, PlanRequest

NO_DEADLINE_S = 60.0   # a request whose utility never reaches zero still gets a finite deadline


def hard_deadline(req: PlanRequest) -> float:
    """arrival + the request's time budget when it has one, else when its time utility reaches zero."""
    if req.time_budget_s > 0:
        return req.arrival + req.time_budget_s
    z = req.tuf.zero_crossing()
    return req.arrival + (z if math.isfinite(z) else NO_DEADLINE_S)


class PredictedLengths:
    """Predicted output tokens per request, from a bucketed length predictor (loaded on first use), cached."""

    def __init__(self, predictor: Any = None) -> None:
        self._predictor = predictor
        self._n: dict[str, int] = {}

    def __call__(self, gen: Generation) -> int:
        n = self._n.get(gen.req_id)
        if n is None:
            if self._predictor is None:
                from timely_llm_ros.core.predictors.length import default_bucket_predictor

                self._predictor = default_bucket_predictor()
            n = self._n[gen.req_id] = int(self._predictor.predict(gen.req.task, gen.req.context))
        return n

    def forget(self, req_id: str) -> None:
        self._n.pop(req_id, None)
