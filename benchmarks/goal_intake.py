#!/usr/bin/env python3
"""How fast the plan server takes in a burst of goals: N dry-run goals sent at the same moment.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/goal_intake.py [--goals 200] [--reps 3] [--policy timely]
        [--compare-threads]

Real processes on loopback: the server node (as `make stress` starts it) and a client (tools/stress/client.py,
deep queues) that sends --goals dry-run goals at once, after a 4-goal warm-up, --reps times. Per repetition:
  server intake   when each goal's "accepted" log line appeared (the goal validated and handed to the scheduler),
                  from the moment the first goal was sent: first, median, last, and the span per goal;
  goal response   when the client had each goal's accept/reject answer (median, last);
  result          when the last result arrived.
Dry-run goals are planned by the engine but not executed, so no executors are needed; the engine's generations
run beside the intake, as they would in a burst.

--compare-threads: what ending idle worker threads costs the intake. Two servers, one after the other (in
alternating order over --servers pairs): worker_idle_exit_s 5 s (the default: each burst after a quiet spell starts
its goal threads anew) and 0 (rclpy's pool: the threads of the first burst are reused), bursts --pause-s (7) apart.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools" / "stress"))
sys.path.insert(0, str(REPO))

ACCEPTED = re.compile(r"\[INFO\] \[(\d+\.\d+)\] \[timely_server\]: \[\w+\] \S+ \((?:drone|arm), ")


def one_burst(server, client, n: int, rep: int) -> dict[str, float]:
    from goals import valid_goal

    mark = len(server.tail)
    wall0, t0 = time.time(), time.monotonic()
    records = [client.send("intake", "dry run", set(), valid_goal(f"d{rep}_{i}", "drone", dry_run=True))
               for i in range(n)]
    sent = time.monotonic() - t0
    client.wait_terminal(records, 60 + 0.5 * n)
    stamps = sorted(float(m.group(1)) - wall0 for ln in list(server.tail)[mark:] if (m := ACCEPTED.match(ln)))
    responses = sorted(r.responded - t0 for r in records if r.responded is not None)
    results = [r.done - t0 for r in records if r.done is not None]
    return {"sent": sent, "intake_n": len(stamps), "intake_first": stamps[0], "intake_median": statistics.median(stamps),
            "intake_last": stamps[-1], "per_goal": (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1),
            "response_median": statistics.median(responses), "response_last": responses[-1],
            "result_last": max(results), "lost": n - len(results)}


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
                  f"{r['result_last']:.2f} s; without a result {r['lost']}", flush=True)
        return rows
    finally:
        if client is not None:
            client.close()
        code = server.stop(30)
        if code != 0:
            print(f"server exited {code}", file=sys.stderr)


def _spread(values: list[float]) -> str:
    return f"{statistics.fmean(values) * 1e3:.2f} ms [{min(values) * 1e3:.2f}, {max(values) * 1e3:.2f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--goals", type=int, default=200)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--policy", default="timely")
    p.add_argument("--compare-threads", action="store_true")
    p.add_argument("--servers", type=int, default=2, help="--compare-threads: server pairs")
    p.add_argument("--pause-s", type=float, default=None, help="quiet time before each burst (1 s; 7 s to compare)")
    args = p.parse_args(argv)
    if args.pause_s is None:
        args.pause_s = 7.0 if args.compare_threads else 1.0
    configs = {"": []}
    if args.compare_threads:
        configs = {"elastic": ["worker_idle_exit_s:=5.0"], "keep-all": ["worker_idle_exit_s:=0.0"]}
    per_goal: dict[str, list[float]] = {name: [] for name in configs}
    lost = False
    for pair in range(args.servers if args.compare_threads else 1):
        names = list(configs) if pair % 2 == 0 else list(reversed(configs))
        for name in names:
            rows = run_server(configs[name], args, f"{name} " if name else "")
            if rows is None:
                return 2
            lost |= any(r["lost"] or r["intake_n"] != args.goals for r in rows)
            per_goal[name] += [r["per_goal"] for r in rows]
    if args.compare_threads:
        e, k = per_goal["elastic"], per_goal["keep-all"]
        print(f"\nserver intake per goal over {len(e)} bursts of {args.goals} each, {args.pause_s:.0f} s apart: "
              f"elastic {_spread(e)}, keep-all {_spread(k)}; ratio {statistics.fmean(e) / statistics.fmean(k):.2f}")
    else:
        print(f"\nserver intake per goal: {_spread(per_goal[''])} over {args.reps} bursts of {args.goals} "
              f"({args.policy})")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
