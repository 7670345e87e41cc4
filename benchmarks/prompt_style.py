"""Where a chat model's prompt should put the worked examples: in the system text or as user/assistant turns.

    .venv/bin/python benchmarks/prompt_style.py [--model smollm2] [--threads 1] [--max-new 80]

A handful of tasks written for this check only (none is from config/fleet_tasks.yaml or the evaluation set), each
with the object or skill its plan must name, run greedy and unconstrained (no grammar) with both placements of the
skill sets' worked examples (skill-set option prompt_examples: system | turns). Per placement: plans that parse
under the skill set (and call an action), plans naming the task's key, prompt tokens, output tokens. Every
generation of a placement runs in one batch (the engine's output per row equals its solo greedy output).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.model_setup import model_setup  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="model entry of config/models.yaml")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new", type=int, default=80, help="output cap per plan (tokens)")
    parser.add_argument("--show", action="store_true", help="print every plan")
    parser.add_argument("--robot", default="", help="only this robot type's tasks")
    parser.add_argument("--only", choices=("system", "turns"), default=None, help="only this placement")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
