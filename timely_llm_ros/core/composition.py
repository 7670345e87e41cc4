"""The core half of the composition root: a policy from typed options, the engine as that policy drives it, and the
scheduler over both; and a live policy change that puts everything in place again exactly as at configure.

Torch-free: the engine is passed in. timely_llm_ros/stack.py loads the model and its engine, composes the model
entry (prompt format, limits) and measures the hardware fit, then composes through here; the simulator composes
through here with the engine it runs on.

What a policy changes beyond itself is applied in ``drive``: TimeBill's prompt-KV eviction ratios are carried out by
wrapping the engine (core/eviction.py). A live change rebuilds the policy from the same options and facts with
another name and drives the configure-time engine again, so a switch to TimeBill evicts as a configure with
TimeBill does, and a switch away unwraps it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.eviction import with_policy_eviction
from timely_llm_ros.core.policies import Policy, PolicyOptions, make_policy
from timely_llm_ros.core.policies.timely import options_from_skill_sets
from timely_llm_ros.core.prompting import PromptEncoder
from timely_llm_ros.core.scheduler import Clock, PlanScheduler, SchedulerConfig


@dataclass(frozen=True)
class PolicyChoice:
    """Which policy schedules, with its own options and the facts every policy is offered."""

    name: str = "timely"                       # a registered policy (core/policies/catalog.py)
    max_batch: int = 8                         # generations per engine step at most
    options: Mapping[str, Any] | PolicyOptions = field(default_factory=dict)   # the policy's own (an unknown name
                                                                              # is an error naming it)
    network_delay_s: float | None = None       # d: delivery to the robot (offered to the policies that use it;
                                               # None: each policy's default)
    online_gen_time: bool = False              # G follows measured segments (the server: true)
    provided: Mapping[str, Any] = field(default_factory=dict)   # objects offered to every policy, by option name
                                                                # (classifier: the semantic policy's text classifier)

    def named(self, name: str) -> "PolicyChoice":
        """The same choice for another policy: its own options do not carry over (they were the other's)."""
        return replace(self, name=name, options={})


def policy_facts(choice: PolicyChoice, skill_sets: Mapping[str, Any],
                 fitted: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What every policy is offered (each takes the ones it has options for): the segment sizes of the skill sets,
    the hardware fit's step times (core/fit.py HardwareFit.policy_options), the network delay, online G and the
    objects the composer provides."""
    delay = {} if choice.network_delay_s is None else {"network_delay_s": choice.network_delay_s}
    return {**options_from_skill_sets(skill_sets), **(fitted or {}), **delay, "online_gen_time": choice.online_gen_time,
            **choice.provided}


def build_policy(choice: PolicyChoice, skill_sets: Mapping[str, Any],
                 fitted: Mapping[str, Any] | None = None) -> Policy:
    """The chosen policy with its options over the facts (ValueError on an unknown policy or option)."""
    return make_policy(choice.name, max_batch=choice.max_batch, options=choice.options,
                       shared=policy_facts(choice, skill_sets, fitted))


def drive(engine: Engine, policy: Policy) -> Engine:
    """``engine`` as ``policy`` drives it: wrapped to evict prompt KV where the policy decides eviction ratios
    (TimeBill) and the engine can evict; else the engine itself."""
    return with_policy_eviction(engine, policy)


def build_scheduler(engine: Engine, policy: Policy, skill_sets: Mapping[str, Any], exec_models: Mapping[str, Any],
                    clock: Clock, config: SchedulerConfig | None = None,
                    plan_rule: Callable[[str], str] = lambda robot: "queue",
                    prompts: PromptEncoder | None = None) -> PlanScheduler:
    """A PlanScheduler running ``policy`` on ``engine`` as the policy drives it (``drive``)."""
    return PlanScheduler(drive(engine, policy), policy, skill_sets, exec_models, clock, config, plan_rule,
                         prompts=prompts)


@dataclass(frozen=True)
class PolicySwitch:
    """A live policy change, built off the scheduler thread (a bad name or option fails here) and applied on it."""

    policy: Policy
    engine: Engine            # the engine as the new policy drives it

    def apply(self, scheduler: PlanScheduler) -> None:
        """Set the policy and its engine on ``scheduler`` (on the thread that steps it, between steps)."""
        scheduler.engine = self.engine
        scheduler.policy = self.policy


def switch_policy(base_engine: Engine, choice: PolicyChoice, skill_sets: Mapping[str, Any],
                  fitted: Mapping[str, Any] | None = None) -> PolicySwitch:
    """The policy ``choice`` names, built and driven as at configure over the configure-time (unwrapped) engine."""
    policy = build_policy(choice, skill_sets, fitted)
    return PolicySwitch(policy, drive(base_engine, policy))
