"""engine_vllm.py on a real model (``--model smollm2`` or a folder): the transformers and the vLLM engine side by side.

    python benchmarks/engine_vllm.py --model smollm2 [--batches 1,8,16] [--prompt-tokens 40,500] [--repeats 5]
        [--decode-steps 32] [--short 70] [--long 1500]

1. decode: for each prompt length and batch, both engines prefill the same prompt ids (an English passage, rows
   +-10% in length: each row attends to its own length), then --repeats rounds of --decode-steps greedy steps,
   the engines alternated round by round (one warm-up round first); tokens/s of each and the ratio per round
   (mean [min-max]), by wall time and by the process's CPU time (less swayed by other jobs taking the cores);
   then the greedy outputs compared generation by generation. A generation that emits EOS leaves the batch;
   identical outputs mean both engines see the same batches. vLLM's prefix cache is reset before every prefill
   measured here (the prompts of one case start like those of the case before).
2. prefill: one prompt of each length, engines alternated, --repeats times.
3. resume-to-next-token vs re-prefill at ~--short and ~--long tokens of context (engine_vllm.resume_part).
4. memory: each engine alone in a child process (the largest decode case): its resident set size, and its peak.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_vllm as ev  # noqa: E402

from timely_llm_ros.engine.benchkit import model_folder  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402

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


def engines(path: Path, threads: int, kv_mb: float) -> dict:
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
    print(f"  batch {batch:2d} prompt ~{length:5d}: tokens/s transformers {ev.stats(t)}  vllm {ev.stats(v)}  "
          f"transformers/vllm {ev.stats(ratio)} (by process CPU time {ev.stats(cpu_ratio)})  prefill s "
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
        print(f"  prompt {n:5d}: ms transformers {ev.stats([x * 1e3 for x in times['transformers']])}  vllm "
              f"{ev.stats([x * 1e3 for x in times['vllm']])}  speed transformers/vllm {ev.stats(ratio)}", flush=True)
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
        out = subprocess.run([sys.executable, __file__, "--rss-child", kind, str(path), str(batch), str(length),
                              str(args.threads), str(kv_mb)], capture_output=True, text=True, timeout=900)
        line = [x for x in out.stdout.splitlines() if x.startswith("RSS_MB")]
        rss[kind] = [float(v) for v in line[0].split()[1:]] if line else [float("nan")] * 2
    t, v = rss["transformers"], rss["vllm"]
    print(f"  resident set, each engine alone with {batch} x ~{length} tokens decoding (vLLM's KV pool {kv_mb:.0f} "
          f"MiB, zero-filled at start): transformers {t[0]:.0f} MB (peak {t[1]:.0f}), vllm {v[0]:.0f} MB (peak "
          f"{v[1]:.0f}) = {t[0] / v[0]:.2f}x (peak {t[1] / v[1]:.2f}x)")


def main(args) -> int:
    path = model_folder(args.model)
    batches = [int(b) for b in args.batches.split(",")]
    lengths = [int(n) for n in args.prompt_tokens.split(",")]
    rounds = args.decode_steps * (args.repeats + 1) + 8
    kv_mb = kv_budget_mb(path, max(max(batches) * (int(max(lengths) * 1.1) + rounds), args.long + 600))
    rows: list[dict] = []
    print(f"{path.name}: fp32, {args.threads} thread(s), CPU; vLLM block size 32, KV pool {kv_mb:.0f} MiB; "
          f"mean [min-max] over {args.repeats} rounds after a warm-up, engines alternated")
    engs = engines(path, args.threads, kv_mb)
    print(f"\n1. decode ({args.decode_steps} steps a round)")
    for length in lengths:
        for batch in batches:
            decode_case(engs, batch, length, args, rows)
    print("\n2. prefill of one prompt")
    prefill_part(engs, lengths, args, rows)
    print(f"\n3. resume-to-next-token vs cold re-prefill, ~{args.short} and ~{args.long} tokens of context")
    for n in (args.short, args.long):
        ev.resume_part(engs, n, args.repeats, rows)
    ev.close(engs)
    print("\n4. memory")
    memory_part(path, max(batches), max(lengths), args, kv_mb)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ev.write_csv(out / "summary_model.csv", rows, ["part", "engine", "case", "mean", "min", "max", "unit"])
    print(f"wrote {out / 'summary_model.csv'}")
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--rss-child"]:
    kind, path, batch, length, threads, kv_mb = sys.argv[2:8]
    rss_child(kind, path, int(batch), int(length), int(threads), float(kv_mb))
