#!/usr/bin/env python3
"""Plan quality of planner configurations over the labelled evaluation set (config/eval/), measured the way the
robot would live each plan: does it parse, run, name only what is in the scene, give the key objects their roles,
and achieve its task (docs/plan_quality.md).

    python benchmarks/plan_quality.py [--configs embedded,smollm2-grammar] [--split all|headline|dev|test|heldout]
        [--robot-types drone,arm] [--limit N] [--policy fcfs] [--max-batch 8] [--threads 1] [--out out/plan_quality]

Every plan comes through the server's own generation path: the engine the composition root (stack.py) builds for the
configuration's model entry (config/models.yaml), driven by core.scheduler.PlanScheduler under a non-dropping
policy with up to --max-batch generations per step, each goal validated as the server validates it (grounded and
constrained as the model entry and the goal say), as a dry run (no robot: every segment counts as executed the
moment it is generated). Segmentation, the plan-length caps and the error codes are exactly the server's.

Each plan is then run, segment by segment as the server sends it, through the robot's interpreter in every scene
variant of its task (built from the task's context and goal condition: evaluation/scene_builder.py) and judged by
the task's goal condition (evaluation/goal_checks.py). Headline figures are over the test and heldout splits.

Prints per configuration and robot type the headline rates, then writes <out>/tables.md (the headline, by split and
by kind), <out>/plans.csv (every plan with its measures and why it missed its goal) and <out>/summary.json.
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402

from timely_llm_ros.core.composition import PolicyChoice  # noqa: E402
from timely_llm_ros.core.errors import ErrorCode, RequestError  # noqa: E402
from timely_llm_ros.core.exec_time import load_exec_models  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.request import RequestState  # noqa: E402
from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, StateChanged  # noqa: E402
from timely_llm_ros.core.skills import SkillSet, load_skill_sets  # noqa: E402
from timely_llm_ros.core.urgency import load_urgency_classes  # noqa: E402
from timely_llm_ros.core.validation import GoalFields, validate_goal  # noqa: E402
from timely_llm_ros.evaluation.evalset import HEADLINE_SPLITS, SPLITS, EvalTask, load_eval_tasks  # noqa: E402
from timely_llm_ros.evaluation.goal_checks import MEASURES, GoalCheck, check_goal, goal_rates  # noqa: E402
from timely_llm_ros.evaluation.goals import Avoid  # noqa: E402
from timely_llm_ros.evaluation.plan_checks import PlanCheck, check_plan  # noqa: E402
from timely_llm_ros.paths import config_dir  # noqa: E402


@dataclass(frozen=True)
class Configuration:
    """A planner setup under evaluation: a model entry, the grammar switch and prompt options.

    grammar None keeps the model entry's default; True/False asks for it per request (the goal's ``unconstrained``
    field). prompt: attributes of every robot type's skill set that shape its prompt (today ``prompt_template``),
    set on copies for this configuration only.
    """

    name: str
    model: str
    grammar: bool | None = None
    prompt: Mapping[str, Any] = field(default_factory=dict)
    adapter: str | None = ""          # "": none; None: the model entry's (config/models.yaml adapter:); or a folder

    def spec(self):
        """The model entry with this configuration's adapter."""
        spec = model_spec(self.model)
        return spec if self.adapter is None else replace(spec, adapter=self.adapter)


# One line per configuration; a model entry of config/models.yaml with an adapter joins on its own (configurations()).
# A model entry's defaults (grammar, grounding) apply unless the configuration sets ``grammar``.
BUILT_IN = (
    Configuration("embedded", "embedded"),
    Configuration("smollm2-grammar", "smollm2-base", grammar=True),
    Configuration("smollm2-unconstrained", "smollm2-base", grammar=False),
    Configuration("smollm2-adapted", "smollm2", adapter=None),    # the entry as shipped: with its adapter
    # prompt variants of smollm2-grammar (choose on the dev split): the worked examples inside the system text
    # instead of as chat turns; no worked examples; only each robot type's first one
    Configuration("smollm2-grammar-examples-in-system", "smollm2-base", grammar=True, prompt={"prompt_examples": "system"}),
    Configuration("smollm2-grammar-no-examples", "smollm2-base", grammar=True, prompt={"examples": ()}),
    Configuration("smollm2-grammar-one-example", "smollm2-base", grammar=True, prompt={"examples": 1}),
)


def configurations(models_file: Path | None = None) -> dict[str, Configuration]:
    """The built-in configurations, and one per model entry that names an ``adapter`` (its own defaults)."""
    out = {c.name: c for c in BUILT_IN}
    path = models_file or config_dir() / "models.yaml"
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for name, entry in entries.items():
        served = any(c.model == name and c.adapter is None for c in out.values())
        if isinstance(entry, dict) and entry.get("adapter") and name not in out and not served:
            out[name] = Configuration(name, name, adapter=None)
    return out


CONFIGURATIONS = configurations()


@dataclass
class PlanRecord:
    """One task's plan under one configuration, with its outcome and checks."""

    config: str
    task: EvalTask
    plan: str
    error_code: str
    message: str
    tokens: int
    latency_s: float          # first engine step of the request to its end (nan if it never ran)
    check: PlanCheck          # the textual checks (evaluation/plan_checks.py)
    goal: GoalCheck           # run in the task's scenes and judged (evaluation/goal_checks.py)

    def row(self) -> dict[str, Any]:
        t, g = self.task, self.goal
        return {"config": self.config, "id": t.id, "robot_type": t.robot_type, "kind": t.kind, "split": t.split,
                "task": t.task, "scene": t.scene, "goal": json.dumps(t.goal.to_config()), "reference": t.plan,
                "plan": self.plan, "error_code": self.error_code, "message": self.message, "tokens": self.tokens,
                "latency_s": round(self.latency_s, 4), "parses": g.parses, "runs": g.runs,
                "hallucinated": "; ".join(g.hallucinated), "roles": "" if g.roles is None else g.roles,
                "achieved": g.achieved, "moved_toward": g.moved_toward, "why": g.why(),
                "robot_ended": " | ".join(f"{r.variant}: {r.ended_with}" for r in g.runs_by_variant),
                "keys": self.check.keys, "same_skills": self.check.same_skills, "exact": self.check.exact}


@dataclass
class Pass:
    """One configuration over one robot type's tasks."""

    config: str
    robot_type: str
    records: list[PlanRecord]
    wall_s: float

    def summary(self) -> dict[str, Any]:
        """Rates over the headline splits (test + heldout; a run of the dev split alone: over dev, ``over`` says
        which), per split and per kind (over the same splits), with the throughput figures and the error codes of
        requests that did not end NONE."""
        n = len(self.records)
        latencies = [r.latency_s for r in self.records if r.latency_s == r.latency_s]
        errors = Counter(r.error_code for r in self.records if r.error_code != ErrorCode.NONE.name)
        present = [split for split in SPLITS if any(r.task.split == split for r in self.records)]
        over = [split for split in present if split in HEADLINE_SPLITS] or present
        headline = [r for r in self.records if r.task.split in over]
        return {"config": self.config, "robot_type": self.robot_type, "n": n, "over": over,
                "headline": self.rates(headline), "avoid": self.rates([r for r in headline
                                                                       if isinstance(r.task.goal, Avoid)]),
                "splits": {split: self.rates([r for r in self.records if r.task.split == split]) for split in present},
                "kinds": {kind: self.rates(group) for kind, group in self.by_kind(headline).items()},
                "tokens_per_plan": statistics.fmean(r.tokens for r in self.records) if n else float("nan"),
                "s_per_plan": self.wall_s / n if n else float("nan"),
                "latency_s": statistics.fmean(latencies) if latencies else float("nan"),
                "wall_s": self.wall_s, "errors": dict(sorted(errors.items()))}

    @staticmethod
    def rates(records: Sequence[PlanRecord]) -> dict[str, Any]:
        return goal_rates([r.goal for r in records])

    @staticmethod
    def by_kind(records: Sequence[PlanRecord]) -> dict[str, list[PlanRecord]]:
        groups: dict[str, list[PlanRecord]] = {}
        for r in records:
            groups.setdefault(r.task.kind, []).append(r)
        return groups


def configured_skill_sets(config: Configuration) -> dict[str, SkillSet]:
    """The robot types' skill sets with the configuration's prompt options applied (copies)."""
    sets = load_skill_sets()
    if not config.prompt:
        return sets
    out: dict[str, SkillSet] = {}
    for name, skill_set in sets.items():
        unknown = [k for k in config.prompt if not hasattr(skill_set, k)]
        if unknown:
            raise SystemExit(f"configuration {config.name!r}: prompt options {unknown} are not skill-set fields")
        out[name] = copy.copy(skill_set)
        for key, value in config.prompt.items():
            if key == "examples" and isinstance(value, int):      # the first N of this robot type's examples
                value = skill_set.examples[:value]
            setattr(out[name], key, value)
    return out


def load_engine(config: Configuration, device: str, threads: int):
    """The engine the server would build for the configuration's model entry (the composition root's)."""
    from timely_llm_ros.stack import EngineChoice, load_engine as load

    return load(config.spec(), EngineChoice("transformers", device=device, num_threads=threads or None))


def goal_for(task: EvalTask, config: Configuration) -> GoalFields:
    """The Plan goal a robot would send for this task."""
    grammar = {} if config.grammar is None else {"unconstrained": not config.grammar}
    return GoalFields(agent_id=f"{task.robot_type}_eval", robot_type=task.robot_type, task=task.task,
                      context=task.scene, urgency_class=task.urgency, **grammar)


def make_scheduler(engine, config: Configuration, skill_sets: Mapping[str, SkillSet], policy: str,
                   max_batch: int) -> PlanScheduler:
    """A PlanScheduler as the server configures it (its defaults; no network delay: nothing is sent): the model
    entry's prompt format and its limits in the model's tokens, composed by the composition root on this engine."""
    from timely_llm_ros.stack import StackOptions, build_stack

    options = StackOptions(model=config.spec(), policy=PolicyChoice(policy, max_batch), warm_up=False)
    return build_stack(options, skill_sets, load_exec_models(), engine=engine).scheduler


def run_pass(scheduler: PlanScheduler, config: Configuration, tasks: Sequence[EvalTask],
             progress: Callable[[int, int], None] | None = None) -> Pass:
    """Submit every task at once, step the scheduler until all have ended, execute segments instantly."""
    skill_sets, classes = scheduler.skill_sets, load_urgency_classes()
    by_id = {t.id: t for t in tasks}
    started: dict[str, float] = {}
    records: list[PlanRecord] = []

    def record(task: EvalTask, plan: str, code: ErrorCode, message: str, tokens: int, end: float) -> None:
        latency = end - started[task.id] if task.id in started else float("nan")
        skill_set = skill_sets[task.robot_type]
        records.append(PlanRecord(config.name, task, plan.strip(), code.name, message, tokens, latency,
                                  check_plan(task, plan, skill_set),
                                  check_goal(task, plan, skill_set, ended=code == ErrorCode.NONE)))
        if progress is not None:
            progress(len(records), len(tasks))

    def handle(events) -> None:
        for ev in events:
            if isinstance(ev, StateChanged) and ev.state == RequestState.GENERATING:
                started.setdefault(ev.req_id, time.monotonic())
            elif isinstance(ev, RequestFinished) and ev.req_id in by_id:
                o = ev.outcome
                record(by_id[ev.req_id], o.plan_text, o.error_code, o.message, o.tokens, time.monotonic())

    t0 = time.monotonic()
    for task in tasks:
        try:
            req = validate_goal(goal_for(task, config), task.id, time.monotonic(), skill_sets, classes,
                                grammar=model_spec(config.model).grammar if config.grammar is None else config.grammar)
            req.dry_run = True                     # no robot: each segment counts as executed when generated
            handle(scheduler.submit(req))
        except RequestError as err:               # refused at the door: counted with its code, never hidden
            record(task, "", err.code, err.message, 0, time.monotonic())
    while scheduler.busy():
        handle(scheduler.step())
    wall = time.monotonic() - t0
    missing = sorted(set(by_id) - {r.task.id for r in records})
    if missing:
        raise RuntimeError(f"the scheduler went idle with requests not ended: {missing}")
    order = {task_id: i for i, task_id in enumerate(by_id)}
    records.sort(key=lambda r: order[r.task.id])
    return Pass(config.name, tasks[0].robot_type, records, wall)


def evaluate(config: Configuration, tasks: Sequence[EvalTask], policy: str = "fcfs", max_batch: int = 8,
             device: str = "auto", threads: int = 1, verbose: bool = True) -> list[Pass]:
    """One pass per robot type (in the order the tasks name them) on one engine load, after a warm-up plan per robot
    type (as the server at configure: start-up costs, and a chat model's system prompt cached, off the clock)."""
    engine = load_engine(config, device, threads)
    scheduler = make_scheduler(engine, config, configured_skill_sets(config), policy, max_batch)
    groups: dict[str, list[EvalTask]] = {}
    for task in tasks:
        groups.setdefault(task.robot_type, []).append(task)
    for robot_type, group in groups.items():
        run_pass(scheduler, config, [replace(group[0], id=f"warm-up-{robot_type}")])
    passes = []
    for robot_type, group in groups.items():
        t0 = time.monotonic()

        def progress(done: int, total: int, label=f"{config.name} {robot_type}") -> None:
            if verbose and (done % 25 == 0 or done == total):
                print(f"[{label}] {done}/{total} plans, {time.monotonic() - t0:.1f} s", flush=True)

        passes.append(run_pass(scheduler, config, group, progress))
    return passes


def _pct(v: float) -> str:
    return "-" if v != v else f"{100 * v:.1f}%"


RATE_HEAD = ["n", "parses", "runs", "hallucinated", "roles", "achieved"]


def _rate_cells(r: Mapping[str, Any]) -> list[str]:
    roles = _pct(r["roles"]) + (f" ({r['n_roles']})" if r["n_roles"] != r["n"] else "")
    return [str(r["n"]), _pct(r["parses"]), _pct(r["runs"]), _pct(r["hallucinated"]), roles, _pct(r["achieved"])]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(row) + " |" for row in rows])


def _over(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The splits the headline rates are over: "test and heldout splits" ("dev split" for a dev run)."""
    splits = [split for split in SPLITS if any(split in s["over"] for s in summaries)] or list(HEADLINE_SPLITS)
    return " and ".join(splits) + (" splits" if len(splits) > 1 else " split")


def headline_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """Per robot type and configuration, over the test and heldout splits (or those the run has: _over): the five
    rates, the avoid tasks that moved toward their hazard, throughput and the requests that did not end NONE."""
    rows = []
    for s in sorted(summaries, key=lambda s: s["robot_type"]):
        avoid = s["avoid"]
        toward = f"{avoid['moved_toward']} of {avoid['n']}" if avoid["n"] else "-"
        errors = ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "-"
        rows.append([s["robot_type"], s["config"], *_rate_cells(s["headline"]), toward,
                     f"{s['tokens_per_plan']:.1f}", f"{s['s_per_plan']:.3f}", errors])
    return _table(["robot", "configuration", *RATE_HEAD, "avoid: moved toward", "tokens/plan", "s/plan",
                   "not NONE (all splits)"], rows)


def splits_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The five rates per split."""
    rows = [[s["robot_type"], s["config"], split, *_rate_cells(r)]
            for s in sorted(summaries, key=lambda s: s["robot_type"]) for split, r in s["splits"].items()]
    return _table(["robot", "configuration", "split", *RATE_HEAD], rows)


def kinds_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The five rates per task kind (over the headline's splits), the configurations side by side."""
    rows = [(s["robot_type"], kind, s["config"], r) for s in summaries for kind, r in s["kinds"].items()]
    return _table(["robot", "kind", "configuration", *RATE_HEAD],
                  [[rt, kind, config, *_rate_cells(r)] for rt, kind, config, r in sorted(rows, key=lambda x: x[:2])])


def tables(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The three tables as one markdown text."""
    over = _over(summaries)
    return (f"Over the {over}:\n\n{headline_table(summaries)}\n\n"
            f"By split:\n\n{splits_table(summaries)}\n\n"
            f"By kind ({over}):\n\n{kinds_table(summaries)}\n")


def write_outputs(out: Path, passes: Sequence[Pass]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = [r.row() for p in passes for r in p.records]
    with open(out / "plans.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summaries = [p.summary() for p in passes]
    (out / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n", encoding="utf-8")
    (out / "tables.md").write_text(tables(summaries), encoding="utf-8")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="embedded", help=f"comma-separated; known: {', '.join(CONFIGURATIONS)}")
    ap.add_argument("--split", default="all", choices=("all", "headline", *SPLITS),
                    help="headline: the test and heldout splits only (the dev split is for choosing prompts)")
    ap.add_argument("--robot-types", default="", help="comma-separated (default: every file in config/eval)")
    ap.add_argument("--limit", type=int, default=0, help="first N tasks per robot type (0: all)")
    ap.add_argument("--policy", default="fcfs", help="a non-dropping policy: fcfs | vllm-stream | vllm")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (0: torch's default; 1 is steadier on a shared machine)")
    ap.add_argument("--adapter", default="", help="an adapter folder for the configurations that use their model "
                                                  "entry's (smollm2-adapted): one being trained, say")
    ap.add_argument("--out", type=Path, default=Path("out/plan_quality"))
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in names if c not in CONFIGURATIONS]
    if unknown or not names:
        raise SystemExit(f"unknown configurations {unknown}; known: {', '.join(CONFIGURATIONS)}")
    robot_types = [r.strip() for r in args.robot_types.split(",") if r.strip()] or None
    if args.split == "headline":
        tasks = [t for t in load_eval_tasks(robot_types) if t.split in HEADLINE_SPLITS]
    else:
        tasks = load_eval_tasks(robot_types, None if args.split == "all" else args.split)
    if args.limit:
        tasks = [t for rt in dict.fromkeys(t.robot_type for t in tasks)
                 for t in [t for t in tasks if t.robot_type == rt][:args.limit]]
    passes: list[Pass] = []
    for name in names:
        print(f"== {name}: {len(tasks)} tasks, policy {args.policy}, max batch {args.max_batch}", flush=True)
        config = CONFIGURATIONS[name]
        if args.adapter and config.adapter is None:
            config = replace(config, adapter=args.adapter)
        for p in evaluate(config, tasks, args.policy, args.max_batch, args.device, args.threads):
            s = p.summary()
            print(f"{name} {p.robot_type}: n={s['n']} " + " ".join(
                f"{m}={_pct(s['headline'][m])}" for m in MEASURES) + f" ({'+'.join(s['over'])}) moved toward="
                f"{s['avoid']['moved_toward']}/{s['avoid']['n']} tokens/plan={s['tokens_per_plan']:.1f} "
                f"s/plan={s['s_per_plan']:.3f} not NONE={s['errors'] or '-'}", flush=True)
            passes.append(p)
    write_outputs(args.out, passes)
    print(f"\n{tables([p.summary() for p in passes])}\nevery plan: {args.out / 'plans.csv'}; tables: "
          f"{args.out / 'tables.md'}; summary: {args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
