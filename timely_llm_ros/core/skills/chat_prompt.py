"""The prompt a chat model sees: a system message rendered from the skill set, then the request as a user message.

The system message (the robot, its skills with argument names, types and units, a query's value, the statement
forms its plans may use) and the worked examples are the same for every request of one robot type, so they form a
shared prefix whose KV the engine caches once (engine/transformers/prefix_cache.py). The examples go either inside the system
text or as user/assistant turns after it (skill-set option ``prompt_examples``: turns | system); only the last user
message (scene and task) differs between requests. The embedded planner keeps its raw format (prompt.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from timely_llm_ros.core.skills.skill_set import SkillSet

Message = dict[str, str]   # {"role": "system" | "user" | "assistant", "content": text}

# statement forms (core/skills/minispec.py FORMS) as a model is told them: the syntax, then what it does
FORM_SYNTAX = {
    "call": ("skill(arguments);", "calls a skill; strings go in single quotes, numbers bare"),
    "assign": ("_1=query(arguments);", "keeps a query's value in the variable _1 (variables are _ then digits) "
                                      "for later arguments and conditions"),
    "return": ("->value;", "ends the plan with this value"),
    "loop": ("N{statements}", "repeats the statements N times"),
    "conditional": ("?condition{statements}", "runs the statements only if the condition holds; a condition "
                                             "compares values with == != > < >= <= and combines comparisons "
                                             "with & and |"),
}


def user_text(task: str, context: str) -> str:
    """The request as the user message: its scene, then its task."""
    return f"scene: {context.strip()}\ntask: {task.strip()}"


def _answer_word(skill_set: "SkillSet") -> str:
    return "plan" if skill_set.mode == "statements" else "reply"


def system_text(skill_set: "SkillSet", examples_in: str) -> str:
    """The system message of a robot type; the worked examples are in it when ``examples_in`` is "system"."""
    robot = skill_set.description or f"a robot of type {skill_set.name}"
    if skill_set.mode == "statements":
        lines = [f"You plan for {robot}. Given a scene and a task, write the plan: statements of the robot's skill "
                 "language, one after another on one line. Answer with the plan only, no explanations.",
                 "", "Skills:"]
        lines += [f"{s.signature()}: {s.description}" if s.description else s.signature()
                  for s in skill_set.skills.values()]
        lines += ["", "Statements (each ends with ';'):"]
        lines += [f"{FORM_SYNTAX[f][0]}  {FORM_SYNTAX[f][1]}" for f in skill_set.statement_forms]
        missing = [f for f in FORM_SYNTAX if f not in skill_set.statement_forms]
        if missing:
            lines.append(f"No other statements ({', '.join(missing)} are not allowed).")
    else:
        lines = [f"You are {robot}. Given a scene and what the person said, reply in one or two short sentences. "
                 "Answer with the words to say only."]
    if examples_in == "system" and skill_set.examples:
        lines += ["", "Examples:"]
        for ex in skill_set.examples:
            lines += ["", user_text(ex.task, ex.scene), f"{_answer_word(skill_set)}: {ex.plan}"]
    return "\n".join(lines)


def shared_messages(skill_set: "SkillSet", examples_in: str | None = None) -> list[Message]:
    """The messages every request of this robot type starts with: the system message, then the worked examples as
    user/assistant turns when ``examples_in`` (default: the skill set's prompt_examples) is "turns"."""
    where = examples_in or skill_set.prompt_examples
    messages = [{"role": "system", "content": system_text(skill_set, where)}]
    if where == "turns":
        for ex in skill_set.examples:
            messages += [{"role": "user", "content": user_text(ex.task, ex.scene)},
                         {"role": "assistant", "content": ex.plan}]
    return messages


def chat_messages(skill_set: "SkillSet", task: str, context: str = "", examples_in: str | None = None) -> list[Message]:
    """The whole conversation for one request: the shared messages, then the request as the last user message."""
    return shared_messages(skill_set, examples_in) + [{"role": "user", "content": user_text(task, context)}]
