"""The policy interface: order waiting generations and choose each engine step's batch."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from timely_llm_ros.core.admission import kv_need_bytes
from timely_llm_ros.core.request import Generation
from timely_llm_ros.core.policies.options import PolicyOptions, options_from


@dataclass
class SchedulingContext:
    """What a policy may know about the engine when it picks a batch."""

    now: float
    kv_free_bytes: float           # KV budget left on the device (inf if unbounded)
    kv_bytes_per_token: float      # approximate KV size of one token of context
    step_time_s: float | None      # duration of the last decode step (None before the first)
    decode_step_s: float | None = None    # duration of the last step that decoded only (no prefill work)
    decode_batch: int = 0                 # its batch size
    prefill_token_s: float | None = None  # measured seconds per prefill token (None before any prefill)
    step_token_budget: int | None = None  # the engine's chunked-prefill budget (None: unchunked)
    fused_steps: bool = False             # the engine runs a step's prefills and decodes in one forward


class Policy(ABC):
    """A scheduling policy. The same object drives the simulator and the real engines.

    Class flags say how the scheduler treats segments:
      segmented:       suspend a generation as soon as a segment is executable;
      stream_segments: dispatch each segment when found (False: only after the whole plan);
      uses_feedback:   the robot's reported start/finish times replace the estimates in E (False: the open-loop preset);
      interrupt_default: whether a request that arrives during an engine step may cut it short (option
                       `interrupt`; see `interrupts`).
    ``Options`` is the policy's options dataclass.
    """

    name: ClassVar[str] = ""
    segmented: ClassVar[bool] = True
    stream_segments: ClassVar[bool] = True
    uses_feedback: bool = True     # False: E from execution estimates only (executor reports ignored for E)
    interrupt_default: ClassVar[bool] = True
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions

    def __init__(self, max_batch: int = 8, options: Mapping[str, Any] | PolicyOptions | None = None) -> None:
        self.max_batch = max_batch
        self.options = options_from(self.Options, options, self.name)
        self.interrupt = self.interrupt_default if self.options.interrupt is None else bool(self.options.interrupt)

    @abstractmethod
    def priority(self, gen: Generation, now: float) -> float:
        """Priority of a waiting generation at time now (higher runs first)."""

    def forget(self, req_id: str) -> None:
        """The request has ended: drop any per-request state (default: none kept)."""

    def observe_segment(self, robot_type: str, gen_time_s: float) -> None:
        """Measured generation time of a segment that just became executable: the engine time of the steps it was
        in, not the time it waited (default: ignored)."""

    def observe_segment_tokens(self, robot_type: str, tokens: int, first: bool = False, urgency: str = "") -> None:
        """Token count of a segment that just became executable; first: it is its plan's first, of a request of
        that urgency class (default: ignored)."""

    def should_drop(self, gen: Generation, now: float) -> str | None:
        """Reason to drop a waiting generation now, or None to keep it (default: never drop). A policy that drops
        asks ``may_drop`` first."""
        return None

    @staticmethod
    def may_drop(gen: Generation) -> bool:
        """Whether a drop rule may end gen: False when its urgency class serves late plans (``late: serve``)."""
        return not gen.req.tuf.serves_late

    @property
    def preempts_running(self) -> bool:
        """Whether select may leave a running generation out of the next step to make room (default: no, running
        generations stay until their segment ends)."""
        return False

    def interrupts(self, arrival: Generation, members: Sequence[Generation], now: float) -> bool:
        """Whether `arrival`, a request new to the scheduler at `now`, should cut short the engine step in flight
        that runs `members` (on an interruptible engine the step then ends at the next layer boundary and the next
        pick sees the arrival). Default: when this policy ranks it above every member, i.e. when it would have
        been picked before each of them had it arrived a moment before the step, and the next pick can take it
        (the batch has room, or select makes room by leaving running generations out): cutting a step whose
        members all come back ahead of the newcomer would only throw work away. Option `interrupt`; FCFS orders
        never rank a newcomer first, so they never interrupt."""
        if not self.interrupt or not members:
            return False
        if len(members) >= self.max_batch and not self.preempts_running:
            return False
        p = self.priority(arrival, now)
        return all(p > self.priority(m, now) for m in members)

    def select(self, waiting: Sequence[Generation], running: Sequence[Generation],
               ctx: SchedulingContext) -> list[Generation]:
        """The batch for the next engine step: running ones stay, waiting ones join by priority
        while the batch has room and KV memory allows."""
        batch = list(running)
        budget = ctx.kv_free_bytes
        for gen in sorted(waiting, key=lambda g: self.priority(g, ctx.now), reverse=True):
            if len(batch) >= self.max_batch:
                break
            need = kv_need_bytes(gen, ctx.kv_bytes_per_token)
            if need > budget and batch:
                break
            budget -= need
            batch.append(gen)
        return batch

