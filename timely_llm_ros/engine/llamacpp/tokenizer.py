"""The Hugging Face tokenizer of a GGUF file, which the llamacpp engine tokenizes and detokenizes with.

The project's prompts (chat template, turn-aligned ids: engine/tokenizer.py), its grammar masks (engine/grammar.py)
and its incremental detokenizer all work on a Hugging Face tokenizer, so the llamacpp engine uses the one
transformers builds from the GGUF's own vocabulary (the same token ids llama.cpp's vocabulary has). Building it reads
the GGUF's metadata with ``gguf.GGUFReader`` (tens of seconds on this CPU for a 49k-token vocabulary), so it is done
once per file and kept as a tokenizer folder next to where engine/models.py keeps the file's converted model; when
that converted folder exists (``make setup`` prepares it for the transformers engine), its tokenizer is used as is.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from timely_llm_ros.core.models import GgufSource
from timely_llm_ros.engine.tokenizer import HFTokenizer, load_tokenizer

log = logging.getLogger(__name__)


def tokenizer_folder(gguf: Path, cache_dir: str | None = None) -> Path:
    """Where the tokenizer of ``gguf`` is kept in the model cache (``cache_dir`` as paths.model_cache_dir takes it):
    the converted model folder when there is one."""
    from timely_llm_ros.engine.models import converted_folder

    folder = converted_folder(GgufSource(file=str(gguf)), cache_dir)
    if (folder / "tokenizer_config.json").is_file():
        return folder
    return folder.with_name(folder.name + "-tokenizer")


def gguf_tokenizer(gguf: Path, cache_dir: str | None = None) -> HFTokenizer:
    """The tokenizer of the GGUF file ``gguf``, built from it on first use and kept in the model cache (see the
    module docstring)."""
    folder = tokenizer_folder(gguf, cache_dir)
    if not (folder / "tokenizer_config.json").is_file():
        _write_tokenizer(gguf, folder)
    tokenizer = load_tokenizer(folder)
    assert isinstance(tokenizer, HFTokenizer)
    return tokenizer


def _write_tokenizer(gguf: Path, folder: Path) -> None:
    """Build the tokenizer from the GGUF with transformers and save it into ``folder`` (atomically: a half-written
    folder is never seen; a folder another process wrote meanwhile is kept)."""
    from transformers import AutoTokenizer

    log.warning("building the tokenizer of %s once (reading its vocabulary takes a while) ...", gguf.name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:
        raise ValueError(f"transformers cannot build a tokenizer from {gguf}: {exc}") from exc
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tokenizer.save_pretrained(tmp)
        if folder.exists():
            shutil.rmtree(tmp)
        else:
            tmp.chmod(0o755)
            tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
