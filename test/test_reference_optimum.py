"""The upper bound and the reference optima of `benchmarks/compare_policies.py upper-bound` that the README quotes (4090
profile, urgent class: ERT 0.2 s, slope -6.67, beta 2; 284-token prompt suffix over 2,884 tokens of context,
5-token first segments)."""
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import compare_policies as ub  # noqa: E402
from timely_llm_ros.evaluation.sim import load_latency_model  # noqa: E402
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES  # noqa: E402

LAT = load_latency_model("llama3-8b-rtx4090")
URGENT = DEFAULT_URGENCY_CLASSES["urgent"]
CTX, NEW, M = 2884, 284, 5


def cluster(*arrivals: float) -> float:
    return ub.cluster_optimum(tuple(arrivals), LAT, URGENT, CTX, NEW, M)


def wave(n: int) -> float:
    return ub.wave_optimum(n, LAT, URGENT, CTX, NEW, M)


def test_for_simultaneous_arrivals_the_cluster_reference_is_the_per_event_one():
    """Three prompts in one step: c + 3 p = 0.0141 + 3 x 0.03091 = 0.1068 s, then 4 decode steps of
    0.0205 + 3 x 0.0008 + 2.5e-7 x 3 x 2,884 = 0.02506 s: ready at 0.2071 s, response 0.2151 s with the 8 ms
    network delay, TUF_0 1.899 each."""
    assert wave(3) == pytest.approx(3 * (2 - 6.67 * (0.10683 + 4 * 0.025063 + 0.008 - 0.2)), abs=1e-3)
    for n in range(1, 6):
        assert cluster(*[0.0] * n) == pytest.approx(wave(n), abs=1e-9)


def test_a_late_fourth_waits_for_the_first_wave_where_the_per_event_reference_serves_it_alone():
    """Three at 0 s (5.698, as above), a fourth at 0.11 s, while the first wave decodes. Its prefill now would
    delay the three by 45 ms (0.9 of utility); after them (0.2071 s) it prefills alone (c + p = 0.0450 s) and
    decodes 4 steps of 0.02202 s: ready 0.3402 s, response 0.2382 s, 1.745. The per-event reference counts it on
    an idle engine (2.0): 7.698 against the cluster's 7.444."""
    alone_after = 2 - 6.67 * (0.20708 + 0.045011 + 4 * 0.022021 + 0.008 - 0.11 - 0.2)
    assert cluster(0.0, 0.0, 0.0, 0.11) == pytest.approx(wave(3) + alone_after, abs=1e-3)
    assert cluster(0.0, 0.0, 0.0, 0.11) == pytest.approx(7.4435, abs=1e-3)
    assert wave(3) + wave(1) == pytest.approx(7.698, abs=1e-3)


def test_two_arrivals_during_a_segment_are_best_prefilled_without_its_decode_pass():
    """One at 0 s: prefill c + p = 0.0450 s, then decode steps of 0.02202 s. Two more at 0.1 s. After its third
    decode step (0.1111 s) the best plan prefills the two *without* the decode pass (0.0759 s, to 0.1870 s); the
    first decodes its last token with them (0.02506 s: ready 0.2121 s, response 0.2201 s, 1.866), the two then
    decode 3 more steps of 0.02354 s (ready 0.2827 s, response 0.1907 s: 2.0 each): 5.866. With the decode pass in
    that step (0.0979 s) the first is ready at 0.2090 s (1.887) but the two at 0.3032 s (1.925 each): 5.737.
    Prefilling the two only after the first is done: 2.0 + 2 x 1.925 = 5.851. The per-event reference: 6.0."""
    first_done_with_them = 0.111074 + 0.075922 + 0.025063
    two_ready = 0.111074 + 0.075922 + 0.025063 + 3 * 0.023542
    best = (2 - 6.67 * (first_done_with_them + 0.008 - 0.2)) + 2 * min(2.0, 2 - 6.67 * (two_ready + 0.008 - 0.1 - 0.2))
    assert best == pytest.approx(5.8662, abs=1e-3)
    assert cluster(0.0, 0.1, 0.1) == pytest.approx(best, abs=1e-3)
    assert wave(1) + wave(2) == pytest.approx(6.0)
    # a request arriving after the engine went idle is served on arrival (the plan idles until it comes)
    assert cluster(0.0, 0.5) == pytest.approx(4.0)


def test_the_bound_serializes_prefills_across_a_set_and_picks_the_best_order():
    """Jobs (arrival, prefill p, tail K): two at 0 s and 0.05 s with p = K = 0.1 s. First-arrived first: ready
    0.2 s (2.0), then the pair's prefills in a row from 0 s plus one tail, 0.3 s (response 0.25 s, 1.6665): 3.6665.
    The other order: 0.25 s (2.0), then 0.3 s (response 0.3 s, 1.333): 3.333. Each alone (the simpler rule): 4.0.
    Three at 0 s: 0.2, 0.3, 0.4 s: 2 + 1.333 + 0.666. With p = 0.3 s the second would count 0 either way."""
    assert ub.cluster_bound([(0.0, 0.1, 0.1), (0.05, 0.1, 0.1)], URGENT) == pytest.approx(3.6665)
    assert ub.cluster_bound([(0.0, 0.1, 0.1)] * 3, URGENT) == pytest.approx(3.999)
    assert ub.cluster_bound([(0.0, 0.3, 0.1)] * 3, URGENT) == pytest.approx(0.666)


def test_the_bound_is_never_below_a_schedule_of_the_latency_model():
    """cluster_optimum's plans are schedules of the same latency model, so the relaxation must bound them: the
    pinned arrival sets above and 40 random clusters (up to 6 arrivals within 0.4 s)."""
    rng = random.Random(7)
    sets = [(0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.11), (0.0, 0.1, 0.1), (0.0, 0.5)]
    sets += [tuple(sorted([0.0] + [round(rng.uniform(0.0, 0.4), 3) for _ in range(rng.randint(0, 5))]))
             for _ in range(40)]
    for arrivals in sets:
        jobs = [ub.bound_job(a, CTX, NEW, M, LAT) for a in arrivals]
        assert ub.cluster_bound(jobs, URGENT) >= cluster(*arrivals) - 1e-9, arrivals
