#!/usr/bin/env python3
"""What interrupts cost and buy on the transformers engine: the layer gate's cost per decode step, and how long an
arrival waits for a step in flight with and without it.

    .venv/bin/python benchmarks/interrupt_latency.py [--batch 8] [--context 256] [--prompts 8] [--prompt-len 384]
    .venv/bin/python benchmarks/interrupt_latency.py --random-config llama3-8b-8l --device cuda

1. Gate cost: decode steps of `--batch` generations, rotating three set-ups of one engine: its layer hooks taken off
   the model (bare), on with no check set (they return at once), and on with an interrupt_check that answers False
   at every layer; the medians of the paired ratios to bare.
2. Wait for the step in flight: a prefill step of `--prompts` prompts; a timer thread "arrives" a third of the way
   into it (its measured length) and raises the flag interrupt_check reads. Without interrupts the arrival waits for
   the step's end; with them, for the layer in progress. Medians over --reps of each, interleaved.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers.layer_gate import decoder_layers  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402


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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
