#!/usr/bin/env python3
"""Where a decode step goes: per decoder layer and per op, the transformers engine beside the vLLM engine.

    python benchmarks/decode_profile.py --model smollm2 --batch 8 --context 800 [--steps 6] [--no-vllm]
    python benchmarks/decode_profile.py --model smollm2 --batch 8 --context 800 --source /path/to/other/checkout

Both engines hold the same --batch generations (prompt ids of --context tokens +-25%, greedy) and decode; each step
is profiled with torch.profiler (self CPU time per op, summed over --steps steps, engines alternated step by step),
and the transformers engine's decoder layers are timed with forward hooks (wall time from a layer's start to its
end; the rest of the step is the embedding, final norm, LM head and the engine's own work). --source imports
timely_llm_ros from another checkout (e.g. one before a change) for a before/after profile of the transformers
engine (vLLM's side then is that checkout's vLLM engine).
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import sys
import time
from pathlib import Path


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="config/models.yaml name or a model folder")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=800)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ops", type=int, default=12, help="ops listed per engine")
    p.add_argument("--no-vllm", action="store_true")
    p.add_argument("--source", default=None, help="a checkout to import timely_llm_ros from")
    return p.parse_args(argv)


def layer_timer(engine) -> tuple[dict[int, list[float]], list]:
    """Wall time of each decoder layer's forward, per call, from hooks on the engine's model."""
    try:
        from timely_llm_ros.engine.transformers.layer_gate import decoder_layers
    except ImportError:                       # a checkout from before the engine's split into modules
        from timely_llm_ros.engine.transformers.engine import decoder_layers

    spans: dict[int, list[float]] = collections.defaultdict(list)
    started: dict[int, float] = {}
    handles = []
    for i, layer in enumerate(decoder_layers(engine.model)):
        handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: started.__setitem__(i, time.perf_counter())))
        handles.append(layer.register_forward_hook(
            lambda m, a, out, i=i: spans[i].append(time.perf_counter() - started[i])))
    return spans, handles


def main(argv=None) -> int:
    args = parse(argv)
    sys.path.insert(0, args.source or str(Path(__file__).resolve().parent.parent))
    import torch
    from torch.profiler import ProfilerActivity, profile

    from timely_llm_ros.engine.factory import make_engine
    try:
        from timely_llm_ros.engine.benchkit import model_folder
    except ImportError:                       # a checkout from before model names: --model must be a folder
        model_folder = Path

    folder = model_folder(args.model)
    path, vocab = str(folder), json.loads((folder / "config.json").read_text())["vocab_size"]
    engines = {"transformers": make_engine("transformers", path, device="cpu", dtype="float32",
                                           num_threads=args.threads)}
    if not args.no_vllm:
        from engine_vllm_model import kv_budget_mb

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


if __name__ == "__main__":
    sys.exit(main())
