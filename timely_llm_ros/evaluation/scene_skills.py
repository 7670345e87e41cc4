"""What the project's drone and arm skills do to a simulated scene (evaluation/scene.py), and what their queries answer.

The simulated executor applies ``act`` after a skill's simulated time; ``tools/plan_branches.py`` runs plans on it
directly. Queries return their value (iv a bool; ox oy ow oh od a float; p a str); actions return None.
Moves take centimetres and turns degrees, as in the skill sets (config/skills/drone.yaml, arm.yaml).
"""
from __future__ import annotations

from typing import Any, Callable

from timely_llm_ros.core.request import SkillCall
from timely_llm_ros.evaluation.scene import Scene

_cm = 0.01


def _arm_move(scene: Scene, x_cm: float, y_cm: float) -> None:
    """mv(x, y): the gripper goes to (x, y) cm on the table."""
    scene.pose.x, scene.pose.y = x_cm * _cm, y_cm * _cm

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
        "g": Scene.goto, "s": Scene.scan, "sa": Scene.scan_abstract,
    },
    "arm": {
        "gt": Scene.goto, "pi": Scene.pick, "tk": Scene.pick, "dr": Scene.drop, "mv": _arm_move,
    },
}


def act(scene: Scene, robot_type: str, call: SkillCall) -> Any:
    """Apply one call of a ``robot_type`` skill to the scene: a query's value, None for an action (and for skills
    the scene has no part in: delay, log, take_picture, re_plan, scan of the arm). LookupError: a query about an
    object not in view."""
    query = QUERIES.get(robot_type, {}).get(call.name)
    if query is not None:
        return query(scene, *call.args)
    action = ACTIONS.get(robot_type, {}).get(call.name)
    if action is not None:
        action(scene, *call.args)
    return None
