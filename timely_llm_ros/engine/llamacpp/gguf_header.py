"""A GGUF file's header key-values, read without parsing the rest of the file.

``gguf.GGUFReader`` parses every field (SmolLM2's 49k-token vocabulary included) through numpy memory maps: tens of
seconds on this CPU. The engine only needs a few scalars (``general.architecture`` first, to name an architecture
llama.cpp refuses), so this walks the key-value section in order and stops once it has them.

Layout (GGUF v2/v3, little-endian): magic ``GGUF``, version u32, tensor count u64, key-value count u64, then per
key-value a string key (u64 length + UTF-8 bytes), a value type u32 and the value; strings are u64 length + bytes,
arrays an element type u32, a count u64 and the elements.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO, Iterable

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GgufHeaderError(ValueError):
    """The file is not a GGUF file this reader understands."""


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise GgufHeaderError("truncated header")
    return data


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", _read(f, 8))
    return _read(f, n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: int, keep: bool) -> Any:
    """The value of type ``vtype`` at the file position (None for arrays and when not ``keep``: skipped)."""
    if vtype in _SCALARS:
        fmt = _SCALARS[vtype]
        raw = _read(f, struct.calcsize(fmt))
        return struct.unpack(fmt, raw)[0] if keep else None
    if vtype == _STRING:
        if keep:
            return _string(f)
        (n,) = struct.unpack("<Q", _read(f, 8))
        f.seek(n, 1)
        return None
    if vtype == _ARRAY:
        etype, count = struct.unpack("<IQ", _read(f, 12))
        if etype in _SCALARS:
            f.seek(count * struct.calcsize(_SCALARS[etype]), 1)
        else:
            for _ in range(count):
                _value(f, etype, False)
        return None
    raise GgufHeaderError(f"unknown value type {vtype}")


def read_header(path: str | Path, keys: Iterable[str]) -> dict[str, Any]:
    """The values of ``keys`` (scalars and strings) found in the header of the GGUF file at ``path``; keys it does
    not hold are absent. Reading stops once every key is found. GgufHeaderError when the file is not GGUF."""
    wanted = set(keys)
    found: dict[str, Any] = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GgufHeaderError(f"{path} is not a GGUF file (no GGUF magic)")
        version, _tensors, n_kv = struct.unpack("<IQQ", _read(f, 20))
        if version < 2:
            raise GgufHeaderError(f"{path}: GGUF version {version} is not supported (2 or later)")
        for _ in range(n_kv):
            if wanted <= found.keys():
                break
            key = _string(f)
            (vtype,) = struct.unpack("<I", _read(f, 4))
            value = _value(f, vtype, key in wanted)
            if key in wanted and value is not None:
                found[key] = value
    return found


def architecture(path: str | Path) -> str | None:
    """``general.architecture`` of a GGUF file (None when the header has none)."""
    return read_header(path, ["general.architecture"]).get("general.architecture")
