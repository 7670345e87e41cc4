#!/usr/bin/env python3
"""Chunked prefill on the embedded planner: the step-time bound it buys and the throughput it costs.

    .venv/bin/python benchmarks/chunked_prefill.py [--budgets 0,16,32,64] [--decoding 4] [--arrivals 4] [--reps 3]

Scenario (real forward passes, CPU): `decoding` generations are mid-plan when `arrivals` new requests (LRTrace
drone and arm prompts through the skill sets' prompt builder) arrive at once; every generation runs to its end
(greedy). Per step-token budget (0 = unchunked): the longest step while the arrivals are prefilled, the mean
step, and the throughput of the whole run (generated tokens / wall time), as a ratio to the unchunked run
measured in the same repetition. Medians over reps. Outputs are checked token-exact against the unchunked run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.workload.lrtrace import TRACES  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402


def prompts(n: int, offset: int) -> list[str]:
    skills = load_skill_sets()
    traces = list(TRACES.values())
    out = []
    for i in range(n):
        tr = traces[(offset + i) % len(traces)]
        out.append(skills[tr.robot_type].build_prompt(tr.task, tr.context))
    return out


def run(engine, old: list[list[int]], new: list[list[int]], max_new: int) -> dict:
    for i, ids in enumerate(old):
        engine.add(f"o{i}", ids, max_new)
    live = [f"o{i}" for i in range(len(old))]
    for _ in range(3):                                   # they are decoding when the arrivals come
        engine.step([g for g in live if not engine._gens[g].finished])
    for i, ids in enumerate(new):
        engine.add(f"n{i}", ids, max_new)
    live += [f"n{i}" for i in range(len(new))]
    steps, t0, tokens = [], time.perf_counter(), 0
    while True:
        ids = [g for g in live if not engine._gens[g].finished]
        if not ids:
            break
        res = engine.step(ids)
        steps.append((res.elapsed_s, any(engine.prefill_left(g) for g in ids if g.startswith("n")) or
                      bool(res.prefilled)))
        tokens += len(res.tokens)
    wall = time.perf_counter() - t0
    outs = {g: engine.output_ids(g) for g in live}
    for g in live:
        engine.release(g)
    prefill_steps = [s for s, p in steps if p] or [0.0]
    return {"max_step": max(prefill_steps), "mean_step": statistics.fmean(s for s, _ in steps),
            "tok_s": tokens / wall, "outs": outs}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budgets", default="0,16,32,64")
    p.add_argument("--decoding", type=int, default=4)
    p.add_argument("--arrivals", type=int, default=4)
    p.add_argument("--max-new", type=int, default=24)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    engines = {b: make_engine("transformers", None, device="cpu", num_threads=args.threads,
                              step_token_budget=b or None) for b in budgets}
    enc = engines[budgets[0]]
    old = [enc.encode(t) for t in prompts(args.decoding, 0)]
    new = [enc.encode(t) for t in prompts(args.arrivals, 5)]
    print(f"embedded planner, CPU x{args.threads} thread(s): {args.decoding} decoding + {args.arrivals} arriving "
          f"(prompts {min(map(len, new))}-{max(map(len, new))} tokens), {args.max_new} tokens each, {args.reps} reps")
    rows = {b: [] for b in budgets}
    for _ in range(args.reps):
        ref = None
        for b in budgets:
            r = run(engines[b], old, new, args.max_new)
            if ref is None:
                ref = r
            assert r["outs"] == ref["outs"], f"budget {b}: outputs differ from the unchunked run"
            rows[b].append((r["max_step"], r["mean_step"], r["tok_s"], r["tok_s"] / ref["tok_s"]))
    print(f"{'budget':>7s} {'max prefill step ms':>20s} {'mean step ms':>13s} {'tokens/s':>9s} {'vs unchunked':>13s}")
    for b in budgets:
        med = [statistics.median(x[i] for x in rows[b]) for i in range(4)]
        print(f"{b or 'off':>7} {med[0] * 1e3:20.1f} {med[1] * 1e3:13.1f} {med[2]:9.1f} {med[3]:13.2f}")
    print("outputs token-exact across budgets: yes")


if __name__ == "__main__":
    main()
