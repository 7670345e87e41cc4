"""Load a causal LM and its tokenizer: from a local folder, or random weights of a named shape.

Nothing here downloads: a folder must hold the weights, and random models are built from a config.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from timely_llm_ros.engine.tokenizer import ByteTokenizer, HFTokenizer, Tokenizer  # noqa: F401  (their home before tokenizer.py)
from timely_llm_ros.engine.tokenizer import load_tokenizer as _load_tokenizer

# Named random shapes. "llama3-8b" is Llama-3-8B's geometry, "smollm2" SmolLM2-135M's; "-Nl" variants keep the width
# and cut layers.
RANDOM_CONFIGS: dict[str, dict] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=272, initializer_range=0.25),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=8192),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0),
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, rope_theta=100000.0, tie_word_embeddings=True),
}


@dataclass
class LoadedModel:
    """A model ready for inference, with its tokenizer and where it runs."""

    model: torch.nn.Module
    tokenizer: Tokenizer
    device: torch.device
    dtype: torch.dtype
    source: str


def resolve_device(device: str = "auto") -> torch.device:
    """auto = cuda when available, else cpu."""
    if device in ("", "auto", None):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """auto = fp32 on cpu, bf16 (fp16 without bf16 support) on cuda."""
    if dtype in ("", "auto", None):
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    names = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16,
             "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(names)}")
    return names[dtype]


def random_config(name: str, layers: int | None = None, **overrides) -> LlamaConfig:
    """A Llama config of a named shape (see RANDOM_CONFIGS); ``name-8l`` or ``layers`` cut the depth."""
    base, cut = name, re.fullmatch(r"(.+)-(\d+)l", name)
    if cut:
        base, layers = cut.group(1), layers or int(cut.group(2))
    if base not in RANDOM_CONFIGS:
        raise ValueError(f"unknown random config {name!r}; known: {', '.join(RANDOM_CONFIGS)}")
    kw = dict(max_position_embeddings=8192, bos_token_id=256, eos_token_id=257, pad_token_id=0,
              tie_word_embeddings=False)
    kw.update(RANDOM_CONFIGS[base])
    if layers:
        kw["num_hidden_layers"] = layers
    kw.update(overrides)
    return LlamaConfig(**kw)


def build_random_model(config: LlamaConfig | str, device: str = "auto", dtype: str = "auto",
                       seed: int = 0) -> LoadedModel:
    """Random weights of a real architecture, built directly on the device (no download)."""
    if isinstance(config, str):
        config = random_config(config)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    shape = f"random llama L={config.num_hidden_layers} d={config.hidden_size} V={config.vocab_size}"
    return LoadedModel(model, ByteTokenizer(), dev, dt, shape)


def load_pretrained(model_path: str | Path, device: str = "auto", dtype: str = "auto",
                    adapter: str | Path | None = None) -> LoadedModel:
    """A model folder with weights and a tokenizer (local files only); ``adapter``: a LoRA adapter folder
    (timely_adapt) merged into the weights, after checking it was trained on this model (adapt/adapter.py)."""
    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model at {path} (expected config.json and weights)")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    hf_logging.disable_progress_bar()
    if adapter:
        from timely_llm_ros.adapt.adapter import check_adapter

        check_adapter(adapter, path)          # before loading anything: a mismatch names both
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, attn_implementation="sdpa", local_files_only=True)
    source = str(path)
    if adapter:
        from timely_llm_ros.adapt.adapter import apply_adapter

        model = apply_adapter(model, adapter, path)
        source = f"{path} + adapter {adapter}"
    model.to(dev).eval()
    return LoadedModel(model, _load_tokenizer(path), dev, dt, source)
