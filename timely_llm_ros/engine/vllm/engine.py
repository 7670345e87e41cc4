"""The vLLM engine: vLLM's own v1 LLMEngine, stepped in-process one step at a time.

- add: ``LLMEngine.add_request`` with token ids and DELTA output, so each step returns only the new
  token of each generation. The request enters vLLM's waiting queue at once.
- step: one ``LLMEngine.step()`` over exactly the given generations. vLLM's scheduler is replaced
  (``scheduler_cls``) by ChosenSetScheduler, which hides the other requests from vLLM for that step.
- suspend / resume: a suspended request stays in vLLM's running list with its KV blocks, just not
  scheduled; resuming is its next decode step (no prefill, no re-tokenization). Under KV pressure a
  parked request is preempted by vLLM (recompute, prefix-cached) to make room for the chosen ones.
  docs/engine.md compares this with vLLM's streaming-input sessions and with prefix-cached re-submission.
- release: ``abort_request`` (frees the blocks; prefix-cache hashes stay until evicted).
- memory: blocks held by our requests x bytes per block, against the configured KV pool.
"""
from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from timely_llm_ros.core.engine import Engine, EngineCapabilities, EngineError, MemoryStats, StepResult
from timely_llm_ros.engine.generation_table import GenerationTable


def configure_environment(cache_root: str | Path | None = None) -> None:
    """vLLM settings that must be in place before ``import vllm``: offline, in-process, caches under build/."""
    from timely_llm_ros.paths import share_dir

    root = Path(cache_root) if cache_root else share_dir() / "build" / "vllm_cache"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")   # the engine core runs in this process
    os.environ.setdefault("VLLM_CACHE_ROOT", str(root))
    os.environ.setdefault("VLLM_CONFIG_ROOT", str(root / "config"))
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
    # option vllm_compile: inductor's precompiled C++ headers go to the system temp dir whatever the cache dir
    os.environ.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")


@dataclass
class VllmOptions:
    """vLLM settings the server exposes (ros/server/parameters.py) and the factory passes through."""

    block_size: int = 32                 # CPU attention needs a multiple of 32; 32 lets the prefix cache reuse short prompts
    kv_bytes: int = 256 * 2**20          # KV pool (zero-filled at start, counts in RSS on CPU)
    dtype: str = "float32"               # explicit: "auto" runs an fp32 model in bf16 on CPU
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_num_seqs: int = 64
    max_num_batched_tokens: int | None = None   # default: max_model_len x 4 (a step's prefills fit at once)
    prefix_caching: bool = True
    enforce_eager: bool = True           # no graph capture / torch.compile: starts in seconds (option vllm_compile)
    distributed_executor_backend: str | None = None   # vLLM's own ("mp", "ray") when spanning devices
    seed: int = 0


@dataclass(eq=False)
class _Gen:
    gen_id: str
    req_id: str                      # vLLM's internal request id (external id + random suffix)
    prompt: list[int]
    max_new_tokens: int
    output: list[int] = field(default_factory=list)
    suspended: bool = False
    finished: bool = False


class VllmEngine(GenerationTable, Engine):
    """The Engine interface over vLLM's step-level engine API."""

    # vLLM samples its own tokens (add() refuses forced_ids) and runs a step's prefills and decodes as one batch
    capabilities = EngineCapabilities(replays_forced_ids=False, fused_steps=True)

    def __init__(self, model_path: str, options: VllmOptions | None = None, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int = 0, num_threads: int | None = None,
                 max_model_len: int | None = None) -> None:
        configure_environment()
        import torch

        from vllm import SamplingParams
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import EngineArgs
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
        from vllm.v1.engine.llm_engine import LLMEngine

        from timely_llm_ros.engine.tokenizer import load_tokenizer as _load_tokenizer
        from timely_llm_ros.engine.vllm.scheduler import ChosenSetScheduler

        self.options = opts = options or VllmOptions()
        if opts.block_size % 32 and not torch.cuda.is_available():
            raise EngineError(f"vllm: block_size {opts.block_size} must be a multiple of 32 on CPU")
        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise EngineError(f"vllm: no model at {path} (expected config.json and weights)")
        self.source = str(path)
        self.tokenizer = _load_tokenizer(path)
        self.bos_token_id = self.tokenizer.bos_token_id
        if not opts.enforce_eager:    # the environment variable counts only if inductor's config is not loaded yet
            import torch._inductor.config as inductor_config

            inductor_config.cpp_cache_precompile_headers = False
        set_threads = torch.set_num_threads          # vLLM's CPU worker replaces it process-wide: keep ours
        args = EngineArgs(
            # vLLM loads the tokenizer only for structured outputs (grammars): prompts arrive as token ids and
            # outputs leave as token ids (detokenize=False)
            model=str(path), tokenizer=str(path), skip_tokenizer_init=False, dtype=opts.dtype, seed=opts.seed,
            max_model_len=max_model_len, block_size=opts.block_size, enable_prefix_caching=opts.prefix_caching,
            kv_cache_memory_bytes=int(opts.kv_bytes), max_num_seqs=opts.max_num_seqs,
            tensor_parallel_size=opts.tensor_parallel_size, pipeline_parallel_size=opts.pipeline_parallel_size,
            distributed_executor_backend=opts.distributed_executor_backend, enforce_eager=opts.enforce_eager,
            scheduler_cls=ChosenSetScheduler, async_scheduling=False, disable_log_stats=True,
            max_num_batched_tokens=opts.max_num_batched_tokens,
            # grammars are Lark for llguidance (core/skills/grammar.py): vLLM's guidance backend takes them as they are
            structured_outputs_config=StructuredOutputsConfig(backend="guidance"),
        )
        if max_model_len is None:
            args.max_model_len = _context_in_pool(path, opts, torch)
        if args.max_num_batched_tokens is None:
            args.max_num_batched_tokens = args.max_model_len * 4
        try:
            self.llm = LLMEngine.from_engine_args(args)
        except Exception as exc:
            raise EngineError(f"vllm: engine start failed for {path}: {exc}") from exc
        finally:
            torch.set_num_threads = set_threads
        if num_threads:
            torch.set_num_threads(int(num_threads))
        # OpenMP thread counts are per thread: vLLM's CPU attention checks that the thread stepping the engine
        # uses as many as it was built with, and the server steps from its scheduler thread
        self._torch, self._threads = torch, torch.get_num_threads()
        core = getattr(self.llm.engine_core, "engine_core", None)
        self._sched = getattr(core, "scheduler", None)
        if not isinstance(self._sched, ChosenSetScheduler):
            raise EngineError("vllm: needs the in-process engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0) "
                              "to drive its scheduler step by step")
        model_cfg = self.llm.vllm_config.model_config
        self.max_context = model_cfg.max_model_len
        self.dtype = str(model_cfg.dtype).replace("torch.", "")
        hf = model_cfg.hf_config
        heads = hf.num_attention_heads
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // heads
        kv_heads = getattr(hf, "num_key_value_heads", None) or heads
        elem = torch.empty((), dtype=model_cfg.dtype).element_size()
        self.kv_bytes_per_token = hf.num_hidden_layers * 2 * kv_heads * head_dim * elem
        self.block_size = self.llm.vllm_config.cache_config.block_size
        self.num_blocks = self._sched.kv_cache_manager.block_pool.num_gpu_blocks
        eos = {self.tokenizer.eos_token_id, *(_as_list(getattr(hf, "eos_token_id", None)))}
        gen_cfg = path / "generation_config.json"
        if gen_cfg.is_file():
            import json

            eos.update(_as_list(json.loads(gen_cfg.read_text()).get("eos_token_id")))
        self._eos_ids = {int(i) for i in eos if i is not None}
        self.eos_token_id = min(self._eos_ids) if self._eos_ids else None
        self._sampling_cls, self._delta, self._structured = SamplingParams, RequestOutputKind.DELTA, StructuredOutputsParams
        self._temperature, self._top_p, self._seed = float(temperature), float(top_p), int(seed)
        self._gens: dict[str, _Gen] = {}
        self._released: set[str] = set()
        self._suspend_seq = itertools.count(1)

    # ----- tokenizer -----
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def describe(self) -> str:
        return self.source

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    # ----- lifecycle of a generation -----
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        if forced_ids is not None:
            raise EngineError("add: forced_ids (trace replay) is not supported by the vllm engine;"
                              " replay traces with engine:=transformers")
        self._check_new(gen_id, prompt_ids, max_new_tokens)
        if len(prompt_ids) + 1 > self.max_context:
            raise EngineError(f"add: generation {gen_id!r}: prompt of {len(prompt_ids)} tokens leaves no room"
                              f" in the model's {self.max_context}-token context")
        max_new = min(int(max_new_tokens), self.max_context - len(prompt_ids))
        params = self._sampling_cls(
            max_tokens=max_new, temperature=self._temperature, top_p=self._top_p,
            seed=None if self._temperature <= 0 else self._seed, stop_token_ids=sorted(self._eos_ids),
            output_kind=self._delta, detokenize=False, skip_special_tokens=False,
            structured_outputs=None if grammar is None else self._structured(grammar=grammar))
        prompt = list(int(t) for t in prompt_ids)
        try:
            req_id = self.llm.add_request(gen_id, {"prompt_token_ids": list(prompt)}, params)
        except Exception as exc:
            raise EngineError(f"add: vllm refused generation {gen_id!r}: {exc}") from exc
        gen = _Gen(gen_id, req_id, prompt, max_new)
        self._released.discard(gen_id)
        self._gens[gen_id] = gen
        if grammar is not None:
            self._await_grammar(gen)

    def _await_grammar(self, gen: _Gen) -> None:
        """Wait until vLLM has compiled the generation's grammar (it compiles on a worker thread, and a request whose
        grammar is not ready sits out the steps meanwhile: a chosen generation would emit nothing); EngineError, the
        generation released, when the grammar does not compile."""
        request = self._sched.requests.get(gen.req_id)
        pending = getattr(getattr(request, "structured_output_request", None), "_grammar", None)
        try:
            if hasattr(pending, "result"):
                pending.result()
        except Exception as exc:
            self.release(gen.gen_id)
            raise EngineError(f"add: generation {gen.gen_id!r}: its grammar does not compile: {exc}") from exc

    def suspend(self, gen_id: str) -> None:
        gen = self._get(gen_id, "suspend")
        if not gen.suspended:
            gen.suspended = True
            self._sched.park_order[gen.req_id] = next(self._suspend_seq)

    def resume(self, gen_id: str) -> None:
        gen = self._get(gen_id, "resume")
        gen.suspended = False
        self._sched.park_order.pop(gen.req_id, None)

    def release(self, gen_id: str) -> None:
        if gen_id in self._released:
            return
        gen = self._get(gen_id, "release")
        if not gen.finished:
            self.llm.abort_request([gen.req_id], internal=True)
        self._sched.park_order.pop(gen.req_id, None)
        del self._gens[gen_id]
        self._mark_released(gen_id)

    def close(self) -> None:
        for gen_id in list(self._gens):
            self.release(gen_id)
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.engine_core.shutdown()
            except Exception:
                pass
            _remove_rendezvous_file()

    # ----- stepping -----
    def step(self, gen_ids: Sequence[str]) -> StepResult:
        start = time.perf_counter()
        gens = self._runnable(gen_ids)
        result = StepResult(tokens={})
        if self._torch.get_num_threads() != self._threads:
            self._torch.set_num_threads(self._threads)
        self._sched.chosen = {g.req_id for g in gens}
        try:
            outputs = self.llm.step()
        except Exception as exc:
            raise EngineError(f"step: vllm failed: {exc}") from exc
        finally:
            self._sched.chosen = set()        # between our steps nothing advances
        for out in outputs:
            gen = self._gens.get(out.request_id)      # outputs carry the external id (our gen id)
            if gen is None or gen.finished:
                continue
            completion = out.outputs[0] if out.outputs else None
            new = list(completion.token_ids) if completion is not None else []
            if not gen.output and new:
                result.prefilled.append(gen.gen_id)
            gen.output.extend(int(t) for t in new)
            if new:
                result.tokens[gen.gen_id] = gen.output[-1]
            if out.finished:
                gen.finished = True
                result.finished.add(gen.gen_id)
                self._sched.park_order.pop(gen.req_id, None)
        result.elapsed_s = time.perf_counter() - start
        return result

    # ----- memory -----
    def memory(self) -> MemoryStats:
        block_bytes = self.block_size * self.kv_bytes_per_token
        held = sum(self._sched.blocks_held(g.req_id) for g in self._gens.values() if not g.finished)
        return MemoryStats(float(held * block_bytes), 0.0, float(self.num_blocks * block_bytes),
                           float(self.kv_bytes_per_token), len(self._gens))

    def blocks_free(self) -> int:
        """Free blocks in vLLM's pool (prefix-cached blocks that can be evicted count as free)."""
        return self._sched.kv_cache_manager.block_pool.get_num_free_blocks()

    @property
    def preempted_parked(self) -> int:
        """Suspended generations whose KV vLLM dropped under memory pressure (they recompute on resume)."""
        return self._sched.preempted_parked

    # ----- introspection -----
    def output_ids(self, gen_id: str) -> list[int]:
        return list(self._get(gen_id, "output_ids").output)


def _context_in_pool(path: Path, opts: VllmOptions, torch) -> int:
    """The model's context (max_position_embeddings), cut to the blocks its KV pool holds for one request: vLLM
    refuses to start when one request of the full context would not fit (SmolLM2's 8,192 tokens need 0.35 GiB of
    fp32 KV, more than the default 256 MiB pool)."""
    import json

    cfg = json.loads((path / "config.json").read_text())
    context = int(cfg.get("max_position_embeddings") or 2048)
    heads = int(cfg.get("num_attention_heads") or 1)
    head_dim = int(cfg.get("head_dim") or cfg.get("hidden_size", heads) // heads)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    elem = torch.empty((), dtype=getattr(torch, opts.dtype)).element_size()
    per_token = int(cfg.get("num_hidden_layers") or 1) * 2 * kv_heads * head_dim * elem
    blocks = int(opts.kv_bytes) // (per_token * opts.block_size) - 1       # vLLM keeps one block back (its null block)
    return max(min(context, blocks * opts.block_size), opts.block_size)


def _remove_rendezvous_file() -> None:
    """vLLM's single-process worker meets itself through a file store, tempdir/vllm_dist_<hex> (its name in
    VLLM_DIST_IDENT), and leaves the file behind: removed once the engine is shut down."""
    import tempfile

    ident = os.environ.get("VLLM_DIST_IDENT", "")
    if ident.startswith("vllm_dist_"):
        Path(tempfile.gettempdir(), ident).unlink(missing_ok=True)


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


def kv_bytes_from_mb(mb: float | None, default: int = VllmOptions.kv_bytes) -> int:
    """KV pool bytes from a MiB budget (None or <= 0: the default)."""
    return default if mb is None or not math.isfinite(mb) or mb <= 0 else int(mb * 2**20)
