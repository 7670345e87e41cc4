#!/usr/bin/env python3
"""make stress: a bounded reliability suite of real processes on loopback (server, executors, clients).

Phases: fuzzed malformed goals interleaved with valid ones, executor faults (abort, hang, SIGKILL mid-segment),
cancels at random points, a burst of simultaneous goals, a closed-loop soak, and random plans of every robot type
through the segmenter, the interpreter and the estimator (plans: test/test_plan_properties.py, --plans in all).
Prints one table row per phase and exits 1 when any phase finds a problem (server crash, goal without a response or terminal result, an error code
other than the one its category must get, generations left running, server RSS up > 10%), 2 when the suite itself
could not run. Use a ROS_DOMAIN_ID of your own.

The long mode (--soak-goals N) runs instead a warm-up of mixed goals and then N more (long_soak.py), sampling the
server's RSS, Python heap, ROS entities and threads; it fails when RSS grows more than --max-rss-growth after the
warm-up or the entity or thread count grows, and writes its table and plot to --out.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import phases  # noqa: E402
from procs import start_executors, start_server  # noqa: E402
from report import Row, score, table  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fuzz", type=int, default=1000, help="malformed goals (one valid goal every 20 more)")
    p.add_argument("--aborts", type=int, default=8, help="goals to an executor whose segments all fail")
    p.add_argument("--hangs", type=int, default=6, help="goals to an executor whose segments hang")
    p.add_argument("--kills", type=int, default=6, help="executors SIGKILLed mid-segment (each then gets a new goal)")
    p.add_argument("--cancels", type=int, default=200, help="goals cancelled at random points")
    p.add_argument("--burst", type=int, default=200, help="goals sent at the same moment")
    p.add_argument("--soak-agents", type=int, default=50, help="agents in closed loop")
    p.add_argument("--soak-s", type=float, default=600.0, help="soak duration (s)")
    p.add_argument("--outstanding", type=int, default=32, help="open goals at most (fuzz, cancels)")
    p.add_argument("--result-timeout", type=float, default=60.0,
                   help="after a phase's last goal, how long its goals may take to end before they count as lost")
    p.add_argument("--no-expected-agents", action="store_true",
                   help="do not list the executors in the server's expected_agents (it discovers each on its "
                        "first goal, waiting up to 5 s)")
    p.add_argument("--plans", type=int, default=10000,
                   help="random plans in the plans phase, over all robot types (0: skip it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--server-param", action="append", default=[], help="extra server parameter name:=value")
    long = p.add_argument_group("long mode (memory over many goals)")
    long.add_argument("--soak-goals", type=int, default=0,
                      help="run the long mode instead of the phases: this many mixed goals after the warm-up")
    long.add_argument("--soak-warmup", type=int, default=2000, help="mixed goals before the first sample")
    long.add_argument("--samples", type=int, default=25, help="samples after the first, one every N/samples goals")
    long.add_argument("--max-rss-growth", type=float, default=0.02,
                      help="largest RSS growth from the first sample to the last (0.02: 2%%)")
    long.add_argument("--out", type=Path, default=Path("build/stress_soak"),
                      help="folder for the long mode's samples.csv, summary.md and memory.png")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from client import StressClient  # rclpy: imported after argument parsing (--help works anywhere)

    opts = _args(argv)
    if opts.soak_goals > 0:
        return long_main(opts)
    t_start = time.monotonic()
    soak_agents = [f"s_{i}" for i in range(opts.soak_agents)]
    pool = [f"c_{i}" for i in range(4)]
    main_agents = ["fz_1", *pool, *soak_agents]
    children, rows = [], []
    client = None
    try:
        # robots first, then the planner (it discovers them at start-up: expected_agents)
        host = start_executors("executors", [(a, "drone") for a in main_agents], "time_scale:=0.02",
                               "queue_size:=64")
        fault_hosts, kill_agents, kill_hosts = phases.fault_hosts(opts.kills)
        children += [host, *fault_hosts, *kill_hosts]
        for c in children:
            c.wait_ready(240)
        expected = [] if opts.no_expected_agents else main_agents + ["fa_1", "fh_1"]
        extra = ["executor_discovery_timeout_s:=5.0"] if opts.no_expected_agents else []
        server = start_server(expected, extra + opts.server_param)
        children.insert(0, server)
        server.wait_ready(240)
        client = StressClient()
        if not client.wait_for_server(30):
            raise RuntimeError("no /plan action server")
        if expected and not server.wait_for("all expected executors discovered", 60):
            raise RuntimeError("the server did not discover every executor in 60 s")
        run = phases.Run(client, server, [host, *fault_hosts, *kill_hosts], random.Random(opts.seed), opts.seed,
                         outstanding=opts.outstanding, result_timeout_s=opts.result_timeout)
        phases.warm_up(run, "fz_1")
        plan = [("fuzz", lambda: phases.fuzz(run, opts.fuzz, "fz_1")),
                ("faults", lambda: phases.faults(run, opts.aborts, opts.hangs, opts.kills, kill_agents, kill_hosts)),
                ("cancels", lambda: phases.cancels(run, opts.cancels, pool)),
                ("burst", lambda: phases.burst(run, opts.burst, pool + soak_agents)),
                ("soak", lambda: phases.soak(run, soak_agents, opts.soak_s))]
        for name, body in plan:
            print(f"[stress] {name} ...", flush=True)
            rss_before, t0 = server.rss_mb(), time.monotonic()
            try:
                records = body()
            except phases.ServerDied:
                records = [r for r in client.records if r.phase == name]
            if not server.alive:
                print(f"[stress] the server died during {name} (exit {server.proc.returncode}); its last lines:\n  "
                      + "\n  ".join(list(server.tail)[-25:]), flush=True)
            timing: dict = {}
            for c in [server, *run.hosts]:   # the server's published/sent with the executors' received/...
                for k, v in list(c.timing.items()):
                    timing.setdefault(k, {}).update(v)
            row = score(name, records, timing)
            row.rss_before, row.crashes = rss_before, 0 if server.alive else 1
            row.left_running = _settle(client, 30.0)
            row.rss_after = server.rss_mb()
            rows.append(row)
            print(f"[stress] {name}: {row.goals} goals in {time.monotonic() - t0:.0f} s, "
                  f"{'ok' if row.ok else 'FAIL'}", flush=True)
            if not server.alive:
                break
        if opts.plans and server.alive:
            print("[stress] plans ...", flush=True)
            t0 = time.monotonic()
            row = phases.plan_properties(opts.plans, opts.seed)
            row.rss_before = row.rss_after = server.rss_mb()
            rows.append(row)
            print(f"[stress] plans: {row.goals} plans in {time.monotonic() - t0:.0f} s, "
                  f"{'ok' if row.ok else 'FAIL'}", flush=True)
    except Exception as exc:  # the suite could not run: say why, with the server's last lines
        print(f"[stress] suite error: {type(exc).__name__}: {exc}", flush=True)
        for c in children:
            if not c.alive:
                print(f"[stress] {c.name} exited {c.proc.returncode}:\n  " + "\n  ".join(list(c.tail)[-15:]))
        _stop(children, client)
        return 2
    exits = _stop(children, client)
    print(table(rows))
    _print_request_lines(rows, children)
    return _verdict(rows, exits, children, run.notes, time.monotonic() - t_start)


LONG_AGENTS = 20   # executors of the long mode's valid goals (one host process)


def long_main(opts: argparse.Namespace) -> int:
    """The long mode: executors, a server tracing its Python heap, the mixed goals; table, plot and verdict."""
    from client import StressClient
    import long_soak

    t_start = time.monotonic()
    agents = [f"m_{i}" for i in range(LONG_AGENTS)]
    children: list = []
    client = None
    rows: list[Row] = []
    samples: list = []
    try:
        host = start_executors("executors", [(a, "drone") for a in agents], "time_scale:=0.02", "queue_size:=64",
                               "log_timing:=false")
        children.append(host)
        host.wait_ready(240)
        # a goal to an agent no executor serves waits executor_discovery_timeout_s on one of the server's four
        # discovery threads: 0.5 s keeps those goals from crowding the others out at the long mode's rate
        server = start_server(agents, ["trace_python_heap:=true", "log_timing:=false",
                                       "executor_discovery_timeout_s:=0.5", *opts.server_param])
        children.insert(0, server)
        server.wait_ready(240)
        client = StressClient()
        if not client.wait_for_server(30):
            raise RuntimeError("no /plan action server")
        if not server.wait_for("all expected executors discovered", 60):
            raise RuntimeError("the server did not discover every executor in 60 s")
        run = phases.Run(client, server, [host], random.Random(opts.seed), opts.seed, outstanding=opts.outstanding,
                         result_timeout_s=opts.result_timeout)
        phases.warm_up(run, agents[0])
        try:
            rows, samples = long_soak.long_soak(run, agents, opts.soak_goals, opts.soak_warmup, opts.samples)
        except phases.ServerDied:
            print(f"[stress] the server died (exit {server.proc.returncode}); its last lines:\n  "
                  + "\n  ".join(list(server.tail)[-25:]), flush=True)
            rows = [Row("long soak", crashes=1)]
        for row in rows:
            row.left_running = _settle(client, 30.0)
    except Exception as exc:  # the suite could not run: say why, with the server's last lines
        print(f"[stress] suite error: {type(exc).__name__}: {exc}", flush=True)
        for c in children:
            if not c.alive:
                print(f"[stress] {c.name} exited {c.proc.returncode}:\n  " + "\n  ".join(list(c.tail)[-15:]))
        _stop(children, client)
        return 2
    exits = _stop(children, client)
    text = table(rows)
    print(text)
    problems = [f"phase {r.phase}: FAIL" for r in rows if not r.ok]
    if len(samples) >= 2:
        result = long_soak.verdict(samples, opts.max_rss_growth)
        problems += result.problems
        print("\n" + long_soak.samples_table(samples))
        long_soak.write_outputs(opts.out, samples, text, result, opts.max_rss_growth)
        print(f"\n[stress] samples, table and plot in {opts.out}/")
    else:
        problems.append("fewer than two memory samples")
    bad_exit = {n: e for n, e in exits.items() if e != 0}
    if bad_exit:
        problems.append(f"processes that did not exit 0 on SIGINT: {bad_exit}")
    print(f"\n[stress] long soak {time.monotonic() - t_start:.0f} s; "
          + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 0 if not problems else 1


def _print_request_lines(rows: list[Row], children) -> None:
    """The processes' log lines for each unexpected result shown in the table (server and executor hosts)."""
    for row in rows:
        for req_id, _ in row.unexpected_examples:
            lines = [f"  {c.name}: {line}" for c in children for line in c.requests.of(req_id)]
            print(f"\nlog lines naming {req_id} ({row.phase}):\n" + ("\n".join(lines) or "  none"))


def _settle(client, timeout: float) -> int:
    """Generations the server still holds (queued + running + suspended + executing) once it has had `timeout`."""
    end = time.monotonic() + timeout
    while True:
        s = client.state
        left = -1 if s is None else s.queued + s.running + s.suspended + s.executing + len(s.requests)
        if left == 0 or time.monotonic() > end:
            return left
        time.sleep(0.2)


def _stop(children, client) -> dict:
    if client is not None:
        client.close()
    exits = {}
    for c in reversed(children):
        if c.alive:
            exits[c.name] = c.stop()
    return exits


def _verdict(rows: list[Row], exits: dict, children, notes: list[str], elapsed: float) -> int:
    problems = [f"phase {r.phase}: FAIL" for r in rows if not r.ok]
    if rows and rows[0].rss_before > 0 and rows[-1].rss_after > 1.10 * rows[0].rss_before:
        problems.append(f"server RSS {rows[0].rss_before:.0f} -> {rows[-1].rss_after:.0f} MiB (> +10%)")
    bad_exit = {n: e for n, e in exits.items() if e != 0}
    if bad_exit:
        problems.append(f"processes that did not exit 0 on SIGINT: {bad_exit}")
    tracebacks = {c.name: c.tracebacks for c in children if c.tracebacks}
    if tracebacks:
        problems.append(f"tracebacks in process output: {tracebacks}")
        for c in children:
            for exc, n in c.exceptions.most_common(5):
                print(f"{c.name}: {n} x {exc}")
    for n in notes:
        print(f"note: {n}")
    rss = [r.rss_after for r in rows if not math.isnan(r.rss_after)]
    print(f"\n[stress] {elapsed:.0f} s; server RSS {rows[0].rss_before if rows else math.nan:.0f} -> "
          f"{rss[-1] if rss else math.nan:.0f} MiB; " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
