"""Profile the transformers engine and write the latency YAML the simulator loads (core/latency_model.py).

    python -m timely_llm_ros.engine.transformers.profiler --out profile.yaml [--model PATH|NAME | --random-config small]
        [--check 12:384 16:768 ...]

Measures, on this engine (StepResult.elapsed_s, or with ``--clock cpu`` the process's CPU time of each step; medians
of --reps):
  prefill time of one prompt of n tokens, fitted as a*n^2 + b*n + c;
  decode step time of B generations holding kv_total tokens of context in all, fitted as
  base + per_seq*B + per_kv_token*kv_total (one linear model over all batch sizes);
  host->device KV reload bandwidth.
Both fits are least squares (numpy) on relative error with non-negative coefficients; the MAPE of each is printed and stored under ``fit``.
``--check B:CTX`` measures decode steps at points outside the fit and prints the fitted model's error there. The
YAML starts with comment lines saying how it was made (command, threads, machine).
"""
from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from timely_llm_ros.paths import share_dir
from timely_llm_ros.engine import benchkit as bk
from timely_llm_ros.engine.transformers.loader import LoadedModel
from timely_llm_ros.engine.transformers.engine import TransformersEngine


CLOCKS = {"wall": "StepResult.elapsed_s, wall time",
          "cpu": "the process's CPU time during each step (CPU engines on a shared machine)"}


def cpu_name() -> str:
    """The processor's model name (Linux), else the architecture."""
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    """Mean absolute percentage error."""
    return float(np.mean(np.abs(predicted - measured) / measured))


def nonneg_lstsq(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares on relative errors (rows scaled by 1/target, as MAPE weighs them) with coefficients >= 0
    (a negative time per token is noise): drop the most negative column and refit until none is negative."""
    design, target = design / target[:, None], np.ones_like(target)
    keep = list(range(design.shape[1]))
    while True:
        coef = np.zeros(design.shape[1])
        coef[keep] = np.linalg.lstsq(design[:, keep], target, rcond=None)[0]
        if coef.min() >= 0 or len(keep) == 1:
            return np.maximum(coef, 0.0)
        keep.remove(int(np.argmin(coef)))


def step_seconds(engine: TransformersEngine, ids: list[str], clock: str) -> float:
    """One step's seconds: its wall time (StepResult.elapsed_s) or, clock "cpu", this process's CPU time during it,
    which other jobs on a shared CPU inflate far less (a CPU engine's step is its process's compute)."""
    if clock == "wall":
        return engine.step(ids).elapsed_s
    start = time.process_time()
    engine.step(ids)
    return time.process_time() - start


def profile_prefill(loaded: LoadedModel, lengths: list[int], reps: int, clock: str = "wall") -> list[tuple[int, float]]:
    """(n, median seconds) of a lone prefill of n tokens."""
    engine = TransformersEngine(loaded)
    points = []
    for n in lengths:
        times = []
        for rep in range(reps + 1):
            engine.add("p", bk.random_prompt(loaded, n, seed=rep), 1)
            times.append(step_seconds(engine, ["p"], clock))
            engine.release("p")
        points.append((n, bk.median(times[1:])))
    return points


def profile_decode(loaded: LoadedModel, batches: list[int], contexts: list[int],
                   steps: int, clock: str = "wall") -> list[tuple[int, int, float]]:
    """(B, kv_total, median seconds) of a decode step of B generations of a given context each."""
    points = []
    for ctx in contexts:
        engine = TransformersEngine(loaded)
        ids = [f"g{i}" for i in range(max(batches))]
        for i, gid in enumerate(ids):
            engine.add(gid, bk.random_prompt(loaded, ctx, seed=i), 10**6, forced_ids=bk.endless(loaded))
            engine.step([gid])
        for batch in batches:
            chosen = ids[:batch]
            for _ in range(3):                            # arrange the rows, warm up
                engine.step(chosen)
            times = [step_seconds(engine, chosen, clock) for _ in range(steps)]
            kv_total = sum(engine._gens[g].kv_len for g in chosen)
            points.append((batch, kv_total, bk.median(times)))
    return points


def reload_bandwidth(loaded: LoadedModel, mib: int = 64) -> float:
    """Bytes/s of a host->device copy of pinned (on cuda) memory."""
    pin = loaded.device.type == "cuda"
    src = torch.empty(mib * 2**20, dtype=torch.uint8, pin_memory=pin)
    dst = torch.empty_like(src, device=loaded.device)
    best = min(bk.timed(lambda: dst.copy_(src, non_blocking=pin), loaded.device) for _ in range(5))
    return src.numel() / best


def fit_prefill(points: list[tuple[int, float]]) -> tuple[dict[str, float], float]:
    n = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points])
    design = np.stack([n * n, n, np.ones_like(n)], axis=1)
    a, b, c = nonneg_lstsq(design, t)
    return {"a": float(a), "b": float(b), "c": float(c)}, mape(t, design @ np.array([a, b, c]))


def fit_decode(points: list[tuple[int, int, float]]) -> tuple[dict[str, float], float]:
    batch = np.array([p[0] for p in points], dtype=float)
    kv = np.array([p[1] for p in points], dtype=float)
    t = np.array([p[2] for p in points])
    design = np.stack([np.ones_like(batch), batch, kv], axis=1)
    coef = nonneg_lstsq(design, t)
    return ({"base": float(coef[0]), "per_seq": float(coef[1]), "per_kv_token": float(coef[2])},
            mape(t, design @ coef))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.set_defaults(reps=3)
    parser.add_argument("--out", required=True, help="YAML to write")
    parser.add_argument("--prefill-lengths", type=int, nargs="+", default=[16, 64, 128, 256, 512, 1024, 1536, 2048])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 256, 512, 1024])
    parser.add_argument("--decode-steps", type=int, default=10)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="what a step's time is: " +
                        "; ".join(f"{k}: {v}" for k, v in CLOCKS.items()))
    parser.add_argument("--check", nargs="*", default=[], metavar="B:CTX",
                        help="decode points outside the fit to check the fitted model against (batch:context)")
    args = parser.parse_args(argv)
    loaded = bk.load_from_args(args)
    desc = bk.describe(loaded).replace(f"{share_dir()}/", "")     # model folders relative to the checkout
    print(desc)
    limit = int(getattr(loaded.model.config, "max_position_embeddings", 10**9)) - 64
    lengths = [n for n in args.prefill_lengths if n <= limit]
    contexts = [c for c in args.contexts if c <= limit]

    pre_points = profile_prefill(loaded, lengths, args.reps, args.clock)
    prefill, pre_err = fit_prefill(pre_points)
    print("prefill   n  measured    fitted")
    for n, t in pre_points:
        print(f"  {n:>8} {bk.ms(t)} {bk.ms(prefill['a'] * n * n + prefill['b'] * n + prefill['c'])}")
    print(f"prefill fit a*n^2+b*n+c: a={prefill['a']:.3e} b={prefill['b']:.3e} c={prefill['c']:.3e}  "
          f"MAPE {pre_err:.1%}")

    dec_points = profile_decode(loaded, args.batches, contexts, args.decode_steps, args.clock)
    decode, dec_err = fit_decode(dec_points)
    print("decode    B  kv_total  measured    fitted")
    for b, kv, t in dec_points:
        fitted = decode["base"] + decode["per_seq"] * b + decode["per_kv_token"] * kv
        print(f"  {b:>8} {kv:>9} {bk.ms(t)} {bk.ms(fitted)}")
    print(f"decode fit base+per_seq*B+per_kv_token*KV: base={decode['base']:.3e} per_seq={decode['per_seq']:.3e} "
          f"per_kv_token={decode['per_kv_token']:.3e}  MAPE {dec_err:.1%}")

    checks = []
    if args.check:
        points = [tuple(int(x) for x in c.split(":")) for c in args.check]
        print("check (not in the fit)  B   ctx  kv_total  measured    fitted   error")
        for b, ctx in points:
            (_, kv, t), = profile_decode(loaded, [b], [ctx], args.decode_steps, args.clock)
            fitted = decode["base"] + decode["per_seq"] * b + decode["per_kv_token"] * kv
            checks.append(f"batch {b} x {ctx} tokens: measured {t * 1e3:.1f} ms, fitted {fitted * 1e3:.1f} ms "
                          f"({(fitted - t) / t:+.1%})")
            print(f"  {b:>25} {ctx:>5} {kv:>9} {bk.ms(t)} {bk.ms(fitted)} {(fitted - t) / t:+7.1%}")

    bandwidth = reload_bandwidth(loaded)
    engine = TransformersEngine(loaded)
    profile = {
        "prefill": prefill,
        "decode": decode,
        "network_delay_s": 0.0,
        "kv": {"bytes_per_token": engine.kv_shape.bytes_per_token, "reload_bytes_per_s": bandwidth},
        "layers": int(loaded.model.config.num_hidden_layers),    # where an interrupt can end a step
        "source": f"timely_llm_ros.engine.transformers.profiler {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {desc}",
        "fit": {"prefill_mape": pre_err, "decode_mape": dec_err,
                "prefill_points": [[n, t] for n, t in pre_points],
                "decode_points": [[b, kv, t] for b, kv, t in dec_points]},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        command = " ".join(sys.argv[1:] if argv is None else argv)
        f.write(f"# made by: python -m timely_llm_ros.engine.transformers.profiler {command}\n# on: {cpu_name()}; {desc}\n"
                f"# measured on the transformers engine ({CLOCKS[args.clock]}, medians); fits below, "
                "points under fit\n")
        f.writelines(f"# decode check outside the fit: {line}\n" for line in checks)
        yaml.safe_dump(profile, f, sort_keys=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
