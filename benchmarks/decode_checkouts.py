#!/usr/bin/env python3
"""Decode speed of the transformers engine from two checkouts (before/after a change) and vLLM, in one run.

    python benchmarks/decode_checkouts.py --old ../main [--new .] [--model smollm2] [--batches 8,16]
        [--prompt-tokens 40,500] [--repeats 5] [--decode-steps 32] [--no-vllm]

Each engine runs in a worker process of its own (the old and the new checkout's transformers engine, each imported
from its checkout; vLLM from the new one), one torch thread each, on the same prompt ids (engine_vllm_model.py's
passage, rows +-10% in length). Per batch and prompt length the workers prefill, then run --repeats rounds of
--decode-steps greedy steps after one warm-up round; one worker runs at a time and the order rotates round by
round. Printed: tokens/s by wall time and by the worker's CPU time (less swayed by other jobs on the cores), and
the ratios new/old and new/vLLM per round, mean [min-max]; then whether the greedy outputs are identical.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="root of the checkout to compare against (e.g. a worktree of main)")
    p.add_argument("--new", default=str(HERE.parent), help="root of the changed checkout (default: this one)")
    p.add_argument("--model", default="smollm2", help="config/models.yaml name or a model folder")
    p.add_argument("--batches", default="8,16")
    p.add_argument("--prompt-tokens", default="40,500")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--no-vllm", action="store_true", help="compare the two checkouts only")
    p.add_argument("--worker", nargs=3, metavar=("ROOT", "KIND", "KV_MB"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(root: str, kind: str, kv_mb: float, model: str) -> None:
    """Serve commands from stdin (one JSON object a line), answer on stdout: the engine of ``root``'s checkout."""
    answers = os.fdopen(os.dup(1), "w")       # the protocol's channel; whatever else prints goes to stderr
    os.dup2(2, 1)
    sys.path.insert(0, root)
    import timely_llm_ros.engine
    from timely_llm_ros.engine.benchkit import model_folder
    from timely_llm_ros.engine.factory import make_engine

    sys.path.insert(0, str(HERE))             # imported after the checkout's package: its paths do not shadow it
    from engine_vllm_model import passage_ids

    options = {"kv_budget_mb": kv_mb} if kind == "vllm" else {}
    engine = make_engine(kind, str(model_folder(model)), device="cpu", dtype="float32", num_threads=1, **options)
    if kind == "vllm":
        engine.llm.reset_prefix_cache()
    live: list[str] = []
    ids: list[str] = []
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["do"] == "case":
            batch, length, max_new = cmd["batch"], cmd["length"], cmd["max_new"]
            ids = [f"d{batch}-{length}-{i}" for i in range(batch)]
            if kind == "vllm":
                engine.llm.reset_prefix_cache()
            for i, g in enumerate(ids):
                n = max(1, round(length * (0.9 + 0.2 * i / max(batch - 1, 1))))
                engine.add(g, passage_ids(engine, n, i), max_new)
            done = engine.step(ids).finished
            live = [g for g in ids if g not in done]
            answer = {}
        elif cmd["do"] == "round":
            tokens, t0, c0 = 0, time.perf_counter(), time.process_time()
            for _ in range(cmd["steps"]):
                if not live:
                    break
                res = engine.step(live)
                tokens += len(res.tokens)
                live = [g for g in live if g not in res.finished]
            answer = {"tokens": tokens, "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
        elif cmd["do"] == "end_case":
            answer = {"outputs": [engine.output_ids(g) for g in ids]}
            for g in ids:
                engine.release(g)
        elif cmd["do"] == "where":
            answer = {"package": str(Path(timely_llm_ros.engine.__file__).parent)}
        else:
            break
        print(json.dumps(answer), file=answers, flush=True)


class Worker:
    def __init__(self, root: str, kind: str, kv_mb: float, model: str) -> None:
        env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, __file__, "--model", model, "--old", root, "--worker", root,
                                      kind, str(kv_mb)], cwd=root, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker ended (exit {self.proc.wait()}); its stderr above says why")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.write(json.dumps({"do": "quit"}) + "\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def stats(xs: list[float]) -> str:
    return f"{statistics.mean(xs):7.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE))
    from engine_vllm_model import kv_budget_mb

    from timely_llm_ros.engine.benchkit import model_folder

    batches = [int(b) for b in args.batches.split(",")]
    lengths = [int(n) for n in args.prompt_tokens.split(",")]
    max_new = args.decode_steps * (args.repeats + 1) + 2
    kv_mb = kv_budget_mb(model_folder(args.model), max(batches) * (int(max(lengths) * 1.1) + max_new))
    roots = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    workers = {name: Worker(root, "transformers", kv_mb, args.model) for name, root in roots.items()}
    if not args.no_vllm:
        workers["vllm"] = Worker(roots["new"], "vllm", kv_mb, args.model)
    print(f"{args.model}: fp32, 1 thread each, CPU; old {roots['old']}, new {roots['new']}; {args.repeats} rounds of "
          f"{args.decode_steps} steps after a warm-up, workers rotated round by round; mean [min-max]")
    for name, w in workers.items():
        print(f"  {name}: {w.ask(do='where')['package']}")
    names = list(workers)
    for length in lengths:
        for batch in batches:
            for w in workers.values():
                w.ask(do="case", batch=batch, length=length, max_new=max_new)
            wall: dict[str, list[float]] = {n: [] for n in names}
            cpu: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.repeats + 1):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    got = workers[name].ask(do="round", steps=args.decode_steps)
                    if r and got["tokens"]:
                        wall[name].append(got["tokens"] / got["wall"])
                        cpu[name].append(got["tokens"] / got["cpu"])
            outputs = {n: w.ask(do="end_case")["outputs"] for n, w in workers.items()}
            if not all(cpu.values()):
                print(f"batch {batch:2d} prompt ~{length:4d}: every generation ended within the warm-up round (stop "
                      f"tokens); nothing measured", flush=True)
                continue
            line = f"batch {batch:2d} prompt ~{length:4d}: tokens/s (CPU) " + "  ".join(
                f"{n} {statistics.mean(cpu[n]):6.1f}" for n in names)
            for a, b in (("new", "old"), ("new", "vllm"), ("old", "vllm")):
                if b in workers:
                    line += (f"\n    {a}/{b}: CPU {stats([x / y for x, y in zip(cpu[a], cpu[b])])}  wall "
                             f"{stats([x / y for x, y in zip(wall[a], wall[b])])}")
            same = {n: sum(o == p for o, p in zip(outputs["new"], outputs[n])) for n in names if n != "new"}
            line += "\n    greedy outputs identical to new: " + ", ".join(f"{n} {k}/{batch}" for n, k in same.items())
            print(line, flush=True)
    for w in workers.values():
        w.close()
    return 0


if __name__ == "__main__":
    ARGS = parse()
    if ARGS.worker:
        worker(ARGS.worker[0], ARGS.worker[1], float(ARGS.worker[2]), ARGS.model)
    else:
        sys.exit(main(ARGS))
