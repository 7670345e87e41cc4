"""The served model's side of benchmarks/ros_burst.py: each burst trace's plan as the model writes it alone, and the
simulator set up as the server sets itself up for that model.

    served = ServedModel.load("smollm2", workload)     # or "embedded"

- plans: each trace's plan written alone, greedy, the way the server prompts the model (the embedded planner's raw
  prompt; a chat model's system prompt and examples through its chat template, under its skill grammar when its
  entry says so), with its prompt length and the tokens its prefix cache supplies (a chat model's shared system
  prompt, cached at start-up by the server's warm-up);
- the simulator counts tokens as the model does (a chat model's own tokenizer: SmolLM2 writes numbers digit by
  digit) and prefills only each robot type's uncached suffix;
- the policies get the hardware fit of the latency profile (core/fit.py profile_measurements), as the server's get
  the fit of its engine at configure;
- classes(): the urgency classes the run uses on both sides: the configured ones, each a first segment cannot meet
  on the profile scaled by --class-scale (core/fit.py scale_classes), written to a file the server loads, so that
  ROS and simulator score the same time utilities.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from timely_llm_ros.core.fit import HardwareFit, PlanShape, derive, plan_shapes, profile_measurements, scale_classes
from timely_llm_ros.core.fit import unmet_classes
from timely_llm_ros.core.tuf import TimeUtility
from timely_llm_ros.evaluation.workload import Workload

NETWORK_DELAY_S = 0.008


class ModelTokens:
    """A real model's tokenizer in the simulator's tokenizer interface (SimEngine): token counts as the model's."""

    pad_id = 0

    def __init__(self, tokenizer) -> None:
        self._tok = tokenizer
        self.eos_id = tokenizer.eos_token_id

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)

    def decode(self, ids) -> str:
        return self._tok.decode([i for i in ids if i != self.eos_id])

    def stream(self):
        from timely_llm_ros.core.engine import PrefixDiffStream

        table = getattr(self._tok, "byte_table", None)
        return table.stream() if table is not None else PrefixDiffStream(self.decode)

    def count(self, text: str) -> int:
        return len(self.encode(text))


@dataclass
class ServedModel:
    name: str
    skill_sets: dict                         # limits in the model's tokens (engine/model_setup.py)
    plans: dict[int, dict]                   # trace id -> prompt_tokens, cached_tokens, tokens, seconds, valid, plan
    cached: dict[str, int]                   # robot type -> prompt tokens its prefix cache supplies
    shapes: dict[str, list[PlanShape]]       # robot type -> its worked examples' segments in the model's tokens
    tokens: ModelTokens | None = None        # None: the simulator's own tokenizer (the embedded planner's runs)
    prompt_tokens: dict[str, int] = field(default_factory=dict)   # robot type -> a request's prompt length

    @classmethod
    def load(cls, name: str, workload: Workload) -> "ServedModel":
        """Load the model as the server does (one torch thread) and write each trace's plan alone (a second, warm
        pass is the one kept)."""
        import torch

        from timely_llm_ros.core.models import model_spec
        from timely_llm_ros.core.skills import load_skill_sets
        from timely_llm_ros.engine.factory import make_engine
        from timely_llm_ros.engine.model_setup import model_setup, setup_engine_options
        from timely_llm_ros.engine.models import weights_folder
        from timely_llm_ros.stack import warm_up

        torch.set_num_threads(1)
        spec = model_spec(name)
        engine = make_engine("transformers", str(weights_folder(spec)), device="cpu", dtype=spec.dtype,
                             num_threads=1, **setup_engine_options(spec))
        setup = model_setup(spec, engine, load_skill_sets())
        for prompt in setup.warm_up_prompts():
            warm_up(engine, prompt)
        skill_sets = setup.skill_sets
        cached = {n: setup.prompts.shared_tokens(ss) if spec.prefix_cache_size_mb() > 0 else 0
                  for n, ss in skill_sets.items()}
        plans = {}
        for _ in range(2):
            plans = {tid: _write_plan(engine, setup, spec.grammar, next(t for t in workload.tasks if t.trace_id == tid))
                     for tid in sorted({t.trace_id for t in workload.tasks})}
        for tid, p in plans.items():
            p["cached_tokens"] = cached[p["robot_type"]]
        tokens = ModelTokens(engine.tokenizer) if spec.chat_template else None
        shapes = {n: plan_shapes(ss, engine.encode) for n, ss in skill_sets.items()}
        prompt_tokens = {n: len(setup.prompts(ss, ex.task, ex.scene)) for n, ss in skill_sets.items()
                         for ex in ss.examples[:1]}
        engine.close()
        return cls(name, skill_sets, plans, cached, shapes, tokens, prompt_tokens)

    def fit(self, latency, max_batch: int) -> HardwareFit:
        """The hardware fit of the latency profile for this model's robot types (their example requests)."""
        prompts = {n: (t, self.cached.get(n, 0)) for n, t in self.prompt_tokens.items()}
        caps = {n: ss.max_segment_tokens for n, ss in self.skill_sets.items()}
        return derive(profile_measurements(latency, prompts, self.shapes, caps, min(max_batch, 8)))

    def classes(self, latency, max_batch: int, configured: dict[str, TimeUtility],
                scale: float) -> tuple[dict[str, TimeUtility], list[str]]:
        """The configured classes, each one a first segment cannot meet on the profile scaled by ``scale``."""
        fit = self.fit(latency, max_batch)
        unmet = unmet_classes(configured, fit.first_segment_s, NETWORK_DELAY_S)
        return scale_classes(configured, unmet, scale) if unmet and scale > 0 else (dict(configured), [])

    def simulator(self, policy, latency, seed: int, time_scale: float, classes: dict[str, TimeUtility]):
        """A Simulator of this model on ``latency``: its token counts, its prompts' cached prefixes."""
        from timely_llm_ros.evaluation.sim.clock import VirtualClock
        from timely_llm_ros.evaluation.sim.sim_engine import SimEngine
        from timely_llm_ros.evaluation.sim.simulator import Simulator

        clock = VirtualClock()
        engine = SimEngine(latency, clock, tokenizer=self.tokens) if self.tokens is not None else None
        return Simulator(policy, latency, skill_sets=self.skill_sets, urgency_classes=classes, seed=seed,
                         engine=engine, clock=clock, time_scale=time_scale, network_delay_s=NETWORK_DELAY_S,
                         cached_prefix_tokens=self.cached)

    def with_plans(self, workload: Workload) -> Workload:
        """The workload with each task's plan and prompt length as this model writes them."""
        return replace(workload, tasks=[replace(t, plan=self.plans[t.trace_id]["plan"],
                                                prompt_tokens=self.plans[t.trace_id]["prompt_tokens"])
                                        for t in workload.tasks])


def _write_plan(engine, setup, grammar: bool, task) -> dict:
    """One task's plan written alone, greedy, as the server prompts (and constrains) it."""
    from timely_llm_ros.core.skills.grammar import plan_grammar
    from timely_llm_ros.engine.benchkit import generate_alone

    ss = setup.skill_sets[task.robot_type]
    prompt = setup.prompts(ss, task.task, task.context)
    text, tokens, seconds = generate_alone(engine, prompt, ss.max_plan_tokens,
                                           grammar=plan_grammar(ss) if grammar else None)
    text = text.strip()
    return {"robot_type": task.robot_type, "prompt_tokens": len(prompt), "tokens": tokens, "seconds": seconds,
            "valid": not ss.validate_plan(text), "plan": text}


def write_classes(classes: dict[str, TimeUtility], path: Path) -> Path:
    """An urgency classes file (config/urgency_classes.yaml's format) the server loads with urgency_classes_file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({n: {"ert": t.ert, "alpha": t.alpha, "beta": t.beta, "late": t.late}
                                    for n, t in classes.items()}, sort_keys=False))
    return path
