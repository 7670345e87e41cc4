#!/usr/bin/env python3
"""A true upper bound on one class's mean utility (default: urgent) under a latency profile, to check how much
room the class-alone bound of compare_policies.py (best of a few policies serving that class alone) leaves.

    python benchmarks/urgent_upper_bound.py --workload WID1 [--seeds 1,2,3,4,5] [--cls urgent]

Relaxation (every schedule of the real simulator satisfies it, so its optimum bounds every policy's):
- other classes are left out (a step never gets cheaper with more in it);
- request j needs its own prompt prefill p_j = a n_j c_j + b n_j (the suffix after the cached prefix) and then
  m_j - 1 decode steps for its m_j-token first segment, each at least t_1 = decode(1, context); a step with
  prefills costs c on top. Step costs add (c + prefills + decode), so the engine's busy time before the last of
  a set Q of first segments is ready is at least min_{i in Q} arrival_i + sum_{i in Q} p_i + c + (m - 1) t_1
  (m of that last one): a one-machine schedule with release dates in which only these sums are enforced;
- constraints between requests more than --split s apart are dropped (a looser, still valid bound), and a
  cluster is cut after --max-cluster requests for the same reason;
- a request counts max(TUF_0(response), 0): a dropped request counts at most 0.
Within a cluster the optimum over every served subset and completion order is found exactly (bitmask search).
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compare_policies as cp  # noqa: E402
from report import parse_seeds  # noqa: E402
from timely_llm_ros.evaluation.sim import load_latency_model  # noqa: E402
from timely_llm_ros.evaluation.sim.tokenizer import PieceTokenizer  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402


def cluster_bound(jobs: list[tuple[float, float, float]], tuf) -> float:
    """jobs: (arrival a, prefill work p, tail K = c + (m - 1) t_1 + network delay). The largest sum of
    max(TUF_0(ready - a), 0) over every served subset and every order of readiness, where the j-th ready is no
    earlier than the previous one, than a_j + p_j + K_j, and, for every set Q of those ready so far with j among
    them, than min arrival(Q) + sum p(Q) + min K(Q) (the last prefill of Q still needs its own tail)."""
    n = len(jobs)
    best: dict[int, list[tuple[float, float]]] = {}      # served mask -> pareto [(last ready, utility)]
    frontier: dict[int, list[tuple[float, float]]] = {0: [(float("-inf"), 0.0)]}
    top = 0.0
    while frontier:
        nxt: dict[int, list[tuple[float, float]]] = {}
        for mask, pts in frontier.items():
            for ready, util in pts:
                top = max(top, util)
                for j in range(n):
                    if mask >> j & 1:
                        continue
                    a, p, k = jobs[j]
                    served = [jobs[i] for i in range(n) if (mask | 1 << j) >> i & 1]
                    lb = a + p + k
                    for th in {q[0] for q in served}:
                        q_set = [q for q in served if q[0] >= th or q is jobs[j]]
                        lb = max(lb, min(th, a) + sum(q[1] for q in q_set) + min(q[2] for q in q_set))
                    r = max(ready, lb)
                    nxt.setdefault(mask | 1 << j, []).append((r, util + max(tuf(r - a), 0.0)))
        frontier = {}
        for mask, pts in nxt.items():
            merged = sorted(best.get(mask, []) + pts, key=lambda x: (x[0], -x[1]))
            pareto, bu = [], -1.0
            for e, u in merged:
                if u > bu + 1e-12:
                    pareto.append((e, u))
                    bu = u
            fresh = [x for x in pareto if x not in best.get(mask, [])]
            best[mask] = pareto
            if fresh:
                frontier[mask] = fresh
    return top


def wave_optimum(n: int, lat, tuf, ctx: int, new: int, m: int) -> float:
    """Reference, not a bound: the best total utility for n requests of one class arriving together on an idle
    engine, searched exactly over how many prompts each step prefills, every started request decoding in every
    step (leaving one out would cost it a whole step to save the others ~1.5 ms), with the latency profile's
    step times. Neighbouring events and other classes are ignored."""
    p = lat.prefill_s(new, ctx)
    horizon = min(tuf.zero_crossing(), 60.0) + 0.1

    @functools.lru_cache(maxsize=None)
    def best(left: int, inflight: tuple[int, ...], t: float) -> float:
        top = 0.0                                   # serve nobody else (they are dropped: at most 0)
        for k in range(left + 1):
            if k == 0 and not inflight:
                continue
            t2 = round(t + (lat.prefill_c + k * p if k else 0.0)
                       + (lat.decode_s(len(inflight), len(inflight) * ctx) if inflight else 0.0), 6)
            if t2 > horizon:
                continue
            done = sum(1 for r in inflight if r == 1)
            rest = tuple(sorted([r - 1 for r in inflight if r > 1] + [m - 1] * k))
            if m == 1:
                done, rest = done + k, tuple(r for r in rest if r > 0)
            top = max(top, done * max(tuf(t2 + lat.network_delay_s), 0.0) + best(left - k, rest, t2))
        return top

    return best(n, (), 0.0)


def cluster_optimum(arrivals: tuple[float, ...], lat, tuf, ctx: int, new: int, m: int) -> float:
    """Reference, not a bound: the best total utility for one class's requests arriving at the given times (sorted,
    a cluster), on an engine idle at the first arrival, searched exactly over the step plans: each step
    prefills the k oldest arrived requests not started (k >= 0), with or without the decode pass of those
    already started (a prefill step without it leaves them one step behind), or the engine idles until the next
    arrival, or the oldest waiting one is dropped. Step times are the latency profile's; the network delay is
    added to every response. Not a bound either way: its plans serve the oldest first, and the work it ignores
    (other classes, the requests' later segments, a step in flight at the first arrival) only makes a real
    schedule worse."""
    p, nd, n = lat.prefill_s(new, ctx), lat.network_delay_s, len(arrivals)

    def utility(t: float, j: int) -> float:
        return max(tuf(t + nd - arrivals[j]), 0.0)

    @functools.lru_cache(maxsize=None)
    def best(i: int, inflight: tuple[tuple[int, int], ...], t: float) -> float:
        arrived = max(i, sum(1 for a in arrivals if a <= t + 1e-9))   # requests i..arrived-1 wait
        options = [0.0]                                  # serve nobody else (they count at most 0)
        if arrived > i:
            options.append(best(i + 1, inflight, t))     # drop the oldest waiting one
        if not inflight and arrived < n:                 # idle until the next arrival
            options.append(best(i, inflight, round(arrivals[arrived], 6)))
        for k in range(arrived - i + 1):
            for decode in ((True, False) if k and inflight else (bool(inflight),)):
                if not k and not inflight:
                    continue
                t2 = round(t + (lat.prefill_c + k * p if k else 0.0)
                           + (lat.decode_s(len(inflight), len(inflight) * ctx) if decode else 0.0), 6)
                done, rest = 0.0, []
                for left, j in inflight:
                    left -= 1 if decode else 0
                    if left == 0:
                        done += utility(t2, j)
                    else:
                        rest.append((left, j))
                for j in range(i, i + k):
                    if m == 1:
                        done += utility(t2, j)
                    else:
                        rest.append((m - 1, j))
                options.append(done + best(i + k, tuple(sorted(rest)), t2))
        return max(options)

    return best(0, (), round(arrivals[0], 6))


def bound_job(arrival: float, ctx: int, new: int, m: int, lat) -> tuple[float, float, float]:
    """cluster_bound's (arrival, prefill work p, tail K) for a request of this shape: K = c + (m - 1) t_1 + network
    delay, t_1 the batch-1 decode step at the prompt's context (no decode step of the real engine is shorter)."""
    return arrival, lat.prefill_s(new, ctx), lat.prefill_c + (m - 1) * lat.decode_s(1, ctx) + lat.network_delay_s


def request_shape(task, lat, tok) -> tuple[int, int, int]:
    """(context tokens, new tokens to prefill after the cached prefix, first-segment tokens) of one task."""
    ctx = task.prompt_tokens
    new = max(ctx - min(lat.cached_prefix_tokens, ctx - 1), 1)
    return ctx, new, len(tok.encode(" " + task.plan.split(";")[0] + ";"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="WID1")
    ap.add_argument("--seeds", default="1,2,3,4,5", help="workload seeds (list or ranges: 6-10)")
    ap.add_argument("--cls", default="urgent")
    ap.add_argument("--latency", default="llama3-8b-rtx4090")
    ap.add_argument("--split", type=float, default=1.0, help="drop constraints across gaps longer than this (s)")
    ap.add_argument("--max-cluster", type=int, default=9)
    ap.add_argument("--waves", action="store_true",
                    help="also the reference optimum per arrival event (wave_optimum; not a bound; assumes the first "
                         "segment length of the class's first request for all)")
    ap.add_argument("--clusters", action="store_true",
                    help="also the reference optimum per cluster of arrivals no more than --cluster-gap apart "
                         "(cluster_optimum; not a bound; same segment-length assumption)")
    ap.add_argument("--cluster-gap", type=float, default=0.5)
    args = ap.parse_args(argv)
    lat = load_latency_model(args.latency)
    tok = PieceTokenizer()
    out, waves, clustered = [], [], []
    for seed in parse_seeds(args.seeds):
        wl = cp.PRESETS[args.workload].make(seed)
        tasks = sorted((t for t in wl.tasks if t.urgency == args.cls and not t.after), key=lambda t: t.arrival)
        if not tasks:
            continue
        jobs = [bound_job(t.arrival, *request_shape(t, lat, tok), lat) for t in tasks]
        tuf = DEFAULT_URGENCY_CLASSES[args.cls]
        total, cluster = 0.0, [jobs[0]]
        for job in jobs[1:]:
            if job[0] - cluster[-1][0] > args.split or len(cluster) >= args.max_cluster:
                total += cluster_bound(cluster, tuf)
                cluster = []
            cluster.append(job)
        total += cluster_bound(cluster, tuf)
        ub = total / len(jobs)
        out.append(ub)
        line = (f"{args.workload} seed {seed}: {len(jobs)} {args.cls} requests, upper bound {ub:.3f} "
                f"(share of max {ub / tuf.beta:.3f})")
        ctx, new, m = request_shape(tasks[0], lat, tok)   # the references assume the first request's shape for all
        if args.waves:
            sizes: dict[float, int] = {}
            for t in tasks:
                sizes[t.arrival] = sizes.get(t.arrival, 0) + 1
            ref = sum(wave_optimum(n, lat, tuf, ctx, new, m) for n in sizes.values()) / len(tasks)
            waves.append(ref)
            line += f"; per-event reference optimum {ref:.3f} (share {ref / tuf.beta:.3f})"
        if args.clusters:
            groups = [[tasks[0].arrival]]
            for t in tasks[1:]:
                if t.arrival - groups[-1][-1] > args.cluster_gap:
                    groups.append([])
                groups[-1].append(t.arrival)
            ref = sum(cluster_optimum(tuple(round(a - g[0], 6) for a in g), lat, tuf, ctx, new, m)
                      for g in groups) / len(tasks)
            clustered.append(ref)
            line += f"; per-cluster reference optimum {ref:.3f} (share {ref / tuf.beta:.3f})"
        print(line, flush=True)
    print(f"upper bound: mean {statistics.fmean(out):.3f} [{min(out):.3f}, {max(out):.3f}]")
    if waves:
        print(f"per-event reference optimum: mean {statistics.fmean(waves):.3f} [{min(waves):.3f}, {max(waves):.3f}]")
    if clustered:
        print(f"per-cluster reference optimum: mean {statistics.fmean(clustered):.3f} "
              f"[{min(clustered):.3f}, {max(clustered):.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
