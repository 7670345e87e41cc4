"""Segmentation overhead: stop checking (detokenize + segmenter) + suspend + resume as a share of
generation time (target <= 2%), and the row copies that leaving and rejoining the batch cost.

    .venv/bin/python benchmarks/segmentation_overhead.py [--traces 1 2 6 9 10 11] [--pause 2]
    .venv/bin/python benchmarks/segmentation_overhead.py --device cuda --random-config llama3-8b

The plans of the TimelyLLM traces (core.workload.lrtrace) are replayed through the engine (forced_ids:
real forward passes, fixed content) as one batch. After every token, the whole output is detokenized and
the new text fed to the skill set's incremental segmenter (core.skills: the real StatementSegmenter, as the
scheduler does). When a segment becomes executable the generation is suspended, sits out ``--pause`` steps
(its robot executes) and is resumed, leaving and rejoining the batch (its KV row parked in a spare store row
and moved back; repeated, interleaved, with the engine's park_rows off: the row cloned out and written back).
Generation time = the engine's step times; overhead = detokenize + segmenter + suspend() + resume(),
also shown with the engine's row copies when the batch changes (already inside the step times).
Medians over --reps runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.workload.lrtrace import get_trace  # noqa: E402
from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.kv_cache import SlotKV  # noqa: E402
from timely_llm_ros.engine.transformers_engine import TransformersEngine  # noqa: E402


def plan_ids(engine: TransformersEngine, plan: str) -> list[int]:
    """Token ids of the plan text as the model would emit them after the prompt (no BOS)."""
    ids = engine.encode(" " + plan)
    bos = getattr(engine.tokenizer, "bos_token_id", None) or getattr(
        getattr(engine.tokenizer, "_tok", None), "bos_token_id", None)
    return ids[1:] if ids and ids[0] == bos else ids


def run_once(engine: TransformersEngine, traces: list[int], pause: int) -> dict[str, float]:
    skill_sets = load_skill_sets()
    dev = engine.device
    tracks = {}
    for tid in traces:
        tr = get_trace(tid)
        skills = skill_sets[tr.robot_type]
        gid = f"t{tid}"
        engine.add(gid, engine.encode(skills.build_prompt(tr.task, tr.context)), 10**4,
                   forced_ids=plan_ids(engine, tr.plan))
        tracks[gid] = {"seg": skills.segmenter(), "text": "", "segments": 0}
    arrange_s = [0.0]
    inner = engine._arrange

    def timed_arrange(gens):                      # the row copies a membership change costs
        bk.sync(dev)
        t0 = time.perf_counter()
        changed = inner(gens)
        bk.sync(dev)
        arrange_s[0] += time.perf_counter() - t0
        return changed

    engine._arrange = timed_arrange
    copied = [0, 0]                               # row copies, KV tokens copied (load-independent)
    store_cls, evict = SlotKV, engine._evict

    def counting(name, tokens):
        inner_fn = getattr(store_cls, name)

        def wrapped(self, *a):
            copied[0] += 1
            copied[1] += tokens(*a)
            return inner_fn(self, *a)
        return inner_fn, wrapped

    saved = {}
    for name, tokens in (("move_row", lambda src, dst, n: n), ("write_row", lambda row, kv: kv.shape[-2])):
        saved[name], wrapped = counting(name, tokens)
        setattr(store_cls, name, wrapped)

    def counted_evict(gen, to_host):
        copied[0] += 1
        copied[1] += gen.kv_len
        return evict(gen, to_host)

    engine._evict = counted_evict
    running, paused, done = list(tracks), {}, set()
    gen_s = stop_s = susp_s = 0.0
    while running or paused:
        for gid in [g for g, left in paused.items() if left == 0]:
            t0 = time.perf_counter()
            engine.resume(gid)
            susp_s += time.perf_counter() - t0
            del paused[gid]
            running.append(gid)
        paused = {g: left - 1 for g, left in paused.items()}
        if not running:
            continue
        res = engine.step(running)
        gen_s += res.elapsed_s
        for gid in list(running):
            t0 = time.perf_counter()
            track = tracks[gid]
            text = engine.decode(engine.output_ids(gid))
            segments = track["seg"].feed(text[len(track["text"]):])
            track["text"] = text
            track["segments"] += len(segments)
            stop_s += time.perf_counter() - t0
            if gid in res.finished:
                running.remove(gid)
                done.add(gid)
                track["seg"].finish()
            elif segments:
                t0 = time.perf_counter()
                engine.suspend(gid)
                susp_s += time.perf_counter() - t0
                running.remove(gid)
                paused[gid] = pause
    engine._arrange = inner
    del engine._evict
    for name, fn in saved.items():
        setattr(store_cls, name, fn)
    segments = sum(t["segments"] for t in tracks.values())
    tokens = sum(len(engine.output_ids(g)) for g in tracks)
    for gid in tracks:
        engine.release(gid)
    return {"gen": gen_s, "stop": stop_s, "suspend": susp_s, "arrange": arrange_s[0],
            "segments": segments, "tokens": tokens, "copies": copied[0], "copied_tokens": copied[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.set_defaults(reps=5)
    parser.add_argument("--traces", type=int, nargs="+", default=[1, 2, 3, 6, 9, 10, 11])
    parser.add_argument("--pause", type=int, default=2, help="steps a suspended generation sits out")
    args = parser.parse_args()
    loaded = bk.load_from_args(args)
    print(bk.describe(loaded))
    engine = TransformersEngine(loaded)
    variants = {"parked in store rows": True, "cloned out (before)": False}
    runs = {v: [] for v in variants}
    for rep in range(args.reps + 1):              # interleaved, first rep is warm-up
        for name, park in variants.items():
            engine.park_rows = park
            r = run_once(engine, args.traces, args.pause)
            if rep:
                runs[name].append(r)
    totals = {}
    for name, rs in runs.items():
        med = {k: bk.median([r[k] for r in rs]) for k in rs[0]}
        overhead = med["stop"] + med["suspend"]
        print(f"[{name}] traces {args.traces}: {med['tokens']:.0f} tokens, {med['segments']:.0f} segments per run; "
              f"segmenter: core.skills StatementSegmenter; medians of {args.reps} runs")
        print(f"  generation (engine steps)        {bk.ms(med['gen'])}")
        print(f"  detokenize + segmenter           {bk.ms(med['stop'])}  {med['stop'] / med['gen']:6.2%}")
        print(f"  suspend() + resume()             {bk.ms(med['suspend'])}  {med['suspend'] / med['gen']:6.2%}")
        print(f"  row copies on leave/rejoin       {bk.ms(med['arrange'])}  {med['arrange'] / med['gen']:6.2%}"
              "  (inside the step times)")
        print(f"  row copies / KV tokens copied    {med['copies']:.0f} / {med['copied_tokens']:.0f}"
              "  (the same on any load)")
        print(f"  segmentation overhead            {bk.ms(overhead)}  {overhead / med['gen']:6.2%}  (target <= 2%)")
        totals[name] = (overhead + med["arrange"]) / med["gen"]
        print(f"  ... with the row copies          {bk.ms(overhead + med['arrange'])}  {totals[name]:6.2%}")
    a, b = totals.values()
    ca, cb = (bk.median([r["copied_tokens"] for r in rs]) for rs in runs.values())
    print(f"with copies, parked / cloned: {a / b:.2f}x time share, {ca / cb:.2f}x KV tokens copied")


if __name__ == "__main__":
    main()
