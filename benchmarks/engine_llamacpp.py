#!/usr/bin/env python3
"""The llamacpp engine beside bare llama-cpp-python and the transformers engine, in one run, on the same GGUF.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/engine_llamacpp.py [--threads 2] [--batches 1,8,16] [--reps 5]
        [--steps 16] [--context 500] [--out out/engine_llamacpp]

SmolLM2-135M-Instruct (the `smollm2-base` entry: its Q4_1 GGUF, no adapter; the transformers engine runs the
dequantised fp32 folder made from the same file), --threads CPU threads for each (llama.cpp's threads, torch's
threads), the same prompt ids (the drone and arm chat prompts of eight tasks, their system prompts included:
700-900 tokens), greedy.

1. decode: ms per step at each batch size B, every sequence decoding one token a step. ``bare``: the low-level API
   as a user would drive it (its own context with the engine's settings: a KV stream per sequence, one llama_decode
   over the B sequences, numpy argmax of the logits); ``engine``: LlamaCppEngine.step; ``transformers``: the transformers
   engine's step. Each repetition runs --steps steps of each, the three alternated (the order rotates every
   repetition); medians of the per-repetition medians, and the ratios against bare and against transformers.
2. resume vs re-prefill at ~--context tokens of context: a generation suspended after 16 tokens, its next token on
   resume (its sequence kept its cells) against a fresh prefill of prompt + output (prefix cache off); medians,
   alternated.
3. greedy outputs with and without suspension: each prompt run alone (the reference); then all of them interleaved
   one generation a step, each suspended while the others step (suspension alone changes nothing: the same batch
   size as the reference); then all of them in random batches where the members left out of a step are suspended and
   rejoin later, and all of them batched every step with no suspension at all. How many outputs equal the
   reference. Batched rows need not: llama.cpp's batched decode does not give a row the logits it gets alone, bit
   for bit, and greedy decoding follows any flip of a near-tie; the bare API with the same prompts batched against
   each alone (32 tokens each) shows how often that happens without this project's code.
4. the grammar's share of a step at batch 8: every row under its robot type's grammar; the time the engine spends
   choosing tokens and advancing the grammars (TokenChoice.choose and grammar.advance, the unconstrained argmax of
   the same step subtracted) over the step's time, medians over decode steps.
5. non-forward time per step (the step trace): 8 requests through the scheduler's own thread (SchedulerThread, the
   server's loop) on the llamacpp engine with the timely policy at max_batch 8, robots answering every segment at
   once; per step with 8 sequences decoding, the scheduling, events and inbox time over the forward (engine_s).
6. the mean pick (policy.select of timely) with 8 and 1,000 queued (benchmarks/overhead.py scheduling's queue).
7. interrupts: a ~2,000-token prefill cut short by interrupt_check turning true at a random moment; the time from
   the poll that saw it to the step's return (llama.cpp ends the decode after its graph node in flight) and from the
   moment it turned true (the poll interval added); and the cost of asking (decode at batch 1 and 8 with a check
   that never fires against none: the decode then runs on a helper thread while the stepping thread polls).

8. GGUF types (--types-only, a run of its own: after the other parts the same engines measured 1.7x slower): the
   same file requantized (llama_model_quantize, into a temporary folder removed at the end) to each of --types; the
   engine's decode ms per step at each batch on each file, alternated, medians over --reps; and how many of the eight
   prompts' greedy outputs (24 tokens, each alone) equal the original file's. Not a target: what a team gains or
   loses by choosing another type for its own model.

Targets: decode >= 0.9x bare at every batch, >= 4x transformers at batch 1 and >= 1.5x at batch 8; resume <= 5% of a
re-prefill; grammar <= 5% of a step at batch 8; non-forward <= 5% of the forward at batch 8; pick <= 0.1 ms (8) and
<= 1 ms (1,000).
"""
from __future__ import annotations

import argparse
import ctypes
import math
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import ENGINE_TASKS, write_csv  # noqa: E402
from overhead import queue as select_queue  # noqa: E402

from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.grammar import plan_grammar  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.llamacpp.native import model_params  # noqa: E402
from timely_llm_ros.engine.model_setup import model_setup  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402
from timely_llm_ros.engine.transformers import token_choice  # noqa: E402

TASKS = ENGINE_TASKS


def median(xs) -> float:
    return statistics.median(xs) if xs else math.nan


# ----------------------------------------------------------------------------- bare llama-cpp-python
class Bare:
    """The low-level API driven directly: a context with the engine's settings, llama_batch_init's batch filled
    field by field, one llama_decode per step, numpy argmax."""

    def __init__(self, gguf: Path, threads: int, n_seq: int, context: int) -> None:
        import llama_cpp

        self.l = llama_cpp
        llama_cpp.llama_backend_init()
        # the engine's model parameters (on an Intel AMX CPU, llama.cpp's defaults crash a prefill: native.py)
        self.model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), model_params(llama_cpp))
        p = llama_cpp.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_seq * context, context, 512, n_seq
        p.n_outputs_max = n_seq
        p.n_threads = p.n_threads_batch = threads
        p.kv_unified, p.swa_full, p.no_perf = False, True, True
        self.ctx = llama_cpp.llama_init_from_model(self.model, p)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.batch = llama_cpp.llama_batch_init(context, 0, 1)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.pos: dict[int, int] = {}
        self.next: dict[int, int] = {}

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> np.ndarray:
        b = self.batch
        for i, (token, pos, seq, want) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, want
            b.seq_id[i][0] = seq
        b.n_tokens = len(items)
        if self.l.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("bare llama_decode failed")
        rows = sum(1 for it in items if it[3])
        ptr = self.l.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(rows, self.n_vocab))

    def prefill(self, seqs: list[int], prompts: list[list[int]]) -> None:
        for seq, ids in zip(seqs, prompts):
            logits = self._decode([(t, i, seq, i == len(ids) - 1) for i, t in enumerate(ids)])
            self.pos[seq], self.next[seq] = len(ids), int(logits[0].argmax())

    def step(self, seqs: list[int]) -> None:
        logits = self._decode([(self.next[s], self.pos[s], s, True) for s in seqs])
        for s, token in zip(seqs, logits.argmax(-1).tolist()):
            self.pos[s] += 1
            self.next[s] = token

    def clear(self) -> None:
        self.l.llama_memory_clear(self.mem, True)
        self.pos.clear()
        self.next.clear()

    def close(self) -> None:
        self.l.llama_batch_free(self.batch)
        self.l.llama_free(self.ctx)
        self.l.llama_model_free(self.model)


# ----------------------------------------------------------------------------- 1. decode
def decode_step_s(e, prompts: list[list[int]], steps: int, tag: str) -> float:
    """Median seconds of an engine's decode step over ``steps`` steps, one generation per prompt (each forced to
    repeat its prompt's last token, so that none ends), after the prefills and one settling step."""
    ids = [f"{tag}_{i}" for i in range(len(prompts))]
    for gid, p in zip(ids, prompts):
        e.add(gid, p, steps + 4, forced_ids=[prompts[0][-1]] * (steps + 4))
    e.step(ids)
    e.step(ids)
    times = [e.step(ids).elapsed_s for _ in range(steps)]
    for gid in ids:
        e.release(gid)
    return median(times)


def decode_part(args, bare: Bare, engines: dict, prompts: list[list[int]], rows: list[dict]) -> None:
    for batch in args.batches:
        ps = [prompts[i % len(prompts)] for i in range(batch)]
        per: dict[str, list[float]] = {"bare": [], "engine": [], "transformers": []}
        for rep in range(args.reps):
            order = ["bare", "engine", "transformers"]
            order = order[rep % 3:] + order[:rep % 3]
            for name in order:
                if name == "bare":
                    seqs = list(range(batch))
                    bare.prefill(seqs, ps)
                    bare.step(seqs)                             # the first decode after the prefills settles
                    times = []
                    for _ in range(args.steps):
                        t0 = time.perf_counter()
                        bare.step(seqs)
                        times.append(time.perf_counter() - t0)
                    bare.clear()
                    per[name].append(median(times))
                else:
                    per[name].append(decode_step_s(engines[name], ps, args.steps, f"d{rep}"))
        ms = {k: median(v) * 1e3 for k, v in per.items()}
        row = {"part": "decode", "batch": batch, "bare_ms": ms["bare"], "engine_ms": ms["engine"],
               "transformers_ms": ms["transformers"], "engine_vs_bare": ms["bare"] / ms["engine"],
               "engine_vs_transformers": ms["transformers"] / ms["engine"]}
        rows.append(row)
        print(f"  batch {batch:2d}: bare {ms['bare']:6.1f} ms  engine {ms['engine']:6.1f} ms  transformers "
              f"{ms['transformers']:6.1f} ms  | engine speed = {row['engine_vs_bare']:.2f}x bare, "
              f"{row['engine_vs_transformers']:.2f}x transformers", flush=True)


# ----------------------------------------------------------------------------- 8. GGUF types
QUANT_TYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}


def requantized(gguf: Path, kind: str, folder: Path) -> Path:
    """``gguf`` requantized to ``kind`` (a QUANT_TYPES key) in ``folder``."""
    import llama_cpp

    out = folder / f"{gguf.stem}.{kind}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[kind])
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(gguf).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize to {kind} failed")
    return out


def types_part(args, gguf: Path, prompts: list[list[int]], rows: list[dict]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gguf_types_") as tmp:
        files = {"q4_1 (as shipped)": gguf, **{k: requantized(gguf, k, Path(tmp)) for k in args.types}}
        engines = {k: make_engine("llamacpp", str(f), num_threads=args.threads) for k, f in files.items()}
        try:
            outputs = {}
            for name, e in engines.items():
                runs = []
                for i, ids in enumerate(prompts):
                    e.add(f"t{i}", ids, 24)
                    while f"t{i}" not in e.step([f"t{i}"]).finished:
                        pass
                    runs.append(e.output_ids(f"t{i}"))
                    e.release(f"t{i}")
                outputs[name] = runs
            reference = outputs["q4_1 (as shipped)"]
            same = {name: sum(a == b for a, b in zip(runs, reference)) for name, runs in outputs.items()}
            for batch in args.batches:
                per: dict[str, list[float]] = {k: [] for k in engines}
                for rep in range(args.reps):
                    names = list(engines)
                    for name in names[rep % len(names):] + names[:rep % len(names)]:
                        ps = [prompts[i % len(prompts)] for i in range(batch)]
                        per[name].append(decode_step_s(engines[name], ps, args.steps, f"b{rep}"))
                cells = []
                for name in engines:
                    ms = median(per[name]) * 1e3
                    rows.append({"part": "types", "type": name, "batch": batch, "engine_ms": ms,
                                 "same_greedy_outputs": same[name], "file_mib": files[name].stat().st_size / 2**20})
                    cells.append(f"{name} {ms:5.1f} ms")
                print(f"  batch {batch:2d}: " + ", ".join(cells), flush=True)
            for name in engines:
                print(f"  {name}: {files[name].stat().st_size / 2**20:.0f} MiB, greedy outputs equal to the shipped "
                      f"file's: {same[name]} of {len(prompts)}")
        finally:
            for e in engines.values():
                e.close()


# ----------------------------------------------------------------------------- 2. resume
def resume_part(args, e, prompts: list[list[int]], rows: list[dict]) -> None:
    base = prompts[0]
    ids = (base * (args.context // len(base) + 1))[:args.context]
    resumed, fresh = [], []
    for rep in range(args.reps):
        e.add("r", ids, 40)
        for _ in range(17):
            e.step(["r"])
        e.suspend("r")
        e.add("other", prompts[1], 4)
        e.step(["other"])
        e.release("other")
        context = ids + e.output_ids("r")[:-1]
        for arm in (("resume", "prefill") if rep % 2 == 0 else ("prefill", "resume")):
            if arm == "resume":
                e.resume("r")
                resumed.append(e.step(["r"]).elapsed_s)
            else:
                e.add("p", context, 2)
                fresh.append(e.step(["p"]).elapsed_s)
                e.release("p")
        e.release("r")
    r, p = median(resumed) * 1e3, median(fresh) * 1e3
    rows.append({"part": "resume", "context": len(ids) + 16, "resume_ms": r, "reprefill_ms": p, "share": r / p})
    print(f"  ~{len(ids) + 16} tokens: resume {r:.1f} ms, re-prefill {p:.1f} ms: resume = {100 * r / p:.1f}% of it",
          flush=True)


# ----------------------------------------------------------------------------- 3. suspension is exact
def identity_part(args, e, bare: Bare, prompts: list[list[int]], rows: list[dict]) -> None:
    alone = {}
    for i, p in enumerate(prompts):
        e.add(f"a{i}", p, 32)
        while f"a{i}" not in e.step([f"a{i}"]).finished:
            pass
        alone[i] = e.output_ids(f"a{i}")
        e.release(f"a{i}")

    def scheduled(tag: str, choose) -> tuple[dict[int, list[int]], int]:
        """Every prompt generated at once, choose(rng, live) stepping each step, the rest suspended."""
        rng = random.Random(11)
        for i, p in enumerate(prompts):
            e.add(f"{tag}{i}", p, 32)
        done, suspensions = {}, 0
        while len(done) < len(prompts):
            live = [i for i in range(len(prompts)) if i not in done]
            chosen = choose(rng, live)
            for i in live:
                gen = e._gens[f"{tag}{i}"]
                if i in chosen:
                    e.resume(f"{tag}{i}")
                elif gen.prefilled and not gen.suspended:
                    e.suspend(f"{tag}{i}")
                    suspensions += 1
            for gid in e.step([f"{tag}{i}" for i in chosen]).finished:
                done[int(gid[len(tag):])] = e.output_ids(gid)
                e.release(gid)
        return done, suspensions

    n = len(prompts)
    ways = {"one a step": scheduled("o", lambda rng, live: [rng.choice(live)]),
            "random batches": scheduled("r", lambda rng, live: [i for i in live if rng.random() < 0.5] or live[:1]),
            "all batched": scheduled("b", lambda rng, live: live)}
    for way, (done, suspensions) in ways.items():
        same = sum(done[i] == alone[i] for i in alone)
        rows.append({"part": "suspension", "way": way, "generations": n, "identical": same,
                     "suspensions": suspensions})
    (one, s1), (rand, sr), (batched, _) = ways.values()
    print(f"  one generation a step, the others suspended ({s1} suspensions): "
          f"{sum(one[i] == alone[i] for i in alone)} of {n} identical to alone", flush=True)
    print(f"  random batches ({sr} suspensions): {sum(rand[i] == alone[i] for i in alone)} of {n}; all batched "
          f"every step, no suspension: {sum(batched[i] == alone[i] for i in alone)} of {n}", flush=True)

    def bare_tokens(groups: list[list[int]]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for group in groups:
            bare.clear()
            bare.prefill(group, [prompts[i] for i in group])
            tokens = {i: [bare.next[i]] for i in group}
            for _ in range(31):
                bare.step(group)
                for i in group:
                    tokens[i].append(bare.next[i])
            out.update(tokens)
        bare.clear()
        return out

    by_itself, together = bare_tokens([[i] for i in range(n)]), bare_tokens([list(range(n))])
    same = sum(by_itself[i] == together[i] for i in range(n))
    rows.append({"part": "suspension", "way": "bare: batched vs alone", "generations": n, "identical": same})
    print(f"  bare llama-cpp-python, all batched against each alone: {same} of {n} identical", flush=True)


# ----------------------------------------------------------------------------- 4. grammar
def grammar_part(args, e, prompts: list[list[int]], rows: list[dict]) -> None:
    skills = load_skill_sets()
    spent = [0.0]
    choose, advance = e.tokens.choose, token_choice.advance

    def timed_choose(logits, gens):
        t0 = time.perf_counter()
        out = choose(logits, gens)
        spent[0] += time.perf_counter() - t0
        return out

    def timed_advance(matcher, token, gen_id):
        t0 = time.perf_counter()
        advance(matcher, token, gen_id)
        spent[0] += time.perf_counter() - t0
    e.tokens.choose, token_choice.advance = timed_choose, timed_advance
    shares, plain = [], []
    try:
        for rep in range(args.reps):
            for constrained in (True, False):
                ids = [f"gr{rep}{constrained}{i}" for i in range(8)]
                for i, gid in enumerate(ids):
                    robot = TASKS[i % len(TASKS)][0]
                    e.add(gid, prompts[i], 24, grammar=plan_grammar(skills[robot]) if constrained else None)
                e.step(ids)
                live = list(ids)
                while len(live) == 8:
                    spent[0] = 0.0
                    res = e.step(live)
                    (shares if constrained else plain).append((spent[0], res.elapsed_s))
                    live = [g for g in live if g not in res.finished]
                for gid in ids:
                    e.release(gid)
    finally:
        e.tokens.choose, token_choice.advance = choose, advance
    base = median([s for s, _ in plain])
    step = median([t for _, t in shares])
    share = (median([s for s, _ in shares]) - base) / step
    rows.append({"part": "grammar", "batch": 8, "grammar_ms": share * step * 1e3, "step_ms": step * 1e3,
                 "share": share})
    print(f"  batch 8: grammar {share * step * 1e3:.2f} ms of a {step * 1e3:.1f} ms step = {100 * share:.1f}%",
          flush=True)


# ----------------------------------------------------------------------------- 5. the step trace
def trace_part(args, e, rows: list[dict]) -> None:
    from timely_llm_ros.core.events import SegmentReady
    from timely_llm_ros.core.request import PlanRequest
    from timely_llm_ros.core.runtime import SchedulerThread
    from timely_llm_ros.core.robot_types import load_robot_types
    from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
    from timely_llm_ros.stack import EngineChoice, StackOptions, build_stack
    from timely_llm_ros.core.composition import PolicyChoice

    robot_types = load_robot_types()
    stack = build_stack(StackOptions(model=model_spec("smollm2-base"), engine=EngineChoice("llamacpp"),
                                     policy=PolicyChoice("timely", max_batch=8, network_delay_s=0.0)),
                        robot_types.skill_sets, robot_types.exec_models, engine=e)
    records = []
    done = threading.Event()
    finished = set()
    loop: SchedulerThread

    def on_events(events) -> None:
        for ev in events:
            if isinstance(ev, SegmentReady):
                req, idx = ev.req_id, ev.segment.index

                def robot(s, req=req, idx=idx):
                    t = s.clock()
                    return [*s.on_execution_accepted(req, idx, t), *s.on_execution_started(req, idx, t),
                            *s.on_execution_finished(req, idx, t, True)]
                loop.post(robot)
            elif type(ev).__name__ == "RequestFinished":
                finished.add(ev.req_id)
                if len(finished) == 8:
                    done.set()

    loop = SchedulerThread(stack.scheduler, on_events, trace=records.append)
    loop.start()
    for i, (robot, task, scene) in enumerate(TASKS):
        req = PlanRequest(f"t{i}", f"{robot}_{i}", robot, task, DEFAULT_URGENCY_CLASSES["normal"], context=scene,
                          arrival=stack.scheduler.clock(), urgency="normal")
        loop.post(lambda s, req=req: s.submit(req))
    done.wait(300)
    loop.stop()
    full = [r for r in records if r.decode_batch == 8 and not r.prefills and r.iteration_s > 0]
    share = median([(r.scheduling_s + r.events_s + r.inbox_s) / r.engine_s for r in full])
    rows.append({"part": "step_trace", "batch": 8, "steps": len(full), "forward_ms": median([r.engine_s for r in full])
                 * 1e3, "non_forward_ms": median([r.scheduling_s + r.events_s + r.inbox_s for r in full]) * 1e3,
                 "share": share})
    print(f"  {len(full)} steps decoding 8: scheduling + events + inbox = {100 * share:.1f}% of the forward "
          f"(median {median([r.engine_s for r in full]) * 1e3:.1f} ms)", flush=True)


# ----------------------------------------------------------------------------- 6. the pick
def pick_part(rows: list[dict]) -> None:
    from timely_llm_ros.core.policies import SchedulingContext, make_policy
    from timely_llm_ros.evaluation.metrics import time_select

    rng = random.Random(0)
    for n in (8, 1000):
        ctx = SchedulingContext(now=0.0, kv_free_bytes=math.inf, kv_bytes_per_token=23040.0, step_time_s=0.01)
        s = time_select(make_policy("timely", max_batch=8), select_queue(n, rng), [], ctx, 500)
        rows.append({"part": "pick", "queued": n, "mean_ms": s.mean_ms, "p99_ms": s.p99_ms})
        print(f"  timely, {n} queued: mean {s.mean_ms:.4f} ms, p99 {s.p99_ms:.4f} ms", flush=True)


# ----------------------------------------------------------------------------- 7. interrupts
def interrupt_part(args, e, prompts: list[list[int]], rows: list[dict]) -> None:
    rng = random.Random(3)
    long = (prompts[1] * 3)[:2000]
    seen, since = [], []
    for rep in range(args.reps):
        e.add("long", long, 4)
        fire_at = time.perf_counter() + rng.uniform(0.05, 0.3)
        fired: list[float] = []

        def check() -> bool:
            now = time.perf_counter()
            if now >= fire_at:
                fired.append(now)
                return True
            return False
        e.interrupt_check = check
        res = e.step(["long"])
        end = time.perf_counter()
        e.interrupt_check = None
        e.release("long")
        if res.interrupted:
            seen.append(e.runner.last_abort_latency_s)
            since.append(end - fire_at)
    costs = {}
    for batch in (1, 8):
        per = {"none": [], "polled": []}
        for rep in range(args.reps):
            for arm in (("none", "polled") if rep % 2 == 0 else ("polled", "none")):
                ids = [f"ic{rep}{arm}{i}" for i in range(batch)]
                for gid, p in zip(ids, prompts):
                    e.add(gid, p, args.steps + 2, forced_ids=[p[-1]] * (args.steps + 2))
                e.step(ids)
                e.interrupt_check = None if arm == "none" else (lambda: False)
                per[arm].append(median([e.step(ids).elapsed_s for _ in range(args.steps)]))
                e.interrupt_check = None
                for gid in ids:
                    e.release(gid)
        costs[batch] = median(per["polled"]) / median(per["none"]) - 1
    rows.append({"part": "interrupt", "aborted": len(seen), "after_poll_ms": median(seen) * 1e3,
                 "after_true_ms": median(since) * 1e3, "poll_ms": e.runner.poll_s * 1e3,
                 "ask_cost_b1": costs[1], "ask_cost_b8": costs[8]})
    print(f"  {len(seen)} of {args.reps} prefills cut short: {median(seen) * 1e3:.2f} ms from the poll that saw the "
          f"arrival to the step's end, {median(since) * 1e3:.2f} ms from the arrival (polls every "
          f"{e.runner.poll_s * 1e3:.1f} ms); asking costs {100 * costs[1]:+.1f}% of a decode step at batch 1, "
          f"{100 * costs[8]:+.1f}% at batch 8", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,8,16")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--context", type=int, default=500)
    p.add_argument("--out", default="out/engine_llamacpp")
    p.add_argument("--types", default="q8_0,q4_0", help=f"part 8's types, of {','.join(QUANT_TYPES)}")
    p.add_argument("--types-only", action="store_true", help="run part 8 alone (in a process of its own)")
    args = p.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    args.types = [t for t in args.types.split(",") if t]
    unknown = set(args.types) - set(QUANT_TYPES)
    if unknown:
        p.error(f"--types: unknown {', '.join(sorted(unknown))}; known: {', '.join(QUANT_TYPES)}")
    import torch

    torch.set_num_threads(args.threads)
    spec = model_spec("smollm2-base")
    gguf = spec.gguf.locate()
    if args.types_only:
        return types_main(args, spec, gguf)
    engine = make_engine("llamacpp", str(gguf), num_threads=args.threads, prefix_cache_mb=256)
    plain = make_engine("llamacpp", str(gguf), num_threads=args.threads)      # no prefix cache: resume, identity
    hf = make_engine("transformers", str(weights_folder(spec)), device="cpu", dtype="float32")
    skills = load_skill_sets()
    setup = model_setup(spec, engine, skills)
    prompts = [setup.prompts(skills[robot], task, scene) for robot, task, scene in TASKS]
    bare = Bare(gguf, args.threads, engine.ctx.n_seq_max, engine.ctx.context)
    print(f"SmolLM2-135M-Instruct Q4_1 ({gguf.name}), {args.threads} threads; prompts of "
          f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens")
    rows: list[dict] = []
    print("1. decode, ms per step (medians of the repetitions' medians)")
    decode_part(args, bare, {"engine": engine, "transformers": hf}, prompts, rows)
    hf.close()
    print(f"2. resume vs re-prefill at ~{args.context} tokens")
    resume_part(args, plain, prompts, rows)
    print("3. greedy outputs with and without suspension")
    identity_part(args, plain, bare, prompts, rows)
    bare.close()
    print("4. the grammar's share of a decode step")
    grammar_part(args, plain, prompts, rows)
    plain.close()
    print("7. interrupts")
    interrupt_part(args, engine, prompts, rows)
    print("5. non-forward time per step (step trace, timely, max_batch 8)")
    trace_part(args, engine, rows)
    print("6. the pick (policy.select of timely)")
    pick_part(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k != "part", k))
    write_csv(out / "engine_llamacpp.csv", rows, fields)
    engine.close()
    return 0


def types_main(args, spec, gguf: Path) -> int:
    """Part 8 alone: the same prompts, nothing else loaded in this process."""
    e = make_engine("llamacpp", str(gguf), num_threads=args.threads)
    skills = load_skill_sets()
    setup = model_setup(spec, e, skills)
    prompts = [setup.prompts(skills[robot], task, scene) for robot, task, scene in TASKS]
    e.close()
    print(f"SmolLM2-135M-Instruct Q4_1 ({gguf.name}), {args.threads} threads; prompts of "
          f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens")
    print(f"8. GGUF types: the engine on the shipped file and on it requantized to {', '.join(args.types)}, "
          f"ms per decode step (medians of {args.reps} alternated repetitions)")
    rows: list[dict] = []
    types_part(args, gguf, prompts, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "gguf_types.csv", rows, sorted({k for r in rows for k in r}, key=lambda k: (k != "part", k)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
