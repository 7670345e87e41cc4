"""Execution-time model: numbers against the TimelyLLM formulas, sampling ranges, errors, urgency classes."""
import math
import random

import pytest

from timely_llm_ros.core.exec_time import ExecTimeModel, load_exec_models
from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES
from timely_llm_ros.core.urgency import load_urgency_classes


@pytest.fixture(scope="module")
def models():
    return load_exec_models()


def call(name, *args):
    return SkillCall(name, args)


def test_every_shipped_skill_has_a_time_model(models):
    for skill_set in load_skill_sets().values():
        model = models[skill_set.exec_profile]
        assert [s for s in skill_set.skills if not model.knows(s)] == []


@pytest.mark.parametrize("skill, v, expected", [
    ("mf", 50, 0.0072 * 50 + 1.8144),
    ("ml", 120, 0.0072 * 120 + 1.8144),
    ("mu", 30, 8e-7 * 30 ** 3 - 0.0003 * 30 ** 2 + 0.0388 * 30 + 1.3195),
    ("md", 200, 8e-7 * 200 ** 3 - 0.0003 * 200 ** 2 + 0.0388 * 200 + 1.3195),
    ("tc", 90, 0.0165 * 90 + 0.784),
    ("tu", 45.5, 0.0165 * 45.5 + 0.784),
    ("d", 3, 3.0),
])
def test_regression_skills_follow_the_formulas(models, skill, v, expected):
    drone = models["drone"]
    assert drone.skill_min(call(skill, v)) == pytest.approx(expected)
    assert drone.sample_time([call(skill, v)], random.Random(1)) == pytest.approx(expected)


@pytest.mark.parametrize("skill, expected", [
    ("iv", 0.001), ("od", 0.001), ("l", 0.001), ("tp", 0.001), ("rp", 0.001), ("p", 0.041), ("g", 2.5),
    ("s", 1.5275), ("sa", 1.5675)])
def test_fixed_and_scan_minimums(models, skill, expected):
    args = () if skill in ("tp", "rp") else ("cat",)
    assert models["drone"].skill_min(SkillCall(skill, args)) == pytest.approx(expected)


def test_scan_samples_whole_steps_up_to_eight(models):
    rng = random.Random(7)
    steps = {round(models["drone"].sample_time([call("s", "cat")], rng) / 1.5275, 9) for _ in range(400)}
    assert steps == set(range(1, 9))


@pytest.mark.parametrize("skill, low, high", [
    ("gt", 0.8, 5.5), ("pi", 3.0, 4.2), ("dr", 3.0, 4.2), ("sc", 1.0, 3.0), ("mv", 1.0, 3.0), ("tk", 3.0, 4.2)])
def test_arm_skills_are_uniform_with_minimum_low(models, skill, low, high):
    arm = models["arm"]
    args = (1, 2) if skill == "mv" else () if skill == "dr" else ("cup",)
    assert arm.skill_min(SkillCall(skill, args)) == low
    rng = random.Random(3)
    samples = [arm.sample_time([SkillCall(skill, args)], rng) for _ in range(500)]
    assert low <= min(samples) < low + 0.1 * (high - low)
    assert high - 0.1 * (high - low) < max(samples) <= high


def test_chat_reads_at_300_words_per_minute(models):
    text = " ".join(["word"] * 25)
    assert models["chat"].min_time([call("say", text)]) == pytest.approx(25 * 60 / 300)


def test_segment_time_sums_skills_and_counts_loop_repetitions(models):
    drone = load_skill_sets()["drone"]
    skills = drone.parse_skills("3{mf(20);tc(45);} ?iv('cat')==True{g('cat');};")
    expected = 3 * (0.0072 * 20 + 1.8144 + 0.0165 * 45 + 0.784) + 0.001 + 2.5
    assert models["drone"].min_time(skills) == pytest.approx(expected)


def test_min_time_never_exceeds_a_sample(models):
    rng = random.Random(11)
    plan = load_skill_sets()["arm"].parse_skills("sc('a'); gt('a'); pi('a'); mv(1, 2); dr(); tk('b');")
    assert all(models["arm"].sample_time(plan, rng) >= models["arm"].min_time(plan) for _ in range(100))


@pytest.mark.parametrize("bad", [-50, float("nan"), float("-inf"), "_1", None])
def test_bad_or_symbolic_arguments_clamp_to_the_minimum(models, bad):
    drone = models["drone"]
    assert drone.skill_min(call("mf", bad)) == pytest.approx(1.8144)
    assert drone.skill_min(call("d", bad)) == 0.0
    assert not math.isnan(drone.sample_time([call("tc", bad)], random.Random(0)))


def test_unknown_skill_names_skill_and_profile(models):
    with pytest.raises(KeyError, match=r"'fly'.*'drone'"):
        models["drone"].min_time([call("fly", 1)])
    assert not models["drone"].knows("fly") and models["drone"].knows("mf")


def test_load_single_profile_and_missing_profile(tmp_path):
    assert ExecTimeModel.load("arm").profile == "arm"
    with pytest.raises(FileNotFoundError, match="rover"):
        ExecTimeModel.load("rover")
    (tmp_path / "rover.yaml").write_text("profile: rover\nskills:\n  fw: {model: warp}\n")
    with pytest.raises(ValueError, match="fw"):
        ExecTimeModel.load("rover", tmp_path)


def test_urgency_classes_match_the_paper_presets(tmp_path):
    def tuf(c):
        return c.ert, c.alpha, c.beta
    assert {n: tuf(c) for n, c in load_urgency_classes().items()} == \
        {n: tuf(c) for n, c in DEFAULT_URGENCY_CLASSES.items()}
    (tmp_path / "u.yaml").write_text("critical: {ert: 0.1, alpha: -10, beta: 3}\n")
    critical = load_urgency_classes(tmp_path / "u.yaml")["critical"]
    assert critical.zero_crossing() == pytest.approx(0.4) and not critical.serves_late   # late defaults to drop
    (tmp_path / "bad.yaml").write_text("critical: {ert: 0.1}\n")
    with pytest.raises(ValueError, match="alpha"):
        load_urgency_classes(tmp_path / "bad.yaml")


def test_a_class_says_whether_late_requests_are_served_and_a_wrong_choice_names_the_file(tmp_path):
    (tmp_path / "u.yaml").write_text("chores: {ert: 5, alpha: -0.1, beta: 1, late: serve}\n")
    assert load_urgency_classes(tmp_path / "u.yaml")["chores"].serves_late
    (tmp_path / "bad.yaml").write_text("chores: {ert: 5, alpha: -0.1, beta: 1, late: maybe}\n")
    with pytest.raises(ValueError, match=r"bad\.yaml.*late must be one of drop, serve"):
        load_urgency_classes(tmp_path / "bad.yaml")
