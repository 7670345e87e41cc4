"""LRTrace traces, the Poisson workload generator and its presets, YAML and rosbag2 (mcap) round trips."""
import random
import statistics

import pytest

from timely_llm_ros.core.exec_time import load_exec_models
from timely_llm_ros.evaluation.sim.tokenizer import PieceTokenizer
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.evaluation.workload import (TRACES, WorkloadSpec, generate, get_trace, load_spec, load_workload,
                                          save_workload)
from timely_llm_ros.evaluation.workload.bag import read_bag, write_bag


def test_eleven_traces_in_the_papers_categories():
    assert sorted(TRACES) == list(range(1, 12))
    assert {TRACES[i].urgency for i in range(6, 9)} == {"urgent"}
    assert {TRACES[i].urgency for i in (1, 2, 3, 4, 5, 9, 10, 11)} == {"normal"}
    assert {TRACES[i].robot_type for i in range(9, 12)} == {"arm"}
    with pytest.raises(ValueError):
        get_trace(12)


def test_every_plan_is_valid_in_its_skill_language():
    skill_sets = load_skill_sets()
    for trace in TRACES.values():
        assert skill_sets[trace.robot_type].validate_plan(trace.plan) == [], trace.trace_id


def test_plan_sizes_match_the_paper():
    tok, skill_sets, models = PieceTokenizer(), load_skill_sets(), load_exec_models()
    rng = random.Random(0)
    for trace in TRACES.values():
        n = tok.count(" " + trace.plan)
        if trace.robot_type == "drone":
            assert 8 <= n <= 30, (trace.trace_id, n)
        else:
            calls = skill_sets["arm"].parse_skills(trace.plan)
            assert 8 <= len(calls) <= 12 and 60 <= n <= 120, (trace.trace_id, len(calls), n)
            mean = statistics.fmean(models["arm"].sample_time(calls, rng) for _ in range(200))
            assert 22 <= mean <= 35, (trace.trace_id, mean)


def small_spec(**kw):
    base = dict(name="T", eps=0.5, max_tpe=4, trace_ids=(1, 6, 9), agents=3, duration_s=60, seed=7)
    return WorkloadSpec(**{**base, **kw})


def test_generator_is_deterministic_per_seed():
    assert generate(small_spec()).tasks == generate(small_spec()).tasks
    assert generate(small_spec()).tasks != generate(small_spec(seed=8)).tasks


def test_events_bring_at_most_max_tpe_tasks_on_distinct_free_agents():
    w = generate(small_spec(agents=2, duration_s=300))
    by_event = {}
    for t in w.tasks:
        by_event.setdefault(t.event, []).append(t)
        assert 0 <= t.arrival < 300 and t.plan == get_trace(t.trace_id).plan
    for tasks in by_event.values():
        assert len(tasks) <= 4 and len({t.agent_id for t in tasks}) == len(tasks)
        assert len({t.arrival for t in tasks}) == 1
    assert w.skipped > 0  # 2 agents per type cannot take every task
    busy_until = {}
    for t in w.tasks:  # an agent never gets a task while still busy with its previous one
        assert busy_until.get(t.agent_id, -1) <= t.arrival
        busy_until[t.agent_id] = t.arrival + w.spec.nominal_exec_s.get(t.robot_type, 10.0) + w.spec.busy_margin_s


def test_event_rate_follows_eps():
    w = generate(small_spec(eps=0.25, agents=1000, duration_s=4000))
    assert w.events / 4000 == pytest.approx(0.25, rel=0.1)


def test_presets_follow_table_3():
    wid1, wid2, wid3 = (load_spec(n) for n in ("WID1", "WID2", "WID3"))
    assert (wid1.eps, wid1.max_tpe, wid1.agents, wid1.duration_s) == (0.25, 8, 25, 260)
    assert (wid2.eps, wid2.max_tpe, wid2.agents, wid2.duration_s) == (0.25, 16, 42, 300)
    assert (wid3.eps, wid3.max_tpe, wid3.agents, wid3.duration_s) == (0.1, 8, 40, 900)
    assert set(wid3.trace_ids) == {9, 10, 11} and set(wid1.trace_ids) == set(range(1, 9))
    with pytest.raises(FileNotFoundError):
        load_spec("WID9")


def test_requests_carry_trace_tuf_and_forced_plan():
    task = generate(small_spec()).tasks[0]
    req = task.to_request()
    assert req.forced_plan == task.plan and req.task_type == str(task.trace_id) and req.arrival == task.arrival
    assert req.tuf.ert == (0.2 if task.urgency == "urgent" else 1.0)


def test_yaml_round_trip(tmp_path):
    w = generate(small_spec())
    back = load_workload(save_workload(w, tmp_path / "w.yaml"))
    assert back.tasks == w.tasks and back.spec == w.spec and back.skipped == w.skipped


def test_mcap_bag_round_trip(tmp_path):
    w = generate(small_spec())
    back = read_bag(write_bag(w, tmp_path / "bag", start_ns=1_700_000_000 * 10**9))
    assert back.tasks == w.tasks and back.spec == w.spec
    assert list((tmp_path / "bag").glob("*.mcap"))
