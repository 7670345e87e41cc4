"""The prompt the planner model sees: one format shared by the corpus generator and the server."""
from __future__ import annotations

DEFAULT_TEMPLATE = "<{robot_type}>\nscene: {context}\ntask: {task}\nplan:"


def build_prompt(robot_type: str, task: str, context: str = "", template: str = DEFAULT_TEMPLATE) -> str:
    """Render a planning prompt; the plan text follows it directly (a leading space is the model's)."""
    return template.format(robot_type=robot_type, task=task.strip(), context=context.strip())
