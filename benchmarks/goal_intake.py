#!/usr/bin/env python3
"""How fast the plan server takes in a burst of goals: N dry-run goals sent at the same moment.

    ROS_DOMAIN_ID=<yours> .venv/bin/python benchmarks/goal_intake.py [--goals 200] [--reps 3] [--policy timely]

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
from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools" / "stress"))
sys.path.insert(0, str(REPO))

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


if __name__ == "__main__":
    sys.exit(main())
