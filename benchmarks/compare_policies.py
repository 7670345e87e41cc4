#!/usr/bin/env python3
"""Run several scheduling policies on the SAME simulated workload and compare them (TimelyLLM Figs. 5, 7, 8, 9).

    python benchmarks/compare_policies.py --workload WID1 --policies timely,vllm,vllm-stream,fcfs,edf \
        [--batch-sweep 1,2,4,6,8,12,16] [--latency llama3-8b-rtx4090] [--seed 1] --out out/bench_wid1

Writes <out>/summary.csv (policy, max_batch, task type, metrics), <out>/workload.yaml and PNG plots of utility,
response time and waiting time per task type (and utility vs max batch size for a sweep). A policy name may carry
options: timely-fixed (no adaptive admission), timely-nodrop (never drop).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm  # noqa: E402

from report import print_table, write_csv  # noqa: E402

from timely_llm_ros.core.metrics import by_urgency, overhead_summary, summarize  # noqa: E402
from timely_llm_ros.core.policies import make_policy  # noqa: E402
from timely_llm_ros.core.policies.timely import options_from_skill_sets  # noqa: E402
from timely_llm_ros.core.sim import load_latency_model  # noqa: E402
from timely_llm_ros.core.sim.simulator import Simulator  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.workload import load_spec, generate, load_workload, save_workload  # noqa: E402

VARIANTS = {"timely-fixed": ("timely", {"adaptive": False}), "timely-nodrop": ("timely", {"drop": "never"})}
FIELDS = ["policy", "max_batch", "group", "n", "utility", "utility_share", "eq3_utility", "response_time",
          "waiting_time", "completion_time", "served", "dropped"]


def build_policy(spec: str, max_batch: int, network_delay_s: float):
    name, options = VARIANTS.get(spec, (spec, {}))
    if name == "timely":
        options = {"network_delay_s": network_delay_s, **options_from_skill_sets(load_skill_sets()), **options}
    return make_policy(name, max_batch=max_batch, options=options)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="WID1", help="preset name (config/workloads) or a saved workload YAML")
    p.add_argument("--policies", default="timely,vllm,vllm-stream,fcfs,edf")
    p.add_argument("--batch-sweep", default="", help="comma-separated max batch sizes (Fig. 7)")
    p.add_argument("--max-batch", type=int, default=16, help="max batch size without a sweep")
    p.add_argument("--latency", default="llama3-8b-rtx4090", help="config/latency profile name or YAML path")
    p.add_argument("--seed", type=int, default=None, help="workload seed (default: the preset's)")
    p.add_argument("--duration", type=float, default=None, help="override the workload duration (s)")
    p.add_argument("--out", default="out/bench")
    p.add_argument("--no-plots", action="store_true")
    return p.parse_args(argv)


def load_or_generate(args):
    if args.workload.endswith((".yaml", ".yml")):
        return load_workload(args.workload)
    overrides = {}
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.duration is not None:
        overrides["duration_s"] = args.duration
    return generate(load_spec(args.workload, **overrides))


def run(args) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workload = load_or_generate(args)
    save_workload(workload, out / "workload.yaml")
    latency = load_latency_model(args.latency)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    batches = [int(b) for b in args.batch_sweep.split(",") if b.strip()] or [args.max_batch]
    print(f"{workload.spec.name}: {len(workload.tasks)} tasks in {workload.events} events "
          f"({workload.skipped} skipped: no free agent); latency profile {args.latency}")
    rows: list[dict] = []
    runs = [(p, b) for b in batches for p in policies]
    for spec, mb in tqdm(runs, desc="policies", unit="run"):
        sim = Simulator(build_policy(spec, mb, latency.network_delay_s), latency, seed=workload.spec.seed)
        result = sim.run(workload)
        groups = {**summarize(result.outcomes), **{f"[{k}]": v for k, v in
                                                   summarize(result.outcomes, by_urgency).items() if k != "all"}}
        for name, m in groups.items():
            rows.append({"policy": spec, "max_batch": mb, "group": name,
                         **{k: v for k, v in m.as_dict().items() if k != "task_type"}})
        oh = overhead_summary(result.select_s)
        tqdm.write(f"  {spec:14s} batch {mb:3d}: sim {result.sim_time_s:7.1f} s, {result.engine_steps} steps, "
                   f"wall {result.wall_s:5.1f} s, select mean {oh['mean_ms']:.3f} ms / max {oh['max_ms']:.3f} ms")
    write_csv(out / "summary.csv", rows, FIELDS)
    print_table([r for r in rows if r["group"].startswith("[") or r["group"] == "all"], with_batch=True)
    if not args.no_plots:
        plot(rows, out, workload.spec.name, len(batches) > 1)
    print(f"wrote {out / 'summary.csv'}" + ("" if args.no_plots else f" and plots in {out}"))
    return rows


def plot(rows: list[dict], out: Path, title: str, sweep: bool) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(r["policy"] for r in rows))
    batch = max(r["max_batch"] for r in rows) if not sweep else None
    groups = [g for g in dict.fromkeys(r["group"] for r in rows) if not g.startswith("[") and g != "all"]
    for metric, label in (("utility", "time utility (TUF of response time)"), ("response_time", "response time (s)"),
                          ("waiting_time", "robot waiting time (s)")):
        fig, ax = plt.subplots(figsize=(max(6, len(groups) * 0.9), 3.5))
        width = 0.8 / len(policies)
        for i, pol in enumerate(policies):
            sel = [r for r in rows if r["policy"] == pol and (batch is None or r["max_batch"] == batch)]
            if sweep:  # per-type bars at the best batch size of this policy
                best = max((r for r in sel if r["group"] == "all"), key=lambda r: r["utility"])["max_batch"]
                sel = [r for r in sel if r["max_batch"] == best]
            vals = [next((r[metric] for r in sel if r["group"] == g), math.nan) for g in groups]
            ax.bar([x + i * width for x in range(len(groups))], vals, width, label=pol)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))], groups)
        ax.set_xlabel("task type (LRTrace id)")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.axhline(0, color="black", lw=0.5)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"{metric}.png", dpi=120)
        plt.close(fig)
    if sweep:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for pol in policies:
            pts = sorted((r["max_batch"], r["utility"]) for r in rows if r["policy"] == pol and r["group"] == "all")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=pol)
        ax.set_xlabel("max batch size")
        ax.set_ylabel("mean time utility")
        ax.set_title(f"{title}: batch-size sweep")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "batch_sweep.png", dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    run(parse_args())
