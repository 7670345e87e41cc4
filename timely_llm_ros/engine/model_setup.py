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
from timely_llm_ros.core.prompting import ChatPrompts, EncodeChat, PromptEncoder, RawPrompts
from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.token_limits import (EffectiveLimits, Encode, effective_limits, short_limit_warnings,
                                              with_limits)
from timely_llm_ros.core.engine import Engine


@functools.lru_cache(maxsize=1)
def reference_encode() -> Encode:
    """encode() of the tokenizer the skill sets' limits are counted in: the embedded planner's."""
    from timely_llm_ros.paths import default_model_dir
    from timely_llm_ros.engine.tokenizer import load_tokenizer

    return load_tokenizer(default_model_dir()).encode


def setup_engine_options(spec: ModelSpec) -> dict:
    """What make_engine takes from the model entry: the prefix cache's size (the vLLM engine ignores it: it has its
    own prefix caching) and its adapter (merged into the weights when the model loads)."""
    options: dict = {"prefix_cache_mb": spec.prefix_cache_size_mb() or None}
    adapter = spec.adapter_folder()
    if adapter is not None:
        options["adapter"] = str(adapter)
    return options


@dataclass
class ModelSetup:
    """What the scheduler and the policy need from a model entry once its engine is loaded."""

    spec: ModelSpec
    prompts: PromptEncoder
    skill_sets: dict[str, SkillSet]         # limits counted in this model's tokens
    limits: dict[str, EffectiveLimits]
    kv_bytes_per_token: float
    notes: tuple[str, ...] = ()             # what the composer had to decide against the entry (logged)
    warnings: tuple[str, ...] = ()          # what a team should act on (logged as warnings)

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


def prompt_encoder(spec: ModelSpec, has_chat_template: bool, encode_chat: EncodeChat, encode: Encode,
                   bos_id: int | None, examples_in: str | None = None) -> tuple[PromptEncoder, list[str]]:
    """The prompt format of a model entry on its tokenizer, and notes on what had to be decided against the entry:
    chat prompts when the entry asks for them and the tokenizer has a template, else the raw planner prompt. The
    server (model_setup) and the adapter trainer (adapt/train.py) both build prompts through here, so an adapter
    is trained on exactly the prompts it serves."""
    notes: list[str] = []
    if spec.chat_template and has_chat_template:
        return ChatPrompts(encode_chat, add_bos=spec.add_bos, examples_in=examples_in), notes
    if spec.chat_template:
        notes.append(f"model {spec.name}: chat_template is true but its tokenizer has no chat template: using the "
                     "raw planner prompt (set chat_template: false in its entry to say so)")
    if spec.add_bos and bos_id is None:
        notes.append(f"model {spec.name}: add_bos is true but its tokenizer has no BOS token: none added")
    return RawPrompts(encode, bos_id if spec.add_bos else None), notes


def adapter_notes(spec: ModelSpec, skill_sets: Mapping[str, SkillSet], prompts: PromptEncoder) -> list[str]:
    """Configure-log lines on the entry's adapter: the robot types it was trained for, those it was not, and any
    whose prompt changed since it was trained (its skill set edited: retrain)."""
    folder = spec.adapter_folder()
    if folder is None:
        return []
    from timely_llm_ros.adapt.adapter import AdapterInfo, robot_prompt_digest

    info = AdapterInfo.read(folder)
    trained = [n for n in skill_sets if n in info.robot_types]
    lines = [f"model {spec.name}: adapter {folder} (trained for {', '.join(info.robot_types)}) in use (merged into "
             "the weights on transformers and vLLM, applied as a LoRA GGUF on llamacpp)"]
    others = [n for n in skill_sets if n not in info.robot_types]
    if others:
        lines.append(f"adapter: robot types it was not trained for: {', '.join(others)} (they get the adapted model "
                     "as it is)")
    changed = [n for n in trained if robot_prompt_digest(skill_sets[n], prompts) != info.robot_types[n]]
    if changed:
        lines.append(f"adapter: the prompt of {', '.join(changed)} changed since the adapter was trained (skill set "
                     f"edited?): retrain it with make adapt MODEL={spec.name} ROBOT={','.join(info.robot_types)}")
    return lines


def interrupts_instead(engine: Engine) -> str:
    """What an engine gives instead of layer-level interrupts, in words."""
    if engine.capabilities.interrupt_granularity == "graph-node":
        poll = engine.capabilities.interrupt_poll_s
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
    prompts, notes = prompt_encoder(spec, engine.has_chat_template(), engine.encode_chat, engine.encode,
                                    engine.bos_token_id, examples_in)
    notes += adapter_notes(spec, skill_sets, prompts)
    if spec.interrupts == "layer" and engine.capabilities.interrupt_granularity != "layer":
        notes.append(f"model {spec.name}: interrupts: layer asks for steps cut short between decoder layers, which "
                      f"{type(engine).__name__} cannot do: {interrupts_instead(engine)}")
    limits = effective_limits(spec, skill_sets, engine.encode, encode_reference or reference_encode())
    return ModelSetup(spec, prompts, with_limits(skill_sets, limits), limits,
                      float(engine.memory().kv_bytes_per_token), tuple(notes),
                      untrained_warnings(spec, skill_sets) + short_limit_warnings(limits, skill_sets, engine.encode))


def untrained_warnings(spec: ModelSpec, skill_sets: Mapping[str, SkillSet]) -> tuple[str, ...]:
    """A model trained only on some robot types' plans (the entry's robot_types) cannot plan for the others: it
    never saw their skills (grounded decoding keeps its plans to them, but not to the task)."""
    others = [n for n in skill_sets if spec.robot_types and n not in spec.robot_types]
    if not others:
        return ()
    return (f"model {spec.name} was trained only on {', '.join(spec.robot_types)} plans: for {', '.join(others)} it "
            "has never seen the skills, so expect GENERATION_FAILED or plans that do not do the task; serve those "
            "robots with an instruct model (model:=smollm2, or a team's own in config/models.yaml), adapted to "
            "their skill set with make adapt (docs/robots.md)",)
