#!/usr/bin/env python3
"""Engine speed: the transformers engine beside the vLLM engine and beside a bare model forward, one job a
sub-command.

    python benchmarks/engine_speed.py vllm [--model smollm2] ...    the two engines side by side: decode, prefill,
                                                                    resume vs re-prefill, workload, memory
    python benchmarks/engine_speed.py profile [--model smollm2] ... where a decode step goes: per layer, per op
    python benchmarks/engine_speed.py overhead [--batches 1 4 8] ... the engine's step vs a bare model forward
    python benchmarks/engine_speed.py resume [--prompt 1536] ...    resume of a suspended generation vs re-prefill
    python benchmarks/engine_speed.py interrupt [--threads 1] ...   the layer gate's cost, the wait it saves

`python benchmarks/engine_speed.py SUB-COMMAND --help` describes each in full (VLLM_DOC, PROFILE_DOC,
OVERHEAD_DOC, RESUME_DOC and INTERRUPT_DOC below). CPU by default; overhead, resume and interrupt also run on a
GPU (--device cuda).
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import math
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import write_csv  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.benchkit import model_folder  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402
from timely_llm_ros.engine.transformers.layer_gate import decoder_layers  # noqa: E402
from timely_llm_ros.paths import default_model_dir, share_dir  # noqa: E402

VLLM_DOC = """The transformers engine and the vLLM engine side by side, in one run, on the same model and prompts.

    python benchmarks/engine_speed.py vllm [--repeats 5] [--decode-steps 64] [--batches 1,8] [--workload-s 8]
        [--long 1500] [--vllm-compile] [--out out/engine_speed_vllm]
    python benchmarks/engine_speed.py vllm --model smollm2 [--batches 1,8,16] [--prompt-tokens 40,500]

With --model (a name of config/models.yaml or a folder) the run is on that model (below): decode at
each batch and prompt length, prefill, resume at ~--short and ~--long tokens, each engine's RSS. Without it:

1. decode: tokens/s and step time at each batch size (same prompts, greedy), engines alternated per repeat;
   with --vllm-compile also a vLLM engine that compiles the model (option vllm_compile).
2. resume on vLLM at ~70 and ~--long tokens of context: resume-to-next-token of a parked generation (this
   project's way: the request keeps its KV blocks, ChosenSetScheduler just does not schedule it), prefix-cached
   re-submission (abort, re-add prompt + output; block size 32), and a cold re-prefill (prefix cache reset).
   The long context uses the embedded planner's weights with max_position_embeddings raised to 2048 (RoPE,
   no learned positions: the shape is the planner's, the outputs past 512 tokens are not meaningful).
3. workload: benchmarks/engine_workload.py's WID1-shaped workload (real plans, wall clock) under the timely and vllm
   policies on each engine: utility, tokens/s, mean step time.
4. memory: KV accounting (Engine.memory) and resident set size after each engine started.
Mean and min-max over --repeats; CPU only (no GPU in this project's CI or dev machines).
"""

VLLM_MODEL_DOC = """`vllm --model` on a real model (``--model smollm2`` or a folder): the transformers and the vLLM engine
side by side.

    python benchmarks/engine_speed.py vllm --model smollm2 [--batches 1,8,16] [--prompt-tokens 40,500] [--repeats 5]
        [--decode-steps 32] [--short 70] [--long 1500]

1. decode: for each prompt length and batch, both engines prefill the same prompt ids (an English passage, rows
   +-10% in length: each row attends to its own length), then --repeats rounds of --decode-steps greedy steps,
   the engines alternated round by round (one warm-up round first); tokens/s of each and the ratio per round
   (mean [min-max]), by wall time and by the process's CPU time (less swayed by other jobs taking the cores);
   then the greedy outputs compared generation by generation. A generation that emits EOS leaves the batch;
   identical outputs mean both engines see the same batches. vLLM's prefix cache is reset before every prefill
   measured here (the prompts of one case start like those of the case before).
2. prefill: one prompt of each length, engines alternated, --repeats times.
3. resume-to-next-token vs re-prefill at ~--short and ~--long tokens of context (resume_part, as without --model).
4. memory: each engine alone in a child process (the largest decode case): its resident set size, and its peak.
"""

PROFILE_DOC = """Where a decode step goes: per decoder layer and per op, the transformers engine beside the vLLM engine.

    python benchmarks/engine_speed.py profile --model smollm2 --batch 8 --context 800 [--steps 6] [--no-vllm]

Both engines hold the same --batch generations (prompt ids of --context tokens +-25%, greedy) and decode; each step
is profiled with torch.profiler (self CPU time per op, summed over --steps steps, engines alternated step by step),
and the transformers engine's decoder layers are timed with forward hooks (wall time from a layer's start to its
end; the rest of the step is the embedding, final norm, LM head and the engine's own work).
"""

OVERHEAD_DOC = """Engine overhead per decode step vs a bare model forward of the same batch (target <= 15%).

    .venv/bin/python benchmarks/engine_speed.py overhead [--batches 1 4 8] [--context 512]
    .venv/bin/python benchmarks/engine_speed.py overhead --device cuda --random-config llama3-8b --context 2048

For each batch size, generations of different context lengths are decoded by the engine; timings
alternate between (1) an engine step (bookkeeping, inputs, forward, token choice, host sync),
(2) the bare model forward the step runs, on the same slot store, with inputs, mask and
positions prepared outside the timed region, (3) the same batch
through a plain transformers DynamicCache (left-padded, 2D mask; cropped back after each call),
and (4) an engine step right after the batch changed (one generation left and came back: its row is
copied out and back in). Medians; the overhead is the median of the paired ratios (engine step / bare forward measured back to
back), which drifting load from other processes disturbs least. Then a step admitting a burst of new generations, prefilled
in one padded forward vs one by one.
"""

RESUME_DOC = """Resume vs re-prefill: time to the next token of a suspended generation (targets: <= 5% from device
memory, <= 15% from host memory, of the re-prefill time).

    .venv/bin/python benchmarks/engine_speed.py resume [--prompt 1536] [--generated 32]
    .venv/bin/python benchmarks/engine_speed.py resume --model smollm2 --threads 1 --prompt 38 1468  # ~70, ~1,500
    .venv/bin/python benchmarks/engine_speed.py resume --device cuda --random-config llama3-8b --prompt 2884

A generation with a long prompt decodes ``--generated`` tokens beside a batch mate, is suspended and
leaves the batch (its KV is copied out of the batch store), then comes back three ways, each giving
the next token:
  device  resume() + step(): KV copied back from device memory, one decode step;
  host    the same after the KV was offloaded to host memory (pinned on cuda; on cpu a memory copy);
  prefill a fresh generation of prompt + generated tokens is prefilled (what an engine without
          suspension would do).
Medians of --reps repetitions, timings interleaved.
"""

INTERRUPT_DOC = """What interrupts cost and buy on the transformers engine: the layer gate's cost per decode step, and how long an
arrival waits for a step in flight with and without it.

    .venv/bin/python benchmarks/engine_speed.py interrupt [--batch 8] [--context 256] [--prompts 8] [--prompt-len 384]
    .venv/bin/python benchmarks/engine_speed.py interrupt --random-config llama3-8b-8l --device cuda

1. Gate cost: decode steps of `--batch` generations, rotating three set-ups of one engine: its layer hooks taken off
   the model (bare), on with no check set (they return at once), and on with an interrupt_check that answers False
   at every layer; the medians of the paired ratios to bare.
2. Wait for the step in flight: a prefill step of `--prompts` prompts; a timer thread "arrives" a third of the way
   into it (its measured length) and raises the flag interrupt_check reads. Without interrupts the arrival waits for
   the step's end; with them, for the layer in progress. Medians over --reps of each, interleaved.
"""


# ---- vllm

def vllm_parse(argv=None):
    p = argparse.ArgumentParser(prog="engine_speed.py vllm", description=VLLM_DOC + "\nWith --model:\n" + VLLM_MODEL_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--out", default="out/engine_speed_vllm")
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


def vllm_main(argv=None) -> int:
    args = vllm_parse(argv)
    if args.model:
        return vllm_model_main(args)
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



PASSAGE = ("A small drone and two ground robots share one edge computer that plans for all of them. Each robot sends "
           "a task in plain words: find the red backpack in the kitchen, check the window in the hall, bring the cup "
           "to the desk. The planner writes short programs of skills, one statement at a time, and the robots start "
           "acting on the first statements while the rest is still being written. ")


def passage_ids(engine, n: int, seed: int) -> list[int]:
    """n token ids of the passage (repeated), starting at a seed-dependent offset."""
    ids = engine.encode(PASSAGE * (n // 40 + 4))
    start = (seed * 13) % 40
    return ids[start:start + n]


def kv_budget_mb(path: Path, tokens: int) -> float:
    """vLLM's KV pool for this many tokens of context in all (+25%), at least one context of the model's length
    (vLLM refuses to start with less)."""
    cfg = json.loads((path / "config.json").read_text())
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    per_token = cfg["num_hidden_layers"] * 2 * cfg.get("num_key_value_heads", heads) * head_dim * 4
    tokens = max(tokens * 1.25, cfg.get("max_position_embeddings", 2048) + 64)
    return float(math.ceil(tokens * per_token / 2**20))


def model_engines(path: Path, threads: int, kv_mb: float) -> dict:
    return {"transformers": make_engine("transformers", str(path), device="cpu", dtype="float32",
                                        num_threads=threads),
            "vllm": make_engine("vllm", str(path), device="cpu", dtype="float32", kv_budget_mb=kv_mb,
                                num_threads=threads)}


def cold(kind: str, eng) -> None:
    """No prefix of an earlier prompt reused: vLLM's prefix cache reset (the transformers engine has none on)."""
    if kind == "vllm" and not eng.llm.reset_prefix_cache():
        raise RuntimeError("vLLM did not reset its prefix cache (blocks still in use)")


def decode_case(engs: dict, batch: int, length: int, args, rows: list[dict]) -> None:
    ids = [f"d{batch}-{length}-{i}" for i in range(batch)]
    lengths = [max(1, round(length * (0.9 + 0.2 * i / max(batch - 1, 1)))) for i in range(batch)]
    prefill, live = {}, {}
    for kind, eng in engs.items():
        cold(kind, eng)
        for i, (g, n) in enumerate(zip(ids, lengths)):
            eng.add(g, passage_ids(eng, n, i), args.decode_steps * (args.repeats + 1) + 2)
        t0 = time.perf_counter()
        done = eng.step(ids).finished
        prefill[kind] = time.perf_counter() - t0
        live[kind] = [g for g in ids if g not in done]
    rates: dict[str, list[float]] = {k: [] for k in engs}
    cpu_rates: dict[str, list[float]] = {k: [] for k in engs}
    for r in range(args.repeats + 1):
        for kind in (list(engs) if r % 2 == 0 else list(reversed(engs))):
            tokens, t0, c0 = 0, time.perf_counter(), time.process_time()
            for _ in range(args.decode_steps):
                if not live[kind]:
                    break
                res = engs[kind].step(live[kind])
                tokens += len(res.tokens)
                live[kind] = [g for g in live[kind] if g not in res.finished]
            if r and tokens:                                     # round 0 warms up
                rates[kind].append(tokens / (time.perf_counter() - t0))
                cpu_rates[kind].append(tokens / (time.process_time() - c0))
    same = sum(engs["transformers"].output_ids(g) == engs["vllm"].output_ids(g) for g in ids)
    for eng in engs.values():
        for g in ids:
            eng.release(g)
    t, v = rates["transformers"], rates["vllm"]
    ratio = [a / b for a, b in zip(t, v)]
    cpu_ratio = [a / b for a, b in zip(cpu_rates["transformers"], cpu_rates["vllm"])]
    print(f"  batch {batch:2d} prompt ~{length:5d}: tokens/s transformers {stats(t)}  vllm {stats(v)}  "
          f"transformers/vllm {stats(ratio)} (by process CPU time {stats(cpu_ratio)})  prefill s "
          f"{prefill['transformers']:.2f} / {prefill['vllm']:.2f}  greedy outputs identical {same}/{batch}", flush=True)
    rows.append({"part": "decode", "engine": "transformers/vllm", "case": f"batch {batch} prompt {length}",
                 "mean": statistics.mean(ratio), "min": min(ratio), "max": max(ratio), "unit": "ratio"})


def prefill_part(engs: dict, lengths: list[int], args, rows: list[dict]) -> None:
    for n in lengths:
        times: dict[str, list[float]] = {k: [] for k in engs}
        for r in range(args.repeats + 1):
            for kind in (list(engs) if r % 2 == 0 else list(reversed(engs))):
                g = f"p{n}-{r}"
                cold(kind, engs[kind])
                engs[kind].add(g, passage_ids(engs[kind], n, 100 + r), 1)
                t0 = time.perf_counter()
                engs[kind].step([g])
                if r:
                    times[kind].append(time.perf_counter() - t0)
                engs[kind].release(g)
        ratio = [v / t for t, v in zip(times["transformers"], times["vllm"])]
        print(f"  prompt {n:5d}: ms transformers {stats([x * 1e3 for x in times['transformers']])}  vllm "
              f"{stats([x * 1e3 for x in times['vllm']])}  speed transformers/vllm {stats(ratio)}", flush=True)
        rows.append({"part": "prefill", "engine": "transformers/vllm speed", "case": f"prompt {n}",
                     "mean": statistics.mean(ratio), "min": min(ratio), "max": max(ratio), "unit": "ratio"})


def rss_child(kind: str, path: str, batch: int, length: int, threads: int, kv_mb: float) -> None:
    """In a child process: one engine, a batch prefilled and decoding; print its resident set size now and at its
    peak (MB). /proc's VmRSS/VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec (the parent's peak)."""
    eng = make_engine(kind, path, device="cpu", dtype="float32", num_threads=threads,
                      **({"kv_budget_mb": kv_mb} if kind == "vllm" else {}))
    ids = [f"m{i}" for i in range(batch)]
    for i, g in enumerate(ids):
        eng.add(g, passage_ids(eng, length, i), 8)
    live = list(ids)
    for _ in range(4):
        done = eng.step(live).finished
        live = [g for g in live if g not in done]
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    print(f"RSS_MB {int(status['VmRSS'].split()[0]) / 1024:.0f} {int(status['VmHWM'].split()[0]) / 1024:.0f}")


def memory_part(path: Path, batch: int, length: int, args, kv_mb: float) -> None:
    rss = {}
    for kind in ("transformers", "vllm"):
        out = subprocess.run([sys.executable, __file__, "rss-child", kind, str(path), str(batch), str(length),
                              str(args.threads), str(kv_mb)], capture_output=True, text=True, timeout=900)
        line = [x for x in out.stdout.splitlines() if x.startswith("RSS_MB")]
        rss[kind] = [float(v) for v in line[0].split()[1:]] if line else [float("nan")] * 2
    t, v = rss["transformers"], rss["vllm"]
    print(f"  resident set, each engine alone with {batch} x ~{length} tokens decoding (vLLM's KV pool {kv_mb:.0f} "
          f"MiB, zero-filled at start): transformers {t[0]:.0f} MB (peak {t[1]:.0f}), vllm {v[0]:.0f} MB (peak "
          f"{v[1]:.0f}) = {t[0] / v[0]:.2f}x (peak {t[1] / v[1]:.2f}x)")


def vllm_model_main(args) -> int:
    """The vllm sub-command with --model: VLLM_MODEL_DOC's parts on a real model."""
    path = model_folder(args.model)
    batches = [int(b) for b in args.batches.split(",")]
    lengths = [int(n) for n in args.prompt_tokens.split(",")]
    rounds = args.decode_steps * (args.repeats + 1) + 8
    kv_mb = kv_budget_mb(path, max(max(batches) * (int(max(lengths) * 1.1) + rounds), args.long + 600))
    rows: list[dict] = []
    print(f"{path.name}: fp32, {args.threads} thread(s), CPU; vLLM block size 32, KV pool {kv_mb:.0f} MiB; "
          f"mean [min-max] over {args.repeats} rounds after a warm-up, engines alternated")
    engs = model_engines(path, args.threads, kv_mb)
    print(f"\n1. decode ({args.decode_steps} steps a round)")
    for length in lengths:
        for batch in batches:
            decode_case(engs, batch, length, args, rows)
    print("\n2. prefill of one prompt")
    prefill_part(engs, lengths, args, rows)
    print(f"\n3. resume-to-next-token vs cold re-prefill, ~{args.short} and ~{args.long} tokens of context")
    for n in (args.short, args.long):
        resume_part(engs, n, args.repeats, rows)
    close(engs)
    print("\n4. memory")
    memory_part(path, max(batches), max(lengths), args, kv_mb)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "summary_model.csv", rows, ["part", "engine", "case", "mean", "min", "max", "unit"])
    print(f"wrote {out / 'summary_model.csv'}")
    return 0



# ---- profile

def profile_parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="engine_speed.py profile", description=PROFILE_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="config/models.yaml name or a model folder")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=800)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ops", type=int, default=12, help="ops listed per engine")
    p.add_argument("--no-vllm", action="store_true")
    return p.parse_args(argv)


def layer_timer(engine) -> tuple[dict[int, list[float]], list]:
    """Wall time of each decoder layer's forward, per call, from hooks on the engine's model."""
    spans: dict[int, list[float]] = collections.defaultdict(list)
    started: dict[int, float] = {}
    handles = []
    for i, layer in enumerate(decoder_layers(engine.model)):
        handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: started.__setitem__(i, time.perf_counter())))
        handles.append(layer.register_forward_hook(
            lambda m, a, out, i=i: spans[i].append(time.perf_counter() - started[i])))
    return spans, handles


def profile_main(argv=None) -> int:
    args = profile_parse(argv)
    from torch.profiler import ProfilerActivity, profile

    folder = model_folder(args.model)
    path, vocab = str(folder), json.loads((folder / "config.json").read_text())["vocab_size"]
    engines = {"transformers": make_engine("transformers", path, device="cpu", dtype="float32",
                                           num_threads=args.threads)}
    if not args.no_vllm:
        engines["vllm"] = make_engine("vllm", path, device="cpu", dtype="float32", num_threads=args.threads,
                                      kv_budget_mb=kv_budget_mb(folder, args.batch * (args.context * 5 // 4 + 64)))
    ids = [f"g{i}" for i in range(args.batch)]
    for eng in engines.values():
        for i, g in enumerate(ids):
            rng = random.Random(i)
            n = args.context + rng.randrange(-args.context // 4, args.context // 4 + 1)
            eng.add(g, [rng.randrange(3, vocab) for _ in range(n)], 10**6)
        eng.step(ids)
        for _ in range(2):
            eng.step(ids)
    spans, handles = layer_timer(engines["transformers"])
    per_op = {k: collections.Counter() for k in engines}
    calls = {k: collections.Counter() for k in engines}
    wall = {k: [] for k in engines}
    for s in range(args.steps):
        for kind in (list(engines) if s % 2 == 0 else list(reversed(engines))):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                res = engines[kind].step(ids)
                wall[kind].append(time.perf_counter() - t0)
            if len(res.tokens) != len(ids):
                raise RuntimeError("a generation ended during the profile: lower --steps")
            for ev in prof.key_averages():
                per_op[kind][ev.key] += ev.self_cpu_time_total
                calls[kind][ev.key] += ev.count
    for h in handles:
        h.remove()
    print(f"{Path(path).name}, batch {args.batch}, ~{args.context} tokens of context each, {args.threads} thread(s), "
          f"{args.steps} steps per engine under torch.profiler (alternated); torch {torch.__version__}")
    layers = [statistics.mean(v) * 1e3 for _, v in sorted(spans.items())]
    step_ms = statistics.median(wall["transformers"]) * 1e3
    print(f"transformers engine, per decoder layer: mean {statistics.mean(layers):.2f} ms [min {min(layers):.2f}, "
          f"max {max(layers):.2f}] x {len(layers)} layers = {sum(layers):.1f} ms of a {step_ms:.1f} ms step "
          f"(the rest, {step_ms - sum(layers):.1f} ms: embedding, final norm, LM head, sampling, the engine)")
    for kind in engines:
        total = sum(per_op[kind].values()) / args.steps / 1e3
        step = statistics.median(wall[kind]) * 1e3
        print(f"\n{kind}: step {step:.1f} ms (median, profiled), self CPU {total:.1f} ms")
        for name, us in per_op[kind].most_common(args.ops):
            print(f"  {name[:52]:52s} {us / args.steps / 1e3:8.2f} ms  {calls[kind][name] // args.steps:5d} calls")
    return 0



# ---- overhead

def contexts(batch: int, context: int) -> list[int]:
    """Different lengths around ``context`` so the batch needs padding."""
    return [max(8, context - (i * context) // (2 * max(batch, 1))) for i in range(batch)]


def dynamic_cache_forward(model, prompts: list[list[int]], device: torch.device):
    """A left-padded batch prefilled into a DynamicCache; returns a callable running one decode forward."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    step_mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype, device=device)], -1)
    step_ids = torch.ones(len(prompts), 1, dtype=torch.long, device=device)
    step_pos = torch.tensor([[len(p)] for p in prompts], device=device)

    def run() -> None:
        with torch.inference_mode():
            model(input_ids=step_ids, attention_mask=step_mask, position_ids=step_pos, past_key_values=cache,
                  use_cache=True)
        cache.crop(-1)
    return run


def measure(loaded, batch: int, context: int, steps: int) -> dict[str, float]:
    engine = TransformersEngine(loaded)
    prompts = [bk.random_prompt(loaded, n, seed=i) for i, n in enumerate(contexts(batch, context))]
    ids = [f"g{i}" for i in range(batch)]
    for gid, p in zip(ids, prompts):
        engine.add(gid, p, 10**6, forced_ids=bk.endless(loaded))
    engine.step(ids)
    engine.step(ids)                               # packs the batch cache
    model, dev = loaded.model, loaded.device

    def bare_forward() -> float:
        """The model call alone, on the engine's store as the next step sees it (nothing is committed)."""
        store = engine.rows.store
        mask = store.begin_decode(store.lengths, changed=False)
        x = torch.ones(batch, 1, dtype=torch.long, device=dev)
        with torch.inference_mode():
            return bk.timed(lambda: model(input_ids=x, position_ids=store.positions(), attention_mask=mask,
                                          past_key_values=store, use_cache=True), dev)

    hf = dynamic_cache_forward(model, prompts, dev)
    mates = ids[:-1] if batch > 1 else ids
    times: dict[str, list[float]] = {"engine": [], "bare": [], "hf": [], "rejoin": []}
    for i in range(steps + 3):
        t_engine = bk.timed(lambda: engine.step(ids), dev)
        t_bare = bare_forward()
        t_hf = bk.timed(hf, dev)
        if batch > 1:
            engine.step(mates)                     # membership changes: the next full step re-admits one row
        t_rejoin = bk.timed(lambda: engine.step(ids), dev)
        if i >= 3:                                 # warm-up
            for k, t in zip(times, (t_engine, t_bare, t_hf, t_rejoin)):
                times[k].append(t)
    out = {k: bk.median(v) for k, v in times.items()}
    out["ratio"] = bk.median([e / b for e, b in zip(times["engine"], times["bare"])])   # paired: robust to drifting load
    return out


def measure_prefill(loaded, burst: int, prompt: int, reps: int) -> dict[str, float]:
    """A step admitting ``burst`` new generations (prompts of ~``prompt`` tokens): batched vs one by one."""
    lengths = [max(8, prompt - 7 * i) for i in range(burst)]
    times: dict[str, list[float]] = {"batched": [], "one_by_one": []}
    for rep in range(reps + 1):
        for mode in times:
            engine = TransformersEngine(loaded, batch_prefill=mode == "batched")
            ids = [f"p{i}" for i in range(burst)]
            for i, (gid, n) in enumerate(zip(ids, lengths)):
                engine.add(gid, bk.random_prompt(loaded, n, seed=100 + i), 4)
            t = bk.timed(lambda: engine.step(ids), loaded.device)
            if rep:
                times[mode].append(t)
    return {k: bk.median(v) for k, v in times.items()}


def overhead_main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="engine_speed.py overhead", description=OVERHEAD_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--context", type=int, default=512, help="longest context in the batch (tokens)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per batch size")
    parser.add_argument("--bursts", type=int, nargs="+", default=[4, 8], help="new generations in one step")
    parser.add_argument("--burst-prompt", type=int, default=160, help="prompt tokens of a burst's generations")
    args = parser.parse_args(argv)
    loaded = bk.load_from_args(args)
    print(bk.describe(loaded))
    print(f"context {args.context} tokens (batch mates shorter, down to half), medians of {args.steps} steps")
    print(f"{'batch':>5} | {'engine step':>11} | {'bare forward':>12} | {'overhead':>8} | "
          f"{'HF DynamicCache':>15} | {'step w/ rejoin':>14}")
    worst = 0.0
    for batch in args.batches:
        r = measure(loaded, batch, args.context, args.steps)
        over = r["ratio"] - 1
        worst = max(worst, over)
        print(f"{batch:>5} | {bk.ms(r['engine']):>11} | {bk.ms(r['bare']):>12} | {over:>+8.1%} | "
              f"{bk.ms(r['hf']):>15} | {bk.ms(r['rejoin']):>14}")
    print(f"worst engine overhead vs bare forward: {worst:+.1%} (target <= +15%)")
    print(f"prefill of a burst of new generations in one step (prompts ~{args.burst_prompt} tokens), "
          f"medians of {args.reps}")
    for burst in args.bursts:
        r = measure_prefill(loaded, burst, args.burst_prompt, args.reps)
        print(f"  {burst:>2} new: batched {bk.ms(r['batched'])}  one by one {bk.ms(r['one_by_one'])}  "
              f"({r['batched'] / r['one_by_one']:.2f}x)")

    return 0


# ---- resume

def leave_batch(engine: TransformersEngine, offload: bool) -> None:
    """Suspend g; the mate's step takes it out of the batch store; optionally push its KV to host."""
    engine.kv_budget_bytes = 0.0 if offload else float("inf")
    engine.suspend("g")
    engine.step(["m"])
    engine._enforce_budget()
    assert engine.is_offloaded("g") == offload


def measure_resume(loaded, prompt_len: int, generated: int, reps: int) -> dict[str, float]:
    """Medians (seconds) of the three ways back to the next token, for one context; plus its size."""
    dev = loaded.device
    engine = TransformersEngine(loaded)
    prompt = bk.random_prompt(loaded, prompt_len, seed=1)
    engine.add("g", prompt, 10**6, forced_ids=bk.endless(loaded))
    engine.add("m", bk.random_prompt(loaded, 64, seed=2), 10**6, forced_ids=bk.endless(loaded))
    for _ in range(generated):
        engine.step(["g", "m"])
    times: dict[str, list[float]] = {"device": [], "host": [], "prefill": [], "resume_device": [], "resume_host": []}
    for rep in range(reps + 1):
        row = {}
        for where in ("device", "host"):
            leave_batch(engine, offload=where == "host")
            row["resume_" + where] = bk.timed(lambda: engine.resume("g"), dev)
            row[where] = row["resume_" + where] + bk.timed(lambda: engine.step(["g"]), dev)
        context = prompt + engine.output_ids("g")[:-1]          # what g's KV holds, re-prefilled
        engine.add("r", context, 1)
        row["prefill"] = bk.timed(lambda: engine.step(["r"]), dev)
        engine.release("r")
        if rep:                                                  # the first is warm-up
            for k, v in row.items():
                times[k].append(v)
    med = {k: bk.median(v) for k, v in times.items()}
    med["context"] = engine._gens["g"].kv_len
    med["kv_mib"] = med["context"] * engine.kv_shape.bytes_per_token / 2**20
    engine.close()
    return med


def resume_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engine_speed.py resume", description=RESUME_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.add_argument("--prompt", type=int, nargs="+", default=[1536],
                        help="prompt tokens of the suspended generation (several: one row each)")
    parser.add_argument("--generated", type=int, default=32, help="tokens generated before the suspension")
    args = parser.parse_args(argv)
    loaded = bk.load_from_args(args)
    print(bk.describe(loaded))
    limit = getattr(loaded.model.config, "max_position_embeddings", None)
    if limit and max(args.prompt) + args.generated > limit:
        print(f"note: a context exceeds the model's max_position_embeddings ({limit}): timings are valid, "
              "the content is not")
    print(f"medians of {args.reps} (token-exactness of resume is what test/test_engine.py checks); "
          f"targets: resume <= 5% of the re-prefill from device memory, <= 15% from host memory")
    print(f"{'context':>8} {'KV MiB':>7} {'re-prefill':>11} {'device resume+step':>19} {'ratio':>7} "
          f"{'host resume+step':>17} {'ratio':>7} {'resume() alone dev/host':>24}")
    for prompt_len in args.prompt:
        med = measure_resume(loaded, prompt_len, args.generated, args.reps)
        print(f"{med['context']:>8} {med['kv_mib']:>7.1f} {bk.ms(med['prefill']):>11} {bk.ms(med['device']):>19} "
              f"{med['device'] / med['prefill']:>7.1%} {bk.ms(med['host']):>17} {med['host'] / med['prefill']:>7.1%} "
              f"{med['resume_device'] * 1e3:>10.2f} / {med['resume_host'] * 1e3:.2f} ms", flush=True)



# ---- interrupt

def gate_cost(loaded, batch: int, context: int, steps: int) -> dict[str, float]:
    """Median decode step with the layer hooks taken off the model ("bare"), with them on and no check set
    ("hooks"), and with a check answering False at every layer ("check"); and the median paired ratios to bare."""
    engine = TransformersEngine(loaded)
    ids = [f"g{i}" for i in range(batch)]
    for i, gid in enumerate(ids):
        engine.add(gid, bk.random_prompt(loaded, context, seed=i), 10**6, forced_ids=bk.endless(loaded))
    engine.step(ids)
    layers = decoder_layers(loaded.model)
    hooks = [dict(layer._forward_pre_hooks) for layer in layers]   # the gate (and nothing else) is hooked here
    times: dict[str, list[float]] = {"bare": [], "hooks": [], "check": []}
    for _ in range(steps):
        for kind in times:
            for layer, saved in zip(layers, hooks):
                layer._forward_pre_hooks.clear()
                if kind != "bare":
                    layer._forward_pre_hooks.update(saved)
            engine.interrupt_check = bool if kind == "check" else None   # bool() is False: asked, never stops
            t0 = time.perf_counter()
            engine.step(ids)
            times[kind].append(time.perf_counter() - t0)
    for layer, saved in zip(layers, hooks):
        layer._forward_pre_hooks.update(saved)
    out = {kind: statistics.median(v) for kind, v in times.items()}
    for kind in ("hooks", "check"):
        out[f"{kind}/bare"] = statistics.median(a / b for a, b in zip(times[kind], times["bare"]))
    return out


def wait_for_step(loaded, prompts: int, length: int, interrupt: bool, at_s: float) -> tuple[float, float, bool]:
    """(seconds from the arrival to the step's end, the step's length, interrupted?) of one prefill step."""
    engine = TransformersEngine(loaded)
    ids = [f"p{i}" for i in range(prompts)]
    for i, gid in enumerate(ids):
        engine.add(gid, bk.random_prompt(loaded, length, seed=100 + i), 4)
    flag = threading.Event()
    arrived: list[float] = []
    engine.interrupt_check = flag.is_set if interrupt else None

    def arrive() -> None:
        arrived.append(time.perf_counter())
        flag.set()

    timer = threading.Timer(at_s, arrive)
    t0 = time.perf_counter()
    timer.start()
    result = engine.step(ids)
    end = time.perf_counter()
    timer.join()
    return end - arrived[0], end - t0, result.interrupted


def interrupt_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="engine_speed.py interrupt", description=INTERRUPT_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(p)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--steps", type=int, default=200, help="decode steps of each kind for the gate's cost")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=384)
    args = p.parse_args(argv)
    loaded = bk.load_from_args(args)
    print(bk.describe(loaded))
    layers = loaded.model.config.num_hidden_layers

    cost = gate_cost(loaded, args.batch, args.context, args.steps)
    print(f"\n1. layer gate, decode step of {args.batch} x ~{args.context} tokens ({args.steps} rounds, interleaved): "
          f"no hooks {cost['bare'] * 1e3:.3f} ms; hooks, no check {cost['hooks'] * 1e3:.3f} ms (paired x"
          f"{cost['hooks/bare']:.3f}); a check at each of {layers} layers {cost['check'] * 1e3:.3f} ms (paired x"
          f"{cost['check/bare']:.3f})")

    whole = statistics.median(wait_for_step(loaded, args.prompts, args.prompt_len, False, 10.0)[1]
                              for _ in range(3))
    at = whole / 3
    plain, cut, stopped = [], [], []
    for _ in range(args.reps):
        plain.append(wait_for_step(loaded, args.prompts, args.prompt_len, False, at)[0])
        wait, _, interrupted = wait_for_step(loaded, args.prompts, args.prompt_len, True, at)
        cut.append(wait)
        stopped.append(interrupted)
    print(f"2. an arrival {at * 1e3:.1f} ms into a {whole * 1e3:.1f} ms prefill step of {args.prompts} x "
          f"{args.prompt_len} tokens ({args.reps} of each, interleaved): waits "
          f"{statistics.median(plain) * 1e3:.1f} ms for the step's end without interrupts, "
          f"{statistics.median(cut) * 1e3:.1f} ms with them (one layer is ~{whole / layers * 1e3:.1f} ms); "
          f"ratio x{statistics.median(cut) / statistics.median(plain):.3f}; interrupted {sum(stopped)}/{len(stopped)}")


# ---- the command line

SUB_COMMANDS = {"vllm": vllm_main, "profile": profile_main, "overhead": overhead_main, "resume": resume_main,
                "interrupt": interrupt_main}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.report import run_sub_command

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rss-child"]:      # memory_part's child process: one engine alone
        kind, path, batch, length, threads, kv_mb = argv[1:7]
        rss_child(kind, path, int(batch), int(length), int(threads), float(kv_mb))
        return 0
    return run_sub_command(__doc__, SUB_COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
