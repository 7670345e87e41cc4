#!/usr/bin/env python3
"""How long a full cycle collection stops every thread of the server's process, with and without the freeze
that configure now does (gc.freeze after loading), side by side in one process.

    .venv/bin/python benchmarks/gc_pause.py [--reps 5]

Loads what a configured server holds (rclpy and the interfaces, the embedded planner through the engine factory,
the skill sets, a policy), runs one warm-up generation, then times ``gc.collect()`` (generation 2: what Python
runs by itself now and then, on whichever thread allocates) --reps times, freezes, and times it again. A step
trace of the ROS burst had one such collection inside an engine step: 253 ms (docs/server.md).
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed_collections(reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        gc.collect()
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    import rclpy  # noqa: F401  (what the server process holds)

    from timely_llm_ros.action import Plan  # noqa: F401
    from timely_llm_ros.core.policies import make_policy
    from timely_llm_ros.core.skills import load_skill_sets
    from timely_llm_ros.engine.factory import make_engine
    from timely_llm_ros.stack import warm_up

    engine = make_engine("transformers", None, device="cpu", num_threads=1)
    skill_sets = load_skill_sets()
    warm_up(engine, engine.encode(next(iter(skill_sets.values())).build_prompt("warm up", "")))
    policy = make_policy("timely", max_batch=16)
    gc.collect()
    tracked = len(gc.get_objects())
    live = timed_collections(args.reps)
    gc.freeze()
    frozen_count = gc.get_freeze_count()
    frozen = timed_collections(args.reps)
    gc.unfreeze()
    a, b = statistics.fmean(live), statistics.fmean(frozen)
    print(f"{tracked} objects tracked by the cycle collector after loading ({frozen_count} frozen)")
    print(f"full collection, mean of {args.reps} [min, max]: as loaded {a * 1e3:.1f} ms [{min(live) * 1e3:.1f}, "
          f"{max(live) * 1e3:.1f}], after gc.freeze() {b * 1e6:.0f} us [{min(frozen) * 1e6:.0f}, "
          f"{max(frozen) * 1e6:.0f}]; frozen / as loaded {b / a:.5f}x")
    del engine, policy
    return 0


if __name__ == "__main__":
    sys.exit(main())
