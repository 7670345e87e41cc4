"""Segmented earliest-deadline-first: deadline = arrival + ERT for the first segment, E for later ones."""
from __future__ import annotations

from timely_llm_ros.core.admission import segment_deadline
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy


class SegmentedEdf(Policy):
    """Segmented generation; the waiting generation whose current segment is due first runs first."""

    name = "edf"

    def priority(self, gen: Generation, now: float) -> float:
        return -segment_deadline(gen)
