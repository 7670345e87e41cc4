"""An adapter (peft's LoRA format) as a llama.cpp LoRA GGUF, so that the llamacpp engine applies it on top of the
quantised weights as stored (llama_adapter_lora_init), written once per adapter and base file.

What llama.cpp expects of the file (src/llama-adapter.cpp, src/llama-graph.cpp):
- metadata ``general.type`` = "adapter", ``general.architecture`` = the base model's, ``adapter.type`` = "lora" and
  ``adapter.lora.alpha``;
- for a base weight named W (e.g. ``blk.0.attn_q.weight``) the tensors ``W.lora_a`` and ``W.lora_b``, whose shapes
  in numpy order are peft's: lora_a (rank, in_features), lora_b (out_features, rank);
- each linear layer then computes W x + s * B (A x), s = scale * alpha / rank (rank = lora_b's columns; s = scale
  when alpha is 0). The engine applies the adapter at scale 1.0, which is peft's alpha / r for a plain LoRA; other
  peft scalings (rsLoRA, per-module alpha) are folded into lora_b so that s stays right.

For the llama architecture the GGUF converter stores the rows of q_proj and k_proj permuted for llama.cpp's rope
(per head: the first and second halves of the head's rows interleaved; k by n_head_kv). W x's rows are then those
permuted rows, so lora_b of q_proj and k_proj takes the same row permutation (lora_a acts on the input: unchanged).

Needs torch only to read adapter weights stored in bfloat16; float32 and float16 weights are read with numpy.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FORMAT_VERSION = 1          # bump when the written file changes for the same inputs
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

# HF module name -> the GGUF name of the weight it wraps, in block i
GGUF_MODULE = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
               "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
# architectures whose GGUF converter permutes the rows of q and k for rope (by n_head and n_head_kv)
ROPE_PERMUTED = {"llama"}
# architectures whose q and k rows are stored as in the HF weights
NOT_PERMUTED = {"qwen2", "qwen3", "mistral3", "gemma", "gemma2", "gemma3", "olmo", "olmo2", "granite", "stablelm"}

_PEFT_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>(?:.*\.)?layers\.(?P<block>\d+)\.(?:self_attn|mlp)\."
                       r"(?P<proj>\w+))\.lora_(?P<ab>[AB])\.weight$")


class LoraExportError(ValueError):
    """The adapter cannot be written as a llama.cpp LoRA for this base GGUF (the message says why and what to do)."""


def rope_permute_rows(rows: np.ndarray, heads: int) -> np.ndarray:
    """``rows`` (out_features, ...) reordered as the GGUF converter orders q/k rows: within each of ``heads`` heads,
    row j of the first half and row j of the second half become rows 2j and 2j + 1."""
    out = rows.shape[0]
    if out % (2 * heads):
        raise LoraExportError(f"cannot permute {out} rows over {heads} heads for rope: not a multiple of {2 * heads}")
    half = out // heads // 2
    return rows.reshape(heads, 2, half, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def _base_header(base_gguf: Path) -> dict[str, Any]:
    """The base GGUF's architecture and head counts (read from its header, not from its weights)."""
    from timely_llm_ros.engine.llamacpp.gguf_header import architecture, read_header

    arch = architecture(base_gguf)
    keys = [f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"]
    values = read_header(base_gguf, keys)
    heads = values.get(keys[0])
    heads_kv = values.get(keys[1], heads)
    return {"arch": arch, "n_head": None if heads is None else int(heads),
            "n_head_kv": None if heads_kv is None else int(heads_kv)}


def _read_adapter_weights(path: Path) -> dict[str, np.ndarray]:
    """The adapter's tensors as float32 numpy arrays."""
    try:
        from safetensors.numpy import load_file

        return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    except (TypeError, ValueError):           # bfloat16: numpy has no such dtype
        from safetensors.torch import load_file as load_torch

        return {k: v.float().numpy() for k, v in load_torch(str(path)).items()}


def _module_alpha(config: dict[str, Any], module: str) -> float:
    """peft's alpha for ``module``: alpha_pattern's entry whose key ends the module's name, else lora_alpha."""
    for pattern, alpha in (config.get("alpha_pattern") or {}).items():
        if re.match(rf"(?:.*\.)?{pattern}$", module):
            return float(alpha)
    return float(config["lora_alpha"])


def adapter_key(adapter: Path, base_gguf: Path) -> str:
    """The digest naming the converted file: the adapter's weights and config, the base's header facts the
    conversion reads, and this format's version."""
    header = _base_header(base_gguf)
    h = hashlib.sha256()
    h.update((adapter / ADAPTER_WEIGHTS).read_bytes())
    h.update((adapter / ADAPTER_CONFIG).read_bytes())
    h.update(json.dumps([header["arch"], header["n_head"], header["n_head_kv"], FORMAT_VERSION]).encode())
    return h.hexdigest()[:12]


def write_lora_gguf(adapter: str | Path, base_gguf: str | Path, out: str | Path) -> Path:
    """Write the peft adapter in ``adapter`` as a llama.cpp LoRA GGUF for ``base_gguf`` at ``out``. LoraExportError
    for an adapter llama.cpp cannot apply as a LoRA (other modules than the seven linear projections, DoRA, an
    architecture whose q/k layout is not known here)."""
    adapter, base_gguf, out = Path(adapter), Path(base_gguf), Path(out)
    from gguf import GGUFWriter

    with open(adapter / ADAPTER_CONFIG, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("use_dora"):
        raise LoraExportError(f"adapter {adapter} is a DoRA adapter, which llama.cpp does not apply: serve it with "
                              "engine: transformers (merged at load)")
    header = _base_header(base_gguf)
    arch = header["arch"]
    if arch in ROPE_PERMUTED and header["n_head"] is None:
        raise LoraExportError(f"{base_gguf} has no {arch}.attention.head_count: cannot lay out q/k rows for it")
    if arch not in ROPE_PERMUTED | NOT_PERMUTED:
        raise LoraExportError(f"{base_gguf} is a GGUF of architecture {arch!r}, whose q/k row layout this converter "
                              "does not know: serve the adapter with engine: transformers (merged at load)")
    weights = _read_adapter_weights(adapter / ADAPTER_WEIGHTS)
    pairs: dict[str, dict[str, Any]] = {}
    for key, value in weights.items():
        m = _PEFT_KEY.match(key)
        if m is None or m["proj"] not in GGUF_MODULE:
            raise LoraExportError(f"adapter {adapter} has the tensor {key}, which the llamacpp engine cannot apply "
                                  f"(it applies LoRA on {', '.join(GGUF_MODULE)}): serve it with engine: transformers")
        pair = pairs.setdefault(m["module"], {"block": int(m["block"]), "proj": m["proj"]})
        pair[m["ab"]] = value
    alpha = float(config["lora_alpha"])
    rslora = bool(config.get("use_rslora"))
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}-", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        writer = GGUFWriter(tmp, arch)
        writer.add_type("adapter")
        writer.add_string("adapter.type", "lora")
        writer.add_float32("adapter.lora.alpha", alpha)
        for module, pair in sorted(pairs.items(), key=lambda kv: (kv[1]["block"], kv[0])):
            if "A" not in pair or "B" not in pair:
                raise LoraExportError(f"adapter {adapter}: {module} has lora_A or lora_B but not both")
            a, b = pair["A"], pair["B"]
            rank = b.shape[1]
            peft_scale = _module_alpha(config, module) / (math.sqrt(rank) if rslora else rank)
            llama_scale = alpha / rank
            if not math.isclose(peft_scale, llama_scale, rel_tol=1e-7):
                b = b * np.float32(peft_scale / llama_scale)
            if arch in ROPE_PERMUTED and pair["proj"] == "q_proj":
                b = rope_permute_rows(b, header["n_head"])
            elif arch in ROPE_PERMUTED and pair["proj"] == "k_proj":
                b = rope_permute_rows(b, header["n_head_kv"])
            name = f"blk.{pair['block']}.{GGUF_MODULE[pair['proj']]}.weight"   # llama.cpp checks it exists
            writer.add_tensor(f"{name}.lora_a", np.ascontiguousarray(a, dtype=np.float32))
            writer.add_tensor(f"{name}.lora_b", np.ascontiguousarray(b, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def lora_gguf(adapter: str | Path, base_gguf: str | Path, cache_root: Path) -> Path:
    """The adapter as a llama.cpp LoRA GGUF for ``base_gguf``: written once under ``cache_root`` (the model cache,
    paths.model_cache_dir), named by the adapter's folder and ``adapter_key``."""
    adapter, base_gguf = Path(adapter), Path(base_gguf)
    if not (adapter / ADAPTER_CONFIG).is_file() or not (adapter / ADAPTER_WEIGHTS).is_file():
        raise FileNotFoundError(f"no adapter at {adapter} (expected {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS} written "
                                "by timely_adapt)")
    path = Path(cache_root) / f"{adapter.name}-{adapter_key(adapter, base_gguf)}.lora.gguf"
    if path.is_file():
        return path
    log.warning("writing adapter %s as a llama.cpp LoRA GGUF once: %s", adapter, path)
    return write_lora_gguf(adapter, base_gguf, path)
