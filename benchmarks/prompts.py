#!/usr/bin/env python3
"""What the planner's prompt costs and how to write it, one job a sub-command.

    python benchmarks/prompts.py cache [--model smollm2] [--robot drone] [--reps 6] [--pair cache|adapter]
        time to first segment with and without the cached system prompt (or the entry's adapter)
    python benchmarks/prompts.py style [--model smollm2] [--max-new 80]
        where the worked examples go: the system text or user/assistant turns

`python benchmarks/prompts.py SUB-COMMAND --help` describes each in full (CACHE_DOC and STYLE_DOC below).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from timely_llm_ros.core.composition import PolicyChoice  # noqa: E402
from timely_llm_ros.core.exec_time import load_exec_models  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.request import PlanRequest  # noqa: E402
from timely_llm_ros.core.scheduler import PlanScheduler, RequestFinished, SegmentReady  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.model_setup import model_setup  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402
from timely_llm_ros.engine.transformers.loader import load_pretrained  # noqa: E402
from timely_llm_ros.stack import EngineChoice, StackOptions, build_stack  # noqa: E402

STYLE_DOC = """Where a chat model's prompt should put the worked examples: in the system text or as user/assistant turns.

    .venv/bin/python benchmarks/prompts.py style [--model smollm2] [--threads 1] [--max-new 80]

A handful of tasks written for this check only (none is from config/fleet_tasks.yaml or the evaluation set), each
with the object or skill its plan must name, run greedy and unconstrained (no grammar) with both placements of the
skill sets' worked examples (skill-set option prompt_examples: system | turns). Per placement: plans that parse
under the skill set (and call an action), plans naming the task's key, prompt tokens, output tokens. Every
generation of a placement runs in one batch (the engine's output per row equals its solo greedy output).
"""

CACHE_DOC = """Time to first segment with and without the cached system prompt, side by side on one model; or (--pair adapter)
with and without the model entry's adapter, both with the cached system prompt.

    .venv/bin/python benchmarks/prompts.py cache [--model smollm2] [--robot drone] [--reps 6] [--threads 1]
        [--pair cache|adapter]

Two transformers engines share the loaded weights: one keeps prompt-prefix KV (the model entry's prefix_cache_mb,
warmed once with each robot type's prompt as the server does at configure), the other has no prefix cache. Each
repetition sends one new request (the next task of the style sub-command's list for the robot type, through
the model's chat template) to a PlanScheduler on each engine, alternating which goes first, and measures request
arrival to its first executable segment (TTFS) on the wall clock; the request is then cancelled. Reported: TTFS of
both, their ratio (median and range over the repetitions), the prompt's tokens and how many of them the cache
supplied, and whether both produced the same first segment (they must: the cache is token-exact).

With --pair adapter the two engines are the model with its entry's adapter merged (timely_adapt) and the model
without it, each with the prefix cache as the server runs it: per token they cost the same (the adapter is merged
into the weights), so a difference in TTFS is the plans' (how many tokens the first segment takes).
"""


# ---- style

# (robot type, scene, task, key the plan must contain)
TASKS = [
    ("drone", "room: porch; objects: red umbrella, bench, doormat", "photograph the red umbrella", "red umbrella"),
    ("drone", "room: workshop; objects: workbench, drill, ladder", "is there a fire extinguisher in this room?",
     "fire extinguisher"),
    ("drone", "room: gym; objects: mat, rope", "fly a square with 50 cm sides", "4{"),
    ("drone", "ceiling fan above, 40 cm away", "the ceiling fan is right above you, get away from it", "md("),
    ("drone", "room: library; objects: globe, armchair", "take a picture of the globe if it is closer than 100 cm",
     "globe"),
    ("drone", "room: den; objects: couch, tv stand, remote control", "where is the remote control?", "remote control"),
    ("arm", "table: blue mug, spoon; places: tray, sink", "put the blue mug on the tray", "blue mug"),
    ("arm", "table: banana peel, napkin; places: bin, shelf", "throw the banana peel in the bin", "banana peel"),
    ("arm", "table: yellow block, red ball", "move the yellow block to (10, 20)", "yellow block"),
    ("arm", "table: small box, big box", "stack the small box on the big box", "small box"),
    ("chat", "room: dining room; objects: vase, candles, plates", "what is on the table?", "vase"),
    ("chat", "room: study; objects: glasses, books", "do you see my glasses?", "glasses"),
    ("chat", "room: bedroom; objects: bed, lamp", "good morning", ""),
]


def generate(engine, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """Greedy outputs of every prompt, decoded in one batch."""
    ids = [f"t{i}" for i in range(len(prompts))]
    for gid, prompt in zip(ids, prompts):
        engine.add(gid, prompt, max_new)
    live = list(ids)
    while live:
        result = engine.step(live)
        live = [g for g in live if g not in result.finished]
    outputs = [engine.output_ids(g) for g in ids]
    for gid in ids:
        engine.release(gid)
    return outputs


def style_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prompts.py style", description=STYLE_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="model entry of config/models.yaml")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new", type=int, default=80, help="output cap per plan (tokens)")
    parser.add_argument("--show", action="store_true", help="print every plan")
    parser.add_argument("--robot", default="", help="only this robot type's tasks")
    parser.add_argument("--only", choices=("system", "turns"), default=None, help="only this placement")
    args = parser.parse_args(argv)
    tasks = [t for t in TASKS if not args.robot or t[0] == args.robot]
    spec = model_spec(args.model)
    engine = make_engine("transformers", str(weights_folder(spec)), device="cpu", dtype=spec.dtype,
                         num_threads=args.threads)
    skill_sets = load_skill_sets()
    print(f"model {spec.name} ({weights_folder(spec).name}), greedy, unconstrained, {args.threads} thread(s), "
          f"{len(tasks)} tasks")
    print(f"{'examples in':12s} {'parses':>8s} {'key named':>10s} {'prompt tok':>11s} {'out tok':>8s} {'s':>6s}")
    for where in [args.only] if args.only else ["system", "turns"]:
        setup = model_setup(spec, engine, skill_sets, examples_in=where)
        prompts = [setup.prompts(setup.skill_sets[rt], task, scene) for rt, scene, task, _ in tasks]
        t0 = time.perf_counter()
        outputs = generate(engine, prompts, args.max_new)
        secs = time.perf_counter() - t0
        parses = keyed = 0
        for (rt, _, task, key), out in zip(tasks, outputs):
            text = engine.decode([t for t in out if t != engine.eos_token_id]).strip()
            ss = setup.skill_sets[rt]
            ok = not ss.validate_plan(text) and bool(ss.parse_skills(text))
            parses += ok
            keyed += ok and key in text
            if args.show:
                print(f"  [{where}] {rt:5s} {task[:40]:40s} {'ok ' if ok else 'BAD'} {text[:110]!r}")
        print(f"{where:12s} {parses:4d}/{len(tasks):<3d} {keyed:6d}/{len(tasks):<3d} "
              f"{sum(map(len, prompts)) / len(prompts):11.0f} {sum(map(len, outputs)) / len(outputs):8.1f} "
              f"{secs:6.1f}")



# ---- cache

def first_segment(sched: PlanScheduler, req: PlanRequest) -> tuple[float, str]:
    """(seconds from submit to the first SegmentReady, its text); (nan, reason) when the plan gave none."""
    t0 = time.perf_counter()
    req.arrival = time.monotonic()
    events = sched.submit(req)
    try:
        while True:
            for ev in events:
                if isinstance(ev, SegmentReady):
                    return time.perf_counter() - t0, ev.segment.text.strip()
                if isinstance(ev, RequestFinished):
                    return float("nan"), f"no segment: {ev.outcome.message[:80]}"
            events = sched.step()
    finally:
        sched.cancel(req.req_id)


def cache_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prompts.py cache", description=CACHE_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="model entry of config/models.yaml")
    parser.add_argument("--robot", default="drone", help="robot type of the requests")
    parser.add_argument("--reps", type=int, default=6, help="alternated repetitions (one new task each)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pair", choices=("cache", "adapter"), default="cache",
                        help="cache: with/without the cached system prompt; adapter: with/without the entry's adapter")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = model_spec(args.model)
    if args.pair == "adapter":
        compare_adapter(spec, args)
        return
    loaded = load_pretrained(weights_folder(spec), "cpu", spec.dtype, adapter=spec.adapter_folder())
    skill_sets = load_skill_sets()
    engines = {"cached": TransformersEngine(loaded, prefix_cache_mb=spec.prefix_cache_size_mb() or 256.0),
               "uncached": TransformersEngine(loaded)}
    scheds = {}
    options = StackOptions(model=spec, engine=EngineChoice("transformers"),   # warmed up as at configure
                           policy=PolicyChoice("fcfs", max_batch=8))
    for name, engine in engines.items():
        stack = build_stack(options, skill_sets, load_exec_models(), engine=engine)
        scheds[name], setup = stack.scheduler, stack.setup
    prompts = scheds["cached"].prompts
    shared = prompts.shared_tokens(setup.skill_sets[args.robot])
    tasks = [t for t in TASKS if t[0] == args.robot]
    print(f"model {spec.name}, {args.threads} thread(s), robot type {args.robot}: shared prompt {shared} tokens; "
          f"{args.reps} repetitions alternated")
    rows = []
    cache = engines["cached"].prefix_cache
    for rep in range(args.reps):
        _, scene, task, _ = tasks[rep % len(tasks)]
        row: dict = {}
        for name in (("cached", "uncached") if rep % 2 == 0 else ("uncached", "cached")):
            req = PlanRequest(req_id=f"{name}{rep}", agent_id=f"{args.robot}_1", robot_type=args.robot, task=task,
                              tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, context=scene, urgency="normal")
            reused = cache.reused_tokens
            row[name] = first_segment(scheds[name], req)
            if name == "cached":
                row["reused"] = cache.reused_tokens - reused
        row["prompt"] = len(prompts(setup.skill_sets[args.robot], task, scene))
        rows.append(row)
        same = "same" if row["cached"][1] == row["uncached"][1] else "DIFFERENT"
        print(f"  rep {rep}: TTFS cached {row['cached'][0]:6.3f} s, uncached {row['uncached'][0]:6.3f} s; cache "
              f"supplied {row['reused']} of {row['prompt']} prompt tokens; first segment {same}: "
              f"{row['cached'][1][:50]!r}")
    ok = [r for r in rows if r["cached"][0] == r["cached"][0] and r["uncached"][0] == r["uncached"][0]]
    if not ok:
        print("no repetition produced a first segment: nothing to compare")
        return
    ratios = [r["uncached"][0] / r["cached"][0] for r in ok]
    med = {k: statistics.median(r[k][0] for r in ok) for k in ("cached", "uncached")}
    print(f"TTFS median over {len(ok)} repetitions: with the cached system prompt {med['cached']:.3f} s, without "
          f"{med['uncached']:.3f} s; uncached / cached = {statistics.median(ratios):.2f}x (range "
          f"{min(ratios):.2f}-{max(ratios):.2f}); cached {statistics.median(r['reused'] for r in ok):.0f} of "
          f"{statistics.median(r['prompt'] for r in ok):.0f} prompt tokens (median)")


def compare_adapter(spec, args) -> None:
    """TTFS of the model with its entry's adapter and without, both with the prefix cache, alternated."""
    if spec.adapter_folder() is None:
        raise SystemExit(f"model entry {spec.name} has no adapter: nothing to compare")
    folder = weights_folder(spec)
    cache_mb = spec.prefix_cache_size_mb() or 256.0
    engines = {"adapted": TransformersEngine(load_pretrained(folder, "cpu", spec.dtype, adapter=spec.adapter_folder()),
                                             prefix_cache_mb=cache_mb),
               "base": TransformersEngine(load_pretrained(folder, "cpu", spec.dtype), prefix_cache_mb=cache_mb)}
    skill_sets = load_skill_sets()
    scheds = {}
    for name, engine in engines.items():
        options = StackOptions(model=spec, policy=PolicyChoice("fcfs", max_batch=8))
        scheds[name] = build_stack(options, skill_sets, load_exec_models(), engine=engine).scheduler
    tasks = [t for t in TASKS if t[0] == args.robot]
    print(f"model {spec.name} with and without adapter {spec.adapter_folder()}, {args.threads} thread(s), robot type "
          f"{args.robot}, prefix cache on both; {args.reps} repetitions alternated")
    rows = []
    for rep in range(args.reps):
        _, scene, task, _ = tasks[rep % len(tasks)]
        row: dict = {}
        for name in (("adapted", "base") if rep % 2 == 0 else ("base", "adapted")):
            req = PlanRequest(req_id=f"{name}{rep}", agent_id=f"{args.robot}_1", robot_type=args.robot, task=task,
                              tuf=DEFAULT_URGENCY_CLASSES["normal"], arrival=0.0, context=scene, urgency="normal")
            row[name] = first_segment(scheds[name], req)
        rows.append(row)
        print(f"  rep {rep}: TTFS adapted {row['adapted'][0]:6.3f} s {row['adapted'][1][:40]!r}; base "
              f"{row['base'][0]:6.3f} s {row['base'][1][:40]!r}")
    ok = [r for r in rows if r["adapted"][0] == r["adapted"][0] and r["base"][0] == r["base"][0]]
    if not ok:
        print("no repetition produced a first segment on both: nothing to compare")
        return
    ratios = [r["adapted"][0] / r["base"][0] for r in ok]
    med = {k: statistics.median(r[k][0] for r in ok) for k in ("adapted", "base")}
    print(f"TTFS median over {len(ok)} repetitions: with the adapter {med['adapted']:.3f} s, without "
          f"{med['base']:.3f} s; adapted / base = {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-"
          f"{max(ratios):.2f})")



# ---- the command line

SUB_COMMANDS = {"style": style_main, "cache": cache_main}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.report import run_sub_command

    argv = sys.argv[1:] if argv is None else argv
    return run_sub_command(__doc__, SUB_COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
