"""The ROS burst benchmark: the calibration that scales the burst to the planner's speed, and its argument checks."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import ros_burst as rb  # noqa: E402

from timely_llm_ros.core.latency_model import LatencyModel  # noqa: E402
from timely_llm_ros.evaluation.workload import Workload, WorkloadSpec, WorkloadTask  # noqa: E402

PLAN = {"u1": 10, "u2": 20, "u3": 30, "n1": 50}


def workload() -> Workload:
    tasks = [WorkloadTask(tid, 0.1 * i, 0, f"drone_{i}", 6, "drone", "normal" if tid == "n1" else "urgent",
                          "task", "", "", 100) for i, tid in enumerate(PLAN)]
    return Workload(WorkloadSpec(name="T", eps=1.0, max_tpe=4, trace_ids=(6,), agents=4, duration_s=1.0),
                    tasks, 0, len(tasks))


def demand(latency: LatencyModel) -> float:
    return rb.urgent_demand_s(workload(), latency, 2, lambda t: PLAN[t.task_id], lambda t: t.prompt_tokens)


def test_urgent_demand_is_one_prefill_step_then_decode_batches_of_max_batch():
    """Three urgent requests (100-token prompts, 10/20/30-token plans), max_batch 2, the normal one left out:
    prefill 0.01 + 3 x 0.1 = 0.31 s; batch [u1, u2] 20 steps x 0.022 s = 0.44 s; batch [u3] 30 x 0.021 = 0.63 s.
    The simpler rule (each request alone: cold prefill + its plan at batch 1) gives 3 x 0.11 + 60 x 0.021 = 1.59."""
    lat = LatencyModel(prefill_a=0.0, prefill_b=0.001, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)
    assert demand(lat) == pytest.approx(1.38)


def test_urgent_demand_prefills_only_the_suffix_after_the_cached_prefix_over_the_whole_context():
    """60 of 100 prompt tokens cached: each prefills 40 tokens over 100 of context (1e-6 x 40 x 100 + 0.001 x 40
    = 0.044 s); decode context is the batch's prompts plus half its plans: 215 and 115 tokens at 1e-5 s each."""
    lat = LatencyModel(prefill_a=1e-6, prefill_b=0.001, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=1e-5, cached_prefix_tokens=60)
    assert demand(lat) == pytest.approx(0.01 + 3 * 0.044 + 20 * 0.02415 + 30 * 0.02215)


def test_auto_scale_is_the_smallest_half_step_that_reaches_the_load():
    lat = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.002, decode_base=0.001, decode_per_seq=2e-4,
                       decode_per_kv_token=0.0)
    plans = {tid: {"tokens": 10 if tid < 9 else 60, "prompt_tokens": 40 if tid < 9 else 90} for tid in range(6, 12)}
    args = argparse.Namespace(scale="auto", load=1.0, max_batch=16)
    k = rb.choose_scale(args, [1, 2], lat, plans)
    assert rb.embedded_load([1, 2], k, lat, plans, 16) >= 1.0 > rb.embedded_load([1, 2], k - 0.5, lat, plans, 16)
    assert rb.choose_scale(argparse.Namespace(scale="2.5", load=1.0, max_batch=16), [1], lat, plans) == 2.5


def test_kendall_tau_counts_a_tie_as_neither_agreement_nor_disagreement():
    a = {"x": 3.0, "y": 2.0, "z": 1.0}
    assert rb.kendall_tau(a, a) == 1.0
    assert rb.kendall_tau(a, {"x": 1.0, "y": 2.0, "z": 3.0}) == -1.0
    assert rb.kendall_tau(a, {"x": 3.0, "y": 1.0, "z": 1.0}) == pytest.approx(2 / 3)


def test_the_as_run_machine_comes_from_the_replays_steps_after_the_warm_up(tmp_path):
    """run_factors pools every step from `since` on (the warm-up's steps, earlier, are left out) and also reports
    each policy's own: decode steps of 1 at 2x, 3x and 4x the profile, 1 ms of loop each."""
    from timely_llm_ros.core.step_trace import StepRecord, StepTraceWriter

    lat = LatencyModel(prefill_a=0.0, prefill_b=0.001, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                       decode_per_kv_token=0.0)
    t1 = lat.decode_s(1, 0)
    writer = StepTraceWriter(tmp_path / "steps.csv")
    for t, k, policy in ((0.0, 10.0, "timely"), (5.0, 2.0, "timely"), (6.0, 3.0, "edf"), (7.0, 4.0, "edf")):
        writer.write(StepRecord(t=t, engine_s=k * t1, decode_batch=1, iteration_s=k * t1 + 0.001, policy=policy))
    writer.close()
    pooled, per_policy = rb.run_factors(tmp_path / "steps.csv", lat, since=1.0)
    assert pooled.steps == 3 and pooled.slowdown == pytest.approx(3.0)
    assert pooled.step_overhead_s == pytest.approx(0.001)
    assert per_policy["timely"].slowdown == pytest.approx(2.0) and per_policy["edf"].slowdown == pytest.approx(3.5)


def test_an_unknown_policy_is_refused_before_any_process_starts(tmp_path, capsys):
    """A typo in --policies was found only after the server (model loaded) failed to configure: a traceback."""
    assert rb.main(["--policies", "timely,edf-admt", "--seeds", "1", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'edf-admt'" in err and "edf-admit" in err
    assert not (tmp_path / "out").exists()
