"""An entry's LoRA adapter on the llamacpp engine: the peft adapter is written once as a llama.cpp LoRA GGUF and
applied on top of SmolLM2's Q4_1 weights as stored; its greedy outputs follow the transformers engine with the
adapter merged into the dequantised weights, and differ from the base's; an adapter of another model fails before
anything loads, naming both."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from safetensors.numpy import load_file  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaForCausalLM  # noqa: E402

from timely_llm_ros.adapt.adapter import AdapterInfo, AdapterMismatch, base_identity  # noqa: E402
from timely_llm_ros.adapt.lora_gguf import lora_gguf, rope_permute_rows  # noqa: E402
from timely_llm_ros.adapt.train import TARGET_MODULES  # noqa: E402
from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.engine.llamacpp.engine import LlamaCppEngine  # noqa: E402
from timely_llm_ros.engine.llamacpp.native import GgufModel, KvContext, LoraAdapter, TokenBatch  # noqa: E402
from timely_llm_ros.engine.model_setup import model_setup  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402
from timely_llm_ros.engine.transformers.loader import random_config  # noqa: E402
from timely_llm_ros.paths import model_cache_dir  # noqa: E402
from timely_llm_ros.stack import EngineChoice, load_engine  # noqa: E402

SKILLS = load_skill_sets()
SPEC = model_spec("smollm2-base")      # the plain model: each test adds its own adapter
TASKS = [("drone", "look for the cat", "room: living room; objects: sofa, lamp, plant"),
         ("arm", "stack the red block on the blue block", "table: green block, red block, blue block"),
         ("drone", "find a toy under the bed", "room: bedroom; objects: bed, chair, cup")]
NEW_TOKENS = 16


def random_adapter(base: Path, out: Path, seed: int, rank: int = 8, alpha: int = 16, b_std: float = 0.05) -> Path:
    """A peft LoRA (rank ``rank`` on every projection timely_adapt targets) with random A and B, saved like
    timely_adapt saves one (adapter_config.json, adapter_model.safetensors, timely_adapter.json naming its base)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, local_files_only=True)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(TARGET_MODULES), bias="none",
                             task_type="CAUSAL_LM")
    wrapped = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if "lora_A" in name:
                param.normal_(0.0, param.shape[1] ** -0.5)
            elif "lora_B" in name:
                # peft starts B at zero (no change). 0.05 moves SmolLM2's logits ~7x as far as Q4_1's rounding does
                # (rms 1.3-1.7 against 0.17-0.24), so the adapter changes greedy tokens and not only near-ties
                param.normal_(0.0, b_std)
    wrapped.save_pretrained(out)
    AdapterInfo(base=base_identity(base), model_entry="test", robot_types={}, prompt={},
                lora={"rank": rank, "alpha": alpha, "target_modules": list(TARGET_MODULES)}).write(out)
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A model cache of its own (the LoRA GGUF goes there) that reuses the prepared SmolLM2 folder and tokenizer of
    the real cache (linked, not copied; prepared there once when missing)."""
    real = model_cache_dir()
    weights_folder(SPEC, cache_dir=real)
    root = tmp_path_factory.mktemp("cache")
    for entry in real.iterdir():
        (root / entry.name).symlink_to(entry)
    return root


@pytest.fixture(scope="module")
def adapter(cache, tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return random_adapter(weights_folder(SPEC, cache_dir=cache), tmp_path_factory.mktemp("adapter") / "random-lora",
                          seed=5)


def greedy(engine, prompts: list[list[int]]) -> list[list[int]]:
    outputs = []
    for i, ids in enumerate(prompts):
        engine.add(f"g{i}", ids, NEW_TOKENS)
        while f"g{i}" not in engine.step([f"g{i}"]).finished:
            pass
        outputs.append(engine.output_ids(f"g{i}"))
        engine.release(f"g{i}")
    return outputs


def run(spec, choice: EngineChoice, cache: Path) -> tuple[type, list[list[int]], list[list[int]]]:
    """The engine's type, the prompts of TASKS and their greedy outputs."""
    engine = load_engine(spec, choice, str(cache))
    try:
        setup = model_setup(spec, engine, SKILLS)
        prompts = [setup.prompts(SKILLS[robot], task, scene) for robot, task, scene in TASKS]
        return type(engine), prompts, greedy(engine, prompts)
    finally:
        engine.close()


@pytest.fixture(scope="module")
def engine_runs(adapter, cache):
    """TASKS' prompts, and their greedy outputs on the llamacpp engine with the entry's adapter and without."""
    with_adapter = dataclasses.replace(SPEC, adapter=str(adapter))
    choice = EngineChoice(num_threads=1, options={"llamacpp_context_tokens": 1024})
    kind, prompts, lora = run(with_adapter, choice, cache)
    assert kind is LlamaCppEngine                   # a GGUF entry with an adapter stays on llama.cpp
    _, _, plain = run(SPEC, choice, cache)
    return prompts, lora, plain


def llama_logits(lora: Path | None, ids: list[int], forced: list[int]) -> np.ndarray:
    """llama.cpp's logits (rows: the prompt's last position, then after each forced token) on SmolLM2's GGUF as
    stored, with the LoRA GGUF ``lora`` applied or none."""
    model = GgufModel(SPEC.gguf.locate())
    adapter = LoraAdapter(model, lora) if lora else None
    ctx = KvContext(model, 1, 1024, 1, lora=adapter)
    try:
        batch, rows = TokenBatch(), []
        batch.add(ids, 0, 0, logits_last=True)
        for i, token in enumerate([None, *forced[:-1]]):
            if token is not None:
                batch.clear()
                batch.add_one(token, len(ids) + i - 1, 0)
            assert ctx.decode(batch) == 0
            rows.append(ctx.logits(1)[0].copy())
        return np.stack(rows)
    finally:
        ctx.close()
        if adapter is not None:
            adapter.close()
        model.close()


@pytest.fixture(scope="module")
def logits(adapter, cache, engine_runs):
    """For each prompt: the merged model's greedy continuation, and logits along it (prompt end, then each of its
    tokens) of llama.cpp with and without the LoRA GGUF and of transformers (fp32) with and without the merge."""
    from timely_llm_ros.adapt.adapter import apply_adapter

    folder = weights_folder(SPEC, cache_dir=cache)
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
    merged = apply_adapter(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True),
                           adapter, folder).eval()
    lora_file = lora_gguf(adapter, SPEC.gguf.locate(), cache)
    rows = []
    for ids in engine_runs[0]:
        with torch.no_grad():
            out = merged.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                  pad_token_id=0)[0, len(ids):].tolist()
            full = torch.tensor([ids + out])
            hf_merged = merged(full).logits[0, len(ids) - 1:-1].numpy()
            hf_base = base(full).logits[0, len(ids) - 1:-1].numpy()
        rows.append((out, llama_logits(lora_file, ids, out), llama_logits(None, ids, out), hf_merged, hf_base))
    return rows


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def test_the_lora_gguf_rows_of_q_and_k_follow_the_base_gguf_layout(adapter, cache):
    """The converter's q/k row order is the base GGUF's: the HF folder's q_proj and k_proj weights (transformers
    un-permutes them when it reads the GGUF) permuted the same way equal the GGUF's stored rows, and the written
    lora_b of q_proj is peft's lora_B in that order."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    gguf = SPEC.gguf.locate()
    hf = load_file(str(weights_folder(SPEC, cache_dir=cache) / "model.safetensors"))
    stored = {t.name: t for t in GGUFReader(str(gguf)).tensors if t.name.startswith("blk.2.attn_")}
    for proj, name, heads in (("q_proj", "attn_q", 9), ("k_proj", "attn_k", 3)):
        t = stored[f"blk.2.{name}.weight"]
        rows = hf[f"model.layers.2.self_attn.{proj}.weight"]
        assert not np.array_equal(rows, dequantize(t.data, t.tensor_type))
        np.testing.assert_array_equal(rope_permute_rows(rows, heads), dequantize(t.data, t.tensor_type))
    path = lora_gguf(adapter, gguf, cache)
    assert lora_gguf(adapter, gguf, cache) == path                    # written once
    written = {t.name: np.asarray(t.data) for t in GGUFReader(str(path)).tensors}
    peft_weights = load_file(str(adapter / "adapter_model.safetensors"))
    lora_b = peft_weights["base_model.model.model.layers.2.self_attn.q_proj.lora_B.weight"]
    np.testing.assert_array_equal(written["blk.2.attn_q.weight.lora_b"], rope_permute_rows(lora_b, 9))
    lora_b = peft_weights["base_model.model.model.layers.2.self_attn.v_proj.lora_B.weight"]
    np.testing.assert_array_equal(written["blk.2.attn_v.weight.lora_b"], lora_b)


def test_the_lora_gguf_changes_llama_cpp_logits_as_the_merged_adapter_changes_the_transformers_ones(logits):
    """Along the merged model's greedy continuation of each prompt, what the LoRA GGUF adds to llama.cpp's logits
    is what merging the adapter adds to the fp32 model's, up to Q4_1's rounding (cosine 0.97 on the worst prompt
    measured), and llama.cpp with it is nearer the merged model than without it."""
    for out, lora, plain, merged, base in logits:
        effect, expected = lora - plain, merged - base
        print(f"cosine {cosine(effect, expected):.4f}; effect rms {np.sqrt((expected ** 2).mean()):.3f}, "
              f"error rms {np.sqrt(((effect - expected) ** 2).mean()):.3f}, base gap rms "
              f"{np.sqrt(((plain - base) ** 2).mean()):.3f}")
        assert cosine(effect, expected) > 0.7
        assert np.abs(lora - merged).mean() < np.abs(plain - merged).mean()


def test_llamacpp_with_the_lora_gguf_picks_the_merged_models_greedy_tokens(logits):
    """Each token of the merged model's greedy continuation is llama.cpp + LoRA's top token, or within a near-tie
    of it (Q4_1 weights and 8-bit activations against fp32)."""
    for out, lora, plain, merged, base in logits:
        picked = lora[np.arange(len(out)), out]
        gap = lora.max(axis=1) - picked
        plain_gap = plain.max(axis=1) - plain[np.arange(len(out)), out]
        print(f"top {int((gap == 0).sum())}/{len(out)}, largest gap {gap.max():.3f}; without the LoRA: top "
              f"{int((plain_gap == 0).sum())}/{len(out)}, largest gap {plain_gap.max():.3f}")
        assert (gap == 0).sum() >= len(out) - 2 and gap.max() < 1.0


def test_the_llamacpp_engine_serves_the_entry_with_its_adapter(engine_runs, logits):
    """The entry's adapter changes every greedy output of the llamacpp engine, which then follows the merged model's
    greedy tokens up to where the two engines' rounding first breaks a near-tie."""
    prompts, lora, plain = engine_runs
    assert all(a != b for a, b in zip(lora, plain))
    for served, (out, *_ ) in zip(lora, logits):
        agree = next((i for i, (a, b) in enumerate(zip(served, out)) if a != b), min(len(served), len(out)))
        print(f"served {served}\nmerged {out}: first {agree} agree")


def test_an_adapter_of_another_model_fails_before_loading_naming_both(cache, tmp_path):
    torch.manual_seed(3)
    other = tmp_path / "tiny-base"
    LlamaForCausalLM(random_config("tiny", vocab_size=1048)).save_pretrained(other)
    GenerationConfig(bos_token_id=0, eos_token_id=1).save_pretrained(other)
    adapter = random_adapter(other, tmp_path / "tiny-lora", seed=4)
    entry = dataclasses.replace(SPEC, adapter=str(adapter))
    with pytest.raises(AdapterMismatch, match=r"trained on tiny-base .* model entry 'smollm2-base' loads SmolLM2"):
        load_engine(entry, EngineChoice(num_threads=1), str(cache))
    assert not list(cache.glob("tiny-lora-*"))                        # nothing converted for it
