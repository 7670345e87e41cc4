"""Plan-length limits of each robot type counted in the loaded model's tokens.

A skill set's max_segment_tokens (admission's WCET bound of one segment) and max_plan_tokens (a plan's hard cap)
are counted in the embedded planner's tokens, the reference tokenizer. Another model counts the same plan in other
tokens (SmolLM2 writes ``mf(100);`` digit by digit), so for it each limit is, in order of precedence:

1. the model entry's ``limits`` for that robot type (config/models.yaml), as given;
2. the skill set's own value when the model tokenizes every worked example plan exactly as the reference does
   (then both count the same tokens: the embedded planner itself), or when the skill set has no worked examples
   (nothing to convert with: the configure log says so);
3. derived from the skill set's worked examples (``derive_limits``).

Torch-free: tokenizers come in as encode callables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from timely_llm_ros.core.models import ModelSpec, TokenLimits
from timely_llm_ros.core.skills.program import Conditional, Loop
from timely_llm_ros.core.skills.segment import ParsedSegment
from timely_llm_ros.core.skills.skill_set import SkillSet

Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class EffectiveLimits:
    """One robot type's limits for the loaded model, and where they came from (for the configure log)."""

    limits: TokenLimits
    source: str          # "model entry" | "skill set" | "derived" | "unconverted" (no examples to convert with)
    ratio: float = 1.0   # derived: model tokens per reference token over the worked example plans

    def describe(self) -> str:
        how = {"model entry": "from the model entry",
               "skill set": "from the skill set (this model counts its examples in the same tokens)",
               "unconverted": "from the skill set UNCONVERTED (it has no worked examples to convert them with)",
               }.get(self.source, f"derived: x{self.ratio:.2f} the skill set's, from its worked examples")
        return (f"max_segment_tokens={self.limits.max_segment_tokens} max_plan_tokens={self.limits.max_plan_tokens}"
                f" {how}")


def segments(skill_set: SkillSet, plan: str) -> list[ParsedSegment]:
    """The executable segments the robot type's segmenter cuts the plan into."""
    segmenter = skill_set.segmenter()
    parsed = segmenter.feed(plan)
    tail = segmenter.finish()
    return parsed + ([tail] if tail is not None else [])


def segment_texts(skill_set: SkillSet, plan: str) -> list[str]:
    """The texts of the executable segments the robot type's segmenter cuts the plan into."""
    return [s.text for s in segments(skill_set, plan)]


def derive_limits(skill_set: SkillSet, encode: Encode, encode_reference: Encode) -> tuple[TokenLimits, float]:
    """The skill set's limits converted from the reference tokenizer's tokens into the model's (``encode``).

    r = (model tokens of all worked example plans) / (reference tokens of the same plans); each limit is the skill
    set's value times r, rounded up. Floors keep the bounds at least what the examples show: max_segment_tokens is
    at least the longest example segment in the model's tokens, max_plan_tokens at least the longest example plan
    and at least max_segment_tokens. Returns (limits, r). ValueError when the skill set has no worked examples."""
    plans = [ex.plan for ex in skill_set.examples]
    if not plans:
        raise ValueError(f"skill set {skill_set.name!r} has no worked examples to derive token limits from: add "
                         "examples to it, or give the model entry limits for it (config/models.yaml)")
    model = sum(len(encode(p)) for p in plans)
    reference = sum(len(encode_reference(p)) for p in plans)
    ratio = model / max(reference, 1)
    longest_segment = max(len(encode(text.strip())) for p in plans for text in segment_texts(skill_set, p))
    segment = max(math.ceil(skill_set.max_segment_tokens * ratio), longest_segment, 1)
    plan = max(math.ceil(skill_set.max_plan_tokens * ratio), max(len(encode(p)) for p in plans), segment)
    return TokenLimits(segment, plan), ratio


def effective_limits(spec: ModelSpec, skill_sets: Mapping[str, SkillSet], encode: Encode,
                     encode_reference: Encode) -> dict[str, EffectiveLimits]:
    """Each robot type's limits for the model of ``spec`` (see the module docstring for the precedence)."""
    out: dict[str, EffectiveLimits] = {}
    for name, skill_set in skill_sets.items():
        own = TokenLimits(skill_set.max_segment_tokens, skill_set.max_plan_tokens)
        if name in spec.limits:
            out[name] = EffectiveLimits(spec.limits[name], "model entry")
        elif not skill_set.examples:
            out[name] = EffectiveLimits(own, "unconverted")
        elif all(encode(ex.plan) == encode_reference(ex.plan) for ex in skill_set.examples):
            out[name] = EffectiveLimits(own, "skill set")
        else:
            limits, ratio = derive_limits(skill_set, encode, encode_reference)
            out[name] = EffectiveLimits(limits, "derived", ratio)
    return out


def short_limit_warnings(limits: Mapping[str, EffectiveLimits], skill_sets: Mapping[str, SkillSet],
                         encode: Encode) -> tuple[str, ...]:
    """A limit below what the robot type's own worked examples need, in the model's tokens (one sentence each): a
    max_segment_tokens under their longest segment that could be cut at it (one with no loop or conditional: a block
    outgrows the bound by design, core/admission.py) makes admission and the hardware fit count a segment's
    generation short; a max_plan_tokens under their longest plan ends such plans PLAN_TOO_LONG. Derived limits
    never are below either."""
    out = []
    for name, eff in limits.items():
        skill_set = skill_sets.get(name)
        if skill_set is None or not skill_set.examples or eff.source == "derived":
            continue
        plans = [ex.plan for ex in skill_set.examples]
        segment = max((len(encode(seg.text.strip())) for p in plans for seg in segments(skill_set, p)
                       if not any(isinstance(st, (Loop, Conditional)) for st in seg.program)), default=0)
        plan = max(len(encode(p)) for p in plans)
        where = ("the model entry's limits" if eff.source == "model entry"
                 else f"max_segment_tokens / max_plan_tokens in the {name} skill set")
        if segment > eff.limits.max_segment_tokens:
            out.append(f"robot type {name}: max_segment_tokens {eff.limits.max_segment_tokens} is below the "
                       f"{segment} tokens of its worked examples' longest segment without a block, so admission and "
                       f"the hardware fit count a segment's generation short; raise it in {where}")
        if plan > eff.limits.max_plan_tokens:
            out.append(f"robot type {name}: max_plan_tokens {eff.limits.max_plan_tokens} is below the {plan} tokens "
                       f"of its longest worked example plan, so such plans end PLAN_TOO_LONG; raise it in {where}")
    return tuple(out)


def with_limits(skill_sets: Mapping[str, SkillSet], limits: Mapping[str, EffectiveLimits]) -> dict[str, SkillSet]:
    """The skill sets with their limits replaced by the model's: what the scheduler and the policy options take."""
    return {name: ss.with_limits(limits[name].limits.max_segment_tokens, limits[name].limits.max_plan_tokens)
            if name in limits else ss for name, ss in skill_sets.items()}
