"""LRTrace: the 11 robot task traces of TimelyLLM Table 2, with plans written in the skill languages.

Drone plans use MiniSpec (TypeFly's drone language: s scan, g goto, iv is_visible, tp take_picture, l log,
p probe, mf/mb/ml/mr/mu/md moves in cm, tc/tu turns in degrees, d delay in s). Arm plans use sc scan, gt goto,
pi pick, dr drop and mv move_to(x, y). Normal drone plans are ~20 tokens, urgent ones are two evasive actions, arm
plans are 8-12 actions (~100 tokens) of 22-35 s execution.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trace:
    """One recorded task: what the robot was asked, what it saw, and the plan the LLM produced."""

    trace_id: int
    robot_type: str       # skill set name
    category: str         # Table 2 category
    urgency: str          # urgency class name (config/urgency_classes.yaml)
    task: str
    context: str          # scene description given to the planner
    plan: str             # the plan text, in the robot's skill language

    @property
    def task_type(self) -> str:
        """Metrics label: the trace id as text."""
        return str(self.trace_id)


_DRONE_SCENE = "objects: chair, bed, cabinet, door, window; the drone hovers at 1 m in the middle of a bedroom"

TRACES: dict[int, Trace] = {t.trace_id: t for t in (
    Trace(1, "drone", "normal drone", "normal", "Look for the cat", _DRONE_SCENE + "; a cat toy lies on the bed",
          "s('cat');g('cat');tp();"),
    Trace(2, "drone", "normal drone", "normal", "Check for keys or wallets", _DRONE_SCENE,
          "s('keys');tp();s('wallet');tp();"),
    Trace(3, "drone", "normal drone", "normal", "Check the book on the cabinet", _DRONE_SCENE + "; a book on the cabinet",
          "g('cabinet');mu(50);p('book title?');tp();"),
    Trace(4, "drone", "normal drone", "normal", "Find a toy under the bed", _DRONE_SCENE,
          "g('bed');md(60);s('toy');tp();"),
    Trace(5, "drone", "normal drone", "normal", "Find a tool for cutting paper", _DRONE_SCENE + "; a desk by the window",
          "sa('tool for cutting paper?');g('scissors');tp();"),
    Trace(6, "drone", "urgent drone", "urgent", "Avoid human injury: a person walks into the flight path", _DRONE_SCENE,
          "mu(80);mb(100);"),
    Trace(7, "drone", "urgent drone", "urgent", "Prevent a collision with the door swinging open", _DRONE_SCENE,
          "mr(100);tc(90);"),
    Trace(8, "drone", "urgent drone", "urgent", "Evade the dog chasing the drone", _DRONE_SCENE,
          "d(1);mu(120);"),
    Trace(9, "arm", "complex arm", "normal", "Stack the red, blue and green boxes, red at the bottom",
          "table with a red box at (30, 40), a blue box at (60, 20) and a green box at (80, 50)",
          "sc('blue box');gt('blue box');pi('blue box');gt('red box');dr();"
          "sc('green box');gt('green box');pi('green box');gt('red box');dr();"),
    Trace(10, "arm", "complex arm", "normal", "Clean the desk: put the cup and the paper in the bin",
          "desk with a coffee cup and crumpled paper; the bin is at (90, 10)",
          "sc('coffee cup');gt('coffee cup');pi('coffee cup');mv(90, 10);dr();"
          "sc('crumpled paper');gt('crumpled paper');pi('crumpled paper');mv(90, 10);dr();"),
    Trace(11, "arm", "complex arm", "normal", "Sort the fruit and the vegetables into the left and right trays",
          "an apple, a carrot and a banana on the table; left tray at (10, 50), right tray at (90, 50)",
          "sc('red apple');pi('red apple');mv(10, 50);dr();sc('carrot');pi('carrot');mv(90, 50);dr();"
          "sc('yellow banana');pi('yellow banana');mv(10, 50);dr();"),
)}

DRONE_TRACES = (1, 2, 3, 4, 5, 6, 7, 8)
ARM_TRACES = (9, 10, 11)


def get_trace(trace_id: int) -> Trace:
    """The trace with this id; ValueError listing the known ids otherwise."""
    try:
        return TRACES[int(trace_id)]
    except (KeyError, ValueError):
        raise ValueError(f"unknown LRTrace id {trace_id!r}; known: {sorted(TRACES)}") from None
