"""Segmented earliest-deadline-first: deadline = arrival + ERT for the first segment, E for later ones."""
from __future__ import annotations

from ..admission import segment_deadline
from ..request import Generation
from .base import Policy
from .registry import register


@register
class SegmentedEdf(Policy):
    """Segmented generation; the waiting generation whose current segment is due first runs first."""

    name = "edf"

    def priority(self, gen: Generation, now: float) -> float:
        return -segment_deadline(gen)
