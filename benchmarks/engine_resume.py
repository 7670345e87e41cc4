"""Resume vs re-prefill: time to the next token of a suspended generation (targets: <= 5% from device
memory, <= 15% from host memory, of the re-prefill time).

    .venv/bin/python benchmarks/engine_resume.py [--prompt 1536] [--generated 32]
    .venv/bin/python benchmarks/engine_resume.py --model smollm2 --threads 1 --prompt 38 1468  # ~70, ~1,500
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
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402


def leave_batch(engine: TransformersEngine, offload: bool) -> None:
    """Suspend g; the mate's step takes it out of the batch store; optionally push its KV to host."""
    engine.kv_budget_bytes = 0.0 if offload else float("inf")
    engine.suspend("g")
    engine.step(["m"])
    engine._enforce_budget()
    assert engine.is_offloaded("g") == offload


def measure(loaded, prompt_len: int, generated: int, reps: int) -> dict[str, float]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.add_argument("--prompt", type=int, nargs="+", default=[1536],
                        help="prompt tokens of the suspended generation (several: one row each)")
    parser.add_argument("--generated", type=int, default=32, help="tokens generated before the suspension")
    args = parser.parse_args()
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
        med = measure(loaded, prompt_len, args.generated, args.reps)
        print(f"{med['context']:>8} {med['kv_mib']:>7.1f} {bk.ms(med['prefill']):>11} {bk.ms(med['device']):>19} "
              f"{med['device'] / med['prefill']:>7.1%} {bk.ms(med['host']):>17} {med['host'] / med['prefill']:>7.1%} "
              f"{med['resume_device'] * 1e3:>10.2f} / {med['resume_host'] * 1e3:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
