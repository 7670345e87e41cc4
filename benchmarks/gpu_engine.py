#!/usr/bin/env python3
"""The transformers engine on a GPU: one table, under 6 minutes on one H100. Needs only torch and transformers.

    python benchmarks/gpu_engine.py                         # cuda: SmolLM2's and Llama-3-8B's shapes
    python benchmarks/gpu_engine.py --device cpu --tiny     # a tiny shape on CPU (what the test runs)

No ROS, no vLLM, no network: the models are random weights of SmolLM2-135M's and Llama-3-8B's shapes built from
their configs (bf16 on cuda), or SmolLM2's own folder when it is prepared here (the model cache, `make setup`).
For each shape (medians; each part has a time budget and stops repeating when it is spent):
  bandwidth  a large device-to-device copy: bytes read + written per second (the roofline's denominator);
  decode     a decode step at batch 1, 8 and 32, --context tokens each, against the memory-bandwidth roofline:
             (weights read + KV read) bytes / bandwidth, i.e. the fastest a step can be if it only streams memory;
  prefill    one prompt of --context and of --long tokens (and the tokens/s);
  resume     a generation of ~--long tokens of context suspended, out of the batch: resume + next token from
             device memory, and from host memory, against re-prefilling its context;
  offload    its KV to host memory and back (MiB/s each way);
  interrupt  a prefill step of 8 prompts that an arrival interrupts a third of the way in: time from the request
             to the step's end, against the same arrival waiting for the uninterrupted step;
  mask       applying a token bitmask (one bit per vocabulary entry) to the logits of a decode step, at batch 1,
             8 and 32, against the step (xgrammar's kernel when xgrammar is installed, else plain torch ops).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers.loader import LoadedModel, build_random_model, load_pretrained, random_config  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402

ROWS: list[tuple[str, str, str, str, str]] = []      # shape, part, case, measured, reference / ratio


def row(shape: str, part: str, case: str, measured: str, reference: str = "") -> None:
    ROWS.append((shape, part, case, measured, reference))
    print(f"  {part:9s} {case:28s} {measured:>24s}  {reference}", flush=True)


def timed_reps(fn: Callable[[], object], device: torch.device, budget_s: float, min_reps: int = 3,
               max_reps: int = 20) -> float:
    """Median seconds of fn() over repetitions until the budget is spent (at least min_reps, one warm-up)."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        times.append(bk.timed(fn, device))
    return statistics.median(times)


def bandwidth(device: torch.device, mib: int) -> float:
    """Bytes/s of a device-to-device copy (read + write counted)."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = min(bk.timed(lambda: dst.copy_(src), device) for _ in range(5))
    return 2 * src.numel() / best


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes a decode step reads of the weights: every parameter, except an untied input embedding (a step reads
    only its batch's rows of it)."""
    embed = model.get_input_embeddings().weight
    tied = model.get_output_embeddings() is not None and getattr(model.get_output_embeddings(), "weight", None) is embed
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    return total - (0 if tied else embed.numel() * embed.element_size())


def prompts(loaded: LoadedModel, n: int, count: int, seed: int = 0) -> list[list[int]]:
    return [bk.random_prompt(loaded, n, seed=seed + i) for i in range(count)]


def decode_part(shape: str, loaded: LoadedModel, context: int, batches: list[int], bw: float, budget_s: float,
                steps: dict[int, float]) -> None:
    engine = TransformersEngine(loaded)
    ids = [f"d{i}" for i in range(max(batches))]
    for gid, p in zip(ids, prompts(loaded, context, len(ids))):
        engine.add(gid, p, 10**6, forced_ids=bk.endless(loaded))
    engine.step(ids)                                             # prefill all (batched)
    wbytes = weight_bytes(loaded.model)
    for batch in batches:
        chosen = ids[:batch]
        for _ in range(3):                                       # arrange the rows for this batch
            engine.step(chosen)
        step = timed_reps(lambda: engine.step(chosen), loaded.device, budget_s / len(batches), min_reps=5, max_reps=40)
        widest = max(engine._gens[g].kv_len for g in chosen) + 1  # attention reads this many columns of every row
        kv_bytes = batch * widest * engine.kv_shape.bytes_per_token
        roof = (wbytes + kv_bytes) / bw
        steps[batch] = step
        row(shape, "decode", f"batch {batch}, {context} tokens each", f"{step * 1e3:8.2f} ms/step",
            f"roofline {roof * 1e3:.2f} ms ({(wbytes + kv_bytes) / 2**20:.0f} MiB) = {roof / step:.0%} of it; "
            f"{batch / step:.0f} tokens/s")
    engine.close()


def prefill_part(shape: str, loaded: LoadedModel, lengths: list[int], budget_s: float) -> None:
    engine = TransformersEngine(loaded)
    counter = iter(range(10**6))
    for n in lengths:
        prompt = bk.random_prompt(loaded, n, seed=7)

        def once() -> None:
            gid = f"p{next(counter)}"
            engine.add(gid, prompt, 1)
            engine.step([gid])
            engine.release(gid)
        t = timed_reps(once, loaded.device, budget_s / len(lengths))
        row(shape, "prefill", f"one prompt of {n} tokens", f"{t * 1e3:8.2f} ms", f"{n / t:.0f} tokens/s")
    engine.close()


def resume_part(shape: str, loaded: LoadedModel, context: int, reps: int) -> None:
    """Resume + next token from device and from host memory vs re-prefill; and the offload each way."""
    dev = loaded.device
    engine = TransformersEngine(loaded)
    prompt = bk.random_prompt(loaded, context - 16, seed=1)
    engine.add("g", prompt, 10**6, forced_ids=bk.endless(loaded))
    engine.add("m", bk.random_prompt(loaded, 32, seed=2), 10**6, forced_ids=bk.endless(loaded))
    for _ in range(16):
        engine.step(["g", "m"])
    times: dict[str, list[float]] = {k: [] for k in ("device", "host", "prefill", "to_host", "to_device")}
    for rep in range(reps + 1):
        sample = {}
        for where in ("device", "host"):
            engine.suspend("g")
            engine.step(["m"])                                   # g leaves the batch: its row is parked
            if where == "host":
                engine.kv_budget_bytes = 0.0
                sample["to_host"] = bk.timed(engine._enforce_budget, dev)
                engine.kv_budget_bytes = math.inf
                sample["to_device"] = bk.timed(lambda: engine.resume("g"), dev)
                sample[where] = sample["to_device"] + bk.timed(lambda: engine.step(["g"]), dev)
            else:
                sample[where] = bk.timed(lambda: (engine.resume("g"), engine.step(["g"])), dev)
        engine.add("r", prompt + engine.output_ids("g")[:-1], 1)
        sample["prefill"] = bk.timed(lambda: engine.step(["r"]), dev)
        engine.release("r")
        if rep:
            for k, v in sample.items():
                times[k].append(v)
    med = {k: statistics.median(v) for k, v in times.items()}
    kv_mib = engine._gens["g"].kv_len * engine.kv_shape.bytes_per_token / 2**20
    ctx = engine._gens["g"].kv_len
    row(shape, "resume", f"re-prefill of {ctx} tokens", f"{med['prefill'] * 1e3:8.2f} ms")
    for where in ("device", "host"):
        row(shape, "resume", f"from {where} + next token", f"{med[where] * 1e3:8.2f} ms",
            f"= {med[where] / med['prefill']:.1%} of the re-prefill")
    row(shape, "offload", f"KV of {ctx} tokens ({kv_mib:.1f} MiB)", f"{med['to_host'] * 1e3:8.2f} ms to host",
        f"{kv_mib / med['to_host']:.0f} MiB/s; back {med['to_device'] * 1e3:.2f} ms = "
        f"{kv_mib / med['to_device']:.0f} MiB/s")
    engine.close()


def interrupt_part(shape: str, loaded: LoadedModel, length: int, reps: int) -> None:
    """An arrival a third of the way into a prefill step of 8 prompts: how long until the step ends."""
    def one(interrupt: bool, at_s: float | None) -> tuple[float | None, float, bool]:
        """(seconds from the arrival to the step's end or None if the step ended first, step seconds, cut?)"""
        engine = TransformersEngine(loaded)
        ids = [f"p{i}" for i in range(8)]
        for gid, p in zip(ids, prompts(loaded, length, 8, seed=100)):
            engine.add(gid, p, 4)
        flag, arrived = threading.Event(), []
        engine.interrupt_check = flag.is_set if interrupt else None

        def arrive() -> None:
            arrived.append(time.perf_counter())
            flag.set()
        timer = threading.Timer(at_s, arrive) if at_s is not None else None
        t0 = time.perf_counter()
        if timer is not None:
            timer.start()
        result = engine.step(ids)                                 # synchronised on cuda before it returns
        end = time.perf_counter()
        if timer is not None:
            timer.cancel()
            timer.join()
        engine.close()
        wait = end - arrived[0] if arrived and arrived[0] < end else None
        return wait, end - t0, result.interrupted

    one(False, None)                                              # warm-up
    whole = statistics.median(one(False, None)[1] for _ in range(3))
    plain, cut, stopped = [], [], 0
    for _ in range(reps):
        plain.append(one(False, whole / 3)[0])
        wait, _, interrupted = one(True, whole / 3)
        cut.append(wait)
        stopped += interrupted
    plain, cut = [w for w in plain if w is not None], [w for w in cut if w is not None]
    layers = loaded.model.config.num_hidden_layers
    if not plain or not cut:
        row(shape, "interrupt", f"prefill step 8 x {length} tokens", "-", f"the step ({whole * 1e3:.1f} ms) ended "
            "before the arrival: too short to measure")
        return
    row(shape, "interrupt", f"prefill step 8 x {length} tokens", f"{statistics.median(cut) * 1e3:8.2f} ms to end",
        f"vs {statistics.median(plain) * 1e3:.2f} ms without interrupts (step {whole * 1e3:.1f} ms, {layers} layers; "
        f"interrupted {stopped}/{reps})")


def bitmask_applier() -> tuple[str, Callable[[torch.Tensor, torch.Tensor], None]]:
    """xgrammar's in-place bitmask kernel when installed, else the same in plain torch ops."""
    try:
        from xgrammar import apply_token_bitmask_inplace

        return "xgrammar", apply_token_bitmask_inplace
    except ImportError:
        pass

    def apply(logits: torch.Tensor, words: torch.Tensor) -> None:
        shifts = torch.arange(32, dtype=torch.int32, device=words.device)
        allowed = ((words[:, :, None] >> shifts) & 1).reshape(words.shape[0], -1)[:, :logits.shape[-1]].bool()
        logits.masked_fill_(~allowed, float("-inf"))
    return "torch", apply


def mask_part(shape: str, loaded: LoadedModel, batches: list[int], steps: dict[int, float], budget_s: float) -> None:
    name, apply = bitmask_applier()
    vocab, dev = loaded.model.config.vocab_size, loaded.device
    gen = torch.Generator(device="cpu").manual_seed(0)
    for batch in batches:
        logits = torch.randn(batch, vocab, dtype=torch.float32, device=dev)
        words = torch.randint(-2**31, 2**31 - 1, (batch, (vocab + 31) // 32), dtype=torch.int32,
                              generator=gen).to(dev)
        t = timed_reps(lambda: apply(logits, words), dev, budget_s / len(batches), min_reps=20, max_reps=200)
        share = f"= {t / steps[batch]:.2%} of the decode step" if batch in steps else ""
        row(shape, "mask", f"batch {batch} ({name})", f"{t * 1e6:8.1f} us", share)


def load_shape(name: str, device: str, tiny: bool) -> tuple[LoadedModel, str]:
    if tiny:
        return build_random_model("tiny", device, "auto"), "tiny (random)"
    if name == "smollm2":
        try:
            folder = bk.model_folder("smollm2")
            return load_pretrained(folder, device, "auto"), "smollm2 (its weights)"
        except (FileNotFoundError, ImportError, ValueError):
            pass
    return build_random_model(random_config(name), device, "auto"), f"{name} (random weights)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="one tiny random shape, small contexts (a quick check)")
    p.add_argument("--shapes", default="smollm2,llama3-8b")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--context", type=int, default=512, help="tokens of context per row in the decode steps")
    p.add_argument("--long", type=int, default=1500, help="context of the resume part, longer prefill")
    p.add_argument("--budget-s", type=float, default=20.0, help="seconds each timed part may repeat for")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu --tiny for a quick check on CPU", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tiny:
        args.shapes, args.context, args.long, args.budget_s = "tiny", 48, 96, min(args.budget_s, 1.0)
    batches = [int(b) for b in args.batches.split(",")]
    started = time.perf_counter()
    torch.set_grad_enabled(False)
    for name in args.shapes.split(","):
        loaded, label = load_shape(name, args.device, args.tiny)
        print(f"\n{label}: {bk.describe(loaded)}", flush=True)
        bw = bandwidth(loaded.device, 8 if args.tiny else 1024)
        row(label, "bandwidth", "device copy", f"{bw / 1e9:8.1f} GB/s")
        steps: dict[int, float] = {}
        decode_part(label, loaded, args.context, batches, bw, args.budget_s, steps)
        prefill_part(label, loaded, [args.context, args.long], args.budget_s)
        resume_part(label, loaded, args.long, reps=3)
        interrupt_part(label, loaded, max(16, args.context // 2), reps=3 if args.tiny else 5)
        mask_part(label, loaded, batches, steps, args.budget_s / 4)
        del loaded
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu x{torch.get_num_threads()}"
    print(f"\n# transformers engine on {dev}, torch {torch.__version__}; {time.perf_counter() - started:.0f} s")
    print("| shape | part | case | measured | reference |\n|---|---|---|---|---|")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
