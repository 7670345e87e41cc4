"""What robots are and can do, a team's skills_dir, and the server's health levels (ROS-free)."""
import pytest

from timely_llm_ros.core.capabilities import RobotStatus, check_robot_type, missing_skills, unknown_skill_error
from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.health import ERROR, OK, WARN, HealthLimits, OutcomeWindow, assess
from timely_llm_ros.core.request import RequestState, SkillCall
from timely_llm_ros.core.robot_types import check_profiles, load_robot_types

ROVER = """name: rover
exec_profile: rover
max_segment_tokens: 10
skills:
  - {short: fw, long: forward, args: [int], kind: action}
  - {short: bump, long: bumper_pressed, args: [], kind: query, returns: bool}
"""
ROVER_PROFILE = "profile: rover\nskills:\n  fw: {model: poly, coeffs: [0.5, 0.01]}\n  bump: {model: fixed, value: 0.001}\n"


def _skills_dir(root, skills: dict[str, str], profiles: dict[str, str]):
    for folder, files in (("skills", skills), ("exec_time", profiles)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / f"{name}.yaml").write_text(text)
    return root


def test_skills_dir_adds_a_teams_robot_type_to_the_packages(tmp_path):
    types = load_robot_types(_skills_dir(tmp_path, {"rover": ROVER}, {"rover": ROVER_PROFILE}))
    assert {"drone", "arm", "rover"} <= set(types.skill_sets)
    assert types.exec_models["rover"].min_time([SkillCall("fw", (100,))]) == pytest.approx(1.5)
    assert types.replaced == []
    check_profiles(types)


def test_a_skills_dir_file_of_a_package_name_replaces_the_packages_and_says_so(tmp_path):
    small_drone = ROVER.replace("name: rover", "name: drone")    # its profile stays the team's rover profile
    types = load_robot_types(_skills_dir(tmp_path, {"drone": small_drone}, {"rover": ROVER_PROFILE}))
    assert set(types.skill_sets["drone"].skills) == {"fw", "bump"}
    assert types.replaced == ["skill set drone"]


def test_a_skill_without_a_profile_entry_is_named_at_load(tmp_path):
    profile = "profile: rover\nskills:\n  fw: {model: fixed, value: 1.0}\n"   # no entry for bump
    with pytest.raises(ValueError, match=r"skill set 'rover': skill\(s\) bump have no entry in execution-time "
                                         r"profile 'rover'; add them to exec_time/rover.yaml"):
        check_profiles(load_robot_types(_skills_dir(tmp_path, {"rover": ROVER}, {"rover": profile})))
    with pytest.raises(ValueError, match="names execution-time profile 'rover', which does not exist"):
        check_profiles(load_robot_types(_skills_dir(tmp_path / "no_profile", {"rover": ROVER}, {})))


def test_a_skills_dir_without_either_folder_says_what_it_must_hold(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"holds neither skills/ nor exec_time/"):
        load_robot_types(tmp_path)


def test_a_goal_for_another_robot_type_than_its_executors_is_refused_naming_both():
    drone = RobotStatus("drone", frozenset({"mf", "tp"}), interprets=True)
    check_robot_type("drone_1", "drone", drone)
    check_robot_type("drone_1", "arm", None)                                # no status: nothing to check
    with pytest.raises(RequestError) as err:
        check_robot_type("drone_1", "arm", drone)
    assert err.value.code == ErrorCode.WRONG_ROBOT_TYPE
    assert "'drone'" in err.value.message and "'arm'" in err.value.message and "drone_1" in err.value.message


@pytest.mark.parametrize("robot_type", ["", "drone"])
def test_a_goal_for_an_executor_that_does_not_interpret_is_refused_saying_how_to_start_it(robot_type):
    """An executor that runs the skill lists it is sent (no plan language) would run every conditional's body."""
    with pytest.raises(RequestError) as err:
        check_robot_type("drone_1", "drone", RobotStatus(robot_type, frozenset({"mf"}), interprets=False))
    assert err.value.code == ErrorCode.WRONG_ROBOT_TYPE
    assert "does not interpret" in err.value.message and "-p robot_type:=drone" in err.value.message


def test_the_skills_a_segment_calls_that_the_executor_lacks_are_named_in_order():
    status = RobotStatus("drone", frozenset({"mf", "tp"}), interprets=True)
    calls = [SkillCall("g", ("cat",)), SkillCall("tp"), SkillCall("s", ("cat",)), SkillCall("g", ("dog",))]
    assert missing_skills(calls, status) == ["g", "s"]
    assert missing_skills(calls, None) == []
    err = unknown_skill_error("drone_1", 2, ["g", "s"], status)
    assert err.code == ErrorCode.UNKNOWN_SKILL and "'g', 's'" in err.message and "segment 2" in err.message


LIMITS = HealthLimits(window_s=60.0, warn_drop_rate=0.2, warn_failure_rate=0.2, starvation_drops=3)


def test_a_class_dropped_repeatedly_starts_one_starvation_episode_and_ends_it_when_the_drops_age_out():
    w = OutcomeWindow(LIMITS)
    for t in range(2):
        w.add(float(t), "normal", RequestState.DROPPED)
    assert w.episodes(2.0) == ([], [])                    # two drops: below the threshold
    w.add(3.0, "normal", RequestState.DROPPED)
    w.add(3.0, "urgent", RequestState.DONE)
    assert w.episodes(3.0) == (["normal"], [])
    w.add(4.0, "normal", RequestState.DROPPED)
    assert w.episodes(4.0) == ([], [])                    # still the same episode: said once
    assert w.starving(w.counts(4.0)) == ["normal"]
    assert w.episodes(70.0) == ([], ["normal"])           # the drops left the window


def test_a_class_mostly_served_is_not_starving_even_with_a_few_drops():
    w = OutcomeWindow(LIMITS)
    for t in range(3):
        w.add(float(t), "normal", RequestState.DROPPED)
    for t in range(4):
        w.add(float(t), "normal", RequestState.DONE)
    assert w.starving(w.counts(5.0)) == []


def test_health_levels_error_for_no_engine_or_a_missing_robot_warn_on_rates_and_starvation_ok_otherwise():
    w = OutcomeWindow(LIMITS)
    for t in range(8):
        w.add(float(t), "normal", RequestState.DONE)
    counts = w.counts(10.0)
    assert assess(True, [], counts, [], LIMITS).level == OK
    assert assess(False, [], counts, [], LIMITS, "configure failed: x").message.startswith("configure failed: x")
    missing = assess(True, ["drone_2"], counts, [], LIMITS)
    assert missing.level == ERROR and "drone_2" in missing.message
    for t in range(3):
        w.add(10.0 + t, "urgent", RequestState.FAILED)
    failing = assess(True, [], w.counts(13.0), [], LIMITS)
    assert failing.level == WARN and "3 of 11 requests failed" in failing.message
    for t in range(3):
        w.add(14.0 + t, "urgent", RequestState.DROPPED)
    counts = w.counts(17.0)
    starving = assess(True, [], counts, w.starving(counts), LIMITS)
    assert starving.level == WARN and "class 'urgent' is starving" in starving.message
    w.add(18.0, "normal", RequestState.CANCELLED)         # the client's choice: not counted
    assert sum(c.ended for c in w.counts(18.0).values()) == 14
