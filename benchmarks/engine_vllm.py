#!/usr/bin/env python3
"""The transformers engine and the vLLM engine side by side, in one run, on the same model and prompts.

    python benchmarks/engine_vllm.py [--repeats 5] [--decode-steps 64] [--batches 1,8] [--workload-s 8]
        [--long 1500] [--vllm-compile] [--out out/engine_vllm]
    python benchmarks/engine_vllm.py --model smollm2 [--batches 1,8,16] [--prompt-tokens 40,500]

With --model (a name of config/models.yaml or a folder) the run is engine_vllm_model.py's, on that model: decode at
each batch and prompt length, prefill, resume at ~--short and ~--long tokens, each engine's RSS. Without it:

1. decode: tokens/s and step time at each batch size (same prompts, greedy), engines alternated per repeat;
   with --vllm-compile also a vLLM engine that compiles the model (option vllm_compile).
2. resume on vLLM at ~70 and ~--long tokens of context: resume-to-next-token of a parked generation (this
   project's way: the request keeps its KV blocks, ChosenSetScheduler just does not schedule it), prefix-cached
   re-submission (abort, re-add prompt + output; block size 32), and a cold re-prefill (prefix cache reset).
   The long context uses the embedded planner's weights with max_position_embeddings raised to 2048 (RoPE,
   no learned positions: the shape is the planner's, the outputs past 512 tokens are not meaningful).
3. workload: the engine_workload.py WID1-shaped workload (real plans, wall clock) under the timely and vllm
   policies on each engine: utility, tokens/s, mean step time.
4. memory: KV accounting (Engine.memory) and resident set size after each engine started.
Mean and min-max over --repeats; CPU only (no GPU in this project's CI or dev machines).
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import write_csv  # noqa: E402

from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.paths import default_model_dir, share_dir  # noqa: E402


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--decode-steps", type=int, default=None, help="decode steps a repeat (default 64; --model: 32)")
    p.add_argument("--batches", default=None, help="decode batch sizes (default 1,8; --model: 1,8,16)")
    p.add_argument("--model", default=None, help="a real model (config/models.yaml name or folder): see above")
    p.add_argument("--prompt-tokens", default="40,500", help="--model: prompt lengths of the decode runs")
    p.add_argument("--short", type=int, default=70, help="short context (the planner's prompts are ~40-90 tokens)")
    p.add_argument("--long", type=int, default=1500)
    p.add_argument("--workload-s", type=float, default=8.0, help="seconds of arrivals (0 = skip part 3)")
    p.add_argument("--eps", type=float, default=8.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--vllm-compile", action="store_true",
                   help="part 1 also on a vLLM engine that compiles the model (option vllm_compile)")
    p.add_argument("--out", default="out/engine_vllm")
    args = p.parse_args(argv)
    args.decode_steps = args.decode_steps or (32 if args.model else 64)
    args.batches = args.batches or ("1,8,16" if args.model else "1,8")
    return args


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stats(xs: list[float]) -> str:
    return f"{statistics.mean(xs):8.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def prompt_ids(n: int, seed: int, vocab: int = 1048) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


def decode_rate(engine, batch: int, steps: int, seed: int) -> tuple[float, float]:
    """Tokens/s and mean step time (ms) of up to `steps` decode steps at this batch (prefill excluded).
    A generation that emits EOS leaves the batch; both engines emit the same greedy tokens, so both see
    the same shrinking batch."""
    ids = [f"d{seed}-{i}" for i in range(batch)]
    for i, g in enumerate(ids):
        engine.add(g, prompt_ids(40, 1000 * seed + i), steps + 2)
    active = [g for g in ids if g not in engine.step(ids).finished]       # prefill
    tokens, n, t0 = 0, 0, time.perf_counter()
    while active and n < steps:
        r = engine.step(active)
        tokens, n = tokens + len(r.tokens), n + 1
        active = [g for g in active if g not in r.finished]
    dt = time.perf_counter() - t0
    for g in ids:
        engine.release(g)
    return tokens / dt, dt / max(n, 1) * 1e3


def random_model_dir() -> Path:
    """Random weights of the planner's shape, its tokenizer, 2048 positions (build/, made once): decode runs
    that never stop at EOS, and contexts past the planner's 512 positions."""
    out = share_dir() / "build" / "planner_random_2k"
    if not (out / "model.safetensors").is_file():
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = json.loads((default_model_dir() / "config.json").read_text())
        cfg["max_position_embeddings"] = 2048
        torch.manual_seed(0)
        config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")})
        LlamaForCausalLM(config).save_pretrained(out)
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(default_model_dir() / name, out / name)
    return out


def started(engine, g: str, n: int, seed: int) -> list[int]:
    """Add a generation with an n-token random prompt and prefill it; retries prompts whose first token is EOS
    (the trained planner ends random prompts quickly). Returns the prompt."""
    for k in range(50):
        base = prompt_ids(n, 7919 * k + seed)
        engine.add(g, base, 32)
        if g not in engine.step([g]).finished:
            return base
        engine.release(g)
    raise RuntimeError(f"no {n}-token prompt kept generating")


def resume_costs(engine, n: int, seed: int) -> dict[str, float]:
    """Seconds to the next token after a suspension at n tokens of context, three ways."""
    other = f"o{seed}-{n}"
    started(engine, other, 16, seed + 7)
    g = f"r{seed}-{n}"
    base = started(engine, g, n, seed)
    engine.suspend(g)                      # parked: vLLM keeps its blocks, schedules only `other`
    if other not in engine.step([other]).finished:
        engine.suspend(other)
    engine.resume(g)
    t0 = time.perf_counter()
    engine.step([g])
    parked = time.perf_counter() - t0
    context = base + engine.output_ids(g)
    engine.release(g)                      # re-submission: abort, add prompt + output again (prefix cache hits)
    engine.add(g + "b", context, 4)
    t0 = time.perf_counter()
    engine.step([g + "b"])
    resubmit = time.perf_counter() - t0
    engine.release(g + "b")
    engine.release(other)
    if not engine.llm.reset_prefix_cache():   # cold: nothing cached
        raise RuntimeError("vLLM did not reset its prefix cache (blocks still in use)")
    engine.add(g + "c", context, 4)
    t0 = time.perf_counter()
    engine.step([g + "c"])
    cold = time.perf_counter() - t0
    engine.release(g + "c")
    return {"parked": parked, "resubmit": resubmit, "cold": cold}


def transformers_resume(engine, n: int, seed: int) -> dict[str, float]:
    g = f"r{seed}-{n}"
    base = started(engine, g, n, seed)
    engine.suspend(g)
    engine.resume(g)
    t0 = time.perf_counter()
    engine.step([g])
    resumed = time.perf_counter() - t0
    context = base + engine.output_ids(g)
    engine.release(g)
    engine.add(g + "c", context, 4)
    t0 = time.perf_counter()
    engine.step([g + "c"])
    cold = time.perf_counter() - t0
    engine.release(g + "c")
    return {"parked": resumed, "cold": cold}


def both(path: str | None, threads: int, compiled: bool = False) -> dict:
    """The transformers and the vLLM engine (and, if compiled, a vLLM engine with vllm_compile) on one model."""
    engines = {"transformers": make_engine("transformers", path, device="cpu", dtype="float32", num_threads=threads),
               "vllm": make_engine("vllm", path, device="cpu", dtype="float32", kv_budget_mb=64, num_threads=threads)}
    if compiled:
        t0 = time.perf_counter()
        engines["vllm-compiled"] = make_engine("vllm", path, device="cpu", dtype="float32", kv_budget_mb=64,
                                               num_threads=threads, vllm_compile=True)
        print(f"  vllm-compiled started in {time.perf_counter() - t0:.1f} s")
    return engines


def close(engines: dict) -> None:
    for e in engines.values():
        e.close()
    engines.clear()
    gc.collect()


def resume_part(engines: dict, n: int, repeats: int, rows: list[dict]) -> None:
    v = [resume_costs(engines["vllm"], n, s) for s in range(repeats + 1)][1:]   # first: warm-up
    t = [transformers_resume(engines["transformers"], n, s) for s in range(repeats + 1)][1:]
    for name, series in (("vllm parked (ours)", [x["parked"] for x in v]),
                         ("vllm re-submit+prefix cache", [x["resubmit"] for x in v]),
                         ("vllm cold re-prefill", [x["cold"] for x in v]),
                         ("transformers resume", [x["parked"] for x in t]),
                         ("transformers cold re-prefill", [x["cold"] for x in t])):
        print(f"  n={n:5d} {name:30s} ms {stats([s * 1e3 for s in series])}")
    for name, key, src in (("vllm parked / cold", "parked", v), ("vllm re-submit / cold", "resubmit", v),
                           ("transformers resume / cold", "parked", t)):
        ratio = [x[key] / x["cold"] for x in src]
        print(f"  n={n:5d} {name:30s}    {stats(ratio)}")
        rows.append({"part": "resume", "engine": name, "case": f"context {n}", "mean": statistics.mean(ratio),
                     "min": min(ratio), "max": max(ratio), "unit": "ratio"})


def decode_part(engines: dict, args, rows: list[dict]) -> None:
    for batch in [int(b) for b in args.batches.split(",")]:
        res = {k: ([], []) for k in engines}
        for r in range(args.repeats + 1):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for kind in order:
                tps, step_ms = decode_rate(engines[kind], batch, args.decode_steps, r)
                if r:                                     # repeat 0 warms up
                    res[kind][0].append(tps)
                    res[kind][1].append(step_ms)
        for kind, (tps, step_ms) in res.items():
            print(f"  batch {batch:2d} {kind:13s} tokens/s {stats(tps)}  step ms {stats(step_ms)}")
            rows.append({"part": "decode", "engine": kind, "case": f"batch {batch}", "mean": statistics.mean(tps),
                         "min": min(tps), "max": max(tps), "unit": "tokens/s"})
        for kind in (k for k in res if k.startswith("vllm")):
            ratio = [v / t for v, t in zip(res[kind][0], res["transformers"][0])]
            print(f"  batch {batch:2d} {kind} / transformers tokens/s: {stats(ratio)}")
            rows.append({"part": "decode", "engine": f"{kind}/transformers", "case": f"batch {batch}",
                         "mean": statistics.mean(ratio), "min": min(ratio), "max": max(ratio), "unit": "ratio"})


def main(argv=None) -> int:
    args = parse(argv)
    if args.model:
        import engine_vllm_model

        return engine_vllm_model.main(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    print(f"fp32, {args.threads} thread(s); CPU only: no GPU is lent to this task; mean [min-max] over "
          f"{args.repeats} repeats after a warm-up, engines alternated")
    rss0 = rss_mb()
    engines = both(None, args.threads)
    rss1 = rss_mb()
    v = engines["vllm"]
    print(f"\n4. memory: max RSS {rss0:.0f} MB at start, {rss1:.0f} MB with both engines on the planner. vLLM KV "
          f"pool {v.memory().kv_budget_bytes / 2**20:.0f} MiB = {v.num_blocks} blocks x {v.block_size} tokens x "
          f"{v.kv_bytes_per_token} B/token, allocated (zero-filled) at start; the transformers engine allocates "
          f"KV on demand")

    print(f"\n2a. resume-to-next-token vs cold re-prefill on the planner ({default_model_dir().name}), "
          f"~{args.short} tokens of context")
    resume_part(engines, args.short, args.repeats, rows)
    close(engines)

    path = str(random_model_dir())
    engines = both(path, args.threads, args.vllm_compile)
    print(f"\n1. decode on random weights of the planner's shape ({path}: no early EOS), 40-token prompts")
    decode_part(engines, args, rows)
    print(f"\n2b. resume-to-next-token vs cold re-prefill, ~{args.long} tokens of context (same random model)")
    resume_part(engines, args.long, args.repeats, rows)
    close(engines)

    if args.workload_s > 0:
        workload_part(args, rows)
    write_csv(out / "summary.csv", rows, ["part", "engine", "case", "mean", "min", "max", "unit"])
    print(f"wrote {out / 'summary.csv'}")
    return 0


def workload_part(args, rows: list[dict]) -> None:
    """engine_workload.py's WID1-shaped workload on both engines (one seed: it runs in real time)."""
    import engine_workload as ew

    from timely_llm_ros.evaluation.metrics import summarize
    from timely_llm_ros.evaluation.sim.simulator import Simulator
    from timely_llm_ros.core.skills import load_skill_sets

    wargs = ew.parse_args(["--duration", str(args.workload_s), "--eps", str(args.eps), "--drain", "20"])
    workload = ew.make_workload(wargs)
    skill_sets = load_skill_sets()
    last = max(t.arrival for t in workload.tasks)
    print(f"\n3. workload: {len(workload.tasks)} tasks over {args.workload_s:g} s ({args.eps:g} events/s), one seed")
    for kind in ("transformers", "vllm"):
        engine = make_engine(kind, None, device="cpu", dtype="float32", num_threads=args.threads,
                             **({"kv_budget_mb": 64} if kind == "vllm" else {}))
        for name in ("timely", "vllm"):
            steps: list[tuple[int, float]] = []
            inner = engine.step

            def step(ids, inner=inner, steps=steps):
                r = inner(ids)
                steps.append((len(ids), r.elapsed_s, len(r.tokens)))
                return r
            engine.step = step
            sim = Simulator(ew.build_policy(name, wargs.max_batch, skill_sets, 0.003), None, skill_sets=skill_sets,
                            seed=wargs.seed, engine=engine, network_delay_s=ew.NETWORK_DELAY_S, forced_plans=False)
            result = sim.run(workload, max_sim_s=last + wargs.drain)
            engine.step = inner
            m = summarize(result.outcomes)["all"]
            busy = sum(s[1] for s in steps)
            tokens = sum(s[2] for s in steps)
            print(f"  {kind:12s} policy {name:7s} utility {m.utility:7.3f}  tokens/s {tokens / busy:7.1f}  "
                  f"mean step {busy / len(steps) * 1e3:6.1f} ms  steps {len(steps)}")
            rows += [{"part": "workload", "engine": kind, "case": f"{name} utility", "mean": m.utility,
                      "min": m.utility, "max": m.utility, "unit": "utility"},
                     {"part": "workload", "engine": kind, "case": f"{name} tokens/s", "mean": tokens / busy,
                      "min": tokens / busy, "max": tokens / busy, "unit": "tokens/s"}]
        engine.close()
        gc.collect()


if __name__ == "__main__":
    sys.exit(main())
