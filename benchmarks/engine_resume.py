"""Resume vs re-prefill: time to the next token of a suspended generation (targets: <= 5% from device
memory, <= 15% from host memory, of the re-prefill time).

    .venv/bin/python benchmarks/engine_resume.py [--prompt 1536] [--generated 32]
    .venv/bin/python benchmarks/engine_resume.py --device cuda --random-config llama3-8b --prompt 2884

A generation with a long prompt decodes ``--generated`` tokens beside a batch mate, is suspended and
leaves the batch (its KV is copied out of the batch store), then comes back three ways, each giving
the next token:
  device  resume() + step(): KV copied back from device memory, one decode step;
  host    the same after the KV was offloaded to host memory (pinned on cuda; on cpu a memory copy);
  prefill a fresh generation of prompt + generated tokens is prefilled (what an engine without
          suspension would do).
Medians of --reps repetitions, timings interleaved.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers_engine import TransformersEngine  # noqa: E402


def leave_batch(engine: TransformersEngine, offload: bool) -> None:
    """Suspend g; the mate's step takes it out of the batch store; optionally push its KV to host."""
    engine.kv_budget_bytes = 0.0 if offload else float("inf")
    engine.suspend("g")
    engine.step(["m"])
    engine._enforce_budget()
    assert engine.is_offloaded("g") == offload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.add_argument("--prompt", type=int, default=1536, help="prompt tokens of the suspended generation")
    parser.add_argument("--generated", type=int, default=32, help="tokens generated before the suspension")
    args = parser.parse_args()
    loaded = bk.load_from_args(args)
    dev = loaded.device
    print(bk.describe(loaded))
    limit = getattr(loaded.model.config, "max_position_embeddings", None)
    if limit and args.prompt + args.generated > limit:
        print(f"note: the context exceeds the model's max_position_embeddings ({limit}): timings are valid, "
              "the content is not")
    engine = TransformersEngine(loaded)
    prompt = bk.random_prompt(loaded, args.prompt, seed=1)
    engine.add("g", prompt, 10**6, forced_ids=bk.endless(loaded))
    engine.add("m", bk.random_prompt(loaded, 64, seed=2), 10**6, forced_ids=bk.endless(loaded))
    for _ in range(args.generated):
        engine.step(["g", "m"])
    kv_mb = engine._gens["g"].kv_len * engine.kv_shape.bytes_per_token / 2**20
    times: dict[str, list[float]] = {"device": [], "host": [], "prefill": [], "resume_device": [], "resume_host": []}
    for rep in range(args.reps + 1):
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
    ctx = engine._gens["g"].kv_len
    print(f"context ~{ctx} tokens ({args.prompt} prompt + generated), KV {kv_mb:.1f} MiB, "
          f"medians of {args.reps} (token-exactness of resume is what test/test_engine.py checks)")
    print(f"  re-prefill of the context     {bk.ms(med['prefill'])}")
    for where, target in (("device", 0.05), ("host", 0.15)):
        ratio = med[where] / med["prefill"]
        print(f"  resume from {where:<6} + step      {bk.ms(med[where])}   = {ratio:6.1%} of re-prefill "
              f"(target <= {target:.0%})   [resume() alone {bk.ms(med['resume_' + where])}]")


if __name__ == "__main__":
    main()
