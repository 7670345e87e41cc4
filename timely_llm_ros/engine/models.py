"""Where a model entry's weights are on disk: its folder, or a GGUF file converted once into an HF folder.

transformers reads a GGUF file only by dequantizing every tensor (16 s for SmolLM2-135M on 2 cores), so the
result is written once as a plain safetensors folder, keyed by the file's content hash, and every later load (the
server, tests, the vLLM engine, which serves the same folder) takes a second. ``make setup`` prepares the entries
of config/models.yaml; a server asked for an entry that is not prepared yet converts it first and says so.

    python -m timely_llm_ros.engine.models prepare [NAME ...]     # default: every GGUF entry
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from timely_llm_ros.core.models import GgufSource, ModelSpec, load_model_specs
from timely_llm_ros.paths import share_dir

log = logging.getLogger(__name__)


def cache_root() -> Path:
    """build/models/ of the checkout (or of the share folder) when writable, else ~/.cache/timely_llm_ros/models."""
    build = share_dir() / "build"
    if os.access(build if build.exists() else build.parent, os.W_OK):
        return build / "models"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "timely_llm_ros" / "models"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


def converted_folder(source: GgufSource) -> Path:
    """Where the HF folder of a GGUF file lives once converted (it may not exist yet)."""
    path = source.locate()
    return cache_root() / f"{path.stem}-{_digest(path)}"


def weights_folder(spec: ModelSpec, convert: bool = True) -> Path:
    """The HF folder holding the entry's weights and tokenizer; a GGUF entry is converted first when needed
    (convert=False: FileNotFoundError instead)."""
    folder = spec.folder()
    if folder is not None:
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"model {spec.name!r}: no model at {folder} (expected config.json and weights)")
        return folder
    assert spec.gguf is not None
    folder = converted_folder(spec.gguf)
    if (folder / "config.json").is_file():
        return folder
    if not convert:
        raise FileNotFoundError(f"model {spec.name!r} is not converted yet: run `make setup` or "
                                f"`python -m timely_llm_ros.engine.models prepare {spec.name}`")
    return convert_gguf(spec.gguf.locate(), folder)


def convert_gguf(gguf: Path, folder: Path) -> Path:
    """Dequantize a GGUF file with transformers and write model + tokenizer as an HF folder (atomically: a
    half-written folder is never seen). A GGUF-loaded model refuses save_pretrained, so its weights are handed to
    a plain model of the same config (built without weights, on the meta device) first."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s into an HF folder once (dequantizing every tensor takes a while) ...", gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
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
    log.warning("converted %s into %s", gguf.name, folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="convert GGUF entries of config/models.yaml into HF folders (idempotent)")
    prep.add_argument("names", nargs="*", help="entries to prepare (default: every GGUF entry)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[models] %(message)s")
    specs = load_model_specs()
    names = args.names or [n for n, s in specs.items() if s.gguf is not None]
    for name in names:
        if name not in specs:
            print(f"[models] unknown model {name!r}; known: {', '.join(specs)}", file=sys.stderr)
            return 2
        try:
            print(f"[models] {name}: {weights_folder(specs[name])}")
        except FileNotFoundError as exc:
            print(f"[models] {name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
