"""The transformers engine's CPU kernels: oneDNN-packed (and fused) linears, and the slot attention that reads each
row's own length without repeating KV heads; the engine on SmolLM2 stays token-exact with them."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import repeat_kv

from timely_llm_ros.engine.transformers.loader import build_random_model, load_pretrained
from timely_llm_ros.engine.transformers.packed_linear import FusedLinearPart, PackedLinear, pack_linears, packing_available
from timely_llm_ros.engine.transformers.slot_attention import slot_attention
from timely_llm_ros.engine.transformers.engine import TransformersEngine

needs_onednn = pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN (mkldnn)")


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


@needs_onednn
def test_packed_linears_give_the_plain_models_logits_and_fuse_the_projections_of_one_input():
    plain, packed = build_random_model("tiny", device="cpu", seed=3), build_random_model("tiny", device="cpu", seed=3)
    n_linear = sum(type(m) is torch.nn.Linear for m in plain.model.modules())
    assert pack_linears(packed.model) == n_linear
    assert pack_linears(packed.model) == 0                                 # a packed model is left as it is
    layer = packed.model.model.layers[0]
    for name in ("q_proj", "k_proj", "v_proj"):
        assert isinstance(getattr(layer.self_attn, name), FusedLinearPart)
    assert layer.self_attn.q_proj.group is layer.self_attn.v_proj.group
    assert layer.mlp.gate_proj.group is layer.mlp.up_proj.group
    assert isinstance(layer.mlp.down_proj, PackedLinear) and isinstance(packed.model.lm_head, PackedLinear)
    ids = torch.tensor([[5, 17, 99, 3, 250, 42, 7], [1, 2, 3, 4, 5, 6, 7]])
    with torch.inference_mode():
        want, got = plain.model(input_ids=ids).logits, packed.model(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


@needs_onednn
def test_a_fused_projection_called_on_an_input_its_siblings_did_not_see_computes_it_anew():
    plain, packed = build_random_model("tiny", device="cpu", seed=4), build_random_model("tiny", device="cpu", seed=4)
    pack_linears(packed.model)
    want, got = plain.model.model.layers[1].self_attn, packed.model.model.layers[1].self_attn
    x, other = torch.randn(3, 64), torch.randn(3, 64)
    with torch.inference_mode():
        q = got.q_proj(x)                                     # the GEMM for x runs here; k and v of x are kept
        k_other = got.k_proj(other)                           # not x: its own GEMM
        v = got.v_proj(x)
        k = got.k_proj(x)
        for out, ref in ((q, want.q_proj(x)), (k_other, want.k_proj(other)), (v, want.v_proj(x)),
                         (k, want.k_proj(x))):
            assert torch.allclose(out, ref, atol=1e-6, rtol=1e-5)


class _Module:
    """What the attention function reads from a transformers attention module."""

    num_key_value_groups = 3
    is_causal = True


def _store_rows(batch: int, kv_heads: int, capacity: int, dim: int) -> torch.Tensor:
    """Keys or values as the slot store hands them to attention: a strided view of wider rows."""
    return torch.randn(batch + 2, kv_heads, capacity + 9, dim)[1:batch + 1, :, :capacity]


@pytest.mark.parametrize("additive", [False, True], ids=["bool-mask", "additive-mask"])
def test_slot_attention_attends_each_decode_row_to_its_own_length_without_repeating_kv_heads(additive):
    torch.manual_seed(0)
    lengths = [1, 40, 13, 64, 7]                                # columns [0, n] of each row are real
    batch, heads, kv_heads, dim, width = len(lengths), 9, 3, 16, max(lengths) + 1
    keys, values = _store_rows(batch, kv_heads, width, dim), _store_rows(batch, kv_heads, width, dim)
    query = torch.randn(batch, heads, 1, dim)
    allowed = torch.arange(width)[None, :] <= torch.tensor(lengths)[:, None]
    mask = allowed[:, None, None, :]
    if additive:
        mask = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
    out, _ = slot_attention(_Module(), query, keys, values, mask, scaling=dim ** -0.5)
    assert out.shape == (batch, 1, heads, dim)
    for row, n in enumerate(lengths):                       # reference: this row alone, its own columns, heads repeated
        k = repeat_kv(keys[row:row + 1, :, :n + 1], heads // kv_heads)
        v = repeat_kv(values[row:row + 1, :, :n + 1], heads // kv_heads)
        ref = F.scaled_dot_product_attention(query[row:row + 1], k, v, scale=dim ** -0.5).transpose(1, 2)
        assert torch.allclose(out[row:row + 1], ref, atol=1e-6, rtol=1e-5), row


def test_slot_attention_prefills_with_a_mask_and_causally_like_transformers_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(1)
    batch, heads, kv_heads, q, dim = 3, 9, 3, 12, 16
    query, keys, values = (torch.randn(batch, heads, q, dim), torch.randn(batch, kv_heads, q, dim),
                           torch.randn(batch, kv_heads, q, dim))
    n = torch.tensor([12, 5, 9])                              # right-padded prompts of these lengths
    cols = torch.arange(q)
    mask = ((cols[None, :] <= cols[:, None])[None] & (cols[None, None, :] < n[:, None, None]))[:, None]
    for m in (mask, None):
        got, _ = slot_attention(_Module(), query, keys, values, m, scaling=0.25)
        want, _ = sdpa_attention_forward(_Module(), query, keys, values, m, scaling=0.25)
        assert torch.equal(got, want)                           # CPU: shared KV heads give the same bits


def test_a_generation_with_evicted_prompt_kv_decodes_alike_alone_and_beside_rows_of_other_lengths():
    """Eviction shortens the row and keeps original positions: in a batch whose rows are longer and shorter, its
    attention still reads exactly its own kept columns."""
    tiny = build_random_model("tiny", device="cpu", seed=1)
    rng = random.Random(5)
    prompts = {g: [256] + [rng.randrange(256) for _ in range(n)] for g, n in (("e", 40), ("long", 70), ("short", 6))}

    def run(names: list[str]) -> list[int]:
        engine = TransformersEngine(tiny)
        for g in names:
            engine.add(g, prompts[g], 16)
        done = engine.step(names).finished
        engine.evict_prompt_kv("e", 0.5)
        live = [g for g in names if g not in done]
        while live:
            done = engine.step(live).finished
            live = [g for g in live if g not in done]
        return engine.output_ids("e")

    assert run(["e", "long", "short"]) == run(["e"])


# ----- SmolLM2 (a real pretrained model; `make setup` converts it) -----

@pytest.fixture(scope="module")
def smollm2():
    from timely_llm_ros.core.models import model_spec
    from timely_llm_ros.engine.models import weights_folder

    try:
        folder = weights_folder(model_spec("smollm2"), convert=False)
    except FileNotFoundError as exc:
        pytest.skip(f"SmolLM2 is not prepared ({exc})")
    return folder


TEXTS = ["Pick up the red cup and put it on the table.", "Fly to the window, then land.",
         "Where is the charger?", "List the rooms of a small flat, one per line, with their doors and windows.",
         "Count to five.", "A drone sees a cat under the bench; what should it do next, and why?",
         "hello", "Write one sentence about robots that plan for each other on a shared edge computer."]


def _teacher_forced_greedy(model, prompt: list[int], output: list[int]) -> list[int]:
    """The plain model's greedy choice after the prompt and each prefix of ``output``, from one forward."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + output[:-1]])).logits[0]
    return logits[len(prompt) - 1:].argmax(-1).tolist()


def test_smollm2_decodes_token_exact_at_batch_1_8_and_16_also_with_steps_cut_short(smollm2):
    """The engine (packed linears, slot attention) against a plain, unpacked copy of the model: every token the
    engine emits is the plain model's greedy choice after the same context. The batch-16 run is interrupted at
    random layers in a third of its steps."""
    engine_model, plain = load_pretrained(smollm2, "cpu", "float32"), load_pretrained(smollm2, "cpu", "float32")
    tok = plain.tokenizer
    prompts = [tok.encode(t) for t in TEXTS] + [tok.encode(t + " Answer briefly.") for t in TEXTS]
    rng = random.Random(7)
    for batch in (1, 8, 16):
        engine = TransformersEngine(engine_model)
        layer_asks = {"n": 0, "stop_at": None}

        def check() -> bool:
            layer_asks["n"] += 1
            return layer_asks["stop_at"] is not None and layer_asks["n"] >= layer_asks["stop_at"]
        engine.interrupt_check = check if batch == 16 else None
        ids = [f"b{batch}-{i}" for i in range(batch)]
        for g, p in zip(ids, prompts):
            engine.add(g, p, 10)
        live = list(ids)
        while live:
            layer_asks["n"], layer_asks["stop_at"] = 0, rng.randrange(1, 31) if rng.random() < 0.33 else None
            done = engine.step(live).finished
            live = [g for g in live if g not in done]
        assert batch < 16 or engine.interrupted_steps > 0
        for g, p in zip(ids, prompts):
            out = engine.output_ids(g)
            assert out and out == _teacher_forced_greedy(plain.model, p, out), (batch, g)
