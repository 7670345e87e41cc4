#!/usr/bin/env python3
"""Engine steps on the scheduler's thread vs in a child process (engine/process_engine.py), next to a Python thread
that holds the GIL part of the time, as the ROS node's threads do in a burst; side by side in one run.

    .venv/bin/python benchmarks/engine_process.py [--duties 0,25,50,75] [--rounds 4] [--steps 60] [--batch 16]

Both engines are the embedded planner (transformers, 1 torch thread, greedy). The competitor thread runs pure
Python for busy = duty x 1.2 ms, then sleeps the rest of that 1.2 ms period; the process's GIL switch interval is
the server's (1 ms). A measurement adds --batch fresh generations of one prompt, prefills them, runs 5 warm-up
steps, then times --steps decode steps as the caller sees them (the call's wall time: for the child process the
pipe round trip is included) and releases them. Modes rotate over --rounds rounds; the table gives each duty's
median over rounds of the per-round median step, and the ratios to the in-thread engine without competitor.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PERIOD_S = 0.0012


def compete(stop: threading.Event, busy_s: float) -> None:
    """Hold the GIL busy_s of every PERIOD_S (pure Python), sleep the rest."""
    while not stop.is_set():
        end = time.perf_counter() + busy_s
        n = 0
        while time.perf_counter() < end:
            n += 1
        time.sleep(PERIOD_S - busy_s)


def step_times(engine, prompt: list[int], tag: str, batch: int, steps: int) -> float:
    """Median caller-side time of a decode step of `batch` fresh generations."""
    ids = [f"{tag}-{i}" for i in range(batch)]
    for g in ids:
        engine.add(g, prompt, steps + 10, forced_ids=[prompt[-1]] * (steps + 10))
    engine.step(ids)
    for _ in range(5):
        engine.step(ids)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        engine.step(ids)
        times.append(time.perf_counter() - t0)
    for g in ids:
        engine.release(g)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duties", default="0,25,50,75", help="competitor's GIL share, percent")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args(argv)
    from timely_llm_ros.engine.factory import make_engine
    from timely_llm_ros.engine.process_engine import ProcessEngine
    from timely_llm_ros.ros.spin import set_gil_switch_interval

    set_gil_switch_interval()
    engines = {"thread": make_engine("transformers", num_threads=1),
               "process": ProcessEngine("transformers", None, num_threads=1)}
    try:
        prompt = engines["thread"].encode("Plan for drone_1 (drone): look for the cat in the kitchen, then land.")
        duties = [int(d) for d in args.duties.split(",")]
        res: dict[tuple[str, int], list[float]] = {}
        n = 0
        for rnd in range(args.rounds):
            order = [(m, d) for d in duties for m in engines]
            for mode, duty in (order if rnd % 2 == 0 else order[::-1]):
                stop, comp = threading.Event(), None
                if duty:
                    comp = threading.Thread(target=compete, args=(stop, PERIOD_S * duty / 100))
                    comp.start()
                    time.sleep(0.1)
                n += 1
                res.setdefault((mode, duty), []).append(
                    step_times(engines[mode], prompt, f"m{n}", args.batch, args.steps))
                stop.set()
                if comp is not None:
                    comp.join()
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        for engine in engines.values():
            engine.close()
    base = statistics.median(res[("thread", 0)]) if ("thread", 0) in res else None
    print(f"decode step, batch {args.batch}, caller's wall time: median over {args.rounds} rounds of each round's "
          f"median of {args.steps} steps")
    print("| competitor's GIL share | engine on the scheduler's thread | engine in a child process | "
          "process / thread |")
    print("|---|---|---|---|")
    for duty in duties:
        t = statistics.median(res[("thread", duty)])
        c = statistics.median(res[("process", duty)])
        rel = (f" ({t / base:.2f}x / {c / base:.2f}x of the thread alone)" if base else "")
        print(f"| {duty}% | {1e3 * t:.2f} ms | {1e3 * c:.2f} ms | {c / t:.2f}x{rel} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
