"""First-come-first-served policies (no deadline awareness)."""
from __future__ import annotations

from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.base import Policy
from timely_llm_ros.core.policies.registry import register


@register
class SegmentedFcfs(Policy):
    """Segmented generation, waiting generations (new or suspended) served in order of request arrival."""

    name = "fcfs"

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival


@register
class VllmStream(Policy):
    """vLLM-like FCFS continuous batching; segments streamed to the robot as found, never suspended."""

    name = "vllm-stream"
    segmented = False

    def priority(self, gen: Generation, now: float) -> float:
        return -gen.req.arrival


@register
class Vllm(VllmStream):
    """vLLM-like FCFS continuous batching; the whole plan is generated, then executed."""

    name = "vllm"
    stream_segments = False
