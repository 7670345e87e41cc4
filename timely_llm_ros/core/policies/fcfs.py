"""First-come-first-served policies (no deadline awareness)."""
from __future__ import annotations

from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy


class SegmentedFcfs(Policy):
    """Segmented generation, waiting generations (new or suspended) served in order of request arrival."""

    name = "fcfs"

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival


class FcfsStream(Policy):
    """FCFS continuous batching as vLLM serves (no segmentation: a generation is never suspended); each segment is
    streamed to the robot as soon as it is found."""

    name = "fcfs-stream"
    segmented = False

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival


class FcfsWholePlan(FcfsStream):
    """FCFS continuous batching as vLLM serves; the whole plan is generated, then sent to the robot."""

    name = "fcfs-whole-plan"
    stream_segments = False
