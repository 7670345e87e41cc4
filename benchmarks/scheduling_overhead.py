#!/usr/bin/env python3
"""Scheduling overhead: wall time of one priority update + pick (policy.select) with N queued generations.

    python benchmarks/scheduling_overhead.py [--queued 1,2,4,6,8,1000] [--policies timely,edf,fcfs]

Targets: <= 0.1 ms with 8 queued, <= 2 ms with 1,000 (the paper's Table 5: 0.58 ms for 1, 2.03 ms for 8).
Queued generations mix fresh and suspended ones of both urgency classes, so every priority branch runs.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.evaluation.metrics import time_select  # noqa: E402
from timely_llm_ros.core.policies import SchedulingContext, make_policy  # noqa: E402
from timely_llm_ros.core.request import Generation, PlanRequest, Segment  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402


def queue(n: int, rng: random.Random) -> list[Generation]:
    gens = []
    for i in range(n):
        cls = "urgent" if rng.random() < 0.375 else "normal"
        g = Generation(PlanRequest(f"g{i}", f"drone_{i}", "drone", "task", DEFAULT_URGENCY_CLASSES[cls],
                                   arrival=rng.uniform(-1.0, 0.0), urgency=cls), prompt_ids=[0] * 64)
        if rng.random() < 0.5:  # suspended after a segment
            g.segments.append(Segment(0, "mf(50);", [], 0.0, 0.0, 2.0))
            g.expected_exec_end = rng.uniform(-0.5, 3.0)
            g.prefilled = True
        gens.append(g)
    return gens


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queued", default="1,2,4,6,8,1000")
    p.add_argument("--policies", default="timely,edf,fcfs")
    p.add_argument("--repeats", type=int, default=500)
    p.add_argument("--max-batch", type=int, default=16)
    args = p.parse_args(argv)
    rng = random.Random(0)
    print(f"{'policy':8s} {'queued':>7s} {'mean ms':>9s} {'p99 ms':>9s} {'max ms':>9s}")
    for name in args.policies.split(","):
        for n in (int(x) for x in args.queued.split(",")):
            ctx = SchedulingContext(now=0.0, kv_free_bytes=math.inf, kv_bytes_per_token=131072.0, step_time_s=0.022)
            s = time_select(make_policy(name, max_batch=args.max_batch), queue(n, rng), [], ctx, args.repeats)
            print(f"{name:8s} {n:7d} {s.mean_ms:9.4f} {s.p99_ms:9.4f} {s.max_ms:9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
