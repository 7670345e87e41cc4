"""Hardware fit: what the scheduler assumes about step times, derived from the loaded model measured on this machine.

The server measures its engine at configure (engine/hardware_fit.py: each robot type's real request prefilled
after its cached system prompt, decode steps at batch 1 and at a few batch sizes at that context) and derives here,
in place of constants tuned for the embedded planner or the 4090 profile:

    t_1(type)        batch-1 decode step at the type's context (the fastest measured)
    P(type)          the step that prefills a request after the cached prompt and yields its first token (fastest)
    n_seg, n_first   segment and first-segment lengths of the type's worked example plans, in the model's tokens
    first(type)      = P + (n_first - 1) * t_1              one first segment on an idle engine
    G(type)          = sum over examples (P + (plan tokens - 1) * t_1) / their segments
                                                            mean time of a segment, its plan's prefill shared out
    token_time_s     = max t_1                              the WCET bounds' token time (the slowest type)
    prefill_token_s  = sum P / sum suffix tokens            amortised, as the scheduler measures it online
    decode_seq_ratio = r of t_B = t_1 (1 + r (B - 1))       least squares over the batch sizes measured

An urgency class cannot be met at all on this engine when its ERT is shorter than one first segment takes here
(first(type) + the network delay) for some robot type: ``unmet_classes`` names them, ``scale_classes`` stretches
such a class's time axis so that its ERT becomes k times that time (its slope divided by the same factor, so the
zero crossing keeps its ratio to the ERT; beta and the late rule unchanged). Torch-free and ROS-free.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.token_limits import segment_texts
from timely_llm_ros.core.tuf import TimeUtility

Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class PlanShape:
    """Token counts of one worked example plan's segments, in the loaded model's tokens."""

    segment_tokens: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return sum(self.segment_tokens)


def plan_shapes(skill_set: SkillSet, encode: Encode) -> list[PlanShape]:
    """The segments of each worked example plan of the skill set, counted in ``encode``'s tokens (the segmenter of
    the robot type cuts them, as it cuts a generated plan)."""
    shapes = []
    for ex in skill_set.examples:
        counts = tuple(max(len(encode(text.strip())), 1) for text in segment_texts(skill_set, ex.plan))
        if counts:
            shapes.append(PlanShape(counts))
    return shapes


@dataclass(frozen=True)
class TypeTiming:
    """What was measured for one robot type."""

    prompt_tokens: int                 # the measured request's whole prompt
    suffix_tokens: int                 # of which prefilled (after the cached system prompt)
    prefill_s: float                   # the step that prefilled the suffix and yielded the first token
    decode_s: float                    # a batch-1 decode step at that context
    plans: tuple[PlanShape, ...] = ()  # its worked examples' segments (none: the skill set's max_segment_tokens)
    max_segment_tokens: int = 1        # the fallback segment length without examples


@dataclass(frozen=True)
class Measurements:
    """The engine measured at configure."""

    types: Mapping[str, TypeTiming]
    batch_decode_s: Mapping[int, float]   # batch size -> decode step (s) at one robot type's context; 1 included
    seconds: float = 0.0                   # how long measuring took
    engine: str = ""
    rounds: int = 1                        # measurements combined (the fastest of each kind of step of them)


@dataclass(frozen=True)
class HardwareFit:
    """The step-time assumptions derived from Measurements (see the module docstring)."""

    measured: Measurements
    segment_gen_time_s: dict[str, float]
    first_segment_s: dict[str, float]          # one first segment at batch 1, network delay not included
    first_segment_tokens: dict[str, int]
    segment_tokens: dict[str, int]
    token_time_s: float
    prefill_token_s: float
    decode_seq_ratio: float

    def policy_options(self) -> dict:
        """Options of the timely family (other policies ignore them): admission's costs before the scheduler has
        measured its own, G, and the segment lengths it assumes before it has seen any."""
        return {"segment_gen_time_s": dict(self.segment_gen_time_s), "token_time_s": self.token_time_s,
                "decode_seq_ratio": self.decode_seq_ratio, "prefill_token_s": self.prefill_token_s,
                "fixed_prefill": False, "expected_segment_tokens": dict(self.segment_tokens),
                "expected_first_segment_tokens": dict(self.first_segment_tokens)}

    def describe(self) -> list[str]:
        """Log lines: what was measured and what was derived from it."""
        m = self.measured
        again = ", twice: a class looked unmet on the first" if m.rounds > 1 else ""
        lines = [f"hardware fit ({m.seconds:.1f} s of measuring{' on ' + m.engine if m.engine else ''}{again}):"]
        for name, t in m.types.items():
            lines.append(f"  {name}: request prefill {t.suffix_tokens} of {t.prompt_tokens} prompt tokens "
                         f"{t.prefill_s * 1e3:.1f} ms, decode {t.decode_s * 1e3:.1f} ms/token at batch 1; first "
                         f"segment {self.first_segment_tokens[name]} tokens -> {self.first_segment_s[name]:.3f} s, "
                         f"G {self.segment_gen_time_s[name]:.3f} s (mean segment {self.segment_tokens[name]} tokens)")
        steps = ", ".join(f"B={b} {s * 1e3:.1f} ms" for b, s in sorted(m.batch_decode_s.items()))
        lines.append(f"  decode steps {steps}: decode_seq_ratio {self.decode_seq_ratio:.3f}; token_time_s "
                     f"{self.token_time_s * 1e3:.1f} ms, prefill_token_s {self.prefill_token_s * 1e3:.2f} ms")
        return lines


def profile_measurements(latency: LatencyModel, prompts: Mapping[str, tuple[int, int]],
                         plans: Mapping[str, Sequence[PlanShape]], max_segment_tokens: Mapping[str, int],
                         batch: int) -> Measurements:
    """What measuring an engine that follows ``latency`` would give (the simulator's policies get the fit of their
    latency model as the server's get the fit of its engine): per robot type, ``prompts`` (prompt tokens, of which a
    prefix cache supplies) and its worked examples' ``plans``; the batch at the longest prompt."""
    types = {}
    for name, (tokens, cached) in prompts.items():
        suffix = max(tokens - min(cached, tokens - 1), 1)
        types[name] = TypeTiming(prompt_tokens=tokens, suffix_tokens=suffix,
                                 prefill_s=latency.step_s([(suffix, tokens)], 0, 0),
                                 decode_s=latency.decode_s(1, tokens + 1), plans=tuple(plans.get(name, ())),
                                 max_segment_tokens=max_segment_tokens.get(name, 1))
    ctx = max(tokens for tokens, _ in prompts.values()) + 1
    return Measurements(types=types, batch_decode_s={b: latency.decode_s(b, b * ctx) for b in {1, batch}},
                        engine="latency model")


def seq_ratio(batch_decode_s: Mapping[int, float]) -> float:
    """r of t_B = t_1 (1 + r (B - 1)), least squares through the origin over the batch sizes above 1 (>= 0)."""
    t1 = batch_decode_s.get(1)
    pairs = [(b - 1, s / t1 - 1.0) for b, s in batch_decode_s.items() if b > 1] if t1 else []
    if not pairs:
        return 0.0
    return max(sum(x * y for x, y in pairs) / sum(x * x for x, _ in pairs), 0.0)


def derive(measured: Measurements) -> HardwareFit:
    """The fit of these measurements (formulas in the module docstring)."""
    if not measured.types:
        raise ValueError("hardware fit: nothing was measured (no robot types)")
    gen, first_s, first_n, seg_n = {}, {}, {}, {}
    for name, t in measured.types.items():
        plans = t.plans or (PlanShape((t.max_segment_tokens,)),)
        n_first = math.ceil(statistics.mean(p.segment_tokens[0] for p in plans))
        first_n[name] = n_first
        seg_n[name] = math.ceil(statistics.mean(n for p in plans for n in p.segment_tokens))
        first_s[name] = t.prefill_s + (n_first - 1) * t.decode_s
        gen[name] = (sum(t.prefill_s + (p.tokens - 1) * t.decode_s for p in plans)
                     / sum(len(p.segment_tokens) for p in plans))
    suffix = sum(t.suffix_tokens for t in measured.types.values())
    return HardwareFit(
        measured=measured, segment_gen_time_s=gen, first_segment_s=first_s, first_segment_tokens=first_n,
        segment_tokens=seg_n, token_time_s=max(t.decode_s for t in measured.types.values()),
        prefill_token_s=sum(t.prefill_s for t in measured.types.values()) / max(suffix, 1),
        decode_seq_ratio=seq_ratio(measured.batch_decode_s))


@dataclass(frozen=True)
class UnmetClass:
    """An urgency class whose ERT is shorter than one first segment takes on this engine, for some robot types."""

    name: str
    tuf: TimeUtility
    takes_s: dict[str, float] = field(default_factory=dict)   # robot type -> first segment + network delay

    @property
    def slowest_s(self) -> float:
        return max(self.takes_s.values())

    def message(self) -> str:
        """e.g. "urgent: ERT 0.20 s, one drone first segment takes 0.45 s on this engine (arm 0.52 s); ..."."""
        (first, t), *rest = sorted(self.takes_s.items(), key=lambda kv: -kv[1])
        others = f" ({', '.join(f'{n} {s:.2f} s' for n, s in rest)})" if rest else ""
        late = ("every request of it will be DROPPED" if t >= self.tuf.zero_crossing() and not self.tuf.serves_late
                else "its plans come late, with less utility")
        return (f"{self.name}: ERT {self.tuf.ert:.2f} s, one {first} first segment takes {t:.2f} s on this engine"
                f"{others}: {late}")


def unmet_classes(classes: Mapping[str, TimeUtility], first_segment_s: Mapping[str, float],
                  network_delay_s: float) -> list[UnmetClass]:
    """The classes some robot type's first segment (+ the network delay) cannot meet; a class whose utility never
    falls (alpha 0) is always met."""
    out = []
    for name, tuf in classes.items():
        if tuf.alpha == 0:
            continue
        slow = {rt: s + network_delay_s for rt, s in first_segment_s.items() if s + network_delay_s > tuf.ert}
        if slow:
            out.append(UnmetClass(name, tuf, slow))
    return out


def scale_classes(classes: Mapping[str, TimeUtility], unmet: Sequence[UnmetClass],
                  factor: float) -> tuple[dict[str, TimeUtility], list[str]]:
    """The classes with each unmet one's time axis stretched so that its ERT becomes ``factor`` x its slowest first
    segment (a class with ERT 0: its zero crossing), and a line per class saying what changed."""
    if factor < 1.0:
        raise ValueError(f"the scale factor must be >= 1 (an ERT below one first segment stays unmet), got {factor}")
    out, lines = dict(classes), []
    for u in unmet:
        tuf = u.tuf
        target = factor * u.slowest_s
        stretch = target / tuf.ert if tuf.ert > 0 else target / tuf.zero_crossing()
        scaled = replace(tuf, ert=tuf.ert * stretch if tuf.ert > 0 else 0.0, alpha=tuf.alpha / stretch)
        out[u.name] = scaled
        lines.append(f"urgency class {u.name!r} scaled x{stretch:.2f} to fit this engine ({factor:g} x its slowest "
                     f"first segment, {u.slowest_s:.2f} s): ERT {tuf.ert:.2f} -> {scaled.ert:.2f} s, alpha "
                     f"{tuf.alpha:g} -> {scaled.alpha:.3g}, zero crossing {tuf.zero_crossing():.2f} -> "
                     f"{scaled.zero_crossing():.2f} s (beta {tuf.beta:g}, late: {tuf.late})")
    return out, lines


@dataclass(frozen=True)
class ClassCheck:
    """The urgency classes against the fit: what configure logs and /diagnostics shows."""

    classes: dict[str, TimeUtility]   # the classes to serve (the unmet ones scaled when asked)
    unmet: list[UnmetClass]           # before any scaling
    scaled: list[str]                 # one line per class scaled
    warnings: list[str]               # the unmet classes left as configured (WARN in the log and on /diagnostics)

    def diagnostic_values(self, fit: HardwareFit) -> dict[str, str]:
        """Key-values for /diagnostics: each robot type's first segment and G measured here, and the classes."""
        values = {f"fit {rt} first segment": f"{s:.3f} s ({fit.first_segment_tokens[rt]} tokens at batch 1)"
                  for rt, s in fit.first_segment_s.items()}
        values.update({f"fit {rt} G": f"{s:.3f} s" for rt, s in fit.segment_gen_time_s.items()})
        values.update({f"urgency class {n}": f"ERT {t.ert:.2f} s, alpha {t.alpha:.3g}, beta {t.beta:g}, late "
                                             f"{t.late}" for n, t in self.classes.items()})
        return values


def check_classes(classes: Mapping[str, TimeUtility], fit: HardwareFit, network_delay_s: float,
                  scale_factor: float = 0.0) -> ClassCheck:
    """Which classes this engine cannot meet; with ``scale_factor`` > 0 those are scaled (scale_classes) instead of
    left to be warned about."""
    unmet = unmet_classes(classes, fit.first_segment_s, network_delay_s)
    if scale_factor > 0 and unmet:
        scaled_classes, lines = scale_classes(classes, unmet, scale_factor)
        return ClassCheck(scaled_classes, unmet, lines, [])
    warnings = [f"urgency class {u.message()} (scale_unmet_classes scales such classes to this engine, or give it "
                "a longer ERT in urgency_classes_file)" for u in unmet]
    return ClassCheck(dict(classes), unmet, [], warnings)
