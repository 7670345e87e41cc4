"""Where a model entry's weights are on disk: its folder, or a GGUF file converted once into an HF folder.

transformers reads a GGUF file only by dequantizing every tensor (16 s for SmolLM2-135M on 2 cores), so the
result is written once as a plain safetensors folder, keyed by the file's content hash, into the model cache
(paths.model_cache_dir: the same folder whether the package runs from the checkout's venv or from a colcon
install), and every later load (the server, tests, the vLLM engine, which serves the same folder) takes a second.
``make setup`` prepares the entries of config/models.yaml; a server asked for an entry that is not prepared yet
converts it first and logs its progress.

    python -m timely_llm_ros.engine.models prepare [--cache-dir DIR] [NAME ...]   # default: every GGUF entry
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable

from timely_llm_ros.core.models import GgufSource, ModelSpec, load_model_specs
from timely_llm_ros.paths import MODEL_CACHE_ENV, model_cache_dir

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
CHOOSE_CACHE = (f"the server parameter model_cache_dir, or {MODEL_CACHE_ENV}, chooses the cache folder "
                "(docs/ros_build.md, 'Models on a ROS install')")


class ModelPrepareError(RuntimeError):
    """A model entry that is not prepared and could not be: the message says what to change."""


@lru_cache(maxsize=32)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


def _digest(path: Path) -> str:
    """The first 12 hex digits of the file's SHA-256 (computed once per process for an unchanged file)."""
    st = path.stat()
    return _digest_of(str(path), st.st_size, st.st_mtime_ns)


def converted_folder(source: GgufSource, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the HF folder of a GGUF file lives once converted (it may not exist yet); ``cache_dir`` as
    paths.model_cache_dir takes it."""
    path = source.locate()
    return model_cache_dir(cache_dir) / f"{path.stem}-{_digest(path)}"


def weights_folder(spec: ModelSpec, convert: bool = True, cache_dir: str | os.PathLike[str] | None = None,
                   progress: Progress | None = None) -> Path:
    """The HF folder holding the entry's weights and tokenizer. A GGUF entry is looked up in the model cache
    (``cache_dir``: see paths.model_cache_dir) and, when not there yet, converted into it first, each step reported
    to ``progress`` (default: this module's logger); convert=False raises FileNotFoundError instead. A conversion
    that cannot be done raises ModelPrepareError saying why."""
    folder = spec.folder()
    if folder is not None:
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"model {spec.name!r}: no model at {folder} (expected config.json and weights)")
        return folder
    assert spec.gguf is not None
    gguf = spec.gguf.locate()
    folder = converted_folder(spec.gguf, cache_dir)
    if (folder / "config.json").is_file():
        return folder
    if not convert:
        raise FileNotFoundError(f"model {spec.name!r} is not prepared yet (no {folder}): run `make setup` or "
                                f"`python -m timely_llm_ros.engine.models prepare {spec.name}`; {CHOOSE_CACHE}")
    check_writable(folder.parent, spec.name)
    report = progress or log.warning
    report(f"model {spec.name!r} is not prepared yet: converting {gguf.name} ({gguf.stat().st_size / 1e6:.0f} MB) "
           f"into {folder} once (dequantizing every tensor: tens of seconds on a small CPU)")
    try:
        return convert_gguf(gguf, folder, report)
    except Exception as exc:
        raise ModelPrepareError(f"model {spec.name!r}: converting {gguf} into {folder} failed ({type(exc).__name__}: "
                                f"{exc}); the converter needs transformers with the gguf and accelerate packages "
                                "(requirements.txt) and room for the float32 weights") from exc


def check_writable(cache: Path, name: str) -> None:
    """Fail before the slow conversion when the cache folder cannot be made or written."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        probe = tempfile.TemporaryFile(dir=cache)
        probe.close()
    except OSError as exc:
        raise ModelPrepareError(
            f"model {name!r} is not prepared and the model cache {cache} is not writable ({exc}): {CHOOSE_CACHE}; "
            f"or prepare it ahead with `python -m timely_llm_ros.engine.models prepare {name}` as a user who can "
            "write there") from exc


def convert_gguf(gguf: Path, folder: Path, progress: Progress | None = None) -> Path:
    """Dequantize a GGUF file with transformers and write model + tokenizer as an HF folder (atomically: a
    half-written folder is never seen). A GGUF-loaded model refuses save_pretrained, so its weights are handed to
    a plain model of the same config (built without weights, on the meta device) first. ``progress`` gets one line
    per step with the time taken."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = progress or log.warning
    t0 = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    report(f"{gguf.name}: tokenizer read ({time.monotonic() - t0:.1f} s)")
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    report(f"{gguf.name}: weights dequantized ({time.monotonic() - t0:.1f} s)")
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):      # the weights are dequantized: the folder is a plain model
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if folder.exists():          # another process converted it meanwhile
            shutil.rmtree(tmp)
        else:
            tmp.chmod(0o755)
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report(f"{gguf.name}: converted into {folder} ({time.monotonic() - t0:.1f} s in all)")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="convert GGUF entries of config/models.yaml into HF folders in the model "
                                          "cache, and their adapters into LoRA GGUFs (idempotent); prints each "
                                          "entry's folder")
    prep.add_argument("names", nargs="*", help="entries to prepare (default: every GGUF entry)")
    prep.add_argument("--cache-dir", default="", help=f"the model cache (default: ${MODEL_CACHE_ENV}, else "
                                                      "$XDG_CACHE_HOME/timely_llm_ros/models)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[models] %(message)s")
    specs = load_model_specs()
    names = args.names or [n for n, s in specs.items() if s.gguf is not None]
    for name in names:
        if name not in specs:
            print(f"[models] unknown model {name!r}; known: {', '.join(specs)}", file=sys.stderr)
            return 2
        spec = specs[name]
        try:
            print(f"[models] {name}: {weights_folder(spec, cache_dir=args.cache_dir or None)}")
            if spec.gguf is not None and spec.adapter_folder() is not None:   # what the llamacpp engine applies
                from timely_llm_ros.adapt.lora_gguf import lora_gguf

                lora = lora_gguf(spec.adapter_folder(), spec.gguf.locate(), model_cache_dir(args.cache_dir or None))
                print(f"[models] {name}: its adapter for llama.cpp: {lora}")
        except (FileNotFoundError, ModelPrepareError) as exc:
            print(f"[models] {name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
