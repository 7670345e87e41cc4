"""llama.cpp through llama-cpp-python's low-level API: the model, its context with one KV pool for every sequence,
token batches and the abort flag. Only ctypes plumbing lives here; engine.py decides what runs.

- ``GgufModel``: the weights of a GGUF file as llama.cpp loads them (quantised as stored: nothing is dequantised).
  A file whose architecture llama.cpp does not know is refused naming the file and the architecture.
- ``KvContext``: a llama.cpp context whose KV cache gives each of ``sequences`` sequences a stream of its own of
  ``context`` cells (llama.cpp's non-unified KV: ``kv_unified`` off). A sequence's cells then sit where its own
  history put them, whatever the other sequences hold, so its attention sums run in the same order in every batch
  and its greedy tokens do not depend on what else the pool holds or when it was suspended. In one unified pool they
  do: a prefill placed behind another sequence's cells gave logits up to 0.5 apart on SmolLM2 (the same sums in
  another order, amplified over 30 layers) and changed greedy tokens. ``remove`` drops a sequence's cells from a
  position on; ``save`` and ``load`` move a sequence's state to host memory and back (offload, the prefix cache).
- ``LoraAdapter``: a llama.cpp LoRA GGUF (adapt/lora_gguf.py writes one from a peft adapter) loaded for a model;
  a context built with it computes every adapted linear layer as W x + (alpha / rank) * B (A x) (llama.cpp's
  scale 1.0 times the file's adapter.lora.alpha over the rank: peft's scaling). Free it after the contexts using it
  and before the model.
- ``TokenBatch``: the tokens of one ``llama_decode`` (token, position, sequence, whether its logits are wanted) in
  numpy arrays the batch struct points at, filled without a ctypes call per token.
- The abort flag: llama.cpp calls the context's abort callback after every graph node of a decode (ggml-cpu checks
  it between nodes, on its first thread) and ends the decode when it returns true. The callback is libc's
  ``strlen`` on a two-byte buffer: it returns 1 when the first byte is set and 0 otherwise, read as the callback's
  bool (the low byte of the return register on x86-64 and AArch64), so checking the flag costs no Python call and
  never waits for the GIL. engine.py sets the flag from the thread that polls ``interrupt_check``.
"""
from __future__ import annotations

import collections
import ctypes
import ctypes.util
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engine.llamacpp.gguf_header import GgufHeaderError, architecture

log = logging.getLogger(__name__)

_INIT = threading.Lock()
_lib: Any = None
_recent: collections.deque[str] = collections.deque(maxlen=40)   # llama.cpp's latest log lines (for errors)
_log_callback: Any = None                                         # kept alive: llama.cpp holds its address


def lib() -> Any:
    """The llama_cpp module (llama-cpp-python), its backend initialised and its log routed to Python's logging (the
    latest lines kept for error messages). EngineError says how to install it when it is missing."""
    global _lib, _log_callback
    with _INIT:
        if _lib is None:
            try:
                import llama_cpp
            except ImportError as exc:
                raise EngineError("engine llamacpp needs llama-cpp-python (built from source by `make setup`, "
                                  f"tools/setup_venv.sh): {exc}") from exc

            def on_log(level: int, text: bytes, _data: Any) -> None:
                line = text.decode("utf-8", errors="replace").rstrip("\n")
                if line.strip():
                    _recent.append(line)
                if level in (2, 3) and line.strip():       # GGML_LOG_LEVEL_WARN, _ERROR
                    log.debug("llama.cpp: %s", line)

            _log_callback = llama_cpp.llama_log_callback(on_log)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _lib = llama_cpp
    return _lib


def recent_log(lines: int = 6) -> str:
    """The last lines llama.cpp logged (joined with ' | ')."""
    return " | ".join(list(_recent)[-lines:])


def _strlen_abort_callback(llama_cpp: Any) -> Any:
    """libc's strlen as a ggml_abort_callback (see the module docstring)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    return ctypes.cast(libc.strlen, llama_cpp.ggml_abort_callback)


def cpu_has_amx() -> bool:
    """Whether this CPU has Intel AMX: /proc/cpuinfo names ``amx_int8`` (False where there is no such file)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and " amx_int8" in line for line in f)
    except OSError:
        return False


def model_params(llama_cpp, gpu_layers: int = 0):
    """llama.cpp's model parameters for this machine: its defaults, ``gpu_layers`` layers offloaded, and on an Intel
    AMX CPU no extra weight buffer types. There llama.cpp (as llama-cpp-python 0.3.36 builds it with GGML_NATIVE)
    repacks the weights into AMX buffers, and a decode of more than one token over them segfaults (measured on a
    2-core Xeon: a 40-token prefill of SmolLM2's Q4_1 file, in the bare low-level API too); plain CPU buffers run
    the same file correctly there. Other CPUs keep the defaults (their repacked buffers are llama.cpp's fast path)."""
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = int(gpu_layers)
    if hasattr(params, "use_extra_bufts") and cpu_has_amx():
        log.info("llamacpp: this CPU has Intel AMX: weights stay in plain CPU buffers (llama.cpp's AMX buffers "
                 "crash a multi-token decode in this build)")
        params.use_extra_bufts = False
    return params


class GgufModel:
    """A GGUF file loaded by llama.cpp (weights as stored), with its vocabulary and shape."""

    def __init__(self, path: str | Path, gpu_layers: int = 0) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise EngineError(f"llamacpp: no GGUF file at {self.path}")
        try:
            self.architecture = architecture(self.path) or "(none in its header)"
        except (GgufHeaderError, OSError) as exc:
            raise EngineError(f"llamacpp: cannot read {self.path}: {exc}") from exc
        llama_cpp = lib()
        params = model_params(llama_cpp, gpu_layers)
        _recent.clear()
        self.ptr = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            said = recent_log()
            if "unknown model architecture" in said:
                raise EngineError(f"llamacpp: {self.path} is a GGUF of architecture {self.architecture!r}, which this "
                                  f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) does not know; serve it with "
                                  "engine:=transformers if transformers does, or use a model of a known architecture")
            raise EngineError(f"llamacpp: llama.cpp could not load {self.path} (architecture {self.architecture!r}): "
                              f"{said or 'no reason logged'}")
        self._lib = llama_cpp
        if llama_cpp.llama_model_is_recurrent(self.ptr) or llama_cpp.llama_model_is_hybrid(self.ptr):
            self.close()
            raise EngineError(f"llamacpp: {self.path} ({self.architecture}) keeps a recurrent state, not a KV per token: "
                              "this engine suspends, copies and cuts sequences by token position, which such models "
                              "cannot do; use a transformer model")
        self.vocab = llama_cpp.llama_model_get_vocab(self.ptr)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.n_layer = int(llama_cpp.llama_model_n_layer(self.ptr))
        self.n_head = int(llama_cpp.llama_model_n_head(self.ptr))
        self.n_head_kv = int(llama_cpp.llama_model_n_head_kv(self.ptr))
        self.n_embd = int(llama_cpp.llama_model_n_embd(self.ptr))
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self.ptr))
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.ptr, buf, len(buf))
        self.description = buf.value.decode(errors="replace")
        self.eog_ids = {t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)}

    def kv_bytes_per_token(self, element_bytes: int = 2) -> int:
        """KV bytes one token of context takes in every layer (K and V, f16 cells by default)."""
        head_dim = self.n_embd // max(self.n_head, 1)
        return self.n_layer * 2 * self.n_head_kv * head_dim * element_bytes

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self._lib.llama_model_free(self.ptr)
            self.ptr = None


class LoraAdapter:
    """A LoRA GGUF loaded by llama.cpp for ``model`` (llama_adapter_lora_init); EngineError names the file and
    what llama.cpp said when it refuses it (a LoRA for another model: missing tensors or wrong shapes)."""

    def __init__(self, model: GgufModel, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise EngineError(f"llamacpp: no LoRA GGUF at {self.path}")
        llama_cpp = self._lib = lib()
        _recent.clear()
        self.ptr = llama_cpp.llama_adapter_lora_init(model.ptr, str(self.path).encode())
        if not self.ptr:
            raise EngineError(f"llamacpp: llama.cpp could not apply the LoRA {self.path} to {model.path}: "
                              f"{recent_log() or 'no reason logged'}")

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self._lib.llama_adapter_lora_free(self.ptr)
            self.ptr = None


class KvContext:
    """A llama.cpp context over ``model``: ``sequences`` KV streams of ``context`` cells each, ``threads`` CPU threads,
    the abort flag installed, and ``lora`` applied at scale 1.0 when given."""

    def __init__(self, model: GgufModel, sequences: int, context: int, threads: int,
                 flash_attention: bool | None = True, lora: LoraAdapter | None = None) -> None:
        llama_cpp = self._lib = lib()
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = int(sequences) * int(context)
        p.n_batch = p.n_ctx                  # a step's tokens, however many, in one llama_decode (only an index per
        p.n_ubatch = 512                     # token scales with it); llama.cpp runs them in micro-batches of 512
        p.n_seq_max = int(sequences)
        p.n_outputs_max = int(sequences)     # one logits row per sequence and step at most: a small output buffer
        p.n_threads = p.n_threads_batch = int(threads)
        p.kv_unified = False                 # a stream per sequence (see the module docstring)
        p.swa_full = True                    # sliding-window layers keep every position: a sequence can be cut back
        p.no_perf = True
        # flash attention keeps V untransposed in the cache. On SmolLM2 Q4_1, 2 threads, 800 tokens of context it
        # costs a 24-token prefill 91 ms against 75 ms without and saves a batch-8 decode step 43 against 46.5 ms;
        # a sequence's state saves and loads in 2-3 ms either way
        p.flash_attn_type = {None: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                             False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attention]
        self._flag = ctypes.create_string_buffer(2)       # [0] = 1: abort the decode in flight
        self._abort_fn = _strlen_abort_callback(llama_cpp)
        p.abort_callback = self._abort_fn
        p.abort_callback_data = ctypes.cast(self._flag, ctypes.c_void_p)
        self.ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not self.ptr:
            raise EngineError(f"llamacpp: llama.cpp could not make a context of {sequences} sequences x {context} KV "
                              f"cells for {model.path}: {recent_log() or 'no reason logged'}")
        self.model = model
        if lora is not None:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(lora.ptr)
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(self.ptr, adapters, 1, scales) != 0:
                self.close()
                raise EngineError(f"llamacpp: llama.cpp could not set the LoRA {lora.path} on a context of "
                                  f"{model.path}: {recent_log() or 'no reason logged'}")
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(self.ptr))
        self.context = int(llama_cpp.llama_n_ctx(self.ptr)) // self.n_seq_max     # cells of each sequence's stream
        self._mem = llama_cpp.llama_get_memory(self.ptr)
        self._logits_type = ctypes.POINTER(ctypes.c_float)

    # ----- the abort flag -----
    def request_abort(self) -> None:
        """Make the decode in flight end at its next graph node (any thread)."""
        self._flag[0] = b"\x01"

    def clear_abort(self) -> None:
        self._flag[0] = b"\x00"

    # ----- sequences -----
    def remove(self, seq: int, start: int = 0) -> None:
        """Drop the cells of positions [start, inf) of ``seq`` (cells no other sequence shares become free)."""
        if not self._lib.llama_memory_seq_rm(self._mem, seq, start, -1):
            raise EngineError(f"llamacpp: llama.cpp could not cut sequence {seq} back to {start} tokens")

    def positions(self, seq: int) -> int:
        """Tokens sequence ``seq`` holds (its largest position + 1)."""
        return int(self._lib.llama_memory_seq_pos_max(self._mem, seq)) + 1

    # ----- a sequence's state in host memory (offload) -----
    def save(self, seq: int) -> bytes:
        """The KV of ``seq`` serialised by llama.cpp (positions and K/V of every layer)."""
        size = int(self._lib.llama_state_seq_get_size_ext(self.ptr, seq, 0))
        buf = (ctypes.c_uint8 * size)()
        n = int(self._lib.llama_state_seq_get_data_ext(self.ptr, buf, size, seq, 0))
        if n == 0:
            raise EngineError(f"llamacpp: llama.cpp could not save sequence {seq}: {recent_log() or 'no reason'}")
        return bytes(memoryview(buf)[:n])

    def load(self, seq: int, state: bytes) -> None:
        """Put a state ``save`` made into the empty sequence ``seq`` (its stream's first cells, as a prefill into the
        empty stream would have placed them)."""
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if int(self._lib.llama_state_seq_set_data_ext(self.ptr, buf, len(state), seq, 0)) == 0:
            raise EngineError(f"llamacpp: llama.cpp could not restore sequence {seq} ({len(state)} bytes): "
                              f"{recent_log() or 'no free cells for it'}")

    # ----- decoding -----
    def decode(self, batch: "TokenBatch") -> int:
        """llama_decode of ``batch`` (the GIL is released meanwhile): 0 done, 1 no KV cells for it, 2 aborted,
        other values failures."""
        return int(self._lib.llama_decode(self.ptr, batch.struct))

    def logits(self, rows: int) -> np.ndarray:
        """The logits of the last decode, one row per token it asked logits for, in batch order (a view of
        llama.cpp's buffer: valid until the next decode)."""
        ptr = self._lib.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(ctypes.cast(ptr, self._logits_type), shape=(rows, self.model.n_vocab))

    def close(self) -> None:
        if getattr(self, "ptr", None):
            self._lib.llama_free(self.ptr)
            self.ptr = None


class TokenBatch:
    """A llama_batch over numpy arrays (grown on demand): one sequence id per token."""

    def __init__(self, capacity: int = 64) -> None:
        self._lib = lib()
        self.n = 0
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, np.int32)
        self.pos = np.zeros(capacity, np.int32)
        self.n_seq_id = np.ones(capacity, np.int32)
        self.seq = np.zeros(capacity, np.int32)
        self.want = np.zeros(capacity, np.int8)
        # seq_id[i] points at seq[i]: one sequence per token, filled as a numpy array
        base = self.seq.ctypes.data
        self._seq_ptrs = np.arange(capacity, dtype=np.uintp) * self.seq.itemsize + base
        llama_cpp = self._lib
        self.struct = llama_cpp.llama_batch()
        self.struct.token = self.token.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token))
        self.struct.embd = None
        self.struct.pos = self.pos.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_pos))
        self.struct.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        self.struct.seq_id = self._seq_ptrs.ctypes.data_as(ctypes.POINTER(ctypes.POINTER(llama_cpp.llama_seq_id)))
        self.struct.logits = self.want.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))

    def clear(self) -> None:
        self.n = 0

    def reserve(self, tokens: int) -> None:
        if self.n + tokens > self.capacity:
            old = (self.token[:self.n].copy(), self.pos[:self.n].copy(), self.seq[:self.n].copy(),
                   self.want[:self.n].copy())
            self._alloc(max(2 * self.capacity, self.n + tokens))
            self.token[:len(old[0])], self.pos[:len(old[0])], self.seq[:len(old[0])], self.want[:len(old[0])] = old

    def add_one(self, token: int, pos: int, seq: int) -> None:
        """Append one token whose logits are wanted (a decode)."""
        self.reserve(1)
        i = self.n
        self.token[i], self.pos[i], self.seq[i], self.want[i] = token, pos, seq, 1
        self.n = i + 1
        self.struct.n_tokens = self.n

    def add(self, tokens: Any, start_pos: int, seq: int, logits_last: bool) -> None:
        """Append ``tokens`` of sequence ``seq`` at positions start_pos, start_pos + 1, ...; the last one's logits
        are output when ``logits_last``."""
        k = len(tokens)
        self.reserve(k)
        i = self.n
        self.token[i:i + k] = tokens
        self.pos[i:i + k] = np.arange(start_pos, start_pos + k, dtype=np.int32)
        self.seq[i:i + k] = seq
        self.want[i:i + k] = 0
        if logits_last:
            self.want[i + k - 1] = 1
        self.n += k
        self.struct.n_tokens = self.n
