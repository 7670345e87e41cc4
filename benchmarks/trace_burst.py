#!/usr/bin/env python3
"""Trace one seed of a compare_policies preset: each urgent request's fate next to the urgent-alone bound's, and
every engine step (batch, urgent members, duration) and batch pick (priorities, who was left out) in a window.

    .venv/bin/python benchmarks/trace_burst.py [--seed 1] [--policy timely] [--workload burst] [--window 0.6]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compare_policies as cp  # noqa: E402
from timely_llm_ros.core.metrics import request_utility  # noqa: E402
from timely_llm_ros.core.policies.timely import TimelyPolicy  # noqa: E402
from timely_llm_ros.core.sim import load_latency_model, sim_engine  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policy", default="timely")
    p.add_argument("--workload", default="burst")
    p.add_argument("--window", type=float, default=0.6, help="seconds after the first urgent arrival to log")
    p.add_argument("--latency", default="llama3-8b-rtx4090")
    p.add_argument("--alone", action="store_true", help="replay the urgent requests alone (the bound's workload)")
    args = p.parse_args(argv)
    lat, preset = load_latency_model(args.latency), cp.PRESETS[args.workload]
    wl = preset.make(args.seed)
    full = wl
    if args.alone:
        wl = cp.class_alone(wl, "urgent")
    t0 = min(t.arrival for t in wl.tasks if t.urgency == "urgent")
    _, bound = cp.bound_for(full, lat, preset.sim, args.seed)
    steps, picks = [], []
    step, select = sim_engine.SimEngine.step, TimelyPolicy.select

    def logged_step(self, ids):
        res = step(self, ids)
        steps.append((self.clock.now - res.elapsed_s - t0, list(ids), res.elapsed_s, len(res.prefilled)))
        return res

    def logged_select(self, waiting, running, ctx):
        batch = select(self, waiting, running, ctx)
        if 0 <= ctx.now - t0 <= args.window:
            show = lambda gs: " ".join(f"{g.req.req_id}/{g.req.urgency[0]}{g.k}:{self.priority(g, ctx.now):.0f}"
                                       for g in gs)
            picks.append(f"pick +{ctx.now - t0:.3f}: {show(batch)}\n    left out: "
                         f"{show([g for g in [*running, *waiting] if g not in batch][:12])}")
        return batch

    sim_engine.SimEngine.step, TimelyPolicy.select = logged_step, logged_select
    try:
        res = cp.run_one(args.policy, 16, wl, lat, preset.sim, args.seed)
    finally:
        sim_engine.SimEngine.step, TimelyPolicy.select = step, select
    urgent = sorted((o for o in res.outcomes if o.req.urgency == "urgent"), key=lambda o: o.req.arrival)
    ids = {o.req.req_id for o in urgent}
    print(f"{args.workload} seed {args.seed}, {args.policy}: urgent utility per request (bound alone)")
    for o in urgent:
        rt = "  -  " if o.response_time is None or o.response_time != o.response_time else f"{o.response_time:.3f}"
        print(f"  {o.req.req_id} +{o.req.arrival - t0:.3f} {o.state.name:9s} rt {rt} u {request_utility(o):+.2f} "
              f"({bound.get(o.req.req_id, float('nan')):+.2f}) {(o.message or '')[:60]}")
    print("engine steps (start after the first urgent arrival, duration, batch size, urgent members):")
    for start, batch, dt, prefilled in steps:
        if -0.3 <= start <= args.window:
            urg = [g for g in batch if g in ids]
            print(f"  +{start:.3f} {dt * 1e3:6.1f} ms batch {len(batch):2d} prefills {prefilled} urgent {' '.join(urg)}")
    print("\n".join(picks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
