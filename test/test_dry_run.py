"""The tools that show what a model writes (tools/robot_plans.py, tools/plan_branches.py) make each request as the
server does (core/dry_run.py ``dry_request``): validated, grounded in its scene, under the grammar the model entry
asks for, and refused with the server's code where the server would refuse it."""
from __future__ import annotations

import pytest

from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.skills import load_skill_sets
from tools.robot_plans import task_request

SETS = load_skill_sets()


def test_a_tool_request_is_grounded_in_its_scene_as_the_servers_is():
    req = task_request("arm", {"scene": "table: red cube, blue bowl; places: drawer",
                               "task": "put the wrench in the blue bowl"}, SETS, grammar=True)
    assert req.constrained and req.scene_objects == ("red cube", "blue bowl", "drawer")
    assert "wrench" in req.objects and req.fixed_places == ("drawer",)
    free = task_request("arm", {"task": "put the wrench in the blue bowl"}, SETS, grammar=False)
    assert not free.constrained and free.objects == ()       # no scene listed: object slots stay free


def test_a_tool_request_the_server_would_refuse_says_why():
    with pytest.raises(RequestError) as err:
        task_request("arm", {"scene": "table: cup", "task": "   "}, SETS, grammar=True)
    assert err.value.code == ErrorCode.INVALID_TASK
    with pytest.raises(RequestError) as err:
        task_request("forklift", {"task": "lift the pallet"}, SETS, grammar=True)
    assert err.value.code == ErrorCode.UNKNOWN_ROBOT_TYPE
