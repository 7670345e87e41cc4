"""An adapter's files, and applying one to the model it was trained on.

An adapter is a folder in peft's standard LoRA format (adapter_config.json, adapter_model.safetensors: llama.cpp and
vLLM read it as it is) plus ``timely_adapter.json``: the identity of the base model it was trained on, the robot
types and skill sets it was trained for, the prompt format, the corpus and the training run. A model entry names it
with ``adapter:`` (config/models.yaml); the transformers engine merges it into the weights when the model loads
(a merged model costs nothing per step and keeps the engine's packed linear layers), and the vLLM engine loads a
merged folder written once (``merged_folder``).

An adapter whose recorded base is not the model being loaded fails with a message naming both: the base's identity
is its architecture's shape and a fingerprint of its embedding weights as stored on disk (``base_identity``).

The identity and the metadata are torch-free; ``apply_adapter`` and ``merged_folder`` import torch and peft.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)

METADATA = "timely_adapter.json"
_SHAPE_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "vocab_size")
_EMBEDDING = "model.embed_tokens.weight"
_FINGERPRINT_BYTES = 1 << 20


class AdapterMismatch(ValueError):
    """The adapter was trained on another base model than the one it is applied to."""


@dataclass(frozen=True)
class BaseIdentity:
    """What a base model is: its folder's name (for people), its architecture's shape and a fingerprint of its
    embedding weights as stored (the first MiB of their bytes, with their dtype and shape)."""

    name: str
    shape: Mapping[str, Any]
    fingerprint: str = ""

    def matches(self, other: "BaseIdentity") -> bool:
        same_shape = dict(self.shape) == dict(other.shape)
        return same_shape and (not self.fingerprint or not other.fingerprint or self.fingerprint == other.fingerprint)

    def describe(self) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.name} ({shape}; weights {self.fingerprint or 'not fingerprinted'})"


@dataclass
class AdapterInfo:
    """timely_adapter.json: what an adapter was trained on and for."""

    base: BaseIdentity
    model_entry: str                          # the config/models.yaml entry it was trained for
    robot_types: dict[str, str]               # robot type -> digest of the system prompt it was trained with
    prompt: dict[str, Any]                    # prompt format: chat template or raw, where the worked examples go
    lora: dict[str, Any]                      # rank, alpha, target modules, saved dtype
    corpus: dict[str, Any] = field(default_factory=dict)      # examples, seed, per pattern, dropped draws
    training: dict[str, Any] = field(default_factory=dict)    # steps, seconds, tokens/s, loss, device, threads

    def write(self, folder: Path) -> None:
        data = asdict(self)
        with open(Path(folder) / METADATA, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")

    @classmethod
    def read(cls, folder: Path) -> "AdapterInfo":
        path = Path(folder) / METADATA
        if not path.is_file():
            raise FileNotFoundError(f"{folder} is not an adapter of this project (no {METADATA}): train one with "
                                    "`timely_adapt` (make adapt MODEL=... ROBOT=...)")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        base = data.pop("base")
        return cls(base=BaseIdentity(base["name"], base["shape"], base.get("fingerprint", "")), **data)


def base_identity(folder: str | Path) -> BaseIdentity:
    """The identity of the model in an HF folder (config.json and its safetensors weights), read without torch."""
    folder = Path(folder)
    with open(folder / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    shape = {k: config[k] for k in _SHAPE_KEYS if k in config}
    return BaseIdentity(folder.name, shape, _embedding_fingerprint(folder))


def _embedding_fingerprint(folder: Path) -> str:
    """sha256 (first 16 hex digits) of the embedding tensor's dtype, shape and first MiB of bytes; "" when the
    weights are not safetensors."""
    path = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        with open(index, encoding="utf-8") as f:
            path = folder / json.load(f)["weight_map"].get(_EMBEDDING, "")
    if not path.is_file():
        return ""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        entry = header.get(_EMBEDDING)
        if entry is None:
            return ""
        begin, end = entry["data_offsets"]
        f.seek(8 + size + begin)
        data = f.read(min(end - begin, _FINGERPRINT_BYTES))
    digest = hashlib.sha256(json.dumps([entry["dtype"], entry["shape"]]).encode() + data)
    return digest.hexdigest()[:16]


def robot_prompt_digest(skill_set, prompts) -> str:
    """A short digest of the prompt every request of a robot type starts with (a PromptEncoder's shared part;
    core/prompting.py), to tell when a skill set changed since an adapter was trained."""
    ids = prompts(skill_set, "\x00", "\x00")[: prompts.shared_tokens(skill_set)]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:12]


def check_adapter(adapter: str | Path, base_folder: str | Path, model_name: str = "") -> AdapterInfo:
    """The adapter's metadata, after checking that it was trained on the model in ``base_folder``
    (AdapterMismatch names both otherwise)."""
    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"no adapter at {adapter} (expected adapter_config.json and adapter_model.safetensors"
                                " written by timely_adapt)")
    info = AdapterInfo.read(adapter)
    here = base_identity(base_folder)
    if not info.base.matches(here):
        entry = f"model entry {model_name!r} loads " if model_name else "the model being loaded is "
        raise AdapterMismatch(f"adapter {adapter} was trained on {info.base.describe()}, but {entry}"
                              f"{here.describe()}: train an adapter for this model (make adapt MODEL=... ROBOT=...) "
                              "or remove adapter: from the entry")
    return info


def apply_adapter(model, adapter: str | Path, base_folder: str | Path, model_name: str = ""):
    """``model`` (loaded from ``base_folder``) with the adapter's LoRA merged into its weights; the adapter is
    checked against the base first. Returns the plain (unwrapped) model."""
    from peft import PeftModel

    info = check_adapter(adapter, base_folder, model_name)
    wrapped = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    merged = wrapped.merge_and_unload()
    log.info("merged adapter %s (trained for %s) into %s", adapter, ", ".join(info.robot_types), Path(base_folder).name)
    return merged


def merged_folder(base_folder: str | Path, adapter: str | Path, cache_root: Path, model_name: str = "") -> Path:
    """An HF folder holding the base with the adapter merged (for engines that load folders: vLLM), written once
    under ``cache_root`` and keyed by the base's folder and the adapter's weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_folder, adapter = Path(base_folder), Path(adapter)
    check_adapter(adapter, base_folder, model_name)
    weights = adapter / "adapter_model.safetensors"
    key = hashlib.sha256(weights.read_bytes()).hexdigest()[:12] if weights.is_file() else "unknown"
    folder = cache_root / f"{base_folder.name}+{adapter.name}-{key}"
    if (folder / "config.json").is_file():
        return folder
    log.warning("writing %s merged with adapter %s once (for the vLLM engine) ...", base_folder.name, adapter)
    model = AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32, local_files_only=True)
    model = apply_adapter(model, adapter, base_folder, model_name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(base_folder, local_files_only=True).save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(tmp)
        else:
            os.chmod(tmp, 0o755)
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
