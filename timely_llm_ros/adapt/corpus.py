"""A training corpus for adapting a model to a skill set: examples (scene, task, plan) drawn from the robot type's
task patterns (patterns.py) with objects from the vocabulary (vocabulary.py), plus its worked examples.

Each pattern's objects are drawn anew for every example and shuffled among distractors, so the plan's objects can
only be copied from the scene or the task: the model learns to read them, not to memorise them. Phrasings get small
variations of surface (a capital, a "please", a final mark) a client's text would have.

Guarantees, checked for every example (ValueError names the pattern that breaks one):

- the plan parses with the skill set;
- every object the plan names (a string argument of a skill whose argument is an ``object`` or ``target``) is one
  the scene lists or one the task's words say (core/skills/context.py grounded_objects: what grounded decoding
  admits), when the scene lists any;
- no example repeats an evaluation task (config/eval, every split): neither its task text nor its scene + task;
  such a draw is dropped and counted. Names of the heldout split's objects are removed from the vocabulary first.

    python -m timely_llm_ros.adapt.corpus drone --count 12            # print examples
    python -m timely_llm_ros.adapt.corpus drone,arm --count 5000 --out build/corpus.jsonl
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from timely_llm_ros.adapt.patterns import PatternSet, draft, load_patterns, pattern_path
from timely_llm_ros.adapt.vocabulary import Vocabulary, load_vocabulary
from timely_llm_ros.core.skills.context import grounded_objects, normalise_name, scene_objects
from timely_llm_ros.core.skills.minispec import parse
from timely_llm_ros.core.skills.skill_set import SkillSet
from timely_llm_ros.core.skills.spec import SkillSpec

WORKED_EXAMPLE_SHARE = 0.02                  # of a robot type's examples: its worked examples, verbatim
_TRIES = 50                                  # draws of one pattern before it is declared unable to give an example


@dataclass(frozen=True)
class Example:
    """One training example of a robot type."""

    robot_type: str
    scene: str
    task: str
    plan: str
    pattern: str                              # the task pattern it came from ("worked example" for those)


@dataclass
class CorpusReport:
    """What generation did: examples per pattern, draws dropped for matching an evaluation task."""

    per_pattern: Counter = field(default_factory=Counter)
    dropped_eval: int = 0
    dropped_duplicate: int = 0
    dropped_ungrounded: int = 0

    def describe(self) -> str:
        mix = ", ".join(f"{k} {v}" for k, v in sorted(self.per_pattern.items()))
        return (f"{sum(self.per_pattern.values())} examples ({mix}); dropped {self.dropped_eval} draws equal to an "
                f"evaluation task, {self.dropped_duplicate} repeats and {self.dropped_ungrounded} naming an object grounded "
                "decoding could not write")


@dataclass(frozen=True)
class EvalExclusion:
    """The evaluation tasks no training example may repeat, and the heldout split's object names."""

    tasks: frozenset[str] = frozenset()               # normalised task texts
    scene_tasks: frozenset[tuple[str, str]] = frozenset()
    heldout_objects: frozenset[str] = frozenset()

    def excludes(self, scene: str, task: str) -> bool:
        return _norm(task) in self.tasks or (_norm(scene), _norm(task)) in self.scene_tasks


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def eval_exclusion(directory: Path | None = None) -> EvalExclusion:
    """Every evaluation task of config/eval (all robot types and splits); empty when there is none (an installed
    package without the evaluation set)."""
    from timely_llm_ros.evaluation.evalset import eval_dir, load_eval_tasks

    directory = directory or eval_dir()
    if not directory.is_dir() or not any(directory.glob("*.yaml")):
        return EvalExclusion()
    tasks = load_eval_tasks(directory=directory)
    heldout = {normalise_name(o) for t in tasks if t.split == "heldout"
               for o in (*t.key_objects, *grounded_objects(t.scene, ""))}
    return EvalExclusion(frozenset(_norm(t.task) for t in tasks),
                         frozenset((_norm(t.scene), _norm(t.task)) for t in tasks), frozenset(heldout))


def object_arguments(plan: str, skill_set: SkillSet) -> list[str]:
    """The object names a plan passes to skills (their arguments of kind "object"), in execution order."""
    return [name for _, name in _object_calls(plan, skill_set)]


def _object_calls(plan: str, skill_set: SkillSet) -> list[tuple[SkillSpec | None, str]]:
    """(the skill, the object name) of each object argument of the plan, in execution order."""
    out = []
    for call in parse(plan, skill_set.skills, skill_set.statement_forms).skills:
        spec = skill_set.skills.get(call.name)
        slots = spec.object_positions if spec is not None else ()
        out += [(spec, str(call.args[i])) for i in slots if i < len(call.args) and isinstance(call.args[i], str)]
    return out


def check_example(example: Example, skill_set: SkillSet) -> None:
    """ValueError when the plan does not parse, or names an object grounded decoding would not admit."""
    problems = skill_set.validate_plan(example.plan)
    if problems:
        raise ValueError(f"pattern {example.pattern!r} gave a plan the {skill_set.name} skill set rejects: "
                         f"{example.plan!r} ({'; '.join(problems)})")
    stray = ungrounded_objects(example, skill_set)
    if stray:
        raise ValueError(f"pattern {example.pattern!r}: the plan {example.plan!r} names {stray}, which neither "
                         f"the scene {example.scene!r} lists nor the task {example.task!r} says")


def ungrounded_objects(example: Example, skill_set: SkillSet) -> list[str]:
    """The objects the plan names that grounded decoding would not admit (none when the scene lists nothing): a
    name neither the scene nor the task gives, or one only the task gives in a skill marked in_scene."""
    admitted = set(grounded_objects(example.scene, example.task))
    if not admitted:
        return []
    listed = set(scene_objects(example.scene))
    return [o for spec, o in _object_calls(example.plan, skill_set)
            if normalise_name(o) not in (listed if spec is not None and spec.in_scene else admitted)]


_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")


def vary_surface(task: str, rng: random.Random) -> str:
    """Small variations of how a person types a request: a capital first letter, a "please", a final mark (and
    "an" before a vowel, whatever name a slot drew)."""
    text = _A_BEFORE_VOWEL.sub(r"\1n ", task)
    roll = rng.random()
    if roll < 0.08 and not text.lower().startswith("please"):
        text = "please " + text
    elif roll < 0.14 and not text.endswith("?"):
        text = text.rstrip(".!") + ", please"
    if rng.random() < 0.3:
        text = text[0].upper() + text[1:]
    if rng.random() < 0.15 and text[-1] not in ".?!":
        text += rng.choice(".!")
    return text


def generate(skill_set: SkillSet, patterns: PatternSet, vocabulary: Vocabulary, count: int, seed: int = 0,
             exclusion: EvalExclusion = EvalExclusion(), report: CorpusReport | None = None) -> list[Example]:
    """``count`` examples for one robot type: its worked examples (a WORKED_EXAMPLE_SHARE of them) and draws of
    its patterns by weight. Deterministic for a seed."""
    if patterns.robot_type != skill_set.name:
        raise ValueError(f"{patterns.source} holds patterns for {patterns.robot_type!r}, not {skill_set.name!r}")
    report = report if report is not None else CorpusReport()
    rng = random.Random(f"{skill_set.name}:{seed}")
    vocabulary = vocabulary.without(exclusion.heldout_objects) if exclusion.heldout_objects else vocabulary
    out: list[Example] = []
    worked = [Example(skill_set.name, ex.scene, ex.task, ex.plan, "worked example") for ex in skill_set.examples
              if not exclusion.excludes(ex.scene, ex.task)]
    for i in range(int(round(count * WORKED_EXAMPLE_SHARE)) if worked else 0):
        out.append(worked[i % len(worked)])
        report.per_pattern["worked example"] += 1
    seen: set[tuple[str, str]] = set()
    weights = [p.weight for p in patterns.patterns]
    while len(out) < count:
        pattern = rng.choices(patterns.patterns, weights)[0]
        last: Example | None = None
        for _ in range(_TRIES):
            d = draft(pattern, patterns.tables, vocabulary, rng)
            example = Example(skill_set.name, d.scene, vary_surface(d.task, rng), d.plan, d.pattern)
            if ungrounded_objects(example, skill_set):     # a name the task's phrases cannot give ("can opener":
                report.dropped_ungrounded += 1              # "can" is a function word): draw again
                last = example
                continue
            check_example(example, skill_set)
            if exclusion.excludes(example.scene, example.task):
                report.dropped_eval += 1
                continue
            if (example.scene, example.task) in seen:
                report.dropped_duplicate += 1
                continue
            seen.add((example.scene, example.task))
            out.append(example)
            report.per_pattern[pattern.name] += 1
            break
        else:
            if last is not None:
                check_example(last, skill_set)              # raises: the pattern names what its text cannot
            raise ValueError(f"{patterns.source}: pattern {pattern.name!r} gave no new example in {_TRIES} draws "
                             "(too few names or phrasings for its slots?)")
    rng.shuffle(out)
    return out


def robot_patterns(skill_set_name: str, skills_dirs: Sequence[Path]) -> PatternSet:
    """The pattern file of a robot type: the last of the skills folders that has one (a team's skills_dir over
    the package's config/skills)."""
    for folder in reversed(list(skills_dirs)):
        path = pattern_path(folder, skill_set_name)
        if path.is_file():
            return load_patterns(path)
    where = " or ".join(str(pattern_path(f, skill_set_name)) for f in skills_dirs)
    raise FileNotFoundError(f"robot type {skill_set_name!r} has no task patterns: write {where} (docs/robots.md, "
                            "'Adapting a model')")


def skills_folders(skills_dir: str | Path | None = None) -> list[Path]:
    """The folders skill sets and their patterns come from: the package's config/skills, then a team's
    <skills_dir>/skills (core/robot_types.py's order)."""
    from timely_llm_ros.paths import config_dir

    folders = [config_dir() / "skills"]
    if skills_dir:
        folders.append(Path(skills_dir).expanduser() / "skills")
    return folders


def build_corpus(skill_sets: Mapping[str, SkillSet], robot_types: Iterable[str], count: int, seed: int = 0,
                 skills_dir: str | Path | None = None, vocabulary: Vocabulary | None = None,
                 exclusion: EvalExclusion | None = None) -> tuple[list[Example], CorpusReport]:
    """A corpus for several robot types: ``count`` examples in all, shared by the robot types in proportion to
    their patterns' total weight, interleaved at random."""
    robot_types = list(robot_types)
    unknown = [r for r in robot_types if r not in skill_sets]
    if unknown:
        raise ValueError(f"unknown robot types {unknown}; known: {', '.join(skill_sets)}")
    vocabulary = vocabulary or load_vocabulary()
    exclusion = exclusion if exclusion is not None else eval_exclusion()
    folders = skills_folders(skills_dir)
    pattern_sets = {r: robot_patterns(r, folders) for r in robot_types}
    total = sum(sum(p.weight for p in ps.patterns) for ps in pattern_sets.values())
    report = CorpusReport()
    examples: list[Example] = []
    left = count
    for i, robot in enumerate(robot_types):
        share = sum(p.weight for p in pattern_sets[robot].patterns) / total
        n = left if i == len(robot_types) - 1 else int(round(count * share))
        left -= n
        examples += generate(skill_sets[robot], pattern_sets[robot], vocabulary, n, seed, exclusion, report)
    random.Random(seed).shuffle(examples)
    return examples, report


def write_jsonl(examples: Iterable[Example], path: Path) -> None:
    """One example per line as JSON; gzip-compressed when the name ends in .gz (an adapter keeps its corpus so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open(path, "wt", encoding="utf-8") if path.suffix == ".gz" else open(path, "w", encoding="utf-8")) as f:
        for ex in examples:
            f.write(json.dumps(asdict(ex)) + "\n")


def read_jsonl(path: Path) -> list[Example]:
    """The examples write_jsonl wrote."""
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        return [Example(**json.loads(line)) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> int:
    from timely_llm_ros.core.robot_types import load_robot_types

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("robots", help="robot types, comma-separated (drone,arm)")
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skills-dir", default="", help="a team's folder with skills/<robot>.yaml and "
                                                         "skills/<robot>.tasks.yaml")
    parser.add_argument("--out", default="", help="write the corpus as JSON lines here instead of printing it")
    args = parser.parse_args(argv)
    skill_sets = load_robot_types(args.skills_dir or None).skill_sets
    examples, report = build_corpus(skill_sets, args.robots.split(","), args.count, args.seed, args.skills_dir)
    if args.out:
        write_jsonl(examples, Path(args.out))
    else:
        for ex in examples:
            print(f"[{ex.robot_type}/{ex.pattern}] scene: {ex.scene}\n  task: {ex.task}\n  plan: {ex.plan}")
    print(report.describe(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
