#!/usr/bin/env python3
"""Write the plan-quality evaluation set (config/eval/drone.yaml, config/eval/arm.yaml) from the tables of
tools/evalset/drone.py and arm.py (splits dev and test) and tools/evalset/heldout_drone.py and heldout_arm.py
(split heldout).

    python -m tools.evalset.make_evalset            # write both files, print the overlap with the training corpus
    python -m tools.evalset.make_evalset --overlap  # only print the overlap of the committed files

A task kind is a list of phrasings, a scene drawn from word tables, a goal condition (what the plan must bring about
in the task's scene: timely_llm_ros/evaluation/goals.py) and a rule writing the reference plan in the project's plan
conventions (each file's header states them). The phrasings are the project's own and none is a template of the
embedded planner's corpus (tools/embedded_planner/corpus.py); ``overlap`` measures that, and test/test_evalset.py
keeps it at zero. Within each kind of the dev/test tables every third task (the first, fourth, ...) is ``dev``, the
rest ``test``; every task of the heldout tables is ``heldout``. Deterministic: the same tables and seed write the
same files.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from timely_llm_ros.evaluation.evalset import EvalTask, eval_dir, load_eval_tasks  # noqa: E402
from timely_llm_ros.evaluation.plan_checks import string_arguments  # noqa: E402
from tools.evalset import arm, drone, heldout_arm, heldout_drone  # noqa: E402

SEED = 30
AN = re.compile(r"\b([Aa]) ([aeiou])")   # "a umbrella" -> "an umbrella"
SOURCES = {"drone": drone, "arm": arm}
HELDOUT_SOURCES = {"drone": heldout_drone, "arm": heldout_arm}


def _drafts(kinds, rng: random.Random) -> list[list[EvalTask]]:
    """Each kind's drafts, in order; no two tasks of a kind with the same scene and text."""
    out: list[list[EvalTask]] = []
    for make, count in kinds:
        seen: set[tuple[str, str]] = set()
        drafts: list[EvalTask] = []
        while len(drafts) < count:
            d = make(rng)
            if (d.scene, d.task) not in seen:
                seen.add((d.scene, d.task))
                drafts.append(d)
        out.append(drafts)
    return out


def draft_tasks(robot_type: str, seed: int = SEED) -> list[EvalTask]:
    """Every task of a robot type: the dev/test tables' kinds (ids numbered per kind, every third one dev), then the
    heldout tables' kinds."""
    out: list[EvalTask] = []
    for drafts in _drafts(SOURCES[robot_type].KINDS, random.Random(f"{seed}:{robot_type}")):
        out += [replace(d, id=f"{robot_type}-{d.kind}-{i:03d}", split="dev" if i % 3 == 0 else "test",
                        task=AN.sub(r"\1n \2", d.task)) for i, d in enumerate(drafts)]
    for drafts in _drafts(HELDOUT_SOURCES[robot_type].KINDS, random.Random(f"{seed}:{robot_type}:heldout")):
        out += [replace(d, id=f"{robot_type}-heldout-{d.kind}-{i:03d}", split="heldout",
                        task=AN.sub(r"\1n \2", d.task)) for i, d in enumerate(drafts)]
    return out


def write(robot_type: str, tasks: list[EvalTask], directory: Path) -> Path:
    entries = [{"id": t.id, "kind": t.kind, "split": t.split, "urgency": t.urgency, "scene": t.scene, "task": t.task,
                "goal": t.goal.to_config(), "plan": t.plan, "key_objects": list(t.key_objects),
                "key_skills": list(t.key_skills)} for t in tasks]
    body = yaml.safe_dump({"robot_type": robot_type, "tasks": entries}, sort_keys=False, width=200,
                          default_flow_style=None, allow_unicode=True)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{robot_type}.yaml"
    path.write_text(SOURCES[robot_type].HEADER + body, encoding="utf-8")
    return path


# ------------------------------------------------------------------ overlap with the training corpus
def _template_regex(template: str) -> re.Pattern:
    parts = re.split(r"\{\w+\}", template)
    return re.compile(r"(?<!\w)" + "(.+?)".join(re.escape(p) for p in parts) + r"(?!\w)", re.I)


def corpus_templates() -> list[str]:
    """Every task template of the embedded planner's corpus: its phrasing lists and its inline motion tasks."""
    from tools.embedded_planner import corpus

    lists = ["FIND", "CHECK_TWO", "ON_FURN", "UNDER_FURN", "PURPOSE", "APPROACH", "PROBE", "INJURY", "COLLISION",
             "EVADE", "STACK", "TOWER", "CLEAN", "CLASSIFY", "MOVE_TO", "GREETINGS", "SEE", "IS_THERE"]
    inline = ["move forward {n} cm and turn {side} {d} degrees", "fly {dir} {n} cm then take a picture",
              "fly a square with {n} cm sides", "turn around and take {k} pictures",
              "move {side} {n} cm, wait {s} seconds and come back", "what can you do?"]
    return [t for name in lists for t in getattr(corpus, name)] + inline


@dataclass(frozen=True)
class Overlap:
    """How the evaluation tasks relate to the embedded planner's training corpus."""

    n: int
    template: list[str]          # ids whose task text is a corpus template with its slots filled
    contains_template: list[str]  # ids whose task text contains one (e.g. "... and look for the cat ...")
    verbatim: list[str]          # ids whose task text occurs in a 50,000-example corpus sample
    new_key_objects: float       # share of the distinct key objects the corpus never names


def overlap(tasks: list[EvalTask], sample: int = 50_000) -> Overlap:
    """Measure the overlap of ``tasks`` with the corpus (template matches, verbatim texts, object vocabulary)."""
    from tools.embedded_planner import corpus

    patterns = [_template_regex(t) for t in corpus_templates()]
    examples = corpus.generate(sample, seed=0)
    texts = {e.task.lower() for e in examples}
    vocabulary = {a.lower() for e in examples for a in string_arguments(e.plan)}
    vocabulary |= {w.strip().lower() for e in examples for part in e.context.split(";")
                   for w in part.split(":")[-1].split(",")}
    template = [t.id for t in tasks if any(p.fullmatch(t.task) for p in patterns)]
    contains = [t.id for t in tasks if any(p.search(t.task) for p in patterns)]
    verbatim = [t.id for t in tasks if t.task.lower() in texts]
    keys = {k for t in tasks for k in t.key_objects}
    new = [k for k in keys if k.lower() not in vocabulary]
    return Overlap(len(tasks), template, contains, verbatim, len(new) / max(1, len(keys)))


def report_overlap(tasks: list[EvalTask]) -> None:
    o = overlap(tasks)
    print(f"overlap with the embedded planner's corpus over {o.n} tasks: {len(o.template)} are a corpus template, "
          f"{len(o.contains_template)} contain one, {len(o.verbatim)} occur verbatim in 50,000 corpus examples; "
          f"{o.new_key_objects:.0%} of the distinct key objects never occur in the corpus")
    for label, ids in (("template", o.template), ("contains a template", o.contains_template)):
        if ids:
            by_id = {t.id: t for t in tasks}
            print(f"  {label}: " + "; ".join(f"{i}: {by_id[i].task!r}" for i in ids[:10]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--overlap", action="store_true", help="only report the committed files' overlap")
    ap.add_argument("--out", type=Path, default=None, help="folder to write to (default: config/eval)")
    args = ap.parse_args(argv)
    if not args.overlap:
        directory = args.out or eval_dir()
        for robot_type in ("drone", "arm"):
            tasks = draft_tasks(robot_type)
            path = write(robot_type, tasks, directory)
            counts = ", ".join(f"{sum(t.split == s for t in tasks)} {s}" for s in ("dev", "test", "heldout"))
            print(f"{path}: {len(tasks)} tasks ({counts})")
        report_overlap(load_eval_tasks(directory=directory))
    else:
        report_overlap(load_eval_tasks(directory=args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
