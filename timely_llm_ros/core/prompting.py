"""Prompt ids for a request: what the scheduler calls to turn (skill set, task, scene) into the model's tokens.

The scheduler does not know the model's prompt format: whoever composes the engine and the scheduler (the server,
the simulator on a real engine, the benchmarks: engine/model_setup.py) hands it a PromptEncoder. Two exist:

- RawPrompts: the embedded planner's format (core/skills/prompt.py), tokenized as one text without special tokens.
- ChatPrompts: a chat model's format: the skill set's system message and worked examples, then the request as the
  last user message (core/skills/chat_prompt.py), through the tokenizer's chat template (Engine.encode_chat).

Torch-free: both only call the tokenizing functions they are given.
"""
from __future__ import annotations

from typing import Callable, Mapping, Protocol, Sequence

from timely_llm_ros.core.skills.chat_prompt import chat_messages, shared_messages
from timely_llm_ros.core.skills.skill_set import SkillSet

EncodeChat = Callable[[Sequence[Mapping[str, str]], bool, bool], list[int]]


class PromptEncoder(Protocol):
    """Token ids of the prompt for one request (its robot type's skill set, task and scene)."""

    chat: bool

    def __call__(self, skill_set: SkillSet, task: str, context: str) -> list[int]: ...

    def shared_tokens(self, skill_set: SkillSet) -> int:
        """How many leading tokens every prompt of this robot type shares (the prefix cache can reuse them)."""
        ...


class RawPrompts:
    """The embedded planner's raw prompt (``<robot>\\nscene: ...\\ntask: ...\\nplan:``) encoded as it was trained,
    after the BOS id when one is given (a model entry with add_bos)."""

    chat = False

    def __init__(self, encode: Callable[[str], list[int]], bos_id: int | None = None) -> None:
        self.encode = encode
        self.bos = [] if bos_id is None else [int(bos_id)]

    def __call__(self, skill_set: SkillSet, task: str, context: str) -> list[int]:
        return self.bos + self.encode(skill_set.build_prompt(task, context))

    def shared_tokens(self, skill_set: SkillSet) -> int:
        """The tokens of the raw template before the scene (``<robot>\\nscene:``): a few, never worth caching."""
        marker = "\x00"
        head = skill_set.build_prompt(marker, marker).split(marker)[0]
        return len(self.bos) + len(self.encode(head.rstrip()))


class ChatPrompts:
    """System message + worked examples + the request, through the model's chat template.

    The shared part of a robot type (every message before the request's) is encoded once; each prompt is checked
    to start with exactly those ids (a ValueError says so if a chat template ever breaks it), so the engine's
    prefix cache reuses its KV for every request of that robot type. ``examples_in`` overrides where every skill
    set puts its worked examples ("turns" | "system"; None: each skill set's prompt_examples)."""

    chat = True

    def __init__(self, encode_chat: EncodeChat, add_bos: bool = False, examples_in: str | None = None) -> None:
        self.encode_chat = encode_chat
        self.add_bos = add_bos
        self.examples_in = examples_in
        self._shared: dict[str, list[int]] = {}

    def shared_ids(self, skill_set: SkillSet) -> list[int]:
        """Ids of the messages every prompt of this robot type starts with (system, example turns)."""
        ids = self._shared.get(skill_set.name)
        if ids is None:
            ids = self.encode_chat(shared_messages(skill_set, self.examples_in), self.add_bos, False)
            self._shared[skill_set.name] = ids
        return ids

    def shared_tokens(self, skill_set: SkillSet) -> int:
        return len(self.shared_ids(skill_set))

    def __call__(self, skill_set: SkillSet, task: str, context: str) -> list[int]:
        ids = self.encode_chat(chat_messages(skill_set, task, context, self.examples_in), self.add_bos, True)
        shared = self.shared_ids(skill_set)
        if ids[:len(shared)] != shared:
            raise ValueError(f"the chat template rendered the {skill_set.name} system prompt differently for this "
                             "request: its KV cannot be shared (a template that changes earlier turns by the last "
                             "one; set chat_template: false or give the model another template)")
        return ids
