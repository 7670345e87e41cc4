"""What the project's drone and arm skills do to a simulated scene (evaluation/scene.py), and what their queries answer.

The simulated executor applies ``act`` after a skill's simulated time; evaluation/scene_run.py runs whole plans on it.
Queries return their value (iv a bool; ox oy ow oh od a float; p a str); actions return None. A skill the scene
cannot do raises SkillImpossible (a LookupError), as the robot's skill would fail. Moves take centimetres and turns
degrees, as in the skill sets (config/skills/drone.yaml, arm.yaml).
"""
from __future__ import annotations

from typing import Any, Callable

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.scene import Scene

_cm = 0.01

QUERIES: dict[str, dict[str, Callable[..., Any]]] = {
    "drone": {"iv": Scene.visible, "ox": Scene.image_x, "oy": Scene.image_y, "ow": Scene.width,
              "oh": Scene.height, "od": Scene.distance_cm, "p": Scene.probe},
    "arm": {},
}

ACTIONS: dict[str, dict[str, Callable[..., Any]]] = {
    "drone": {
        "mf": lambda s, cm: s.move(cm * _cm), "mb": lambda s, cm: s.move(-cm * _cm),
        "ml": lambda s, cm: s.move(0.0, cm * _cm), "mr": lambda s, cm: s.move(0.0, -cm * _cm),
        "mu": lambda s, cm: s.move(0.0, 0.0, cm * _cm), "md": lambda s, cm: s.move(0.0, 0.0, -cm * _cm),
        "tc": lambda s, deg: s.turn(-deg), "tu": lambda s, deg: s.turn(deg),
        "g": Scene.goto, "s": Scene.scan, "sa": Scene.scan_abstract, "tp": Scene.take_picture,
    },
    "arm": {
        "sc": Scene.arm_scan, "gt": Scene.arm_goto, "pi": Scene.pick, "tk": Scene.take, "dr": Scene.drop,
        "mv": lambda s, x_cm, y_cm: s.arm_move(x_cm * _cm, y_cm * _cm),
    },
}


def act(scene: Scene, robot_type: str, call: SkillCall) -> Any:
    """Apply one call of a ``robot_type`` skill to the scene: a query's value, None for an action (and for skills
    the scene has no part in: delay, log, re_plan). LookupError: a query about an object not in view;
    SkillImpossible: an action the robot cannot do here."""
    query = QUERIES.get(robot_type, {}).get(call.name)
    if query is not None:
        return query(scene, *call.args)
    action = ACTIONS.get(robot_type, {}).get(call.name)
    if action is not None:
        action(scene, *call.args)
    return None
