"""Scheduling policies: TimelyLLM's PUD priority, latency-guided admission, drop rule; EDF; the registry."""
import dataclasses
import math

import pytest

from timely_llm_ros.core.admission import budget_s, segment_deadline, wcet_s
from timely_llm_ros.core.policies import POLICIES, PRESETS, RENAMED, SchedulingContext, make_policy
from timely_llm_ros.core.request import Generation, PlanRequest, Segment
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES

NORMAL, URGENT = DEFAULT_URGENCY_CLASSES["normal"], DEFAULT_URGENCY_CLASSES["urgent"]


def gen(rid, arrival=0.0, tuf=NORMAL, robot="drone", segments=0, exec_end=None, prefilled=False, prompt=10):
    g = Generation(req=PlanRequest(rid, "a", robot, "task", tuf, arrival), prompt_ids=[0] * prompt)
    for i in range(segments):
        g.segments.append(Segment(i, "mf(1);", [], 0.0, 0.0, 1.0))
    g.expected_exec_end = exec_end
    g.prefilled = prefilled
    return g


def ctx(now, kv_free=math.inf, per_token=1.0):
    return SchedulingContext(now=now, kv_free_bytes=kv_free, kv_bytes_per_token=per_token, step_time_s=None)


def test_every_policy_of_the_paper_is_registered():
    make_policy("timely")
    assert {"timely", "edf", "fcfs", "fcfs-stream", "fcfs-whole-plan"} <= set(POLICIES)


def test_the_ablations_are_presets_of_timely_not_policies():
    assert not set(PRESETS) & set(POLICIES)
    for name, preset in PRESETS.items():
        policy = make_policy(name, options={"segment_estimate": "max"})
        assert type(policy) is POLICIES[preset.policy] and policy.name == name
        assert policy.options.segment_estimate == "max"              # the given options stay
        for option, value in preset.options.items():                 # the preset's are set over them
            assert getattr(policy.options, option) == value
    assert make_policy("timely-nointerrupt", options={"interrupt": True}).interrupt is False


def test_edf_admit_orders_by_segment_deadline_and_fcfs_admit_by_arrival():
    early_due, late_due = gen("a", arrival=0.02, tuf=URGENT), gen("b", arrival=0.0)
    assert segment_deadline(early_due) < segment_deadline(late_due)
    assert make_policy("edf-admit").priority(early_due, 0.05) > make_policy("edf-admit").priority(late_due, 0.05)
    assert make_policy("fcfs-admit").priority(late_due, 0.05) > make_policy("fcfs-admit").priority(early_due, 0.05)


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_a_renamed_policy_is_still_built_by_its_old_name_with_a_deprecation_warning(old, new, caplog):
    with pytest.warns(DeprecationWarning, match=f"'{old}' is now called '{new}'"):
        policy = make_policy(old)
    assert policy.name == new and type(policy) is POLICIES[new]
    assert f"now called '{new}'" in caplog.text


@pytest.mark.parametrize("name", sorted(POLICIES))       # the shipped ones: registered by importing the package
def test_every_policy_refuses_an_option_it_does_not_have_naming_it_and_its_options(name):
    with pytest.raises(ValueError, match=r"no_such_option.*its options: .*interrupt"):
        make_policy(name, options={"no_such_option": 1})


def test_a_misspelt_timely_option_fails_with_its_name():
    with pytest.raises(ValueError, match="step_prefil_s"):
        make_policy("timely", options={"step_prefil_s": 0.05})


def test_timely_options_are_typed_and_frozen():
    listed = {"step_prefill_s": "0.05", "prefill_alone": "true", "crowd_plan": False, "utility_floor": 0.1,
              "drop": "never", "segment_estimate": "max", "late_delay_s": 0.02, "admit_per_step": 2}
    timely = make_policy("timely", options=listed)
    assert timely.options.step_prefill_s == 0.05 and timely.options.prefill_alone is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        timely.options.admit_per_step = 3


def test_shared_options_go_to_the_policies_that_have_them_and_a_name_no_policy_has_fails():
    shared = {"network_delay_s": 0.02, "max_segment_tokens": {"drone": 7}}
    assert make_policy("timely", shared=shared).network_delay_s == 0.02
    assert make_policy("fcfs", shared=shared).name == "fcfs"
    with pytest.raises(ValueError, match="network_delay"):
        make_policy("fcfs", shared={"network_delay": 0.02})


def test_urgent_request_outranks_normal_one_arriving_together():
    timely = make_policy("timely")
    assert timely.priority(gen("u", tuf=URGENT), 0.0) > timely.priority(gen("n"), 0.0)


def test_priority_grows_as_slack_shrinks_while_utility_is_full():
    timely = make_policy("timely")
    g = gen("n")
    assert timely.priority(g, 0.6) > timely.priority(g, 0.1)


def test_suspended_generation_with_long_execution_ahead_yields_to_fresh_request():
    timely = make_policy("timely")
    resumed = gen("r", segments=1, exec_end=10.0)
    assert timely.priority(gen("n", arrival=1.0), 1.0) > timely.priority(resumed, 1.0)


def test_priority_stays_finite_and_positive_when_late_or_hopeless():
    timely = make_policy("timely")
    for now in (0.2, 0.5, 3.0, 100.0):
        p = timely.priority(gen("u", tuf=URGENT), now)
        assert math.isfinite(p) and p > 0
    # a hopeless one ranks below one that can still earn utility
    assert timely.priority(gen("late", arrival=0.0), 5.0) < timely.priority(gen("fresh", arrival=4.9), 5.0)


def test_waiting_later_segment_ages_past_the_utility_floor_instead_of_starving():
    """Issue 7 D7: a robot waiting mid-plan (E = 0) whose TUF_1 has hit the floor must not rank below fresh requests
    for ever. Drone G = 0.09 s, d = 0.008 s, floor 0.05: TUF_1 reaches the floor at 0.475 s of delay."""
    timely = make_policy("timely")
    waiting = gen("r", segments=1, exec_end=0.0)
    floor_rank = 0.05 / (0.09 * 0.09)                   # 6.17: the old, constant rank of a floored later segment
    at_floor = 0.475 - 0.09 - 0.008                     # the moment TUF_1(t + G + d - E) = floor
    assert timely.priority(waiting, at_floor) == pytest.approx(floor_rank)          # continuous at the floor
    tau = 2.0 + 0.09 + 0.008 - 0.475
    assert timely.priority(waiting, 2.0) == pytest.approx(0.05 * (1 + tau / 0.09) / 0.0081)   # 117.5, not 6.17
    # it now outranks a fresh request arriving at once (1 / (G * ERT) = 11.1) and one due now (1 / G^2 = 111.1);
    # the floored constant ranked below both
    assert timely.priority(waiting, 2.0) > timely.priority(gen("fresh", arrival=2.0), 2.0) > floor_rank
    assert timely.priority(waiting, 2.0) > timely.priority(gen("due", arrival=1.1), 2.0)
    # a hopeless first segment does not age (it is dropped by default): it still ranks by the floor
    assert timely.priority(gen("late", arrival=0.0), 5.0) == pytest.approx(0.05 / (0.09 * 0.09))


def test_drop_rule_only_drops_hopeless_first_segments():
    timely = make_policy("timely")
    assert timely.should_drop(gen("ok"), 1.0) is None
    assert "utility" in timely.should_drop(gen("late"), 1.5)
    assert timely.should_drop(gen("mid-plan", segments=1, exec_end=0.0), 50.0) is None
    assert make_policy("timely", options={"drop": "never"}).should_drop(gen("late"), 9.0) is None
    with pytest.raises(ValueError):
        make_policy("timely", options={"drop": "sometimes"})


def test_wcet_uses_remaining_segment_tokens_and_measured_speed():
    g = gen("g", prefilled=True)
    g.output_ids = [5, 5, 5, 5]
    g.step_times.extend([0.3, 0.02, 0.02, 0.04])  # prefill step first, then decode steps
    assert wcet_s(g, 10, token_s=1.0) == pytest.approx(6 * 0.02)
    assert wcet_s(gen("new"), 10, token_s=0.05) == pytest.approx(0.5)


def test_wcet_of_a_block_longer_than_a_segment_is_bounded_by_the_plans_token_cap():
    """A conditional cannot be cut before its '}': once it has outgrown max_segment_tokens (10 here), the tokens
    it may still take are bounded by the generation's cap (60), not by one more token."""
    g = gen("g", prefilled=True)
    g.output_ids = [5] * 12
    g.step_times.extend([0.3, 0.02, 0.02, 0.02])
    g.max_new_tokens = 60
    assert wcet_s(g, 10, token_s=1.0) == pytest.approx(1 * 0.02)      # statements end inside: one token, as before
    g.open_block = True
    assert wcet_s(g, 10, token_s=1.0) == pytest.approx(48 * 0.02)
    g.output_ids = [5] * 4                                              # within the segment length: as before
    assert wcet_s(g, 10, token_s=1.0) == pytest.approx(6 * 0.02)
    g.output_ids, g.max_segment_tokens = [5] * 12, 20     # an expected length of 10, the skill set's bound 20
    assert wcet_s(g, 10, token_s=1.0) == pytest.approx(1 * 0.02)      # not outgrown yet: the estimate stands


def test_admission_holds_back_relaxed_requests_while_an_urgent_one_is_tight():
    timely = make_policy("timely", max_batch=16, options={"admission": "deadline"})
    urgent = gen("u", tuf=URGENT, prefilled=True)
    urgent.output_ids = [5]
    urgent.step_times.extend([0.05])
    normal = gen("n")
    batch = timely.select([normal], [urgent], ctx(0.05))
    assert [g.req_id for g in batch] == ["u"]  # WCET 9 x 22 ms > 0.15 s slack
    # deadline rule: an equally urgent newcomer waits too, its prefill would push u past its deadline
    batch = timely.select([normal, gen("u2", tuf=URGENT)], [urgent], ctx(0.05))
    assert [g.req_id for g in batch] == ["u"]
    # utility rule with the worst-case segment: u2 joins, since u loses less than u2 would lose by waiting for
    # u's segment; n (1 s of slack) waits (admission alone: the ablation without prefill-only steps)
    utility = make_policy("timely-mixed-steps", max_batch=16, options={"segment_estimate": "max"})
    assert [g.req_id for g in utility.select([normal, gen("u2", tuf=URGENT)], [urgent], ctx(0.05))] == ["u", "u2"]
    # timely then prefills u2 alone: both are ready past their 0.2 s ERT, u2 gains the 22 ms decode pass and u
    # loses t_dec(2) - t_dec(1) = 1.5 ms
    utility = make_policy("timely", max_batch=16, options={"segment_estimate": "max"})
    assert [g.req_id for g in utility.select([normal, gen("u2", tuf=URGENT)], [urgent], ctx(0.05))] == ["u2"]
    # utility rule (default, expected segment of 5 tokens): u is ready at about 0.05 + 4 x 24 ms + 8 ms < its
    # 0.2 s ERT with both newcomers, so nobody loses anything and n joins too
    utility = make_policy("timely", max_batch=16)
    assert [g.req_id for g in utility.select([normal, gen("u2", tuf=URGENT)], [urgent], ctx(0.05))] == \
        ["u", "u2", "n"]
    # the old rule let it in as "pressing" (the crowd that turned into one long step)
    assert make_policy("timely", options={"prefill_aware": False}).select(
        [gen("u2", tuf=URGENT)], [urgent], ctx(0.05))[-1].req_id == "u2"


def test_fixed_cap_without_adaptive_admission():
    waiting = [gen(f"n{i}") for i in range(5)] + [gen("u", tuf=URGENT)]
    fixed = make_policy("timely", max_batch=3, options={"adaptive": False})
    batch = fixed.select(waiting, [], ctx(0.0))
    assert len(batch) == 3 and batch[0].req_id == "u"


def test_a_step_carries_at_most_step_prefill_s_of_prefill_work_even_for_a_pressing_crowd():
    """Prompts of 284 tokens at 1.6e-4 s/token = 45 ms each: two fit the 0.1 s of prefill work a step may carry
    (the fixed cap, crowd_plan off; the crowd plan is tested below)."""
    timely = make_policy("timely", max_batch=16, options={"crowd_plan": False})
    running = [gen("r", prefilled=True)]
    later = [gen(f"n{i}", arrival=0.5, prompt=284) for i in range(4)]
    assert len(timely.select(later, running, ctx(0.5))) == 1 + 2
    unlimited = make_policy("timely", max_batch=16, options={"step_prefill_s": 10.0})
    assert len(unlimited.select(later, running, ctx(0.5))) == 1 + 4
    counted = make_policy("timely", max_batch=16, options={"admit_per_step": 1})
    assert len(counted.select(later, running, ctx(0.5))) == 1 + 1
    # a crowd sharing one deadline gets no exemption: relaxed ones (ERT 1 s) fill the step's prefill work ...
    relaxed = [gen(f"r{i}", prompt=284) for i in range(6)]
    assert len(timely.select(relaxed, [], ctx(0.0))) == 2
    # ... urgent ones (ERT 0.2 s) go one at a time under the deadline rule: a second prefill would push the first
    # past its deadline (2 x 45 ms + 10 decode steps of 23.5 ms = 0.33 s > 0.2 s)
    same = [gen(f"s{i}", tuf=URGENT, prompt=284) for i in range(6)]
    deadline = make_policy("timely", max_batch=16, options={"admission": "deadline"})
    assert len(deadline.select(same, [], ctx(0.0))) == 1
    # the utility rule weighs it, but the step's prefill cap still holds the crowd to two
    assert len(timely.select(same, [], ctx(0.0))) == 2
    # the paper's decode-only rule with its "pressing" exemption admitted the whole crowd into one step
    old = make_policy("timely", max_batch=16, options={"prefill_aware": False, "admit_per_step": 0,
                                                        "step_prefill_s": 10.0})
    assert len(old.select(same, [], ctx(0.0))) == 6


def test_kv_budget_limits_admission():
    timely = make_policy("timely", max_batch=16, options={"admit_per_step": 0})
    running = [gen("r", prefilled=True)]
    batch = timely.select([gen("big", prompt=100)], running, ctx(0.0, kv_free=50.0, per_token=1.0))
    assert [g.req_id for g in batch] == ["r"]


def test_edf_orders_by_segment_deadline():
    edf = make_policy("edf")
    normal, urgent = gen("n", arrival=0.0), gen("u", arrival=0.5, tuf=URGENT)
    resumed = gen("r", segments=1, exec_end=0.6)
    order = sorted([normal, urgent, resumed], key=lambda g: edf.priority(g, 0.5), reverse=True)
    assert [g.req_id for g in order] == ["r", "u", "n"]
    assert segment_deadline(urgent) == pytest.approx(0.7)


def test_admission_budget_falls_back_to_time_until_zero_utility():
    g = gen("u", tuf=URGENT)
    assert budget_s(g, 0.1) == pytest.approx(0.1)
    assert budget_s(g, 0.3) == pytest.approx(0.2, abs=1e-3)


def test_timely_takes_segment_sizes_from_skill_sets():
    from timely_llm_ros.core.policies.timely import options_from_skill_sets
    from timely_llm_ros.core.skills import load_skill_sets

    skill_sets = load_skill_sets()
    worst = make_policy("timely", options={**options_from_skill_sets(skill_sets), "segment_estimate": "max"})
    assert worst.segment_tokens(gen("a", robot="arm")) == skill_sets["arm"].max_segment_tokens
    assert worst.segment_tokens(gen("d", robot="drone")) == skill_sets["drone"].max_segment_tokens
    worst.observe_segment_tokens("drone", 4)
    worst.observe_segment_tokens("drone", 7)
    assert worst.segment_tokens(gen("d", robot="drone")) == 7          # longest seen


def test_utility_admission_assumes_the_expected_segment_length():
    """Default (utility test): before any segment is seen, G / t_1 tokens (the profiled mean segment time over
    the batch-1 token time: drone 0.09 / 0.022 -> 5, arm 0.16 / 0.022 -> 8), then the mean of the last 32
    seen, never above the skill set's maximum; the deadline test keeps the worst case."""
    timely = make_policy("timely")
    assert timely.segment_tokens(gen("d", robot="drone")) == 5
    assert timely.segment_tokens(gen("a", robot="arm")) == 8
    for n in (4, 7, 4):
        timely.observe_segment_tokens("drone", n)
    assert timely.segment_tokens(gen("d", robot="drone")) == 5          # ceil(15 / 3)
    timely.observe_segment_tokens("arm", 400)
    assert timely.segment_tokens(gen("a", robot="arm")) == 20           # capped at the maximum
    assert make_policy("timely", options={"admission": "deadline"}).segment_tokens(gen("d")) == 10


def test_expected_segment_length_protects_a_late_urgent_first_segment_from_a_slack_newcomer():
    """An urgent first segment 0.3 s old has 1 token: with the worst case (10 tokens) it would be ready at
    0.3 + 9 x 22 ms + 8 ms = 0.506 s, past the point where TUF_0 reaches 0, so the old rule saw nothing to lose
    and let a normal newcomer (1 s of slack) share its steps; with the expected 5 tokens it is ready at 0.396 s
    (TUF_0 0.69), the newcomer's prefill would cost it utility while the newcomer loses nothing by waiting,
    so the newcomer waits."""
    def running_urgent():
        u = gen("u", tuf=URGENT, prefilled=True)
        u.output_ids = [5]
        return u

    new = make_policy("timely", max_batch=16)
    old = make_policy("timely", max_batch=16, options={"segment_estimate": "max"})
    assert [g.req_id for g in old.select([gen("n", arrival=0.3)], [running_urgent()], ctx(0.3))] == ["u", "n"]
    assert [g.req_id for g in new.select([gen("n", arrival=0.3)], [running_urgent()], ctx(0.3))] == ["u"]


# ---- Eq. 4 pinned: exact values, both floors, and a case where PUD and EDF disagree ----------------------------

def test_eq4_exact_values_including_both_floors():
    """Pri = U / (G * max(L, G)), U = max(TUF, 0.05 beta); drone G = 0.09 s, network d = 0.008 s."""
    timely = make_policy("timely")
    u = gen("u", tuf=URGENT)
    # t = 0: TUF_0(0.098) is capped at beta = 2, L = 0.2 s
    assert timely.priority(u, 0.0) == pytest.approx(2.0 / (0.09 * 0.2))
    # t = 0.15: TUF_0(0.248) = 2 - 6.67 * 0.048 on the slope; L = 0.05 s < G, floored at G
    assert timely.priority(u, 0.15) == pytest.approx((2.0 - 6.67 * 0.048) / (0.09 * 0.09))
    # t = 0.5: TUF_0(0.598) < 0, floored at 0.05 * beta = 0.1; L < 0 floored at G
    assert timely.priority(u, 0.5) == pytest.approx(0.1 / (0.09 * 0.09))
    # a later segment: TUF_1 of the wait past E = 1.0 (ERT 0); at t = 0.95 the wait is 0.048 s
    n = gen("n", segments=1, exec_end=1.0)
    assert timely.priority(n, 0.95) == pytest.approx((1.0 - 2.0 * 0.048) / (0.09 * 0.09))
    assert timely.priority(n, 0.5) == pytest.approx(1.0 / (0.09 * 0.5))   # before E: beta, L = E - t


def test_pud_and_edf_disagree_and_timely_follows_pud():
    """A normal request due at 1.0 s vs an urgent one due at 1.05 s: EDF runs the normal one (earlier deadline);
    PUD weighs the urgent one's double utility: 2 / (0.09 * 0.2) = 111 > 1 / (0.09 * 0.15) = 74."""
    now = 0.85
    normal, urgent = gen("n", arrival=0.0), gen("u", arrival=0.85, tuf=URGENT)
    timely = make_policy("timely", max_batch=1)
    edf = make_policy("edf", max_batch=1)
    assert timely.priority(urgent, now) == pytest.approx(2.0 / (0.09 * 0.2))
    assert timely.priority(normal, now) == pytest.approx(1.0 / (0.09 * 0.15))
    assert [g.req_id for g in edf.select([normal, urgent], [], ctx(now))] == ["n"]
    assert [g.req_id for g in timely.select([normal, urgent], [], ctx(now))] == ["u"]


def test_a_step_carries_at_most_step_prefill_s_of_kv_reloads():
    """A KV reload is as unpreemptible as a prefill: two generations coming back from host memory (60 ms of reload
    each) do not both join one step when step_prefill_s is 0.1 s; the first one always may (work 0 so far).
    Without the rule (step_reloads False) both join and the step carries 120 ms of reloads."""
    def back(rid):
        g = gen(rid, prefilled=True, segments=1, exec_end=10.0)
        g.reload_s = 0.06
        return g

    new = make_policy("timely", max_batch=16)
    old = make_policy("timely", max_batch=16, options={"step_reloads": False})
    assert [g.req_id for g in new.select([back("a"), back("b")], [gen("r", prefilled=True)], ctx(0.0))] == ["r", "a"]
    assert [g.req_id for g in old.select([back("a"), back("b")], [gen("r", prefilled=True)], ctx(0.0))] == \
        ["r", "a", "b"]


def test_crowd_plan_lets_a_crowd_share_one_longer_step_when_that_earns_more_than_splitting_it():
    """Urgent prompts of 284 new tokens (31 ms each at 1.09e-4 s/token, 14 ms per prefilling step), 5-token first
    segments (the step completing a prompt yields its first token, 4 decode steps of 22 ms (1 + 0.07 (k - 1))
    follow). Waves run one after another; response = wave end + 8 ms; TUF_0 2 - 6.67 (t - 0.2).
    Four at once: 3 then 1 (3 x 1.90 + 1.01 = 6.71) beats 4 together (4 x 1.65 = 6.61): both rules split.
    Five: 4 + 1 (6.61 + 0.76 = 7.37) beats the 0.1 s cap's 3 + 2 (5.70 + 2 x 0.76 = 7.23); six: 4 + 2 (7.64)
    beats 3 + 3 (7.25). The fixed cap stops at three prompts (3 x 31 ms fit in 0.1 s, four do not)."""
    opts = {"prefill_token_s": 1.0884e-4, "prefill_step_s": 0.0141}
    fixed = make_policy("timely", max_batch=16, options={**opts, "crowd_plan": False})
    crowd = make_policy("timely", max_batch=16, options=opts)
    mixed = make_policy("timely-mixed-steps", max_batch=16, options=opts)
    for p in (fixed, crowd, mixed):
        for _ in range(4):
            p.observe_segment_tokens("drone", 5, first=True, urgency="urgent")
    sizes = {}
    for name, p in (("fixed", fixed), ("crowd", crowd)):
        for n in (3, 4, 5, 6):
            same = [gen(f"s{i}", tuf=URGENT, prompt=284) for i in range(n)]
            for g in same:
                g.req.urgency = "urgent"
            sizes[name, n] = len(p.select(same, [], ctx(0.0)))
    assert [sizes["fixed", n] for n in (3, 4, 5, 6)] == [3, 3, 3, 3]
    assert [sizes["crowd", n] for n in (3, 4, 5, 6)] == [3, 3, 4, 4]
    # the first wave shares its step with the members admitted before it, and their predicted utility counts:
    # a running urgent segment (5 decode steps left, due at 0.15 s) is ready at 0.24 s (1.35) next to three
    # prompts, at 0.28 s (1.09) next to four, so five at once now get 3 (+ 2), not 4 (+ 1)
    # (timely then prefills the three alone, r decoding in the next step; the plan is the same without that rule)
    running = gen("r", tuf=URGENT, prefilled=True, arrival=-0.05)
    five = [gen(f"t{i}", tuf=URGENT, prompt=284) for i in range(5)]
    for g in [running, *five]:
        g.req.urgency = "urgent"
    batch = mixed.select(five, [running], ctx(0.0))
    assert batch[0] is running and len(batch) == 1 + 3
    assert [g.req_id for g in crowd.select(five, [running], ctx(0.0))] == ["t0", "t1", "t2"]


def test_a_prefill_step_leaves_its_decode_pass_out_when_the_new_members_gain_more_than_the_others_lose():
    """The crowd test's cost model: p = 1.0884e-4 s/token, c = 14.1 ms, t_dec(n) = 22 ms (1 + 0.07 (n - 1)).
    Three urgent 284-token prompts (5-token first segments) arrive while three normal robots' later segments
    decode (their robots finish the previous segment at 0.05 s: they outrank the prompts, and lose nothing to
    them, their TUF_1 being flat for 1 s). With the decode pass in the prefill step, that step takes
    106.8 + 25.1 ms and 4 decode steps of 29.7 ms follow: the prompts' segments are ready at 0.251 s (response
    0.259 s, TUF_0 1.61 each, 4.83). Ending the step after the prefills: ready at 0.226 s (1.78 each, 5.33);
    the later segments' tokens come t_dec(6) - t_dec(3) = 4.6 ms later, still inside their flat part. The step
    prefills alone; the decoding three are suspended for it (timely; its ablation timely-mixed-steps, with
    prefill_alone off, keeps the mixed step)."""
    p = _urgent_crowd_policy()
    three = [_urgent(f"u{i}", 0.0) for i in range(3)]
    decoding = [gen(f"n{i}", arrival=-2.0, prefilled=True, segments=1, exec_end=0.05) for i in range(3)]
    assert sorted(g.req_id for g in p.select(three, decoding, ctx(0.0))) == ["u0", "u1", "u2"]
    mixed = _urgent_crowd_policy("timely-mixed-steps")
    assert len(mixed.select([_urgent(f"u{i}", 0.0) for i in range(3)], decoding, ctx(0.0))) == 6
    # vLLM runs a step's prefills and decodes in one forward: nothing to gain, the batch stays whole
    fused = SchedulingContext(now=0.0, kv_free_bytes=math.inf, kv_bytes_per_token=1.0, step_time_s=None,
                              fused_steps=True)
    assert len(_urgent_crowd_policy().select([_urgent(f"u{i}", 0.0) for i in range(3)], decoding, fused)) == 6


def test_a_prefill_step_keeps_its_decode_pass_when_the_others_would_lose_and_the_new_member_gains_nothing():
    """The rule weighs both sides (it is not "always prefill alone"). A fresh urgent prompt (ready at 0.177 s
    with the pass, 0.152 s without: inside its 0.2 s ERT either way, nothing to gain) and three urgent segments
    0.15 s old with 4 tokens to go: with the pass they are ready at 0.045 + 0.025 + 3 x 26.6 ms = 0.150 s
    (response 0.308 s, past ERT); alone at 0.045 + 4 x 26.6 ms = 0.151 s, 1.5 ms later, which costs each 0.010:
    the step keeps its decode pass. A prompt already 50 ms old gains 0.17 (response 0.235 -> 0.210 s)."""
    p = _urgent_crowd_policy()
    for _ in range(4):
        p.observe_segment_tokens("drone", 5)
    newcomer = _urgent("new", 0.0)
    late = []
    for i in range(3):
        g = _urgent(f"d{i}", -0.15)
        g.prefilled, g.output_ids = True, [1]
        late.append(g)
    batch = [*late, newcomer]
    assert p._prefills_alone_if_better(batch, 0.0, p.step_cost(ctx(0.0))) == batch
    # the same batch with a prompt that does gain prefills alone
    older = _urgent("old", -0.05)
    assert p._prefills_alone_if_better([*late, older], 0.0, p.step_cost(ctx(0.0))) == [older]


def _urgent_crowd_policy(name="timely", **options):
    """timely with the crowd test's cost model (284-token prompts, 5-token urgent first segments)."""
    p = make_policy(name, max_batch=16,
                    options={"prefill_token_s": 1.0884e-4, "prefill_step_s": 0.0141, **options})
    for _ in range(4):
        p.observe_segment_tokens("drone", 5, first=True, urgency="urgent")
    return p


def _urgent(rid, arrival):
    g = gen(rid, arrival=arrival, tuf=URGENT, prompt=284)
    g.req.urgency = "urgent"
    return g


def test_served_crowd_objective_serves_a_member_the_utility_plan_drops():
    """Burst seed 2's case: three urgent prompts 225, 223 and 215 ms old. Two at once (76 ms prefill + 4 decode
    steps of 23.5 ms): b, c ready 0.178 s later, responses 0.401 / 0.393 s -> 0.66 + 0.71 = 1.37, and a, alone after
    them, would respond past 0.5 s (utility 0: dropped). Three at once (107 + 4 x 25 ms): 0.40 + 0.41 + 0.47 = 1.28.
    Summed utility splits; "served" (first the number served with positive utility) takes all three."""
    crowd = lambda: [_urgent("a", -0.225), _urgent("b", -0.223), _urgent("c", -0.215)]
    assert [g.req_id for g in _urgent_crowd_policy().select(crowd(), [], ctx(0.0))] == ["c", "b"]
    served = _urgent_crowd_policy(crowd_objective="served")
    assert [g.req_id for g in served.select(crowd(), [], ctx(0.0))] == ["c", "b", "a"]


def test_crowd_promise_keeps_a_deferred_member_ahead_of_later_arrivals():
    """Four urgent at once are served 3 + 1 (see above): s3 is deferred to the next wave. When that wave starts
    (0.21 s), three newer arrivals (0.1 s) rank above s3 (more utility left): without the promise the plan serves
    them and s3 is dropped; with crowd_promise s3 keeps its place in the wave."""
    for promise, expected in ((False, ["n0", "n1", "n2"]), (True, ["n0", "n1", "s3"])):
        p = _urgent_crowd_policy(crowd_promise=promise)
        four = [_urgent(f"s{i}", 0.0) for i in range(4)]
        first = p.select(four, [], ctx(0.0))
        assert [g.req_id for g in first] == ["s0", "s1", "s2"]
        later = [g for g in four if g not in first] + [_urgent(f"n{i}", 0.1) for i in range(3)]
        assert [g.req_id for g in p.select(later, [], ctx(0.21))] == expected


def test_an_urgent_first_segment_is_ranked_with_the_g_the_drop_rule_keeps_it_alive_with():
    """Online G follows the segments measured under load (0.47 s a drone segment sharing batches of 4); the fit
    measured 0.13 s alone. Ranked with the loaded G an urgent goal looked unable to make its 0.2 s ERT at arrival,
    fell to the utility floor behind plans mid-segment, and was dropped 0.4 s later by the drop rule, which had
    kept it alive with the fitted G (make demo). Eq. 4 and the drop rule now use the same G for a first segment."""
    timely = make_policy("timely", options={"segment_gen_time_s": {"drone": 0.13}, "online_gen_time": True})
    for _ in range(20):
        timely.observe_segment("drone", 0.47)
    assert timely.segment_time("drone") > 0.4
    now = 10.0
    urgent = gen("u", arrival=now, tuf=URGENT)
    mid_plan = [gen(f"n{i}", arrival=0.0, segments=1 + i, exec_end=now + 0.3 + 0.1 * i, prefilled=True)
                for i in range(3)]
    ranked = sorted([*mid_plan, urgent], key=lambda g: -timely.priority(g, now))
    assert ranked[0] is urgent
    assert timely.should_drop(urgent, now + 0.1) is None
    assert timely.should_drop(urgent, now + 0.45) is not None     # hopeless by then, with either G
