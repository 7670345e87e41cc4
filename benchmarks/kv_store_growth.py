#!/usr/bin/env python3
"""What a burst costs the transformers engine's slot KV store: reserved address space vs grow-and-copy.

    .venv/bin/python benchmarks/kv_store_growth.py [--waves 8] [--wave 16] [--prompt 90] [--decode 8] [--reps 5]

A burst as the ROS server meets it: ``--waves`` waves of ``--wave`` generations (``--prompt``-token prompts)
arrive one after another; each wave is prefilled in one step, decodes ``--decode`` steps and is suspended,
so its generations stay parked in store rows while the next wave runs (8 x 16 = 128 rows at the end). Two
engines on the same model, alternated per repetition:
  reserved  the default on CPU: the store sits in a reservation of address space and grows by widening a view;
  copy      ``engine.rows.reserve = False``: a growth allocates a larger zeroed buffer and copies the store into it.
Printed per mode (medians over --reps): the burst's wall time, its longest step, the store growths that copied,
and the process's resident memory (RSS, /proc) at the end of the burst and after every generation is released,
against its level before the burst. Ratios are copy / reserved, measured in the same run.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from report import rss_mb  # noqa: E402

from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers_engine import TransformersEngine  # noqa: E402

MODES = ("reserved", "copy")


def burst(loaded, reserve: bool, args) -> dict[str, float]:
    """One burst on a fresh engine; its wall time, longest step, copying growths and RSS figures."""
    engine = TransformersEngine(loaded)
    engine.rows.reserve = reserve
    gc.collect()
    base = rss_mb()
    steps, copies, reservation = [], 0, None
    start = time.perf_counter()
    for w in range(args.waves):
        ids = [f"w{w}g{i}" for i in range(args.wave)]
        for i, gen_id in enumerate(ids):
            engine.add(gen_id, bk.random_prompt(loaded, args.prompt, seed=w * 1000 + i), 10**6,
                       forced_ids=bk.endless(loaded))
        for _ in range(1 + args.decode):
            t0 = time.perf_counter()
            engine.step(ids)
            steps.append(time.perf_counter() - t0)
            now = engine.rows.store.reservation     # changes only when a growth reallocates and copies
            copies += reservation is not None and now != reservation
            reservation = now
        for gen_id in ids:
            engine.suspend(gen_id)
    wall = time.perf_counter() - start
    held = rss_mb() - base
    rows = engine.rows.store.rows
    for gen_id in list(engine._gens):
        engine.release(gen_id)
    engine.close()
    del engine
    after = rss_mb() - base
    return {"wall": wall, "max_step": max(steps), "copies": copies, "rows": rows, "held_mb": held,
            "after_mb": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.add_argument("--waves", type=int, default=8)
    parser.add_argument("--wave", type=int, default=16, help="generations per wave")
    parser.add_argument("--prompt", type=int, default=90, help="prompt tokens (the arm traces' ~80-90)")
    parser.add_argument("--decode", type=int, default=8, help="decode steps per wave before it is suspended")
    parser.set_defaults(reps=5, threads=1)
    args = parser.parse_args()
    loaded = bk.load_from_args(args)
    print(bk.describe(loaded))
    burst(loaded, True, args)        # warm-up (allocator, kernels)
    got: dict[str, list[dict]] = {m: [] for m in MODES}
    for rep in range(args.reps):
        order = MODES if rep % 2 == 0 else MODES[::-1]
        for mode in order:
            got[mode].append(burst(loaded, mode == "reserved", args))
        print(f"  rep {rep + 1}/{args.reps}: " + "  ".join(
            f"{m} {got[m][-1]['wall'] * 1e3:.0f} ms (longest step {got[m][-1]['max_step'] * 1e3:.0f} ms)"
            for m in MODES), flush=True)
    med = {m: {k: bk.median([r[k] for r in got[m]]) for k in got[m][0]} for m in MODES}
    print(f"\n{args.waves} waves x {args.wave} generations ({args.prompt}-token prompts, {args.decode} decode steps "
          f"each, parked after): store {med['reserved']['rows']:.0f} rows at the end; medians of {args.reps}")
    print(f"{'':10s} {'burst':>10s} {'longest step':>13s} {'copying growths':>16s} {'RSS held':>10s} "
          f"{'RSS after release':>18s}")
    for m in MODES:
        r = med[m]
        print(f"{m:10s} {r['wall'] * 1e3:7.0f} ms {r['max_step'] * 1e3:10.1f} ms {r['copies']:16.0f} "
              f"{r['held_mb']:7.0f} MiB {r['after_mb']:14.1f} MiB")
    ratio = {k: med["copy"][k] / med["reserved"][k] for k in ("wall", "max_step")}
    print(f"copy / reserved: burst time {ratio['wall']:.2f}x, longest step {ratio['max_step']:.2f}x")


if __name__ == "__main__":
    main()
