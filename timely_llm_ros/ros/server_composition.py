"""The server's composition: the policy, the engine as that policy drives it, and the scheduler over both; one
path for configure and for a live policy change (`ros2 param set /timely_server policy timebill`).

What a policy changes beyond itself is applied in ``compose_policy``: TimeBill's prompt-KV eviction ratios are
carried out by wrapping the engine (engine/evicting.py). A live change composes the new policy over the same
configure-time (unwrapped) engine, so a switch to TimeBill evicts as TimeBill set at configure does, and a switch
away unwraps the engine again. This is the seam where the package's composition root (engine + policy + scheduler
from typed options) replaces the server's own wiring.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..core.engine_loop import Clock
from ..core.policies import Policy, make_policy
from ..core.policies.timely import options_from_skill_sets
from ..core.prompting import PromptEncoder
from ..core.scheduler import PlanScheduler, SchedulerConfig
from ..engine.base import Engine
from ..engine.evicting import with_policy_eviction


def policy_options(skill_sets: Mapping[str, Any], fitted: Mapping[str, Any] | None,
                   network_delay_s: float) -> dict[str, Any]:
    """Options every policy gets (a policy ignores those it does not use): segment sizes from the skill sets, the
    hardware fit's step times, the network delay, and G measured online."""
    return {**options_from_skill_sets(skill_sets), **(fitted or {}), "network_delay_s": network_delay_s,
            "online_gen_time": True}


@dataclass(frozen=True)
class PolicyStack:
    """A policy and the engine as it drives it; built off the scheduler thread (a bad name fails there), installed
    on it between engine steps."""

    policy: Policy
    engine: Engine

    def install(self, scheduler: PlanScheduler) -> None:
        scheduler.engine = self.engine
        scheduler.policy = self.policy


def compose_policy(base_engine: Engine, name: str, max_batch: int, options: Mapping[str, Any]) -> PolicyStack:
    """The named policy (ValueError on an unknown one) and ``base_engine`` as it drives it: wrapped to evict prompt
    KV where the policy decides eviction ratios (TimeBill) and the engine can evict, else the engine itself."""
    policy = make_policy(name, max_batch=max_batch, options=dict(options))
    return PolicyStack(policy, with_policy_eviction(base_engine, policy))


def compose_scheduler(base_engine: Engine, stack: PolicyStack, skill_sets: Mapping[str, Any],
                      exec_models: Mapping[str, Any], config: SchedulerConfig, plan_rule: Callable[[str], str],
                      prompts: PromptEncoder | None, clock: Clock = time.monotonic) -> PlanScheduler:
    """The scheduler over ``base_engine`` running ``stack``'s policy. The stack's engine is installed as a live
    change installs it (``stack.install`` posted to the scheduler thread), after that thread has hooked its arrival
    check into the engine that runs the forward passes (``base_engine``, which a wrapper steps through)."""
    return PlanScheduler(base_engine, stack.policy, skill_sets, exec_models, clock, config, plan_rule=plan_rule,
                         prompts=prompts)
