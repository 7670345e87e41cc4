#!/usr/bin/env python3
"""Compare scheduling policies on the SAME simulated workloads, over several seeds, against an upper bound.

    python benchmarks/compare_policies.py --workload WID1 [--policies timely,edf,vllm-stream] [--seeds 1,2,3,4,5] \\
        [--batch-sweep 1,2,4,6,8,12,16] [--latency llama3-8b-rtx4090] --out out/bench_wid1
    python benchmarks/compare_policies.py --workload WID1,WID2,WID3,burst,closed-loop --out out/ablation
    python benchmarks/compare_policies.py --workload WID1 --cache-sweep 0,1000,2000,2400,2600,2800,2883 --out out/cache
    python benchmarks/compare_policies.py --workload WID1,burst --layers-sweep 1,4,8,16,32,80 --out out/layers
    python benchmarks/compare_policies.py --workload WID1 --seeds 1-30 --blocks 5 --policies timely,cap05 \\
        --variant cap05=timely:step_prefill_s=0.05 --out out/cap05
    python benchmarks/compare_policies.py upper-bound --workload WID1 [--seeds 1,2,3,4,5] [--cls urgent]

--workload: preset names (PRESETS; register_preset adds one) or a saved workload YAML. --policies: any name
make_policy knows (core/policies, e.g. timely, edf, fcfs, vllm, vllm-stream, timely-open-loop, edf-admit,
fcfs-admit) or a variant in VARIANTS (register_variant adds one, --variant on the command line). Every figure is
the mean [min-max] over the seeds; each seed draws its own workload and every policy replays that same workload.
Upper bound per class: the same latency model serving that class alone (its requests only), best of
BOUND_POLICIES; "share" = utility / bound. Writes <out>/runs.csv (one row per preset, seed, policy, max batch,
group), <out>/summary.csv and <out>/summary.md (mean [min-max]), with --blocks <out>/blocks.md, and PNG plots
(utility per policy; batch sweep; cache sweep; layers sweep: where an interrupt can end a step).

The sub-command upper-bound computes a true upper bound on one class's mean utility instead (UPPER_BOUND_DOC
below): how much room the class-alone bound leaves.
"""
from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from report import parse_seeds, write_csv  # noqa: E402

from timely_llm_ros.core.composition import PolicyChoice, build_policy  # noqa: E402
from timely_llm_ros.evaluation.metrics import by_urgency, request_utility, summarize  # noqa: E402
from timely_llm_ros.core.policies import POLICIES, RENAMED, known_names, make_policy  # noqa: E402
from timely_llm_ros.core.request import RequestState  # noqa: E402
from timely_llm_ros.core.scheduler import SchedulerConfig  # noqa: E402
from timely_llm_ros.evaluation.sim import LatencyModel, load_latency_model  # noqa: E402
from timely_llm_ros.evaluation.sim.simulator import ExecNoise, Simulator  # noqa: E402
from timely_llm_ros.evaluation.sim.tokenizer import PieceTokenizer  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.evaluation.workload import generate, load_spec, load_workload  # noqa: E402
from timely_llm_ros.evaluation.workload.generator import Workload, burst  # noqa: E402

DEFAULT_POLICIES = ("timely,timely-fixed,timely-nodrop,timely-open-loop,timely-nopreempt,timely-nointerrupt,"
                    "timely-mixed-steps,"
                    "timely-chunked,timely-maxseg,timely-reloads-free,timely-fixed-cap,edf,edf-admit,fcfs,fcfs-admit,"
                    "vllm-stream,vllm")
BOUND_POLICIES = ("timely", "edf-admit", "edf", "vllm-stream")


# ----------------------------------------------------------------------------------------------- registries
@dataclass(frozen=True)
class Preset:
    """A workload family: make(seed) draws one workload; sim holds Simulator keywords (noise, scheduler config)."""

    make: Callable[[int], Workload]
    sim: dict[str, Any] = field(default_factory=dict)
    about: str = ""


PRESETS: dict[str, Preset] = {}
VARIANTS: dict[str, tuple[str, dict, dict]] = {}   # name -> (registered policy, policy options, Simulator keywords)


def register_preset(name: str, make: Callable[[int], Workload], sim: dict | None = None, about: str = "") -> None:
    """Make a workload family available to --workload (another branch's presets register the same way)."""
    PRESETS[name] = Preset(make, dict(sim or {}), about)


def register_variant(name: str, policy: str, options: dict | None = None, sim: dict | None = None) -> None:
    """Make a policy with options (and Simulator keywords, e.g. a chunked engine) available to --policies."""
    VARIANTS[name] = (policy, dict(options or {}), dict(sim or {}))


for _wid in ("WID1", "WID2", "WID3"):
    register_preset(_wid, lambda seed, w=_wid: generate(load_spec(w, seed=seed)), about=f"TimelyLLM Table 3 {_wid}")
register_preset("burst", lambda seed: burst(seed),
                about="16-20 arm plans generating, then 20-30 urgent drone requests within 100 ms")
register_preset("closed-loop",
                lambda seed: generate(load_spec("WID1", seed=seed, name="CLOSED", chain=3, think_s=1.0,
                                                trace_ids=(1, 2, 3, 4, 5, 6, 7, 8, 12))),
                sim={"exec_noise": ExecNoise(factor="lognormal", median=1.0, sigma=0.5, failure_rate=0.05),
                     "scheduler_config": SchedulerConfig(replan_on_failure=1)},
                about="WID1 drones + chat, 1-3 tasks per robot each sent 1 s after the previous really ended; "
                      "execution x lognormal(median 1, sigma 0.5) of the model, 5% of segments fail, 1 replan")

register_variant("timely-fixed", "timely", {"adaptive": False})
register_variant("timely-nodrop", "timely", {"drop": "never"})
register_variant("timely-nopreempt", "timely", {"preempt": False})
register_variant("edf-admit-nointerrupt", "edf-admit", {"interrupt": False})
register_variant("timely-paper-admit", "timely", {"prefill_aware": False, "preempt": False})
register_variant("timely-deadline-admit", "timely", {"admission": "deadline"})
register_variant("timely-chunked", "timely", {}, {"step_token_budget": 256})
register_variant("timely-maxseg", "timely", {"segment_estimate": "max"})      # worst-case segment in the utility test
register_variant("timely-reloads-free", "timely", {"step_reloads": False})   # KV reloads outside the per-step cap
register_variant("timely-fixed-cap", "timely", {"crowd_plan": False})      # crowds split by the fixed 0.1 s step cap
register_variant("timely-promise", "timely", {"crowd_promise": True})     # a split's deferred members keep their place
register_variant("timely-served", "timely", {"crowd_objective": "served"})  # crowd plan: most served first
register_variant("timely-served-promise", "timely", {"crowd_objective": "served", "crowd_promise": True})


# ----------------------------------------------------------------------------------------------- building runs
def timely_cost_options(latency: LatencyModel, prompt_tokens: int) -> dict:
    """Admission's step-cost figures taken from the latency profile the simulation uses (not tuned): a prompt's
    suffix after the cached prefix costs p per token + c per step; a decode step grows by r per sequence."""
    ctx = prompt_tokens
    p = latency.prefill_b + latency.prefill_a * ctx
    t1 = latency.decode_s(1, ctx)
    r = (latency.decode_per_seq + latency.decode_per_kv_token * ctx) / t1
    return {"prefill_token_s": p, "prefill_step_s": latency.prefill_c, "token_time_s": t1, "decode_seq_ratio": r,
            "network_delay_s": latency.network_delay_s}


def build(spec: str, max_batch: int, latency: LatencyModel, prompt_tokens: int):
    """(policy, Simulator keywords) for a registered policy name or a variant."""
    name, options, sim = VARIANTS.get(spec, (spec, {}, {}))
    if name not in known_names() and name not in RENAMED:
        raise SystemExit(f"unknown policy {spec!r}; registered: {', '.join(sorted(POLICIES))}; "
                         f"variants: {', '.join(sorted(VARIANTS))}")
    # composed as the server composes a policy: the latency model's step times stand in for the hardware fit
    choice = PolicyChoice(name, max_batch, options=options, network_delay_s=latency.network_delay_s)
    return build_policy(choice, load_skill_sets(), timely_cost_options(latency, prompt_tokens)), sim


def run_one(spec: str, max_batch: int, workload: Workload, latency: LatencyModel, preset_sim: dict, seed: int):
    policy, sim = build(spec, max_batch, latency, workload.spec.prompt_tokens)
    kwargs = {**preset_sim, **sim}
    if "scheduler_config" in kwargs:
        kwargs["scheduler_config"] = replace(kwargs["scheduler_config"])   # the simulator sets its delay
    return Simulator(policy, latency, seed=seed, **kwargs).run(workload)


def groups_of(outcomes) -> dict[str, Any]:
    by_class = summarize(outcomes, by_urgency)
    return {g: m for g, m in by_class.items()}


def class_alone(workload: Workload, cls: str) -> Workload:
    return Workload(workload.spec, [t for t in workload.tasks if t.urgency == cls and not t.after], 0, 0)


def bound_for(workload: Workload, latency, preset_sim: dict, seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """Per class: the best mean utility any BOUND_POLICIES policy gets serving that class alone, and each request's
    utility in that best run (closed-loop follow-up tasks are left out: they depend on the run)."""
    best, per_request = {}, {}
    for cls in sorted({t.urgency for t in workload.tasks}):
        alone = class_alone(workload, cls)
        for spec in BOUND_POLICIES:
            res = run_one(spec, 16, alone, latency, preset_sim, seed)
            util = statistics.fmean(request_utility(o) for o in res.outcomes)
            if cls not in best or util > best[cls]:
                best[cls] = util
                per_request.update({o.req.req_id: request_utility(o) for o in res.outcomes})
    return best, per_request


def span(values: list[float]) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "-"
    return f"{statistics.fmean(vals):.3f} [{min(vals):.3f}, {max(vals):.3f}]"


# ----------------------------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="WID1", help="preset names (comma-separated) or a saved workload YAML")
    p.add_argument("--policies", default=DEFAULT_POLICIES)
    p.add_argument("--seeds", default="1,2,3,4,5", help="workload seeds, one workload each (list or ranges: 1-30)")
    p.add_argument("--blocks", type=int, default=0,
                   help="also write blocks.md: the mean of each run of this many consecutive seeds (how much a "
                        "figure over 5 seeds depends on which 5)")
    p.add_argument("--batch-sweep", default="", help="comma-separated max batch sizes (Fig. 7)")
    p.add_argument("--max-batch", type=int, default=16, help="max batch size without a sweep")
    p.add_argument("--latency", default="llama3-8b-rtx4090", help="config/latency profile name or YAML path")
    p.add_argument("--cache-sweep", default="", help="cached prefix tokens to sweep (0..prompt length)")
    p.add_argument("--layers-sweep", default="", help="decoder layers of the latency model to sweep (an interrupt "
                   "ends a step at the next of that many boundaries; 1: never mid-step)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=POLICY:KEY=VALUE,...",
                   help="register a policy variant for --policies (repeatable), e.g. "
                        "timely-cap05=timely:step_prefill_s=0.05 (values are read as YAML scalars)")
    p.add_argument("--no-bound", action="store_true", help="skip the class-alone upper bound runs")
    p.add_argument("--robots", choices=("per_task", "named"), default="per_task",
                   help="per_task: each task goes to a free robot (the paper's setting); named: the workload's agent "
                        "ids are the robots, one plan per robot, so a task for a busy agent waits")
    p.add_argument("--out", default="out/bench")
    p.add_argument("--no-plots", action="store_true")
    return p.parse_args(argv)


def variant_from_arg(text: str) -> None:
    """Register --variant NAME=POLICY:KEY=VALUE,... (NAME=POLICY alone is an alias); stops on an option the
    policy does not have (its options dataclass, core/policies)."""
    import yaml

    name, eq, rest = text.partition("=")
    policy, _, opts = rest.partition(":")
    if not eq or not name.strip() or not policy.strip():
        raise SystemExit(f"--variant {text!r}: expected NAME=POLICY:KEY=VALUE,... "
                         "(e.g. timely-cap05=timely:step_prefill_s=0.05)")
    options = {}
    for item in (i for i in opts.split(",") if i.strip()):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"--variant {text!r}: option {item!r} is not KEY=VALUE")
        options[key.strip()] = yaml.safe_load(value)
    try:
        make_policy(policy.strip(), options=options)
    except ValueError as e:
        raise SystemExit(f"--variant {text!r}: {e}") from None
    register_variant(name.strip(), policy.strip(), options)


def workloads(args) -> list[tuple[str, int, Workload, dict]]:
    seeds = parse_seeds(args.seeds)
    out = []
    for name in [w.strip() for w in args.workload.split(",") if w.strip()]:
        if name.endswith((".yaml", ".yml")):
            out.append((Path(name).stem, 0, load_workload(name), {}))
            continue
        if name not in PRESETS:
            raise SystemExit(f"unknown workload preset {name!r}; known: {', '.join(PRESETS)}")
        for seed in seeds:
            out.append((name, seed, PRESETS[name].make(seed), PRESETS[name].sim))
    return out


def run(args) -> list[dict]:
    for text in args.variant:
        variant_from_arg(text)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    batches = [int(b) for b in args.batch_sweep.split(",") if b.strip()] or [args.max_batch]
    caches = [int(c) for c in args.cache_sweep.split(",") if c.strip()] or [None]
    layer_counts = [int(n) for n in args.layers_sweep.split(",") if n.strip()] or [None]
    if caches != [None] and layer_counts != [None]:
        raise SystemExit("--cache-sweep and --layers-sweep: one sweep at a time")
    if any(n is not None and n < 1 for n in layer_counts):
        raise SystemExit(f"--layers-sweep {args.layers_sweep!r}: layer counts are >= 1")
    if args.blocks > 0 and (batches != [args.max_batch] or caches != [None] or layer_counts != [None]):
        raise SystemExit("--blocks: leave out --batch-sweep, --cache-sweep and --layers-sweep (one figure per policy "
                         "and seed)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base_latency = load_latency_model(args.latency)
    rows: list[dict] = []
    print(f"latency profile {args.latency} ({base_latency.source}); cached prefix "
          f"{base_latency.cached_prefix_tokens} tokens, {base_latency.layers} layers unless swept")
    variants = [(c, n) for c in caches for n in layer_counts]
    for preset, seed, workload, preset_sim in workloads(args):
        preset_sim = {**preset_sim, "robots": args.robots}
        for cached, layers in variants:
            latency = base_latency if cached is None else replace(base_latency, cached_prefix_tokens=cached)
            latency = latency if layers is None else replace(latency, layers=layers)
            bound, per_request = ({}, {}) if args.no_bound else bound_for(workload, latency, preset_sim, seed)
            if bound:   # all: the class bounds weighted by how many requests each class has
                counts = _counts(workload)
                bound["all"] = sum(bound[c] * n for c, n in counts.items()) / sum(counts.values())
            for mb in batches:
                for spec in policies:
                    res = run_one(spec, mb, workload, latency, preset_sim, seed)
                    for g, m in groups_of(res.outcomes).items():
                        b = bound.get(g, math.nan)
                        lost = [o for o in res.outcomes if (g == "all" or o.req.urgency == g)
                                and o.state == RequestState.DROPPED and per_request.get(o.req.req_id, 0.0) > 0]
                        rows.append({"preset": preset, "seed": seed, "policy": spec, "max_batch": mb,
                                     "cached": latency.cached_prefix_tokens, "layers": latency.layers,
                                     "group": g, "n": m.n,
                                     "utility": m.utility, "share_of_max": m.utility_share, "bound": b,
                                     "share": m.utility / b if b and not math.isnan(b) and b > 0 else math.nan,
                                     "response_time": m.response_time, "waiting_time": m.waiting_time,
                                     "eq3_utility": m.eq3_utility, "served": m.served, "dropped": m.dropped,
                                     "dropped_bound_positive": len(lost),
                                     "replans": sum(o.replans for o in res.outcomes), "sim_s": res.sim_time_s})
        print(f"  {preset} seed {seed}: {len(workload.tasks)} tasks, bound {bound}")
    fields = list(rows[0])
    write_csv(out / "runs.csv", rows, fields)
    summary = summarize_rows(rows)
    write_csv(out / "summary.csv", summary, list(summary[0]))
    text = markdown(summary, args)
    (out / "summary.md").write_text(text, encoding="utf-8")
    print(text)
    if args.blocks > 0:
        (out / "blocks.md").write_text(blocks_md(rows, args.blocks), encoding="utf-8")
        print(f"per-block means: {out / 'blocks.md'}")
    if not args.no_plots:
        plot(rows, out, caches != [None], len(batches) > 1, layer_counts != [None])
    print(f"wrote {out / 'runs.csv'}, {out / 'summary.csv'}, {out / 'summary.md'}")
    return rows


def _counts(workload: Workload) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in workload.tasks:
        counts[t.urgency] = counts.get(t.urgency, 0) + 1
    return counts


def summarize_rows(rows: list[dict]) -> list[dict]:
    def key_of(r: dict) -> tuple:
        return r["preset"], r["policy"], r["max_batch"], r["cached"], r["layers"], r["group"]

    out = []
    for key in dict.fromkeys(key_of(r) for r in rows):
        sel = [r for r in rows if key_of(r) == key]
        out.append({"preset": key[0], "policy": key[1], "max_batch": key[2], "cached": key[3], "layers": key[4],
                    "group": key[5],
                    "seeds": len(sel), "utility": span([r["utility"] for r in sel]),
                    "share_of_max": span([r["share_of_max"] for r in sel]),
                    "share_of_bound": span([r["share"] for r in sel]),
                    "bound": span([r["bound"] for r in sel]),
                    "response_time": span([r["response_time"] for r in sel]),
                    "waiting_time": span([r["waiting_time"] for r in sel]),
                    "eq3_utility": span([r["eq3_utility"] for r in sel]),
                    "dropped": span([r["dropped"] for r in sel]),
                    "dropped_bound_positive": span([float(r["dropped_bound_positive"]) for r in sel]),
                    "utility_mean": statistics.fmean(r["utility"] for r in sel)})
    return out


def blocks_md(rows: list[dict], size: int) -> str:
    """Share of max per preset, policy and group: the mean over all seeds, then over each run of `size`
    consecutive seeds (in the order given; a last, shorter run is left out); and the urgent class-alone bound's."""
    lines = [f"Share of max (U/beta), mean over all seeds and over each {size} consecutive seeds.", ""]
    for preset in dict.fromkeys(r["preset"] for r in rows):
        seeds = list(dict.fromkeys(r["seed"] for r in rows if r["preset"] == preset))
        runs = [seeds[i:i + size] for i in range(0, len(seeds) - size + 1, size)]
        lines += [f"### {preset}", "", "| policy | group | all seeds | " + " | ".join(
            f"seeds {b[0]}-{b[-1]}" for b in runs) + " |", "|---|---|---|" + "---|" * len(runs)]
        for key in dict.fromkeys((r["policy"], r["group"]) for r in rows if r["preset"] == preset):
            sel = {r["seed"]: r for r in rows if r["preset"] == preset and (r["policy"], r["group"]) == key}
            cells = [statistics.fmean(sel[s]["share_of_max"] for s in b) for b in runs]
            lines.append(f"| {key[0]} | {key[1]} | {statistics.fmean(r['share_of_max'] for r in sel.values()):.3f}"
                         f" | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
        bound = {}      # the urgent bound in share-of-max units (share_of_max = utility / beta for every row)
        for r in rows:
            if r["preset"] == preset and r["group"] == "urgent" and r["utility"] and not math.isnan(r["bound"]):
                bound.setdefault(r["seed"], r["bound"] * r["share_of_max"] / r["utility"])
        if bound and len(bound) == len(seeds):
            lines.append(f"| class-alone bound | urgent | {statistics.fmean(bound.values()):.3f} | "
                         + " | ".join(f"{statistics.fmean(bound[s] for s in b):.3f}" for b in runs) + " |")
        lines.append("")
    return "\n".join(lines)


def markdown(summary: list[dict], args) -> str:
    lines = [f"Policies on {args.workload} ({args.latency}), seeds {args.seeds}: mean [min-max].", ""]
    for preset in dict.fromkeys(r["preset"] for r in summary):
        lines += [f"### {preset}" + (f" ({PRESETS[preset].about})" if preset in PRESETS else ""), "",
                  "| policy | batch | cached | layers | group | utility | share of max (U/beta) | share of bound |"
                  " dropped | dropped (bound > 0) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in summary:
            if r["preset"] == preset:
                lines.append(f"| {r['policy']} | {r['max_batch']} | {r['cached']} | {r['layers']} | {r['group']} | "
                             f"{r['utility']} | "
                             f"{r['share_of_max']} | {r['share_of_bound']} | {r['dropped']} | "
                             f"{r['dropped_bound_positive']} |")
        lines.append("")
    return "\n".join(lines)


def plot(rows: list[dict], out: Path, cache_sweep: bool, batch_sweep: bool, layers_sweep: bool = False) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for preset in dict.fromkeys(r["preset"] for r in rows):
        sel = [r for r in rows if r["preset"] == preset]
        if cache_sweep or layers_sweep:
            column, label, name = ("cached", "cached prompt prefix (tokens)", "cache") if cache_sweep else \
                ("layers", "decoder layers (an interrupt ends a step at the next boundary)", "layers")
            groups = [g for g in dict.fromkeys(r["group"] for r in sel) if g != "all"]
            fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.6), squeeze=False)
            for ax, g in zip(axes[0], groups):
                for pol in policies:
                    pts = sorted({r[column] for r in sel})
                    ys = [statistics.fmean(r["utility"] for r in sel if r["policy"] == pol and r["group"] == g
                                           and r[column] == c) for c in pts]
                    ax.plot(pts, ys, marker="o", label=pol)
                ax.set_xlabel(label)
                if layers_sweep:
                    ax.set_xscale("log", base=2)
                ax.set_ylabel(f"{g} utility (mean over seeds)")
                ax.axhline(0, color="black", lw=0.5)
                ax.set_title(f"{preset}: {g}")
            axes[0][0].legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(out / f"{name}_sweep_{preset}.png", dpi=120)
            plt.close(fig)
            continue
        if batch_sweep:
            fig, ax = plt.subplots(figsize=(6, 3.5))
            for pol in policies:
                pts = sorted({r["max_batch"] for r in sel})
                ys = [statistics.fmean(r["utility"] for r in sel if r["policy"] == pol and r["group"] == "all"
                                       and r["max_batch"] == b) for b in pts]
                ax.plot(pts, ys, marker="o", label=pol)
            ax.set_xlabel("max batch size")
            ax.set_ylabel("mean time utility")
            ax.set_title(f"{preset}: batch-size sweep")
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(out / f"batch_sweep_{preset}.png", dpi=120)
            plt.close(fig)
            continue
        groups = list(dict.fromkeys(r["group"] for r in sel))
        fig, ax = plt.subplots(figsize=(max(6, len(policies) * 0.8), 3.6))
        width = 0.8 / len(groups)
        for i, g in enumerate(groups):
            means, lo, hi = [], [], []
            for pol in policies:
                vals = [r["utility"] for r in sel if r["policy"] == pol and r["group"] == g]
                means.append(statistics.fmean(vals))
                lo.append(means[-1] - min(vals))
                hi.append(max(vals) - means[-1])
            ax.bar([x + i * width for x in range(len(policies))], means, width, yerr=[lo, hi], label=g, capsize=2)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(policies))], policies, rotation=30, ha="right",
                      fontsize=7)
        ax.set_ylabel("time utility (mean, min-max over seeds)")
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(preset)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"utility_{preset}.png", dpi=120)
        plt.close(fig)



# ---- upper-bound: a true upper bound on one class's utility

UPPER_BOUND_DOC = """A true upper bound on one class's mean utility (default: urgent) under a latency profile, to check how much
room the class-alone bound of the policy comparison (best of a few policies serving that class alone) leaves.

    python benchmarks/compare_policies.py upper-bound --workload WID1 [--seeds 1,2,3,4,5] [--cls urgent]

Relaxation (every schedule of the real simulator satisfies it, so its optimum bounds every policy's):
- other classes are left out (a step never gets cheaper with more in it);
- request j needs its own prompt prefill p_j = a n_j c_j + b n_j (the suffix after the cached prefix) and then
  m_j - 1 decode steps for its m_j-token first segment, each at least t_1 = decode(1, context); a step with
  prefills costs c on top. Step costs add (c + prefills + decode), so the engine's busy time before the last of
  a set Q of first segments is ready is at least min_{i in Q} arrival_i + sum_{i in Q} p_i + c + (m - 1) t_1
  (m of that last one): a one-machine schedule with release dates in which only these sums are enforced;
- constraints between requests more than --split s apart are dropped (a looser, still valid bound), and a
  cluster is cut after --max-cluster requests for the same reason;
- a request counts max(TUF_0(response), 0): a dropped request counts at most 0.
Within a cluster the optimum over every served subset and completion order is found exactly (bitmask search).
"""


def cluster_bound(jobs: list[tuple[float, float, float]], tuf) -> float:
    """jobs: (arrival a, prefill work p, tail K = c + (m - 1) t_1 + network delay). The largest sum of
    max(TUF_0(ready - a), 0) over every served subset and every order of readiness, where the j-th ready is no
    earlier than the previous one, than a_j + p_j + K_j, and, for every set Q of those ready so far with j among
    them, than min arrival(Q) + sum p(Q) + min K(Q) (the last prefill of Q still needs its own tail)."""
    n = len(jobs)
    best: dict[int, list[tuple[float, float]]] = {}      # served mask -> pareto [(last ready, utility)]
    frontier: dict[int, list[tuple[float, float]]] = {0: [(float("-inf"), 0.0)]}
    top = 0.0
    while frontier:
        nxt: dict[int, list[tuple[float, float]]] = {}
        for mask, pts in frontier.items():
            for ready, util in pts:
                top = max(top, util)
                for j in range(n):
                    if mask >> j & 1:
                        continue
                    a, p, k = jobs[j]
                    served = [jobs[i] for i in range(n) if (mask | 1 << j) >> i & 1]
                    lb = a + p + k
                    for th in {q[0] for q in served}:
                        q_set = [q for q in served if q[0] >= th or q is jobs[j]]
                        lb = max(lb, min(th, a) + sum(q[1] for q in q_set) + min(q[2] for q in q_set))
                    r = max(ready, lb)
                    nxt.setdefault(mask | 1 << j, []).append((r, util + max(tuf(r - a), 0.0)))
        frontier = {}
        for mask, pts in nxt.items():
            merged = sorted(best.get(mask, []) + pts, key=lambda x: (x[0], -x[1]))
            pareto, bu = [], -1.0
            for e, u in merged:
                if u > bu + 1e-12:
                    pareto.append((e, u))
                    bu = u
            fresh = [x for x in pareto if x not in best.get(mask, [])]
            best[mask] = pareto
            if fresh:
                frontier[mask] = fresh
    return top


def wave_optimum(n: int, lat, tuf, ctx: int, new: int, m: int) -> float:
    """Reference, not a bound: the best total utility for n requests of one class arriving together on an idle
    engine, searched exactly over how many prompts each step prefills, every started request decoding in every
    step (leaving one out would cost it a whole step to save the others ~1.5 ms), with the latency profile's
    step times. Neighbouring events and other classes are ignored."""
    p = lat.prefill_s(new, ctx)
    horizon = min(tuf.zero_crossing(), 60.0) + 0.1

    @functools.lru_cache(maxsize=None)
    def best(left: int, inflight: tuple[int, ...], t: float) -> float:
        top = 0.0                                   # serve nobody else (they are dropped: at most 0)
        for k in range(left + 1):
            if k == 0 and not inflight:
                continue
            t2 = round(t + (lat.prefill_c + k * p if k else 0.0)
                       + (lat.decode_s(len(inflight), len(inflight) * ctx) if inflight else 0.0), 6)
            if t2 > horizon:
                continue
            done = sum(1 for r in inflight if r == 1)
            rest = tuple(sorted([r - 1 for r in inflight if r > 1] + [m - 1] * k))
            if m == 1:
                done, rest = done + k, tuple(r for r in rest if r > 0)
            top = max(top, done * max(tuf(t2 + lat.network_delay_s), 0.0) + best(left - k, rest, t2))
        return top

    return best(n, (), 0.0)


def cluster_optimum(arrivals: tuple[float, ...], lat, tuf, ctx: int, new: int, m: int) -> float:
    """Reference, not a bound: the best total utility for one class's requests arriving at the given times (sorted,
    a cluster), on an engine idle at the first arrival, searched exactly over the step plans: each step
    prefills the k oldest arrived requests not started (k >= 0), with or without the decode pass of those
    already started (a prefill step without it leaves them one step behind), or the engine idles until the next
    arrival, or the oldest waiting one is dropped. Step times are the latency profile's; the network delay is
    added to every response. Not a bound either way: its plans serve the oldest first, and the work it ignores
    (other classes, the requests' later segments, a step in flight at the first arrival) only makes a real
    schedule worse."""
    p, nd, n = lat.prefill_s(new, ctx), lat.network_delay_s, len(arrivals)

    def utility(t: float, j: int) -> float:
        return max(tuf(t + nd - arrivals[j]), 0.0)

    @functools.lru_cache(maxsize=None)
    def best(i: int, inflight: tuple[tuple[int, int], ...], t: float) -> float:
        arrived = max(i, sum(1 for a in arrivals if a <= t + 1e-9))   # requests i..arrived-1 wait
        options = [0.0]                                  # serve nobody else (they count at most 0)
        if arrived > i:
            options.append(best(i + 1, inflight, t))     # drop the oldest waiting one
        if not inflight and arrived < n:                 # idle until the next arrival
            options.append(best(i, inflight, round(arrivals[arrived], 6)))
        for k in range(arrived - i + 1):
            for decode in ((True, False) if k and inflight else (bool(inflight),)):
                if not k and not inflight:
                    continue
                t2 = round(t + (lat.prefill_c + k * p if k else 0.0)
                           + (lat.decode_s(len(inflight), len(inflight) * ctx) if decode else 0.0), 6)
                done, rest = 0.0, []
                for left, j in inflight:
                    left -= 1 if decode else 0
                    if left == 0:
                        done += utility(t2, j)
                    else:
                        rest.append((left, j))
                for j in range(i, i + k):
                    if m == 1:
                        done += utility(t2, j)
                    else:
                        rest.append((m - 1, j))
                options.append(done + best(i + k, tuple(sorted(rest)), t2))
        return max(options)

    return best(0, (), round(arrivals[0], 6))


def bound_job(arrival: float, ctx: int, new: int, m: int, lat) -> tuple[float, float, float]:
    """cluster_bound's (arrival, prefill work p, tail K) for a request of this shape: K = c + (m - 1) t_1 + network
    delay, t_1 the batch-1 decode step at the prompt's context (no decode step of the real engine is shorter)."""
    return arrival, lat.prefill_s(new, ctx), lat.prefill_c + (m - 1) * lat.decode_s(1, ctx) + lat.network_delay_s


def request_shape(task, lat, tok) -> tuple[int, int, int]:
    """(context tokens, new tokens to prefill after the cached prefix, first-segment tokens) of one task."""
    ctx = task.prompt_tokens
    new = max(ctx - min(lat.cached_prefix_tokens, ctx - 1), 1)
    return ctx, new, len(tok.encode(" " + task.plan.split(";")[0] + ";"))


def upper_bound_main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="compare_policies.py upper-bound", description=UPPER_BOUND_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="WID1")
    ap.add_argument("--seeds", default="1,2,3,4,5", help="workload seeds (list or ranges: 6-10)")
    ap.add_argument("--cls", default="urgent")
    ap.add_argument("--latency", default="llama3-8b-rtx4090")
    ap.add_argument("--split", type=float, default=1.0, help="drop constraints across gaps longer than this (s)")
    ap.add_argument("--max-cluster", type=int, default=9)
    ap.add_argument("--waves", action="store_true",
                    help="also the reference optimum per arrival event (wave_optimum; not a bound; assumes the first "
                         "segment length of the class's first request for all)")
    ap.add_argument("--clusters", action="store_true",
                    help="also the reference optimum per cluster of arrivals no more than --cluster-gap apart "
                         "(cluster_optimum; not a bound; same segment-length assumption)")
    ap.add_argument("--cluster-gap", type=float, default=0.5)
    args = ap.parse_args(argv)
    lat = load_latency_model(args.latency)
    tok = PieceTokenizer()
    out, waves, clustered = [], [], []
    for seed in parse_seeds(args.seeds):
        wl = PRESETS[args.workload].make(seed)
        tasks = sorted((t for t in wl.tasks if t.urgency == args.cls and not t.after), key=lambda t: t.arrival)
        if not tasks:
            continue
        jobs = [bound_job(t.arrival, *request_shape(t, lat, tok), lat) for t in tasks]
        tuf = DEFAULT_URGENCY_CLASSES[args.cls]
        total, cluster = 0.0, [jobs[0]]
        for job in jobs[1:]:
            if job[0] - cluster[-1][0] > args.split or len(cluster) >= args.max_cluster:
                total += cluster_bound(cluster, tuf)
                cluster = []
            cluster.append(job)
        total += cluster_bound(cluster, tuf)
        ub = total / len(jobs)
        out.append(ub)
        line = (f"{args.workload} seed {seed}: {len(jobs)} {args.cls} requests, upper bound {ub:.3f} "
                f"(share of max {ub / tuf.beta:.3f})")
        ctx, new, m = request_shape(tasks[0], lat, tok)   # the references assume the first request's shape for all
        if args.waves:
            sizes: dict[float, int] = {}
            for t in tasks:
                sizes[t.arrival] = sizes.get(t.arrival, 0) + 1
            ref = sum(wave_optimum(n, lat, tuf, ctx, new, m) for n in sizes.values()) / len(tasks)
            waves.append(ref)
            line += f"; per-event reference optimum {ref:.3f} (share {ref / tuf.beta:.3f})"
        if args.clusters:
            groups = [[tasks[0].arrival]]
            for t in tasks[1:]:
                if t.arrival - groups[-1][-1] > args.cluster_gap:
                    groups.append([])
                groups[-1].append(t.arrival)
            ref = sum(cluster_optimum(tuple(round(a - g[0], 6) for a in g), lat, tuf, ctx, new, m)
                      for g in groups) / len(tasks)
            clustered.append(ref)
            line += f"; per-cluster reference optimum {ref:.3f} (share {ref / tuf.beta:.3f})"
        print(line, flush=True)
    print(f"upper bound: mean {statistics.fmean(out):.3f} [{min(out):.3f}, {max(out):.3f}]")
    if waves:
        print(f"per-event reference optimum: mean {statistics.fmean(waves):.3f} [{min(waves):.3f}, {max(waves):.3f}]")
    if clustered:
        print(f"per-cluster reference optimum: mean {statistics.fmean(clustered):.3f} "
              f"[{min(clustered):.3f}, {max(clustered):.3f}]")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["upper-bound"]:
        sys.exit(upper_bound_main(sys.argv[2:]))
    run(parse_args())
