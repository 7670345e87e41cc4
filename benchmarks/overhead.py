#!/usr/bin/env python3
"""The server's own overheads, each beside what it is a share of; one job a sub-command.

    python benchmarks/overhead.py scheduling [--queued 1,2,8]   one priority update + pick with N queued generations
    python benchmarks/overhead.py segmentation [--reps 5]        detokenize + segmenter + KV save/restore, share of
                                                                 generation time (target <= 2%)
    python benchmarks/overhead.py goal-intake [--goals 200]      a burst of goals through the real ROS server
    python benchmarks/overhead.py preempt [--trials 100]         how soon an urgent plan's segment starts on a robot
                                                                 that runs another plan (the shipped executors)

`python benchmarks/overhead.py SUB-COMMAND --help` describes each in full (SCHEDULING_DOC, SEGMENTATION_DOC,
GOAL_INTAKE_DOC and PREEMPT_DOC below).
"""
from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools" / "stress"))
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from timely_llm_ros.core.policies import SchedulingContext, make_policy  # noqa: E402
from timely_llm_ros.core.request import Generation, PlanRequest, Segment  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402
from timely_llm_ros.engine import benchkit as bk  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402
from timely_llm_ros.engine.transformers.kv_cache import SlotKV  # noqa: E402
from timely_llm_ros.evaluation.metrics import time_select  # noqa: E402
from timely_llm_ros.evaluation.workload.lrtrace import get_trace  # noqa: E402

SCHEDULING_DOC = """Scheduling overhead: wall time of one priority update + pick (policy.select) with N queued generations.

    python benchmarks/overhead.py scheduling [--queued 1,2,4,6,8,1000] [--policies timely,edf,fcfs]

Targets: <= 0.1 ms with 8 queued, <= 1 ms with 1,000 (the paper's Table 5: 0.58 ms for 1, 2.03 ms for 8).
Queued generations mix fresh and suspended ones of both urgency classes, so every priority branch runs.
"""

SEGMENTATION_DOC = """Segmentation overhead by the paper's definition: detokenize + segmenter + KV save/restore (suspend,
resume, and the KV row copies a batch change costs), as a share of generation time (target <= 2%).

    .venv/bin/python benchmarks/overhead.py segmentation --reps 5 --threads 1 [--traces 1 2 6] [--pause 2]

The plans of the TimelyLLM traces (evaluation.workload.lrtrace) are replayed through the engine (forced_ids:
real forward passes, fixed content) as one batch. After every token the new token is detokenized (the
engine's text stream) and the new text fed to the skill set's incremental segmenter (core.skills
StatementSegmenter), as the scheduler's _absorb does. When a segment becomes executable the generation is
suspended, sits out ``--pause`` steps (its robot executes) and is resumed; a finished generation is released.
Two row modes of the engine, reps interleaved: parked rows in a decode window that slides to where the fewest
rows must move (default), and the same with the window fixed at rows [0, B) (``engine.rows.slide_window = False``).
Generation time = the engine's step times (row copies included). The overhead shown counts the row copies (timed
inside the steps). Load-independent counts: row copies and KV tokens copied. mean [min-max] over --reps.
Times are this thread's CPU time with --threads 1 on CPU (other jobs on a shared box not counted), wall
time otherwise.
"""

GOAL_INTAKE_DOC = """How fast the plan server takes in a burst of goals: N dry-run goals sent at the same moment.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/overhead.py goal-intake [--goals 200] [--reps 3] [--policy timely]

Real processes on loopback: the server node (as `make stress` starts it) and a client (tools/stress/client.py,
deep queues) that sends --goals dry-run goals at once, after a 4-goal warm-up, --reps times. Per repetition:
  server intake   when each goal's "accepted" log line appeared (the goal validated and handed to the scheduler),
                  from the moment the first goal was sent: first, median, last, and the span per goal;
  goal response   when the client had each goal's accept/reject answer (median, last);
  result          when the last result arrived;
  threads         the server's thread count before the burst and its peak while goals were open (sampled every 5 ms).
Dry-run goals are planned by the engine but not executed, so no executors are needed; the engine's generations
run beside the intake, as they would in a burst.
"""


# ---- scheduling

def queue(n: int, rng: random.Random) -> list[Generation]:
    gens = []
    for i in range(n):
        cls = "urgent" if rng.random() < 0.375 else "normal"
        g = Generation(PlanRequest(f"g{i}", f"drone_{i}", "drone", "task", DEFAULT_URGENCY_CLASSES[cls],
                                   arrival=rng.uniform(-1.0, 0.0), urgency=cls), prompt_ids=[0] * 64)
        if rng.random() < 0.5:  # suspended after a segment
            g.segments.append(Segment(0, "mf(50);", [], 0.0, 0.0, 2.0))
            g.expected_exec_end = rng.uniform(-0.5, 3.0)
            g.prefilled = True
        gens.append(g)
    return gens


def scheduling_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="overhead.py scheduling", description=SCHEDULING_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queued", default="1,2,4,6,8,1000")
    p.add_argument("--policies", default="timely,edf,fcfs")
    p.add_argument("--repeats", type=int, default=500)
    p.add_argument("--max-batch", type=int, default=16)
    args = p.parse_args(argv)
    rng = random.Random(0)
    print(f"{'policy':8s} {'queued':>7s} {'mean ms':>9s} {'p99 ms':>9s} {'max ms':>9s}")
    for name in args.policies.split(","):
        for n in (int(x) for x in args.queued.split(",")):
            ctx = SchedulingContext(now=0.0, kv_free_bytes=math.inf, kv_bytes_per_token=131072.0, step_time_s=0.022)
            s = time_select(make_policy(name, max_batch=args.max_batch), queue(n, rng), [], ctx, args.repeats)
            print(f"{name:8s} {n:7d} {s.mean_ms:9.4f} {s.p99_ms:9.4f} {s.max_ms:9.4f}")
    return 0



# ---- segmentation

def clock() -> float:
    """CPU seconds of this thread when torch runs on it alone (time other jobs take from the shared CPU is
    not counted; on a busy box wall time swings 5-20x), else wall seconds (cuda steps are synchronised)."""
    return time.thread_time() if CPU_THREAD else time.perf_counter()


CPU_THREAD = False


def plan_ids(engine: TransformersEngine, plan: str) -> list[int]:
    """Token ids of the plan text as the model would emit them after the prompt (no BOS)."""
    ids = engine.encode(" " + plan)
    bos = getattr(engine.tokenizer, "bos_token_id", None) or getattr(
        getattr(engine.tokenizer, "_tok", None), "bos_token_id", None)
    return ids[1:] if ids and ids[0] == bos else ids


def run_once(engine: TransformersEngine, traces: list[int], pause: int) -> dict[str, float]:
    skill_sets = load_skill_sets()
    dev = engine.device
    tracks = {}
    for tid in traces:
        tr = get_trace(tid)
        skills = skill_sets[tr.robot_type]
        gid = f"t{tid}"
        engine.add(gid, engine.encode(skills.build_prompt(tr.task, tr.context)), 10**4,
                   forced_ids=plan_ids(engine, tr.plan))
        tracks[gid] = {"seg": skills.segmenter(), "text": engine.text_stream(), "ids": [], "segments": 0}
    arrange_s = [0.0]
    rows = engine.rows
    inner = rows.arrange

    def timed_arrange(gens):                      # the row copies a membership change costs
        bk.sync(dev)
        t0 = clock()
        changed = inner(gens)
        bk.sync(dev)
        arrange_s[0] += clock() - t0
        return changed

    rows.arrange = timed_arrange
    copied = [0, 0]                               # row copies, KV tokens copied (load-independent)
    copy_s = [0.0]                                # time in the copies themselves
    store_cls, clone_out = SlotKV, rows.clone_out

    def counting(name, tokens):
        inner_fn = getattr(store_cls, name)

        def wrapped(self, *a):
            copied[0] += 1
            copied[1] += tokens(*a)
            t0 = clock()
            inner_fn(self, *a)
            copy_s[0] += clock() - t0
        return inner_fn, wrapped

    saved = {}
    for name, tokens in (("move_row", lambda src, dst, n: n), ("write_row", lambda row, kv: kv.shape[-2])):
        saved[name], wrapped = counting(name, tokens)
        setattr(store_cls, name, wrapped)

    def counted_clone_out(gen, to_host, pin):
        copied[0] += 1
        copied[1] += gen.kv_len
        t0 = clock()
        clone_out(gen, to_host, pin)
        copy_s[0] += clock() - t0

    rows.clone_out = counted_clone_out
    running, paused, done = list(tracks), {}, set()
    gen_s = stop_s = susp_s = 0.0
    steps = 0
    while running or paused:
        for gid in [g for g, left in paused.items() if left == 0]:
            t0 = clock()
            engine.resume(gid)
            susp_s += clock() - t0
            del paused[gid]
            running.append(gid)
        paused = {g: left - 1 for g, left in paused.items()}
        if not running:
            continue
        t0 = clock()
        res = engine.step(running)
        bk.sync(dev)
        gen_s += clock() - t0
        steps += 1
        for gid in list(running):
            t0 = clock()
            track = tracks[gid]
            track["ids"].append(res.tokens[gid])   # as the scheduler's _absorb
            delta = track["text"].push(res.tokens[gid])
            segments = track["seg"].feed(delta) if delta else []
            track["segments"] += len(segments)
            stop_s += clock() - t0
            if gid in res.finished:             # released at once, as the scheduler does
                running.remove(gid)
                done.add(gid)
                track["seg"].finish()
                track["tokens"] = len(track["ids"])
                engine.release(gid)                # (not segmentation: an unsegmented run releases too)
            elif segments:
                t0 = clock()
                engine.suspend(gid)
                susp_s += clock() - t0
                running.remove(gid)
                paused[gid] = pause
    del rows.arrange, rows.clone_out
    for name, fn in saved.items():
        setattr(store_cls, name, fn)
    segments = sum(t["segments"] for t in tracks.values())
    tokens = sum(t["tokens"] for t in tracks.values())
    return {"gen": gen_s, "stop": stop_s, "suspend": susp_s, "arrange": arrange_s[0], "copy": copy_s[0],
            "segments": segments, "tokens": tokens, "copies": copied[0], "copied_tokens": copied[1],
            "steps": steps}


TRACES = [1, 2, 3, 6, 9, 10, 11]
STORES = {"warm": "warm KV store (kept between runs, as in a busy server)",
          "fresh": "fresh KV store each run (an idle engine gives its store back; first touches page-fault)"}
VARIANTS = {   # name: slide_window
    "parked rows, sliding window (default)": True,
    "parked rows, window fixed at [0, B)": False,
}


def spread(xs: list[float], fmt: str = "{:.2%}") -> str:
    """mean [min-max]."""
    return f"{fmt.format(statistics.mean(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def report(name: str, rs: list[dict[str, float]]) -> list[float]:
    """Print one variant's figures (mean [min-max] over reps); return its per-rep overhead shares."""
    r0 = rs[0]
    share = {k: [r[k] / r["gen"] for r in rs] for k in ("stop", "suspend", "arrange")}
    total = [(r["stop"] + r["suspend"] + r["arrange"]) / r["gen"] for r in rs]
    wall = [(r["gen"] + r["stop"] + r["suspend"]) / r["tokens"] for r in rs]
    print(f"[{name}] {r0['tokens']:.0f} tokens, {r0['segments']:.0f} segments, {r0['steps']:.0f} steps per run")
    print(f"  generation (engine steps)        {spread([r['gen'] * 1e3 for r in rs], '{:.0f}')} ms")
    print(f"  detokenize + segmenter           {spread(share['stop'])}")
    print(f"  suspend() + resume()             {spread(share['suspend'])}")
    copy = [r["copy"] / r["gen"] for r in rs]
    print(f"  row placement (inside the steps) {spread(share['arrange'])}   of which the copies {spread(copy)}")
    print(f"  row copies / KV tokens copied    {r0['copies']:.0f} / {r0['copied_tokens']:.0f}   (load-independent)")
    print(f"  OVERHEAD with the KV copies      {spread(total)}   (target <= 2%)")
    print(f"  time per token (all in)          {spread([w * 1e3 for w in wall], '{:.3f}')} ms")
    return total


def segmentation_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="overhead.py segmentation", description=SEGMENTATION_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    bk.add_model_args(parser)
    parser.set_defaults(reps=5)
    parser.add_argument("--traces", type=int, nargs="+", default=TRACES)
    parser.add_argument("--pause", type=int, default=2, help="steps a suspended generation sits out")
    parser.add_argument("--store", choices=["warm", "fresh", "both"], default="both",
                        help="warm: the engine keeps its KV store between runs (a busy server); fresh: each run "
                             "starts from an idle engine, whose new store page-faults on first touch")
    args = parser.parse_args(argv)
    loaded = bk.load_from_args(args)
    global CPU_THREAD
    CPU_THREAD = loaded.device.type == "cpu" and torch.get_num_threads() == 1
    print(bk.describe(loaded), "| clock:", "thread CPU time" if CPU_THREAD else "wall")
    print(f"traces {args.traces}, pause {args.pause} steps; segmenter: core.skills StatementSegmenter; "
          f"mean [min-max] over {args.reps} interleaved reps (after one warm-up)")
    stores = {"warm": True, "fresh": False} if args.store == "both" else {args.store: args.store == "warm"}
    engines = {}
    for store, keep in stores.items():
        engines[store] = TransformersEngine(loaded)
        engines[store].rows.keep_when_idle = keep
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(st, v): [] for st in stores for v in VARIANTS}
    for rep in range(args.reps + 1):              # interleaved, first rep is warm-up
        for store, engine in engines.items():
            for name, slide in VARIANTS.items():
                engine.rows.slide_window = slide
                r = run_once(engine, args.traces, args.pause)
                if rep:
                    runs[store, name].append(r)
    for store in stores:
        print(f"=== {STORES[store]}")
        shares = {name: report(name, runs[store, name]) for name in VARIANTS}
        sliding, fixed = VARIANTS
        ratio = [a / b for a, b in zip(shares[sliding], shares[fixed])]
        print(f"{sliding} / {fixed}, overhead with copies: {spread(ratio, '{:.2f}x')}")



# ---- goal-intake

ACCEPTED = re.compile(r"\[INFO\] \[(\d+\.\d+)\] \[timely_server\]: \[\w+\] \S+ \((?:drone|arm), ")


def _threads(pid: int) -> int:
    """The process's thread count (/proc), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    except (OSError, StopIteration):
        return 0


def one_burst(server, client, n: int, rep: int) -> dict[str, float]:
    from goals import valid_goal

    mark = len(server.tail)
    peak, sampling = [_threads(server.proc.pid)], threading.Event()

    def sample() -> None:   # the server's threads every 5 ms while the burst is open
        while not sampling.wait(0.005):
            peak.append(_threads(server.proc.pid))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    wall0, t0 = time.time(), time.monotonic()
    records = [client.send("intake", "dry run", set(), valid_goal(f"d{rep}_{i}", "drone", dry_run=True))
               for i in range(n)]
    sent = time.monotonic() - t0
    client.wait_terminal(records, 60 + 0.5 * n)
    sampling.set()
    sampler.join()
    stamps = sorted(float(m.group(1)) - wall0 for ln in list(server.tail)[mark:] if (m := ACCEPTED.match(ln)))
    responses = sorted(r.responded - t0 for r in records if r.responded is not None)
    results = [r.done - t0 for r in records if r.done is not None]
    return {"sent": sent, "intake_n": len(stamps), "intake_first": stamps[0], "intake_median": statistics.median(stamps),
            "intake_last": stamps[-1], "per_goal": (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1),
            "response_median": statistics.median(responses), "response_last": responses[-1],
            "result_last": max(results), "lost": n - len(results), "threads_before": peak[0],
            "threads_peak": max(peak)}


def run_server(params: list[str], args: argparse.Namespace, tag: str) -> list[dict[str, float]] | None:
    """One server, a warm-up, --reps bursts --pause-s apart; the rows, or None when no server answered."""
    from client import StressClient
    from goals import valid_goal
    from procs import start_server

    server = start_server([], [f"policy:={args.policy}", *params])
    server.tail = deque(maxlen=200_000)   # every line: the intake stamps are read from the log
    client = None
    try:
        server.wait_ready(180)
        client = StressClient("goal_intake_client_" + "".join(c for c in tag if c.isalnum()))
        if not client.wait_for_server(30):
            print("no /plan server answering", file=sys.stderr)
            return None
        client.wait_terminal([client.send("warm-up", "dry run", set(), valid_goal(f"w{i}", "drone", dry_run=True))
                              for i in range(4)], 60)
        rows = []
        for rep in range(args.reps):
            time.sleep(args.pause_s)
            r = one_burst(server, client, args.goals, rep)
            rows.append(r)
            print(f"{tag}rep {rep + 1}: {args.goals} goals sent in {r['sent'] * 1e3:.0f} ms; server intake "
                  f"{r['intake_first'] * 1e3:.0f} / {r['intake_median'] * 1e3:.0f} / {r['intake_last'] * 1e3:.0f} ms "
                  f"(first / median / last; {r['per_goal'] * 1e3:.2f} ms a goal); goal responses median "
                  f"{r['response_median'] * 1e3:.0f} ms, last {r['response_last'] * 1e3:.0f} ms; last result "
                  f"{r['result_last']:.2f} s; without a result {r['lost']}; server threads {r['threads_before']} before, "
                  f"{r['threads_peak']} at most", flush=True)
        return rows
    finally:
        if client is not None:
            client.close()
        code = server.stop(30)
        if code != 0:
            print(f"server exited {code}", file=sys.stderr)


def _spread(values: list[float]) -> str:
    return f"{statistics.fmean(values) * 1e3:.2f} ms [{min(values) * 1e3:.2f}, {max(values) * 1e3:.2f}]"


def goal_intake_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="overhead.py goal-intake", description=GOAL_INTAKE_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--goals", type=int, default=200)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--policy", default="timely")
    p.add_argument("--pause-s", type=float, default=1.0, help="quiet time before each burst")
    args = p.parse_args(argv)
    rows = run_server([], args, "")
    if rows is None:
        return 2
    lost = any(r["lost"] or r["intake_n"] != args.goals for r in rows)
    print(f"\nserver intake per goal: {_spread([r['per_goal'] for r in rows])} over {args.reps} bursts of "
          f"{args.goals} ({args.policy})")
    return 1 if lost else 0


# ---- preemption on the robot

PREEMPT_DOC = """How long a more urgent plan waits for a robot that runs another plan (plan_rule urgent_preempts), with the
shipped executors: from the moment its first segment is sent with ``preempts`` (the planner server sends it the
moment it decides to preempt) to the moment that segment starts on the robot, its first skill called right after.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/overhead.py preempt [--trials 100]

Each trial: plan a's segment ``d(60);`` (hover 60 s) starts; 10-50 ms into it plan u's segment ``tp();`` is sent
with preempts. The running skill is interrupted as by a cancel (``ctx.sleep`` raises), so u starts at once instead
of 60 s later. Start times are the executor's own (its log_timing lines, CLOCK_MONOTONIC, which this process shares).
Prints p50, p99 and max per executor of three moments after u is sent: u received by the executor, the
preempted segment ended, u started.
"""

PREEMPT_EXECUTORS = {"simulated": "timely_llm_ros.ros.executor.node", "kinematic": "timely_llm_ros.ros.executor.kinematic"}
_TIMING = re.compile(r"segment timing (\S+) (\d+) (received|started|ended) ([\d.]+)")


class PreemptedExecutor:
    """One shipped executor in its own process; the start times it logs."""

    def __init__(self, module: str, ns: str) -> None:
        args = [sys.executable, "-m", module, "--ros-args", "-r", f"__ns:=/{ns}", "-r", "__node:=executor",
                "-p", "plan_rule:=urgent_preempts", "-p", "log_timing:=true"]
        self.proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.times: dict[tuple[str, str], float] = {}    # (plan, received|started|ended) -> its segment 0's
        self.ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            if "executor ready" in line:
                self.ready.set()
            m = _TIMING.search(line)
            if m is not None and m.group(2) == "0":
                self.times[(m.group(1), m.group(3))] = float(m.group(4))

    def stop(self) -> None:
        self.proc.send_signal(2)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _goal(plan: str, text: str, preempts: bool):
    """An ExecuteSegment goal of one skill call (segment 0 of ``plan``)."""
    from timely_llm_ros.action import ExecuteSegment
    from timely_llm_ros.msg import Skill

    name = text.split("(")[0]
    return ExecuteSegment.Goal(request_id=plan, index=0, text=text, skills=[Skill(name=name, args=[])],
                               expected_duration=1.0, preempts=preempts)


def _wait(future, timeout: float):
    end = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > end:
            raise TimeoutError("no answer from the executor")
        time.sleep(0.001)
    return future.result()


def preempt_trials(name: str, module: str, trials: int, rng: random.Random) -> list[tuple[float, float, float]]:
    """Per trial, seconds from sending the preempting segment u to: its arrival at the executor, the end of the
    preempted segment a, u's start on the robot."""
    import rclpy
    from rclpy.action import ActionClient
    from rclpy.executors import SingleThreadedExecutor

    from timely_llm_ros.action import ExecuteSegment

    robot = PreemptedExecutor(module, f"preempt_{name}")
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("preempt_latency", context=context)
    client = ActionClient(node, ExecuteSegment, f"/preempt_{name}/execute_segment")
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    out: list[float] = []
    try:
        if not robot.ready.wait(120) or not client.wait_for_server(timeout_sec=30):
            raise RuntimeError(f"the {name} executor did not come up")
        for i in range(trials):
            running = threading.Event()
            handle = _wait(client.send_goal_async(_goal(f"a{i}", "d(60);", False),
                                                  feedback_callback=lambda fb: running.set()), 10)
            if not running.wait(10):
                raise RuntimeError(f"plan a{i} did not start")
            time.sleep(rng.uniform(0.01, 0.05))
            sent = time.monotonic()
            urgent = _wait(client.send_goal_async(_goal(f"u{i}", "tp();", True)), 10)
            a = _wait(handle.get_result_async(), 10).result
            u = _wait(urgent.get_result_async(), 10).result
            if a.error_code != ExecuteSegment.Result.PREEMPTED or not u.success:
                raise RuntimeError(f"trial {i}: a ended {a.error_code} ({a.error_message}), u {u.error_message}")
            end = time.monotonic() + 5
            while (f"u{i}", "started") not in robot.times and time.monotonic() < end:
                time.sleep(0.001)
            out.append((robot.times[(f"u{i}", "received")] - sent, robot.times[(f"a{i}", "ended")] - sent,
                        robot.times[(f"u{i}", "started")] - sent))
    finally:
        executor.shutdown(timeout_sec=5)
        client.destroy()
        node.destroy_node()
        rclpy.shutdown(context=context)
        robot.stop()
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def preempt_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="overhead.py preempt", description=PREEMPT_DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--executors", default=",".join(PREEMPT_EXECUTORS), help="which of: " + ", ".join(PREEMPT_EXECUTORS))
    opts = p.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    rng = random.Random(opts.seed)
    print(f"ms after the preempting segment u is sent, {opts.trials} trials: p50 / p99 / max")
    print(f"{'executor':<10} {'u received':>20} {'preempted a ended':>20} {'u started':>20}")
    for name in opts.executors.split(","):
        runs = preempt_trials(name, PREEMPT_EXECUTORS[name], opts.trials, rng)
        cols = []
        for k in range(3):
            ms = [1000 * r[k] for r in runs]
            cols.append(f"{_quantile(ms, 0.5):.1f} / {_quantile(ms, 0.99):.1f} / {max(ms):.1f}")
        print(f"{name:<10} {cols[0]:>20} {cols[1]:>20} {cols[2]:>20}", flush=True)
    return 0


# ---- the command line

SUB_COMMANDS = {"scheduling": scheduling_main, "segmentation": segmentation_main, "goal-intake": goal_intake_main,
                "preempt": preempt_main}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.report import run_sub_command

    argv = sys.argv[1:] if argv is None else argv
    return run_sub_command(__doc__, SUB_COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
