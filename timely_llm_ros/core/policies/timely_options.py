"""TimelyLLM's options (core/policies/timely.py): step-time assumptions, segment sizes, admission, crowd plan,
preemption, interrupts, drop rule. Per-robot-type tables take a mapping {robot_type: value} over the defaults below,
or one number for every type."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from timely_llm_ros.core.policies.options import PolicyOptions

DEFAULT_SEGMENT_GEN_TIME_S = {"drone": 0.09, "arm": 0.16, "chat": 0.16}
DEFAULT_MAX_SEGMENT_TOKENS = {"drone": 10, "arm": 20, "chat": 20}
DEFAULT_PREFILL_TOKEN_S = 1.6e-4     # prefill seconds per prompt token assumed when none is given
DEFAULT_PREFILL_STEP_S = 0.0141      # fixed cost of a step that prefills, with given prefill figures


@dataclass(frozen=True)
class TimelyOptions(PolicyOptions):
    # order of waiting generations
    order: str = "utility"              # "utility": Eq. 4; "deadline": earliest segment deadline first (EDF);
                                        # "arrival": earliest request first (FCFS) (presets edf-admit, fcfs-admit)
    # G and segment sizes
    segment_gen_time_s: Mapping[str, float] | float | None = None   # G per robot type (profiled segment time, s)
    online_gen_time: bool = False       # G follows measured segments (EMA, weight 0.2)
    max_segment_tokens: Mapping[str, int] | int | None = None       # segment cap per robot type (tokens)
    expected_segment_tokens: Mapping[str, int] | None = None        # mean segment assumed before any is seen
    expected_first_segment_tokens: Mapping[str, int] | None = None  # mean first segment assumed before any is seen
    online_segment_tokens: bool = True  # admission assumes seen segment lengths (False: always the cap)
    segment_estimate: str | None = None  # "mean" or "max" of the seen lengths (None: mean with the utility test,
                                         # max with the deadline test)
    network_delay_s: float = 0.008      # d: delivery to the robot
    # step-time assumptions
    token_time_s: float = 0.022         # batch-1 decode step assumed before one is measured
    decode_seq_ratio: float = 0.07      # r: a decode step of B sequences takes t_1 (1 + r (B - 1))
    prefill_token_s: float | None = None  # prefill s per prompt token (None: DEFAULT_PREFILL_TOKEN_S, and measured
                                          # ones replace it)
    prefill_step_s: float | None = None   # fixed cost of a prefill step (None: DEFAULT_PREFILL_STEP_S when the
                                          # prefill figures are fixed, else 0)
    fixed_prefill: bool | None = None   # the given prefill figures are used always (None: when prefill_token_s is
                                        # given); False: only until the scheduler has measured a prefill
    # admission
    adaptive: bool = True               # latency-guided admission on top of max_batch (False: the fixed cap only)
    admission: str = "utility"          # "utility" (predicted utilities with and without a candidate) or
                                        # "deadline" (no member's WCET may reach its segment deadline)
    prefill_aware: bool = True          # WCET counts the prefill work a candidate adds (False: decode-only)
    admit_when_late: bool = True        # decode-only rule: a late member does not refuse a join
    late_delay_s: float = 0.01          # delay joins may add to an already late member (deadline test)
    step_prefill_s: float = 0.1         # prefill work one step may carry (at least one prompt or chunk)
    admit_per_step: int = 0             # prefills joining per step (0: no count limit)
    step_reloads: bool = True           # KV reloads from host memory count in the step's prefill work
    # crowds of first segments
    crowd_plan: bool | None = None      # plan a crowd in waves by summed predicted utility (None: on with the
                                        # utility test)
    crowd_objective: str = "utility"    # "utility", or "served": most members served with positive utility first
    crowd_promise: bool = False         # members a split deferred to a later wave keep their place (ablation)
    # preemption, interrupts, drop
    preempt: bool = True                # running generations that rank lower and can wait are left out of a step
    prefill_alone: bool = True          # a prefill step may leave the decode pass out when that earns more
    feedback: str = "closed"            # "closed": the robot's reported times set E; "open": estimates only
    utility_floor: float = 0.05         # U floored at utility_floor * beta, in (0, 1)
    drop: str = "hopeless"              # "hopeless": drop a first segment that cannot earn utility; "never"

    def __post_init__(self) -> None:
        for name, allowed in (("order", ("utility", "deadline", "arrival")), ("feedback", ("closed", "open")), ("admission", ("utility", "deadline")),
                              ("segment_estimate", (None, "mean", "max")),
                              ("crowd_objective", ("utility", "served")), ("drop", ("hopeless", "never"))):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"timely: {name} must be {' or '.join(repr(a) for a in allowed if a)}, got {value!r}")
        if not 0.0 < self.utility_floor < 1.0:
            raise ValueError(f"timely: utility_floor must be in (0, 1), got {self.utility_floor}")

    @property
    def effective_segment_estimate(self) -> str:
        return self.segment_estimate or ("mean" if self.admission == "utility" else "max")

    @property
    def effective_crowd_plan(self) -> bool:
        return self.admission == "utility" if self.crowd_plan is None else self.crowd_plan

    @property
    def effective_fixed_prefill(self) -> bool:
        return self.prefill_token_s is not None if self.fixed_prefill is None else self.fixed_prefill


def per_type(value: Any, defaults: Mapping[str, float]) -> dict[str, float]:
    """A per-robot-type table: a mapping over the defaults, one number for every type ("*" included), or the
    defaults."""
    if isinstance(value, Mapping):
        return {**defaults, **{str(k): float(v) for k, v in value.items()}}
    if value is None:
        return dict(defaults)
    return {k: float(value) for k in defaults} | {"*": float(value)}


def options_from_skill_sets(skill_sets: Mapping[str, Any]) -> dict[str, Any]:
    """Per-robot-type timely options taken from loaded SkillSets: max_segment_tokens, and segment_gen_time_s
    where a skill set carries one (else the defaults above). Merge with other options before make_policy."""
    tokens = {name: int(ss.max_segment_tokens) for name, ss in skill_sets.items()}
    times = {name: float(ss.segment_gen_time_s) for name, ss in skill_sets.items()
             if getattr(ss, "segment_gen_time_s", None)}
    return {"max_segment_tokens": tokens, **({"segment_gen_time_s": times} if times else {})}
