"""Segmentation overhead by the paper's definition: detokenize + segmenter + KV save/restore (suspend,
resume, and the KV row copies a batch change costs), as a share of generation time (target <= 2%).

    .venv/bin/python benchmarks/segmentation_overhead.py --reps 5 --threads 1 [--traces 1 2 6] [--pause 2]

The plans of the TimelyLLM traces (evaluation.workload.lrtrace) are replayed through the engine (forced_ids:
real forward passes, fixed content) as one batch. After every token the new token is detokenized (the
engine's text stream) and the new text fed to the skill set's incremental segmenter (core.skills
StatementSegmenter), as the scheduler's _absorb does. When a segment becomes executable the generation is
suspended, sits out ``--pause`` steps (its robot executes) and is resumed; a finished generation is released.
Two row modes of the engine, reps interleaved: parked rows in a decode window that slides to where the fewest
rows must move (default), and the same with the window fixed at rows [0, B) (``engine.rows.slide_window = False``).
Generation time = the engine's step times (row copies included). The overhead shown counts the row copies (timed
inside the steps). Load-independent counts: row copies and KV tokens copied. mean [min-max] over --reps.
Times are this thread's CPU time with --threads 1 on CPU (other jobs on a shared box not counted), wall
time otherwise.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.evaluation.workload.lrtrace import get_trace  # noqa: E402
from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers.kv_cache import SlotKV  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402


def clock() -> float:
    """CPU seconds of this thread when torch runs on it alone (time other jobs take from the shared CPU is
    not counted; on a busy box wall time swings 5-20x), else wall seconds (cuda steps are synchronised)."""
    return time.thread_time() if CPU_THREAD else time.perf_counter()


CPU_THREAD = False


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
        tracks[gid] = {"seg": skills.segmenter(), "text": engine.text_stream(), "ids": [], "segments": 0}
    arrange_s = [0.0]
    rows = engine.rows
    inner = rows.arrange

    def timed_arrange(gens):                      # the row copies a membership change costs
        bk.sync(dev)
        t0 = clock()
        changed = inner(gens)
        bk.sync(dev)
        arrange_s[0] += clock() - t0
        return changed

    rows.arrange = timed_arrange
    copied = [0, 0]                               # row copies, KV tokens copied (load-independent)
    copy_s = [0.0]                                # time in the copies themselves
    store_cls, clone_out = SlotKV, rows.clone_out

    def counting(name, tokens):
        inner_fn = getattr(store_cls, name)

        def wrapped(self, *a):
            copied[0] += 1
            copied[1] += tokens(*a)
            t0 = clock()
            inner_fn(self, *a)
            copy_s[0] += clock() - t0
        return inner_fn, wrapped

    saved = {}
    for name, tokens in (("move_row", lambda src, dst, n: n), ("write_row", lambda row, kv: kv.shape[-2])):
        saved[name], wrapped = counting(name, tokens)
        setattr(store_cls, name, wrapped)

    def counted_clone_out(gen, to_host, pin):
        copied[0] += 1
        copied[1] += gen.kv_len
        t0 = clock()
        clone_out(gen, to_host, pin)
        copy_s[0] += clock() - t0

    rows.clone_out = counted_clone_out
    running, paused, done = list(tracks), {}, set()
    gen_s = stop_s = susp_s = 0.0
    steps = 0
    while running or paused:
        for gid in [g for g, left in paused.items() if left == 0]:
            t0 = clock()
            engine.resume(gid)
            susp_s += clock() - t0
            del paused[gid]
            running.append(gid)
        paused = {g: left - 1 for g, left in paused.items()}
        if not running:
            continue
        t0 = clock()
        res = engine.step(running)
        bk.sync(dev)
        gen_s += clock() - t0
        steps += 1
        for gid in list(running):
            t0 = clock()
            track = tracks[gid]
            track["ids"].append(res.tokens[gid])   # as the scheduler's _absorb
            delta = track["text"].push(res.tokens[gid])
            segments = track["seg"].feed(delta) if delta else []
            track["segments"] += len(segments)
            stop_s += clock() - t0
            if gid in res.finished:             # released at once, as the scheduler does
                running.remove(gid)
                done.add(gid)
                track["seg"].finish()
                track["tokens"] = len(track["ids"])
                engine.release(gid)                # (not segmentation: an unsegmented run releases too)
            elif segments:
                t0 = clock()
                engine.suspend(gid)
                susp_s += clock() - t0
                running.remove(gid)
                paused[gid] = pause
    del rows.arrange, rows.clone_out
    for name, fn in saved.items():
        setattr(store_cls, name, fn)
    segments = sum(t["segments"] for t in tracks.values())
    tokens = sum(t["tokens"] for t in tracks.values())
    return {"gen": gen_s, "stop": stop_s, "suspend": susp_s, "arrange": arrange_s[0], "copy": copy_s[0],
            "segments": segments, "tokens": tokens, "copies": copied[0], "copied_tokens": copied[1],
            "steps": steps}


TRACES = [1, 2, 3, 6, 9, 10, 11]
STORES = {"warm": "warm KV store (kept between runs, as in a busy server)",
          "fresh": "fresh KV store each run (an idle engine gives its store back; first touches page-fault)"}
VARIANTS = {   # name: slide_window
    "parked rows, sliding window (default)": True,
    "parked rows, window fixed at [0, B)": False,
}


def spread(xs: list[float], fmt: str = "{:.2%}") -> str:
    """mean [min-max]."""
    return f"{fmt.format(statistics.mean(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def report(name: str, rs: list[dict[str, float]]) -> list[float]:
    """Print one variant's figures (mean [min-max] over reps); return its per-rep overhead shares."""
    r0 = rs[0]
    share = {k: [r[k] / r["gen"] for r in rs] for k in ("stop", "suspend", "arrange")}
    total = [(r["stop"] + r["suspend"] + r["arrange"]) / r["gen"] for r in rs]
    wall = [(r["gen"] + r["stop"] + r["suspend"]) / r["tokens"] for r in rs]
    print(f"[{name}] {r0['tokens']:.0f} tokens, {r0['segments']:.0f} segments, {r0['steps']:.0f} steps per run")
    print(f"  generation (engine steps)        {spread([r['gen'] * 1e3 for r in rs], '{:.0f}')} ms")
    print(f"  detokenize + segmenter           {spread(share['stop'])}")
    print(f"  suspend() + resume()             {spread(share['suspend'])}")
    copy = [r["copy"] / r["gen"] for r in rs]
    print(f"  row placement (inside the steps) {spread(share['arrange'])}   of which the copies {spread(copy)}")
    print(f"  row copies / KV tokens copied    {r0['copies']:.0f} / {r0['copied_tokens']:.0f}   (load-independent)")
    print(f"  OVERHEAD with the KV copies      {spread(total)}   (target <= 2%)")
    print(f"  time per token (all in)          {spread([w * 1e3 for w in wall], '{:.3f}')} ms")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.set_defaults(reps=5)
    parser.add_argument("--traces", type=int, nargs="+", default=TRACES)
    parser.add_argument("--pause", type=int, default=2, help="steps a suspended generation sits out")
    parser.add_argument("--store", choices=["warm", "fresh", "both"], default="both",
                        help="warm: the engine keeps its KV store between runs (a busy server); fresh: each run "
                             "starts from an idle engine, whose new store page-faults on first touch")
    args = parser.parse_args()
    loaded = bk.load_from_args(args)
    global CPU_THREAD
    CPU_THREAD = loaded.device.type == "cpu" and torch.get_num_threads() == 1
    print(bk.describe(loaded), "| clock:", "thread CPU time" if CPU_THREAD else "wall")
    print(f"traces {args.traces}, pause {args.pause} steps; segmenter: core.skills StatementSegmenter; "
          f"mean [min-max] over {args.reps} interleaved reps (after one warm-up)")
    stores = {"warm": True, "fresh": False} if args.store == "both" else {args.store: args.store == "warm"}
    engines = {}
    for store, keep in stores.items():
        engines[store] = TransformersEngine(loaded)
        engines[store].rows.keep_when_idle = keep
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(st, v): [] for st in stores for v in VARIANTS}
    for rep in range(args.reps + 1):              # interleaved, first rep is warm-up
        for store, engine in engines.items():
            for name, slide in VARIANTS.items():
                engine.rows.slide_window = slide
                r = run_once(engine, args.traces, args.pause)
                if rep:
                    runs[store, name].append(r)
    for store in stores:
        print(f"=== {STORES[store]}")
        shares = {name: report(name, runs[store, name]) for name in VARIANTS}
        sliding, fixed = VARIANTS
        ratio = [a / b for a, b in zip(shares[sliding], shares[fixed])]
        print(f"{sliding} / {fixed}, overhead with copies: {spread(ratio, '{:.2f}x')}")


if __name__ == "__main__":
    main()
