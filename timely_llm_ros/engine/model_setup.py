"""A model entry composed with its engine: prompt format, plan-length limits in its tokens, prefix cache.

The composition root (timely_llm_ros/stack.py build_stack) calls it between loading the engine and building the
policy and scheduler; the server, the simulator on a real engine and the benchmarks compose through that root.

Torch-free itself (the engine is passed in); the reference tokenizer of the skill sets' limits (the embedded
planner's) is loaded from the package when a model's limits must be converted.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping

from timely_llm_ros.core.models import ModelSpec
from timely_llm_ros.core.prompting import ChatPrompts, PromptEncoder, RawPrompts
from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.token_limits import EffectiveLimits, Encode, effective_limits, with_limits
from timely_llm_ros.core.engine import Engine


@functools.lru_cache(maxsize=1)
def reference_encode() -> Encode:
    """encode() of the tokenizer the skill sets' limits are counted in: the embedded planner's."""
    from timely_llm_ros.paths import default_model_dir
    from timely_llm_ros.engine.tokenizer import load_tokenizer

    return load_tokenizer(default_model_dir()).encode


def setup_engine_options(spec: ModelSpec) -> dict:
    """What make_engine takes from the model entry: the prefix cache's size (the vLLM engine ignores it: it has its
    own prefix caching)."""
    return {"prefix_cache_mb": spec.prefix_cache_size_mb() or None}


@dataclass
class ModelSetup:
    """What the scheduler and the policy need from a model entry once its engine is loaded."""

    spec: ModelSpec
    prompts: PromptEncoder
    skill_sets: dict[str, SkillSet]         # limits counted in this model's tokens
    limits: dict[str, EffectiveLimits]
    kv_bytes_per_token: float
    notes: tuple[str, ...] = ()             # what the composer had to decide against the entry (logged)

    def warm_up_prompts(self) -> list[list[int]]:
        """Prompts to run once at start-up: every robot type's with a chat template (each one's shared system
        prompt is then cached before its first request), else the first robot type's (start-up costs only)."""
        names = list(self.skill_sets) if self.prompts.chat else list(self.skill_sets)[:1]
        return [self.prompts(self.skill_sets[n], "warm up", "") for n in names]

    def describe(self, engine_kind: str = "transformers") -> list[str]:
        """Lines for the configure log: prompt format, BOS, prefix cache, limits per robot type."""
        spec = self.spec
        if self.prompts.chat:
            where = getattr(self.prompts, "examples_in", None) or "each skill set's prompt_examples"
            fmt = f"chat template ON (worked examples: {where}), BOS {'added' if spec.add_bos else 'not added'}"
        else:
            fmt = "chat template OFF: the raw planner prompt (<robot> scene task plan:)"
        lines = [f"model {spec.name}: {fmt}; grammar by default {'on' if spec.grammar else 'off'}", *self.notes]
        size = spec.prefix_cache_size_mb()
        shared = {n: self.prompts.shared_tokens(ss) for n, ss in self.skill_sets.items()}
        need = sum(shared.values()) * self.kv_bytes_per_token / 2**20
        per_type = ", ".join(f"{n} {t}" for n, t in shared.items())
        if engine_kind == "vllm":
            lines.append(f"prefix caching: vLLM's own, block-granular (shared prompt tokens per robot type: "
                         f"{per_type})")
        elif size > 0:
            fits = "" if need <= size else f" -- TOO SMALL: raise prefix_cache_mb above {need:.0f} in the model entry"
            lines.append(f"prefix cache {size:.0f} MiB ({engine_kind} engine): shared prompt tokens per robot type: "
                         f"{per_type} ({need:.1f} MiB of KV in all){fits}")
        else:
            lines.append(f"prefix cache off (shared prompt tokens per robot type: {per_type})")
        lines += [f"limits {n}: {lim.describe()}" for n, lim in self.limits.items()]
        return lines


def interrupts_instead(engine: Engine) -> str:
    """What an engine gives instead of layer-level interrupts, in words."""
    granularity = getattr(engine, "interrupt_granularity", "step")
    if granularity == "graph-node":
        poll = getattr(getattr(engine, "runner", None), "poll_s", None)
        every = f"every {poll * 1e3:.1f} ms" if poll else "every few milliseconds"
        return (f"it asks interrupt_check {every} while a forward runs and ends the forward after the graph node in "
                "flight, so an urgent arrival waits up to that poll interval (plus one graph node) instead of one "
                "layer")
    return "an urgent arrival waits for the step in flight to end (step-level interrupts)"


def model_setup(spec: ModelSpec, engine: Engine, skill_sets: Mapping[str, SkillSet],
                examples_in: str | None = None, encode_reference: Encode | None = None) -> ModelSetup:
    """Compose the entry with its loaded engine: chat prompts when the entry asks for them and the tokenizer has a
    template (otherwise the raw planner prompt, with a note), the limits of each robot type in the model's tokens
    (core/token_limits.py). ``examples_in`` overrides every skill set's prompt_examples (turns | system);
    ``encode_reference`` the tokenizer the skill sets' limits are counted in (default: the embedded planner's)."""
    notes: list[str] = []
    prompts: PromptEncoder
    if spec.chat_template and engine.has_chat_template():
        prompts = ChatPrompts(engine.encode_chat, add_bos=spec.add_bos, examples_in=examples_in)
    else:
        if spec.chat_template:
            notes.append(f"model {spec.name}: chat_template is true but its tokenizer has no chat template: using the "
                         "raw planner prompt (set chat_template: false in its entry to say so)")
        bos = getattr(getattr(engine, "tokenizer", None), "bos_token_id", None) if spec.add_bos else None
        if spec.add_bos and bos is None:
            notes.append(f"model {spec.name}: add_bos is true but its tokenizer has no BOS token: none added")
        prompts = RawPrompts(engine.encode, bos)
    if spec.interrupts == "layer" and getattr(engine, "interrupt_granularity", "step") != "layer":
        notes.append(f"model {spec.name}: interrupts: layer asks for steps cut short between decoder layers, which "
                      f"{type(engine).__name__} cannot do: {interrupts_instead(engine)}")
    limits = effective_limits(spec, skill_sets, engine.encode, encode_reference or reference_encode())
    return ModelSetup(spec, prompts, with_limits(skill_sets, limits), limits,
                      float(engine.memory().kv_bytes_per_token), tuple(notes))
