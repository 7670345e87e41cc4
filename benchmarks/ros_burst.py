#!/usr/bin/env python3
"""The urgent-burst shape through the real ROS server on a real model, next to the simulator.

    python benchmarks/ros_burst.py [--model embedded|smollm2] [--seeds 1,2,3,4,5]
        [--policies timely,edf-admit,edf,vllm-stream,fcfs] [--scale auto|K] [--load 1.0] [--time-scale 0.2]
        [--max-batch 16] [--class-scale 2.0] [--profile YAML] [--server-param NAME:=VALUE ...]
        [--out out/ros_burst] [--resummarize] [--sim-sweep 1,2,3,4,5,6,8,12 [--sim-loads 1:0,1.5:1]]

Real processes over DDS on loopback, per seed: one server node (one torch thread, `max_batch`, every agent
expected) and one simulated executor host for all agents; a 4-goal warm-up replay, then per policy (order rotated
per seed) the runtime parameter `policy` is set and the replay client (`workload_node`, `workload_file:=` the seed's
workload YAML, `results_csv:=`) sends the workload. Server and host get SIGINT at the end and must exit 0; the
client must exit 0 (every goal answered). Workload: `engine_workload.py --shape burst` (evaluation.workload.generator.burst:
burst at 1 s, corpus phrasing for the drone traces, the model writes every plan), its arm and urgent counts times K.

Scaled to the planner's speed (--scale auto): a burst is an overload when its urgent requests alone need more engine
time than the urgent TUF leaves them (its zero crossing, ERT + beta/|alpha| = 0.5 s). That demand is measured the
same way on both profiles (urgent_demand_s: one step prefilling every urgent prompt after the cached prefix, then
every urgent plan decoded in batches of max_batch), and K is the smallest multiple of 0.5 whose bursts have a mean
demand of at least --load zero crossings on the embedded planner's profile. The 4090 preset is at about 3.4 (its
figure is printed); matching that here would take about 12x the requests (some 550 robots, each a ROS node with
an action server), more than a 2-core box hosts beside the server, so the default asks for the least overload, 1.0.

--model (default the embedded planner; burst_models.py): the server loads that model entry (a chat model on its
chat prompt, under its grammar when its entry says so), each trace's plan for the simulator is the one it writes
alone, the simulator counts its tokens and caches each robot type's system prompt as the server does, and every
policy on either side gets the hardware fit of its engine (the server's, measured at configure; the simulator's,
of the profile: core/fit.py). The urgency classes are the configured ones, except that a class one first segment
cannot meet on the profile (SmolLM2 here: the urgent class's 0.2 s ERT) is scaled to --class-scale x that time
(core/fit.py scale_classes); the server loads the same classes from a file, so both sides score the same TUFs, and
--scale auto reads their urgent zero crossing. Its profile: --profile, default config/latency/<model>-cpu.yaml
(engine/transformers/profiler.py), build/latency/embedded_planner.yaml for the embedded planner.

The same workloads go through the discrete-event simulator twice:
  sim-embedded: a latency profile of the embedded planner measured on this machine (engine/transformers/profiler.py, written to
      build/latency/embedded_planner.yaml when missing), each trace's plan as the model writes it alone (greedy),
      prompts of the real length, and the policy options the server gives (online G);
  sim-as-run: sim-embedded on the machine the ROS runs had: the server writes a step trace (step_trace_csv, one
      row per engine step: what it prefilled and decoded, the forward's time, the scheduler loop's time around it),
      and core.step_trace.load_factors measures from the seed's replays (all policies pooled, the warm-up left out)
      how much slower each forward was than the profile says (a ratio of sums) and the loop's own time per step;
      the profile under that load (LatencyModel.under_load) replays the seed. Calibrated by the run's own
      engine steps, never by any policy's utility; --sim-sweep with --sim-loads prints how the order moves with it;
  sim-4090: the README's burst preset (burst(seed) on the Llama-3-8B/RTX 4090 profile, compare_policies options);
      embedded planner only (a chat model's runs use other classes).
Urgent- and normal-class utility (mean over the class's requests; dropped = 0) as mean [min-max] over seeds, each
source's ordering and Kendall's tau against the ROS one. Outputs in --out: runs.csv (seed, policy, source),
summary.md, per ROS run the client's outcome CSV and the server's log, per seed the server's step trace.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from statistics import mean

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import engine_workload as ew  # noqa: E402
from burst_models import ServedModel, write_classes  # noqa: E402
from report import cpu_seconds, parse_seeds, write_csv  # noqa: E402

from timely_llm_ros.evaluation.workload import Workload, save_workload  # noqa: E402
from tools.stress.procs import Child  # noqa: E402

DEFAULT_POLICIES = "timely,edf-admit,edf,vllm-stream,fcfs"
PROFILE = REPO / "build" / "latency" / "embedded_planner.yaml"
SOURCES = ("ros", "sim-embedded", "sim-smollm2", "sim-as-run", "sim-4090")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3,4,5", help="workload seeds (list or ranges: 6-10)")
    p.add_argument("--policies", default=DEFAULT_POLICIES)
    p.add_argument("--scale", default="auto",
                   help="K: arm and urgent request counts times K (16-20 and 20-30 at K=1); auto: from --load")
    p.add_argument("--load", type=float, default=1.0,
                   help="--scale auto: the urgent demand to reach, in urgent-TUF zero crossings (see above)")
    p.add_argument("--time-scale", type=float, default=0.2,
                   help="multiplies robot execution times (executors and simulator; 0.2 as in the replay demo)")
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--model", default="embedded", help="model entry the server loads (config/models.yaml)")
    p.add_argument("--profile", default="", help="latency YAML of the model (default: see above; the embedded "
                                                 "planner's is made if missing)")
    p.add_argument("--class-scale", type=float, default=2.0,
                   help="an urgency class a first segment cannot meet on the profile gets ERT = this x that time")
    p.add_argument("--result-timeout", type=float, default=40.0,
                   help="the client's result_timeout_s: a goal without a result this long after the last goal is sent "
                        "counts 'no result' (0 utility)")
    p.add_argument("--robots-nice", type=int, default=0,
                   help="niceness of the executor host and the replay client (the robots' side, which on a fleet "
                        "runs on the robots, not on the server's cores); 0: the same priority as the server")
    p.add_argument("--server-param", action="append", default=[], metavar="NAME:=VALUE",
                   help="one more server parameter (repeatable), e.g. segment_clients:=server")
    p.add_argument("--out", default="out/ros_burst")
    p.add_argument("--sim-sweep", default="",
                   help="no ROS runs: sim-embedded's urgent utility per policy, its class-alone bound and the "
                        "urgent demand at each of these scales (e.g. 1,2,3,4,5,6,8,12), to --out/sim_sweep.md")
    p.add_argument("--sim-loads", default="1:0",
                   help="with --sim-sweep: machine loads as SLOWDOWN:OVERHEAD_MS pairs (the profile's forward times "
                        "SLOWDOWN, plus OVERHEAD_MS per step; 1:0 = the profile as measured), e.g. 1:0,1.25:1,1.5:1")
    p.add_argument("--resummarize", action="store_true",
                   help="no runs: recompute the ROS rows of --out/runs.csv from the outcome CSVs and server logs, "
                        "and its sim-as-run rows from the step traces")
    return p.parse_args(argv)


def burst_workload(seed: int, scale: float = 1.0) -> Workload:
    """The burst shape as engine_workload.py --shape burst makes it (model-written plans), counts times scale."""
    arms, urgent = f"{round(16 * scale)},{round(20 * scale)}", f"{round(20 * scale)},{round(30 * scale)}"
    return ew.make_workload(ew.parse_args(["--shape", "burst", "--seed", str(seed), "--arms", arms,
                                           "--urgent", urgent]))


def urgent_demand_s(workload: Workload, latency, max_batch: int, plan_tokens, prompt_tokens,
                    cached_tokens=None) -> float:
    """Engine seconds the latency model gives the workload's urgent requests alone: one step prefilling every
    urgent prompt (the suffix after the cached prefix: cached_tokens(task), default the profile's), then their plans
    decoded in batches of max_batch (each batch as long as its longest plan, over its prompts and half its plans
    of context)."""
    urgent = [t for t in workload.tasks if t.urgency == "urgent"]
    cached = cached_tokens or (lambda t: latency.cached_prefix_tokens)
    seconds = latency.step_s([(prompt_tokens(t) - min(cached(t), prompt_tokens(t) - 1), prompt_tokens(t))
                              for t in urgent], 0, 0)
    for i in range(0, len(urgent), max_batch):
        batch = urgent[i:i + max_batch]
        kv = sum(prompt_tokens(t) + plan_tokens(t) / 2 for t in batch)
        seconds += max(plan_tokens(t) for t in batch) * latency.decode_s(len(batch), kv)
    return seconds


def urgent_horizon_s(classes=None) -> float:
    """When an urgent request's first segment stops earning utility (the urgent TUF's zero crossing; default the
    paper's class)."""
    from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
    return (classes or DEFAULT_URGENCY_CLASSES)["urgent"].zero_crossing()


def preset_load(seeds: list[int], max_batch: int) -> float:
    """The 4090 burst preset's urgent demand in zero crossings (mean over seeds; its plans in simulator tokens)."""
    from timely_llm_ros.core.latency_model import load_latency_model
    from timely_llm_ros.evaluation.sim.tokenizer import PieceTokenizer
    from timely_llm_ros.evaluation.workload.generator import burst

    latency, tok = load_latency_model(REPO / "config/latency/llama3-8b-rtx4090.yaml"), PieceTokenizer()
    return mean(urgent_demand_s(burst(seed), latency, max_batch, lambda t: tok.count(" " + t.plan) + 1,
                                lambda t: t.prompt_tokens) for seed in seeds) / urgent_horizon_s()


def embedded_load(seeds: list[int], scale: float, latency, plans: dict[int, dict], max_batch: int,
                  classes=None) -> float:
    """The scaled burst's urgent demand on the served model's profile, in zero crossings of the urgent class (mean
    over seeds)."""
    return mean(urgent_demand_s(burst_workload(seed, scale), latency, max_batch,
                                lambda t: plans[t.trace_id]["tokens"], lambda t: plans[t.trace_id]["prompt_tokens"],
                                lambda t: plans[t.trace_id].get("cached_tokens", latency.cached_prefix_tokens))
                for seed in seeds) / urgent_horizon_s(classes)


def choose_scale(args, seeds: list[int], latency, plans: dict[int, dict], classes=None) -> float:
    """--scale as given, or the smallest of 0.25, 0.5, 0.75 and the multiples of 0.5 up to 16 whose bursts reach
    --load zero crossings."""
    if args.scale != "auto":
        return float(args.scale)
    for k in [0.25, 0.5, 0.75] + [1 + 0.5 * i for i in range(31)]:
        if embedded_load(seeds, k, latency, plans, args.max_batch, classes) >= args.load:
            return k
    raise SystemExit(f"no scale up to 16 gives an urgent load of {args.load}: lower --load or pass --scale")


def agents_of(workload: Workload) -> list[tuple[str, str]]:
    return sorted({(t.agent_id, t.robot_type) for t in workload.tasks})


# ------------------------------------------------------------------------------------------------ ROS replay
class RosSession:
    """One server and one executor host for a seed's agents; replays run against it, the policy switched between
    them through the runtime-settable `policy` parameter (the engine loads once: ~40 s on the loaded 2-core box)."""

    def __init__(self, agents: list[tuple[str, str]], seed: int, first_policy: str, args, trace: Path) -> None:
        names = [a for a, _ in agents]
        self.args = args
        self.server = Child("server", "timely_llm_ros.ros.server.node",
                            ["--ros-args", "-r", "__node:=timely_server", "-p", f"policy:={first_policy}",
                             "-p", "num_threads:=1", "-p", f"max_batch:={args.max_batch}",
                             "-p", f"expected_agents:=[{','.join(names)}]", "-p", f"step_trace_csv:={trace}",
                             *[a for p in args.server_param for a in ("-p", p)]], "timely_server ready")
        self.server.tail = deque(maxlen=100_000)   # the whole log, saved with the outcomes (evidence)
        self.host = Child("executors", "timely_llm_ros.ros.executor.host",
                          ["--agents", ",".join(f"{a}:{t}" for a, t in agents), "--ros-args", "-p",
                           f"time_scale:={args.time_scale}", "-p", f"seed:={seed}"], "executor ready",
                          nice=args.robots_nice)
        self.host.ready_needed = len(agents)
        self._node = None
        try:
            self.server.wait_ready(180)
            self.host.wait_ready(180)
        except Exception:
            self.close()
            raise
        if not self.server.wait_for("all expected executors discovered", 30):
            time.sleep(2.0)
        import rclpy
        from rcl_interfaces.srv import SetParameters
        self._rclpy = rclpy
        self._ctx = rclpy.context.Context()
        rclpy.init(context=self._ctx, args=[])  # not sys.argv: --server-param values look like remaps
        self._node = rclpy.create_node("ros_burst_params", context=self._ctx)
        self._params = self._node.create_client(SetParameters, "/timely_server/set_parameters")

    def set_policy(self, policy: str) -> None:
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters
        from rclpy.executors import SingleThreadedExecutor

        if not self._params.wait_for_service(timeout_sec=20):
            raise RuntimeError("no /timely_server/set_parameters service")
        req = SetParameters.Request(parameters=[Parameter(name="policy", value=ParameterValue(
            type=ParameterType.PARAMETER_STRING, string_value=policy))])
        future = self._params.call_async(req)
        ex = SingleThreadedExecutor(context=self._ctx)
        ex.add_node(self._node)
        ex.spin_until_future_complete(future, timeout_sec=20)
        ex.remove_node(self._node)
        ex.shutdown()
        res = future.result()
        if res is None or not res.results[0].successful:
            raise RuntimeError(f"setting policy:={policy} failed: {res}")
        self.server.wait_for(f"policy={policy}", 0.5)

    def replay(self, workload_yaml: Path, csv_out: Path) -> tuple[list[dict], int | None, float]:
        """Run the replay client to its end; (its outcome rows, its exit code, the server's CPU seconds meanwhile)."""
        mark = len(self.server.tail)
        cpu0 = cpu_seconds(self.server.proc.pid)
        client = Child("client", "timely_llm_ros.ros.fleet.workload_node",
                       ["--ros-args", "-p", f"workload_file:={workload_yaml}", "-p", f"results_csv:={csv_out}",
                        "-p", f"result_timeout_s:={self.args.result_timeout}"], "replaying", nice=self.args.robots_nice)
        try:
            client.proc.wait(self.args.result_timeout + 120)
        except subprocess.TimeoutExpired:
            print("  client still running: SIGINT", flush=True)
        code = client.stop(30)
        if code != 0:
            print(f"  client exited {code}:\n    " + "\n    ".join(
                [ln for ln in client.tail if "no result" in ln][:5] + list(client.tail)[-3:]), flush=True)
        server_cpu = cpu_seconds(self.server.proc.pid) - cpu0
        csv_out.with_suffix(".server.log").write_text("\n".join(list(self.server.tail)[mark:]) + "\n")
        rows = list(csv.DictReader(csv_out.open())) if csv_out.exists() else []
        return rows, code, server_cpu

    def close(self) -> dict[str, int | None]:
        """SIGINT to server and executor host; their exit codes."""
        if self._node is not None:
            self._node.destroy_node()
            self._rclpy.shutdown(context=self._ctx)
        codes = {"server": self.server.stop(30), "executors": self.host.stop(30)}
        for name, child in (("server", self.server), ("executors", self.host)):
            if codes[name] != 0:
                print(f"  {name} exited {codes[name]}:\n    " + "\n    ".join(list(child.tail)[-15:]), flush=True)
        return codes


def warmup_workload(w: Workload) -> Workload:
    """Two arm and two drone goals of the seed's workload, 0.5 s apart: the server's first engine steps are cold
    (engine_workload.py warms its engine the same way, by generating each plan alone first)."""
    arms = [t for t in w.tasks if t.robot_type == "arm"][:2]
    drones = [t for t in w.tasks if t.robot_type == "drone"][:2]
    tasks = [replace(t, arrival=0.5 * i, task_id=f"warmup-{i}") for i, t in enumerate(arms + drones)]
    return replace(w, tasks=tasks)


def ros_utilities(rows: list[dict], workload: Workload) -> dict[str, float]:
    """Mean utility per urgency class; a goal without a result counts 0 (and fails the run: the client exits 1)."""
    out: dict[str, float] = {"lost_results": sum(r["status"] == "no result" for r in rows)}
    for cls in ("urgent", "normal"):
        n = sum(t.urgency == cls for t in workload.tasks)
        got = [float(r["utility"]) for r in rows if r["urgency"] == cls and r["status"] != "no result"]
        out[cls] = sum(got) / n if n else float("nan")
        out[f"{cls}_served"] = sum(r["status"].startswith("ok") for r in rows if r["urgency"] == cls) / max(n, 1)
        done = [r for r in rows if r["urgency"] == cls and r["status"] == "ok"]
        out[f"{cls}_eq3"] = sum(float(r["segment_utility"]) for r in done) / n if n else float("nan")
        out[f"{cls}_midplan_wait_s"] = (mean(float(r["waiting_time"]) - float(r["response_time"]) for r in done)
                                        if done else float("nan"))
    out["no_result"] = sum(t.urgency in ("urgent", "normal") for t in workload.tasks) - sum(
        r["status"] != "no result" for r in rows)
    return out


# ------------------------------------------------------------------------------------------------- simulator
def profile_path(args) -> Path:
    """--profile, or the model's default (see the module docstring)."""
    if args.profile:
        return Path(args.profile)
    return PROFILE if args.model == "embedded" else REPO / "config" / "latency" / f"{args.model}-cpu.yaml"


def ensure_profile(path: Path, model: str = "embedded") -> Path:
    """The embedded planner's latency profile, made when missing or older than its `layers` key (without it the
    simulator would model no interrupts); another model's must exist."""
    import yaml

    if model != "embedded":
        if not path.exists():
            raise SystemExit(f"no latency profile {path}: make one (python -m timely_llm_ros.engine.transformers.profiler --model "
                             f"<its folder> --threads 1 --out {path}) or pass --profile")
        return path
    if not path.exists() or "layers" not in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}):
        print(f"profiling the embedded planner into {path} (one torch thread)", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "timely_llm_ros.engine.transformers.profiler", "--out", str(path), "--threads", "1",
                        "--prefill-lengths", "16", "32", "64", "128", "256", "--batches", "1", "2", "4", "8", "16",
                        "--contexts", "64", "128", "256"], check=True, cwd=REPO)
    return path


def sim_utilities(outcomes, workload: Workload) -> dict[str, float]:
    out: dict[str, float] = {}
    for cls in ("urgent", "normal"):
        n = sum(t.urgency == cls for t in workload.tasks)
        out[cls] = sum(o.utility for o in outcomes if o.req.urgency == cls) / n if n else float("nan")
        out[f"{cls}_served"] = sum(o.state.value == "done" and int(o.error_code) == 0 for o in outcomes
                                   if o.req.urgency == cls) / max(n, 1)
        done = [o for o in outcomes if o.req.urgency == cls and o.ok]
        out[f"{cls}_eq3"] = sum(o.total_utility for o in done) / n if n else float("nan")
        out[f"{cls}_midplan_wait_s"] = mean(o.waiting_time - o.response_time for o in done) if done else float("nan")
    out["no_result"] = len(workload.tasks) - len(outcomes)
    return out


def sim_model(policy: str, seed: int, workload: Workload, served: ServedModel, latency, args, classes):
    """The workload on the served model's profile: its plans, its token counts, its cached prefixes, the policy
    options the server gives (the fit, online G)."""
    from timely_llm_ros.core.composition import PolicyChoice, build_policy

    w = served.with_plans(workload)
    choice = PolicyChoice(policy, args.max_batch, network_delay_s=ew.NETWORK_DELAY_S, online_gen_time=True)
    pol = build_policy(choice, served.skill_sets, served.fit(latency, args.max_batch).policy_options())
    result = served.simulator(pol, latency, seed, args.time_scale, classes).run(w)
    return sim_utilities(result.outcomes, w)


def sim_4090(policy: str, seed: int, args):
    import compare_policies as cp
    from timely_llm_ros.core.latency_model import load_latency_model
    from timely_llm_ros.evaluation.workload.generator import burst

    w = burst(seed)
    result = cp.run_one(policy, args.max_batch, w, load_latency_model(REPO / "config/latency/llama3-8b-rtx4090.yaml"),
                        {}, seed)
    return sim_utilities(result.outcomes, w)


def run_factors(trace: Path, latency, since: float) -> tuple[object, dict[str, object]]:
    """The seed's machine from its step trace: load factors of all its replays' steps (from `since`, the first
    replay after the warm-up), and per policy for the record."""
    from timely_llm_ros.core.step_trace import load_factors, read_step_trace

    steps = [r for r in read_step_trace(trace) if r.t >= since]
    per_policy = {p: load_factors([r for r in steps if r.policy == p], latency)
                  for p in dict.fromkeys(r.policy for r in steps)}
    return load_factors(steps, latency), per_policy


# ----------------------------------------------------------------------------------------------- comparison
def sim_as_run(trace: Path, since: float, seed: int, scale: float, policies: list[str], w: Workload,
               served: ServedModel, latency, args, classes) -> list[dict]:
    """The model's simulation on the machine the seed's ROS replays measured (see the module docstring): one row per
    policy."""
    pooled, per_policy = run_factors(trace, latency, since)
    machine = latency.under_load(pooled.slowdown, pooled.step_overhead_s)
    print(f"  step trace: {pooled.steps} engine steps, forward x{pooled.slowdown:.2f} the profile, "
          f"{pooled.step_overhead_s * 1e3:.2f} ms of loop per step; "
          + ", ".join(f"{p} x{f.slowdown:.2f} + {f.step_overhead_s * 1e3:.2f} ms" for p, f in per_policy.items()),
          flush=True)
    rows = []
    for policy in policies:
        own = per_policy.get(policy)
        m = sim_model(policy, seed, w, served, machine, args, classes)
        rows.append({"seed": seed, "scale": scale, "policy": policy, "source": "sim-as-run", **m, "exit_codes": "",
                     "trace_since": since,
                     "slowdown": round(pooled.slowdown, 4), "overhead_ms": round(pooled.step_overhead_s * 1e3, 4),
                     "policy_slowdown": round(own.slowdown, 4) if own else "",
                     "policy_overhead_ms": round(own.step_overhead_s * 1e3, 4) if own else ""})
        print(f"  {policy:12s} sim-as-run urgent {m['urgent']:+.2f} normal {m['normal']:+.2f}", flush=True)
    return rows


def kendall_tau(a: dict[str, float], b: dict[str, float]) -> float:
    """Kendall's tau-a between two scorings of the same policies: a pair tied in either counts as neither
    concordant nor discordant (so a tie never passes for agreement)."""
    items = list(a)
    score = 0
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            x, y = a[items[i]] - a[items[j]], b[items[i]] - b[items[j]]
            score += (x > 0) - (x < 0) if y > 0 else -((x > 0) - (x < 0)) if y < 0 else 0
    pairs = len(items) * (len(items) - 1) / 2
    return score / pairs if pairs else float("nan")


def order_text(means: dict[str, float]) -> str:
    """'a > b = c' (best first; '=' where two means are equal to 1e-9)."""
    ranked = sorted(means, key=lambda p: -means[p])
    out = ranked[0]
    for prev, cur in zip(ranked, ranked[1:]):
        out += (" = " if abs(means[prev] - means[cur]) < 1e-9 else " > ") + cur
    return out


def span(vals: list[float]) -> str:
    return f"{mean(vals):.2f} [{min(vals):.2f}, {max(vals):.2f}]"


def urgent_of(rows: list[dict], source: str, seed: int) -> dict[str, float]:
    return {r["policy"]: r["urgent"] for r in rows if r["source"] == source and r["seed"] == seed}


def summary_md(rows: list[dict], policies: list[str], seeds: list[int]) -> str:
    lines = []
    sources = [s for s in SOURCES if any(r["source"] == s for r in rows)]
    sim = next(s for s in sources if s.startswith("sim-"))     # the model's own simulation
    means = {src: {p: mean(r["urgent"] for r in rows if r["source"] == src and r["policy"] == p) for p in policies}
             for src in sources}
    scales = sorted({float(r.get("scale") or 1.0) for r in rows if r["source"] == "ros"})
    lines.append(f"Burst counts x{', x'.join(f'{k:g}' for k in scales)} (sim-4090: the preset, x1). "
                 f"Urgent-class utility (max 2) and normal (max 1), mean [min, max] over seeds "
                 f"{','.join(map(str, seeds))}:\n")
    lines.append("| policy | " + " | ".join(f"{s} urgent" for s in sources) + f" | ros normal | {sim} normal |"
                 " ros urgent served |")
    lines.append("|---|" + "---|" * (len(sources) + 3))
    for p in policies:
        get = lambda src, k: [r[k] for r in rows if r["source"] == src and r["policy"] == p]  # noqa: E731
        cells = [span(get(s, "urgent")) for s in sources]
        cells += [span(get("ros", "normal")), span(get(sim, "normal")), span(get("ros", "urgent_served"))]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines.append("")
    if len(policies) > 1:    # an order, and how well each source keeps it, needs two policies
        for src in sources:
            tau = kendall_tau(means["ros"], means[src])
            lines.append(f"- {src}: {order_text(means[src])} (Kendall tau vs ros {tau:+.2f})")
        for src in sources[1:]:
            taus = [kendall_tau(urgent_of(rows, "ros", seed), urgent_of(rows, src, seed)) for seed in seeds]
            lines.append(f"- per-seed Kendall tau ros vs {src}: " + ", ".join(f"{t:+.2f}" for t in taus))
    machine = [r for r in rows if r["source"] == "sim-as-run"]
    if machine:
        lines.append("- sim-as-run's machine per seed (the step trace of all its replays): "
                     + ", ".join(f"seed {r['seed']} forward x{float(r['slowdown']):.2f} + {float(r['overhead_ms']):.2f} "
                                 f"ms a step" for r in machine if r["policy"] == policies[0]))
        lines.append("- the same per policy's own replays, mean over seeds: " + ", ".join(
            f"{p} x{mean(float(r['policy_slowdown']) for r in machine if r['policy'] == p):.2f} + "
            f"{mean(float(r['policy_overhead_ms']) for r in machine if r['policy'] == p):.2f} ms" for p in policies))
    cpu = {p: [float(r["server_cpu_s"]) for r in rows if r["source"] == "ros" and r["policy"] == p
               and r.get("server_cpu_s") not in (None, "")] for p in policies}
    if all(cpu.values()):
        lines.append("- server CPU seconds per replay (all threads): "
                     + ", ".join(f"{p} {span(v)}" for p, v in cpu.items()))
    return "\n".join(lines) + "\n"


def sim_sweep(scales: list[float], policies: list[str], seeds: list[int], base, served: ServedModel, classes, args,
              out: Path) -> int:
    """How the model's simulated order depends on the scale and on the machine's load (--sim-loads): the sensitivity of
    the ROS comparison to --scale and to sim-as-run's measured factors."""
    from compare_policies import BOUND_POLICIES   # the class-alone bound's policies, as in the simulator tables

    loads = [tuple(float(x) for x in pair.split(":")) for pair in args.sim_loads.split(",") if pair]
    lines = [f"sim-{args.model} urgent utility (max 2), mean over seeds {','.join(map(str, seeds))}; bound: the best of "
             f"{', '.join(BOUND_POLICIES)} serving the urgent requests alone; load: urgent demand in urgent-TUF zero "
             "crossings; machine: the profile's forward times x slowdown + a loop overhead per step\n",
             "| scale | load | machine | " + " | ".join(policies) + " | bound | order |",
             "|---|---|---|" + "---|" * (len(policies) + 2)]
    for k, (slowdown, overhead_ms) in [(k, ld) for k in scales for ld in loads]:
        latency = base.under_load(slowdown, overhead_ms / 1e3)
        got: dict[str, list[float]] = {p: [] for p in policies}
        bound = []
        for seed in seeds:
            w = burst_workload(seed, k)
            for p in policies:
                got[p].append(sim_model(p, seed, w, served, latency, args, classes)["urgent"])
            alone = replace(w, tasks=[t for t in w.tasks if t.urgency == "urgent"])
            bound.append(max(sim_model(p, seed, alone, served, latency, args, classes)["urgent"]
                             for p in BOUND_POLICIES))
        means = {p: mean(v) for p, v in got.items()}
        load = embedded_load(seeds, k, base, served.plans, args.max_batch, classes)
        lines.append(f"| x{k:g} | {load:.2f} | x{slowdown:g} + {overhead_ms:g} ms | "
                     + " | ".join(f"{means[p]:.2f}" for p in policies)
                     + f" | {mean(bound):.2f} | {order_text(means)} |")
        print(lines[-1], flush=True)
    (out / "sim_sweep.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'sim_sweep.md'}")
    return 0


def resummarize(out: Path, policies: list[str], seeds: list[int], args) -> int:
    """Recompute the ROS rows from the outcome CSVs and the sim-as-run rows from the step traces (the simulator may
    have changed since the run), then the summary."""
    rows = list(csv.DictReader((out / "runs.csv").open()))
    as_run = [r for r in rows if r["source"] == "sim-as-run" and r.get("trace_since")]
    if as_run:
        latency, served, classes, _ = prepare(args, burst_workload(int(as_run[0]["seed"])))
        scale = float(as_run[0].get("scale") or 1.0)
        firsts = {r["seed"]: r for r in reversed(as_run)}          # one row per seed (its first)
        redone = [row for seed, r in sorted(firsts.items(), key=lambda kv: int(kv[0]))
                  for row in sim_as_run(out / f"steps_s{seed}.csv", float(r["trace_since"]), int(seed), scale,
                                        [x["policy"] for x in as_run if x["seed"] == seed],
                                        burst_workload(int(seed), scale), served, latency, args, classes)]
        rows = [r for r in rows if r["source"] != "sim-as-run"] + redone
    for r in rows:
        r["seed"] = int(r["seed"])
        for k in ("urgent", "normal", "urgent_served", "normal_served", "no_result"):
            r[k] = float(r[k])
        if r["source"] == "ros":
            csv_out = out / f"outcomes_{r['policy']}_s{r['seed']}.csv"
            got = ros_utilities(list(csv.DictReader(csv_out.open())),
                                burst_workload(r["seed"], float(r.get("scale") or 1.0)))
            r.update({k: v for k, v in got.items() if k != "lost_results"})
            r["lost_results"] = got["lost_results"]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    write_csv(out / "runs.csv", rows, fields)
    md = summary_md(rows, policies, seeds)
    (out / "summary.md").write_text(md)
    print(md)
    return 0


def sim_source(model: str) -> str:
    """The label of the model's own simulation in the tables."""
    return f"sim-{model}"


def prepare(args, workload: Workload):
    """(the model's latency profile, the served model with its plans, the urgency classes of the run, whether any
    class was scaled to the profile)."""
    from timely_llm_ros.core.latency_model import load_latency_model
    from timely_llm_ros.core.urgency import load_urgency_classes

    path = ensure_profile(profile_path(args), args.model)
    latency = load_latency_model(path)
    print(f"{args.model} profile {path}: prefill c={latency.prefill_c * 1e3:.1f} ms, decode base="
          f"{latency.decode_base * 1e3:.1f} ms", flush=True)
    served = ServedModel.load(args.model, workload)
    for tid, p in sorted(served.plans.items()):
        print(f"  trace {tid}: prompt {p['prompt_tokens']} tok ({p['cached_tokens']} cached), plan {p['tokens']} tok, "
              f"{'parses' if p['valid'] else 'DOES NOT PARSE'}: {p['plan'][:60]}", flush=True)
    classes, lines = served.classes(latency, args.max_batch, load_urgency_classes(), args.class_scale)
    for line in lines:
        print(f"  {line}", flush=True)
    return latency, served, classes, bool(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    seeds = parse_seeds(args.seeds)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    from timely_llm_ros.core.policies import RENAMED, known_names
    unknown = [p for p in policies if p not in known_names() and p not in RENAMED]
    if unknown:   # before any process starts: the server would only fail to configure, seed after seed
        print(f"unknown policy {', '.join(map(repr, unknown))}; the server knows: {', '.join(known_names())}",
              file=sys.stderr)
        return 2
    out = REPO / args.out if not Path(args.out).is_absolute() else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.resummarize:
        return resummarize(out, policies, seeds, args)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    if "ROS_DOMAIN_ID" not in os.environ:
        print("note: ROS_DOMAIN_ID is not set (domain 0)", flush=True)
    latency, served, classes, scaled = prepare(args, burst_workload(seeds[0]))
    if args.sim_sweep:
        return sim_sweep([float(k) for k in args.sim_sweep.split(",")], policies, seeds, latency, served, classes,
                         args, out)
    plans = served.plans
    scale = choose_scale(args, seeds, latency, plans, classes)
    print(f"burst counts x{scale:g}: urgent demand "
          f"{embedded_load(seeds, scale, latency, plans, args.max_batch, classes):.2f} urgent-TUF zero crossings on "
          f"this profile (x1: {embedded_load(seeds, 1.0, latency, plans, args.max_batch, classes):.2f}; the 4090 "
          f"preset: {preset_load(seeds, args.max_batch):.2f})", flush=True)
    if args.model != "embedded":
        args.server_param.append(f"model:={args.model}")
    if scaled:       # the server scores the same classes as the simulator
        args.server_param.append(f"urgency_classes_file:={write_classes(classes, out / 'urgency_classes.yaml')}")
    workloads = {seed: burst_workload(seed, scale) for seed in seeds}
    rows: list[dict] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ros_burst_", dir=REPO / "build") as tmp:
        for seed in seeds:
            w = workloads[seed]
            path = Path(tmp) / f"burst_{seed}.yaml"
            save_workload(w, path)
            n_urg = sum(t.urgency == "urgent" for t in w.tasks)
            print(f"seed {seed}: {len(w.tasks)} goals ({n_urg} urgent drones, {len(w.tasks) - n_urg} arms)", flush=True)
            save_workload(warmup_workload(w), Path(tmp) / "warmup.yaml")
            k = (seed - 1) % len(policies)
            order = policies[k:] + policies[:k]   # rotated per seed: spreads order effects
            seed_rows: list[dict] = []
            trace = out / f"steps_s{seed}.csv"
            session = RosSession(agents_of(w), seed, order[0], args, trace)
            try:
                session.replay(Path(tmp) / "warmup.yaml", Path(tmp) / "warmup.csv")
                since = time.monotonic()     # the server's step trace is on the same clock (CLOCK_MONOTONIC)
                for policy in order:
                    t0 = time.monotonic()
                    session.set_policy(policy)
                    ros_rows, code, cpu = session.replay(path, out / f"outcomes_{policy}_s{seed}.csv")
                    entries = [("ros", {**ros_utilities(ros_rows, w), "server_cpu_s": round(cpu, 2)}),
                               (sim_source(args.model), sim_model(policy, seed, w, served, latency, args, classes))]
                    if args.model == "embedded":
                        entries.append(("sim-4090", sim_4090(policy, seed, args)))
                    for src, m in entries:
                        seed_rows.append({"seed": seed, "scale": scale, "policy": policy, "source": src, **m,
                                          "exit_codes": f"client={code}" if src == "ros" else ""})
                    print(f"  {policy:12s} " + "  ".join(f"{s} urgent {m['urgent']:+.2f} normal {m['normal']:+.2f}"
                                                           for s, m in entries)
                          + f"  client exit {code} ({time.monotonic() - t0:.0f} s, total "
                            f"{time.monotonic() - t_start:.0f} s)", flush=True)
            finally:
                codes = session.close()
            print(f"  server exit {codes['server']}, executor host exit {codes['executors']}", flush=True)
            seed_rows += sim_as_run(trace, since, seed, scale, order, w, served, latency, args, classes)
            for r in seed_rows:
                if r["source"] == "ros":
                    r["exit_codes"] += f",server={codes['server']},executors={codes['executors']}"
            rows += seed_rows
    write_csv(out / "runs.csv", rows, list(dict.fromkeys(k for r in rows for k in r)))
    md = summary_md(rows, policies, seeds)
    (out / "summary.md").write_text(md)
    print(md)
    print(f"wrote {out / 'runs.csv'}, {out / 'summary.md'} in {time.monotonic() - t_start:.0f} s")
    bad = [r for r in rows if r["source"] == "ros" and any(not c.endswith("=0") for c in r["exit_codes"].split(","))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
