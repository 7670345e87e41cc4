"""Model entries (config/models.yaml): a GGUF file converted into an HF folder is the same model, and entries are
checked with errors that say what to fix."""
from __future__ import annotations

import pytest
import torch

from timely_llm_ros.core.models import DEFAULT_PREFIX_CACHE_MB, ModelSpec, load_model_specs, model_spec
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.core.skills.chat_prompt import chat_messages
from timely_llm_ros.engine.transformers.loader import load_pretrained
from timely_llm_ros.engine.models import weights_folder


def test_a_gguf_prepared_at_first_use_in_an_empty_cache_reports_progress_and_gives_the_prepared_models_logits(
        tmp_path):
    """The one slow test of the model entries (~20 s: transformers dequantizes every tensor of the GGUF)."""
    torch.set_num_threads(1)
    spec = model_spec("smollm2")
    prepared = load_pretrained(weights_folder(spec, convert=False), "cpu", "float32")
    progress: list[str] = []
    folder = weights_folder(spec, cache_dir=tmp_path / "cache", progress=progress.append)
    assert folder.parent == tmp_path / "cache" and folder.name.startswith(spec.gguf.locate().stem)
    assert f"model 'smollm2' is not prepared yet: converting {spec.gguf.locate().name}" in progress[0]
    assert str(folder) in progress[0] and str(folder) in progress[-1] and len(progress) >= 3
    assert weights_folder(spec, cache_dir=tmp_path / "cache", progress=pytest.fail) == folder   # prepared once
    fresh = load_pretrained(folder, "cpu", "float32")
    messages = chat_messages(load_skill_sets()["arm"], "put the cup on the tray", "table: cup; places: tray")
    ids = fresh.tokenizer.encode_chat(messages)
    assert ids == prepared.tokenizer.encode_chat(messages)
    with torch.inference_mode():
        a = prepared.model(torch.tensor([ids])).logits[0, -1]
        b = fresh.model(torch.tensor([ids])).logits[0, -1]
    assert torch.equal(a, b)


def test_the_prefix_cache_is_on_by_default_only_for_chat_template_models():
    specs = load_model_specs()
    assert specs["smollm2"].prefix_cache_size_mb() == DEFAULT_PREFIX_CACHE_MB
    assert specs["embedded"].prefix_cache_size_mb() == 0
    own = ModelSpec.from_config("mine", {"path": "/m", "chat_template": True, "prefix_cache_mb": 0})
    assert own.prefix_cache_size_mb() == 0


def test_a_gguf_entry_runs_on_llamacpp_and_a_folder_on_transformers_unless_the_entry_or_the_server_says_otherwise():
    from timely_llm_ros.stack import EngineChoice, engine_kind

    specs = load_model_specs()
    assert specs["smollm2"].engine_kind() == "llamacpp"
    assert specs["embedded"].engine_kind() == "transformers"
    pinned = ModelSpec.from_config("mine", {"gguf": {"path": "/m.gguf"}, "engine": "transformers"})
    assert pinned.engine_kind() == "transformers"
    assert engine_kind(specs["smollm2"], EngineChoice()) == "llamacpp"
    assert engine_kind(specs["smollm2"], EngineChoice("vllm")) == "vllm"        # ENGINE= / engine:= wins


def test_smollm2_ships_with_the_adapter_trained_on_it_for_the_drone_and_the_arm_and_smollm2_base_without():
    """`make demo MODEL=smollm2` serves the committed adapter: it exists, it was trained on this very GGUF (its
    embedding fingerprint), for the built-in robot types; smollm2-base is the same file without it."""
    from timely_llm_ros.adapt.adapter import check_adapter

    specs = load_model_specs()
    smol, base = specs["smollm2"], specs["smollm2-base"]
    assert smol.adapter_folder() is not None and base.adapter_folder() is None
    assert smol.gguf.locate() == base.gguf.locate()
    info = check_adapter(smol.adapter_folder(), weights_folder(smol, convert=False), "smollm2")
    assert {"drone", "arm"} <= set(info.robot_types)


@pytest.mark.parametrize("entry, fragment", [
    ({"path": "/m", "engine": "onnx"}, "engine must be one of transformers, vllm, llamacpp"),
    ({"path": "/m", "engine": "llamacpp"}, "engine llamacpp serves GGUF files"),
    ({"path": "/m", "interrupts": "token"}, "interrupts must be one of auto, layer"),
    ({"path": "/m", "prefix_cache_mb": -1}, "prefix_cache_mb must be >= 0"),
    ({"path": "/m", "limits": {"drone": {"max_segment_tokens": 30, "max_plan_tokens": 20}}}, "max_segment_tokens"),
    ({"path": "/m", "prompt": "chat"}, "unknown fields"),
])
def test_bad_model_entries_name_the_field(entry, fragment):
    with pytest.raises(ValueError, match=fragment):
        ModelSpec.from_config("mine", entry, "models.yaml")
