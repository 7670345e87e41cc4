"""Engine overhead per decode step vs a bare model forward of the same batch (target <= 15%).

    .venv/bin/python benchmarks/engine_overhead.py [--batches 1 4 8] [--context 512]
    .venv/bin/python benchmarks/engine_overhead.py --device cuda --random-config llama3-8b --context 2048

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
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402
from transformers import DynamicCache  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--context", type=int, default=512, help="longest context in the batch (tokens)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per batch size")
    parser.add_argument("--bursts", type=int, nargs="+", default=[4, 8], help="new generations in one step")
    parser.add_argument("--burst-prompt", type=int, default=160, help="prompt tokens of a burst's generations")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
