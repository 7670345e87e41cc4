"""The composition root: engine + model setup + hardware fit + policy + scheduler from typed options, in one call.

    stack = build_stack(StackOptions(model=model_spec("smollm2"), engine=EngineChoice("transformers"),
                                     policy=PolicyChoice("timely", max_batch=8, network_delay_s=0.008)),
                        robot_types.skill_sets, robot_types.exec_models)
    stack.scheduler.submit(...)
    stack.switch_policy("timebill").apply(stack.scheduler)     # a live change, on the scheduler's thread

The server (ros/), the benchmarks and the tools compose through here; the core half (policy, the engine as the
policy drives it, scheduler, live change) is core/composition.py, which the simulator uses with its own engine.
torch is imported only when an engine is loaded (engine/factory.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from timely_llm_ros.core.composition import PolicyChoice, PolicySwitch, build_policy, build_scheduler, switch_policy
from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.fit import ClassCheck, HardwareFit
from timely_llm_ros.core.models import ModelSpec
from timely_llm_ros.core.policies import Policy
from timely_llm_ros.core.scheduler import Clock, PlanScheduler, SchedulerConfig
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES, TimeUtility
from timely_llm_ros.engine.model_setup import ModelSetup, model_setup, setup_engine_options


@dataclass(frozen=True)
class EngineChoice:
    """Which engine runs the model, and how."""

    kind: str = ""                           # engine/factory.py make_engine: transformers | vllm | llamacpp; "": the
                                             # model entry's (ModelSpec.engine_kind)
    device: str = "auto"
    dtype: str = "auto"                      # auto: the model entry's
    kv_budget_mb: float | None = None        # device KV budget (None: unbounded; vLLM: its pool's default)
    num_threads: int | None = None           # torch CPU threads (None: torch's default)
    own_process: bool = False                # run the engine in a child process (engine/process_engine.py)
    options: Mapping[str, Any] = field(default_factory=dict)   # other make_engine keywords (sampling, vllm_*, ...)


@dataclass(frozen=True)
class FitChoice:
    """The hardware fit (core/fit.py): measure the loaded model here, derive the policies' step times from it and
    check the urgency classes against it."""

    enabled: bool = True
    scale_unmet_classes: float = 0.0         # > 0: scale classes this engine cannot meet by this factor


@dataclass(frozen=True)
class StackOptions:
    """Everything the composition root needs besides the robot types."""

    model: ModelSpec                         # the model entry (config/models.yaml)
    engine: EngineChoice = EngineChoice()
    policy: PolicyChoice = PolicyChoice()
    scheduler: SchedulerConfig = SchedulerConfig()
    fit: FitChoice = FitChoice(enabled=False)
    urgency_classes: Mapping[str, TimeUtility] = field(default_factory=lambda: dict(DEFAULT_URGENCY_CLASSES))
    warm_up: bool = True                     # one short generation per prompt format before the first request
    examples_in: str | None = None           # overrides every skill set's prompt_examples (turns | system)
    model_cache_dir: str = ""                # prepared models (paths.model_cache_dir; "": its default)
    progress: Callable[[str], None] | None = None   # lines of a model prepared at first use (a GGUF conversion)


@dataclass
class Stack:
    """What build_stack composed. ``engine`` is the engine as loaded; the scheduler drives it as its policy does."""

    options: StackOptions
    engine: Engine
    setup: ModelSetup
    policy: Policy
    scheduler: PlanScheduler
    urgency_classes: Mapping[str, TimeUtility]   # after the fit's check (scaled where asked)
    fit: HardwareFit | None = None
    class_check: ClassCheck | None = None

    def report(self) -> list[tuple[str, str]]:
        """(level, line) for the configure log: the model setup, the hardware fit and the urgency classes against
        it (level "info" or "warning")."""
        engine = self.engine
        about = engine.describe()
        lines = [("info", f"engine {self.options.engine.kind} ({type(engine).__name__}){': ' if about else ''}{about}")]
        lines += [("info", line) for line in self.setup.describe(self.options.engine.kind)]
        lines += [("warning", line) for line in self.setup.warnings]
        if self.fit is None or self.class_check is None:
            return lines + [("info", "hardware_fit is false: the policies use the configured step-time constants and "
                                     "the urgency classes are not checked against this engine")]
        lines += [("info", line) for line in self.fit.describe()]
        scale = self.options.fit.scale_unmet_classes
        lines += [("warning", f"{line} (scale_unmet_classes={scale:g}; goals with their own ert/alpha/beta are not "
                              "changed)") for line in self.class_check.scaled]
        lines += [("warning", line) for line in self.class_check.warnings]
        if not self.class_check.unmet:
            lines.append(("info", f"every urgency class can be met on this engine "
                                  f"({', '.join(self.options.urgency_classes)})"))
        return lines

    def fitted_options(self) -> dict[str, Any]:
        return self.fit.policy_options() if self.fit is not None else {}

    def switch_policy(self, name: str, max_batch: int | None = None) -> PolicySwitch:
        """A live change to policy ``name`` (at ``max_batch``, default the configured one), composed as build_stack
        composes one (ValueError on an unknown name); apply it on the scheduler's thread."""
        choice = self.options.policy.named(name)
        if max_batch is not None:
            choice = replace(choice, max_batch=max_batch)
        return switch_policy(self.engine, choice, self.setup.skill_sets, self.fitted_options())


def engine_kind(spec: ModelSpec, choice: EngineChoice) -> str:
    """The engine that runs the entry: the choice's, else the entry's own (a GGUF file: llamacpp)."""
    return choice.kind or spec.engine_kind()


def weights_location(spec: ModelSpec, kind: str, model_cache_dir: str = "",
                     progress: Callable[[str], None] | None = None) -> str:
    """What the engine loads: the GGUF file itself for llamacpp, else the entry's HF folder (a GGUF entry not
    prepared yet in the model cache is converted into one first, reporting to progress: engine/models.py). An
    entry's adapter is checked against the base it was trained on (AdapterMismatch names both) on every engine."""
    if kind == "llamacpp":
        if spec.gguf is None:
            raise ValueError(f"model {spec.name!r} is a folder ({spec.path}); engine llamacpp serves GGUF files: use "
                             "engine transformers or vllm for it")
        if spec.adapter:        # its base's identity needs the HF folder (converted once into the model cache)
            from timely_llm_ros.adapt.adapter import check_adapter
            from timely_llm_ros.engine.models import weights_folder

            folder = weights_folder(spec, cache_dir=model_cache_dir or None, progress=progress)
            check_adapter(spec.adapter_folder(), folder, spec.name)    # a mismatch fails before the model loads
        from timely_llm_ros.engine.llamacpp.tokenizer import tokenizer_folder
        from timely_llm_ros.engine.models import check_writable

        gguf = spec.gguf.locate()
        tokenizer = tokenizer_folder(gguf, model_cache_dir or None)
        if not (tokenizer / "tokenizer_config.json").is_file():
            check_writable(tokenizer.parent, spec.name)     # the engine builds it there: fail before the model loads
        return str(gguf)
    from timely_llm_ros.engine.models import weights_folder

    folder = weights_folder(spec, cache_dir=model_cache_dir or None, progress=progress)
    if spec.adapter:
        from timely_llm_ros.adapt.adapter import check_adapter

        check_adapter(spec.adapter_folder(), folder, spec.name)      # a mismatch fails before the model loads
    return str(folder)


def load_engine(spec: ModelSpec, choice: EngineChoice, model_cache_dir: str = "",
                progress: Callable[[str], None] | None = None) -> Engine:
    """The model entry's weights on the chosen engine, with the entry's engine options (its prefix cache)."""
    if choice.own_process:
        from timely_llm_ros.engine.process_engine import ProcessEngine as make_engine
    else:
        from timely_llm_ros.engine.factory import make_engine
    kind = engine_kind(spec, choice)
    dtype = choice.dtype if choice.dtype not in ("", "auto") else spec.dtype
    location = weights_location(spec, kind, model_cache_dir, progress)
    options = dict(choice.options)
    if kind == "llamacpp" and model_cache_dir:
        options["llamacpp_model_cache_dir"] = model_cache_dir
    return make_engine(kind, location, device=choice.device, dtype=dtype,
                       kv_budget_mb=choice.kv_budget_mb, num_threads=choice.num_threads, **options,
                       **setup_engine_options(spec))


def warm_up(engine: Engine, prompt_ids: list[int], tokens: int = 4) -> None:
    """Run one short generation so the first robot's request does not pay one-time start-up costs (and, with a
    prefix cache, finds its robot type's system prompt cached)."""
    engine.add("__warm_up__", prompt_ids, tokens)
    try:
        for _ in range(tokens):
            if engine.step(["__warm_up__"]).finished:
                break
    finally:
        engine.release("__warm_up__")


def engine_provided(choice: PolicyChoice) -> PolicyChoice:
    """``choice`` with what the engine layer offers every policy: the semantic policy's text urgency classifier
    (MiniLM, loaded when first asked), unless the choice provides its own."""
    from timely_llm_ros.engine.sentence_encoder import LazyUrgencyClassifier

    return replace(choice, provided={"classifier": LazyUrgencyClassifier(), **choice.provided})


def build_stack(options: StackOptions, skill_sets: Mapping[str, Any], exec_models: Mapping[str, Any],
                clock: Clock = time.monotonic, plan_rule: Callable[[str], str] = lambda robot: "queue",
                engine: Engine | None = None) -> Stack:
    """Load the engine (unless given), compose the model entry with it, warm it up, measure the hardware fit
    (when chosen), then build the policy and the scheduler over them. A bad option fails before the model loads
    where it can (the policy's name and options are checked first)."""
    options = replace(options, policy=engine_provided(options.policy),
                      engine=replace(options.engine, kind=engine_kind(options.model, options.engine)))
    build_policy(options.policy, skill_sets)          # fail fast on a bad policy name or option
    if engine is None:
        engine = load_engine(options.model, options.engine, options.model_cache_dir, options.progress)
    setup = model_setup(options.model, engine, skill_sets, options.examples_in)
    if options.warm_up:
        for prompt in setup.warm_up_prompts():
            warm_up(engine, prompt)
    fit, check, classes = None, None, options.urgency_classes
    if options.fit.enabled:
        from timely_llm_ros.engine.hardware_fit import fit_engine

        fit, check = fit_engine(engine, setup.skill_sets, setup.prompts, options.urgency_classes,
                                options.policy.network_delay_s or 0.0, options.policy.max_batch,
                                options.fit.scale_unmet_classes)
        classes = check.classes
    policy = build_policy(options.policy, setup.skill_sets, fit.policy_options() if fit is not None else None)
    scheduler = build_scheduler(engine, policy, setup.skill_sets, exec_models, clock, options.scheduler, plan_rule,
                                prompts=setup.prompts)
    return Stack(options, engine, setup, policy, scheduler, classes, fit, check)
