"""Training an adapter (timely_adapt) and serving it: a few steps on a tiny random-weights model give an adapter that
loads and changes the model's output; it is trained on exactly the prompts the server renders; an adapter on another
model fails naming both; the committed adapter of config/models.yaml loads onto SmolLM2 and its plans parse."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig, LlamaForCausalLM

from timely_llm_ros.adapt.adapter import AdapterMismatch, merged_folder
from timely_llm_ros.adapt.corpus import build_corpus, read_jsonl
from timely_llm_ros.adapt.train import CORPUS_FILE, TrainConfig, encode_examples, steps_in_budget, train_adapter
from timely_llm_ros.core.models import ModelSpec
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.engine.factory import make_engine
from timely_llm_ros.engine.model_setup import model_setup, setup_engine_options
from timely_llm_ros.engine.transformers.loader import load_pretrained, random_config
from timely_llm_ros.paths import default_model_dir
from timely_llm_ros.stack import EngineChoice, load_engine

# a plain-text chat template over the embedded planner's tokenizer (its <|bos|>/<|eos|> mark the turns)
CHAT_TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")


def tiny_chat_model(folder: Path, seed: int) -> Path:
    """A random-weights Llama of the "tiny" shape (engine/transformers/loader.py) over the embedded planner's
    tokenizer, with a chat template: a real model folder the trainer and the engine load like SmolLM2's."""
    torch.manual_seed(seed)
    config = random_config("tiny", vocab_size=1048, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    LlamaForCausalLM(config).save_pretrained(folder)
    GenerationConfig(bos_token_id=0, eos_token_id=1, pad_token_id=2).save_pretrained(folder)
    shutil.copy(default_model_dir() / "tokenizer.json", folder / "tokenizer.json")
    tok_config = json.loads((default_model_dir() / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tok_config, "chat_template": CHAT_TEMPLATE}))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny model and an adapter trained on it for three steps (drone and arm)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("adapt")
    base = tiny_chat_model(root / "tiny-a", seed=1)
    spec = ModelSpec(name="tiny", path=str(base), chat_template=True, grammar=True)
    config = TrainConfig(("drone", "arm"), root / "adapter", examples=48, batch_size=8, max_steps=3,
                         learning_rate=1e-2, warmup_steps=0, check_examples=0)
    info = train_adapter(spec, config)
    return spec, base, config.out, info, root


def test_a_few_steps_give_an_adapter_in_the_standard_format_that_changes_the_output(tiny):
    spec, base, adapter, info, _ = tiny
    assert {"adapter_config.json", "adapter_model.safetensors", "timely_adapter.json", "corpus.jsonl.gz"} <= {
        p.name for p in adapter.iterdir()}
    assert info.training["steps"] == 3 and set(info.robot_types) == {"drone", "arm"}
    plain = load_pretrained(base, "cpu", "float32")
    adapted = load_pretrained(base, "cpu", "float32", adapter=adapter)
    assert type(adapted.model) is type(plain.model)              # merged: a plain model, no adapter layers left
    ids = torch.tensor([plain.tokenizer.encode("scene: table: red cube\ntask: pick up the red cube\nplan:")])
    with torch.no_grad():
        assert not torch.allclose(plain.model(ids).logits, adapted.model(ids).logits, atol=1e-4)


def test_the_time_budget_plans_steps_that_fit_and_recovers_from_a_slow_first_estimate():
    # 100 s left at 1 s a step, 10 steps in: 110 steps fit of 800 planned
    assert steps_in_budget(800, 800, 10, 100.0, 1.0) == 110
    # a slow first estimate (the steps that refreshed a shared prompt) planned 110; steps measured faster since
    # then, still early in the plan: the count grows back, to the planned steps at most
    assert steps_in_budget(800, 110, 20, 1000.0, 1.0) == 800
    assert steps_in_budget(800, 110, 20, 300.0, 1.0) == 320
    # past the first quarter it only shrinks: a faster step does not lengthen the cosine schedule mid-run
    assert steps_in_budget(800, 500, 300, 1000.0, 1.0) == 500
    assert steps_in_budget(800, 500, 300, 100.0, 1.0) == 400
    # a spent budget still plans the step after this one
    assert steps_in_budget(800, 500, 300, -5.0, 1.0) == 301


def test_training_continues_from_an_adapter_and_a_checkpoint_is_a_loadable_adapter(tiny):
    spec, base, adapter, info, root = tiny
    config = TrainConfig(("arm",), root / "continued", examples=16, batch_size=8, max_steps=2, learning_rate=1e-2,
                         warmup_steps=0, check_examples=0, save_every_min=1e-6, init_adapter=adapter)
    more = train_adapter(spec, config)
    assert more.training["continued_from"] == str(adapter) and more.training["steps"] == 2
    # its record keeps the run its weights started from, and the corpus holds both runs' examples
    (first_run,) = more.training["earlier_runs"]
    assert first_run["training"]["steps"] == info.training["steps"] and first_run["corpus"]["seed"] == info.corpus["seed"]
    assert "earlier_runs" not in first_run["training"] and "earlier_runs" not in info.training
    both, first = read_jsonl(config.out / CORPUS_FILE), read_jsonl(adapter / CORPUS_FILE)
    assert both[:len(first)] == first and len(both) == len(first) + more.corpus["examples"]
    assert more.lora["rank"] == info.lora["rank"]
    ids = torch.tensor([[5, 17, 99, 3]])
    with torch.no_grad():
        first = load_pretrained(base, "cpu", "float32", adapter=adapter).model(ids).logits
        second = load_pretrained(base, "cpu", "float32", adapter=config.out).model(ids).logits
    assert not torch.allclose(first, second, atol=1e-5)


def test_a_bf16_forward_gives_the_fp32_loss_to_bf16_precision_and_an_unknown_precision_fails(tiny):
    spec, _, _, _, root = tiny
    first_loss = {}
    for precision in ("fp32", "bf16"):
        torch.set_num_threads(1)
        config = TrainConfig(("arm",), root / f"precision-{precision}", examples=16, batch_size=8, max_steps=1,
                             warmup_steps=0, check_examples=0, save_every_min=0, precision=precision)
        info = train_adapter(spec, config)
        assert info.training["precision"] == precision
        first_loss[precision] = info.training["final_loss"]          # one step: the first batch's loss
    assert first_loss["bf16"] != first_loss["fp32"]                   # the forward did run in another type
    assert first_loss["bf16"] == pytest.approx(first_loss["fp32"], rel=0.02)
    with pytest.raises(ValueError, match="--precision"):
        train_adapter(spec, TrainConfig(("arm",), root / "precision-fp8", examples=16, max_steps=1,
                                        check_examples=0, precision="fp8"))


def test_the_adapter_is_trained_on_exactly_the_prompts_the_server_renders(tiny):
    spec, base, _, _, _ = tiny
    skill_sets = load_skill_sets()
    engine = make_engine("transformers", str(base), device="cpu", dtype="float32")
    served = model_setup(spec, engine, skill_sets).prompts
    examples, _ = build_corpus(skill_sets, ["drone", "arm"], 12, seed=5)
    encoded = encode_examples(examples, served, skill_sets, engine.encode, eos_id=1)
    for robot, enc in encoded.items():
        mine = [e for e in examples if e.robot_type == robot]
        for ex, row, target in zip(mine, enc.rows, enc.targets):
            prompt = served(skill_sets[robot], ex.task, ex.scene)
            plan = [t for t in target if t != -100]
            assert enc.prefix + row == prompt + plan
            assert plan == engine.encode(ex.plan) + [1]
        assert len(enc.prefix) >= served.shared_tokens(skill_sets[robot])


def test_the_engine_serves_the_adapted_model_for_an_entry_with_an_adapter(tiny):
    spec, base, adapter, _, _ = tiny
    with_adapter = ModelSpec(name="tiny", path=str(base), chat_template=True, adapter=str(adapter))
    assert setup_engine_options(with_adapter)["adapter"] == str(adapter)
    engine = load_engine(with_adapter, EngineChoice("transformers", device="cpu", dtype="float32"))
    setup = model_setup(with_adapter, engine, load_skill_sets())
    notes = "\n".join(setup.notes)
    assert "trained for drone, arm" in notes and "not trained for: chat" in notes
    reference = load_pretrained(base, "cpu", "float32", adapter=adapter).model
    ids = setup.prompts(setup.skill_sets["drone"], "take a photo of the mug", "room: kitchen; objects: mug")
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0, -1].argmax().item()
    engine.add("g", ids, 1)
    assert engine.step(["g"]).tokens["g"] == expected


def test_an_adapter_on_another_model_fails_naming_both(tiny):
    _, _, adapter, _, root = tiny
    other = tiny_chat_model(root / "tiny-b", seed=2)
    with pytest.raises(AdapterMismatch, match=r"adapter .*adapter was trained on tiny-a .* tiny-b"):
        load_pretrained(other, "cpu", "float32", adapter=adapter)
    entry = ModelSpec(name="other-entry", path=str(other), chat_template=True, adapter=str(adapter))
    with pytest.raises(AdapterMismatch, match="model entry 'other-entry' loads tiny-b"):
        load_engine(entry, EngineChoice("transformers", device="cpu", dtype="float32"))


def test_the_merged_folder_for_vllm_holds_the_model_the_transformers_engine_merges(tiny):
    _, base, adapter, _, root = tiny
    folder = merged_folder(base, adapter, root / "cache")
    assert merged_folder(base, adapter, root / "cache") == folder            # written once
    ids = torch.tensor([[5, 17, 99, 3]])
    with torch.no_grad():
        a = load_pretrained(folder, "cpu", "float32").model(ids).logits
        b = load_pretrained(base, "cpu", "float32", adapter=adapter).model(ids).logits
    assert torch.allclose(a, b, atol=1e-5)
