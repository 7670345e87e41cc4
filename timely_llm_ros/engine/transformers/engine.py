"""The real engine: a transformers causal LM with continuous batching and suspend/resume that keeps KV.

A generation's KV lives in a row of the shared slot store while it is resident, or in a tensor of its own on the
device or offloaded to host memory (generation_state.py). A step decodes all already-prefilled generations in ONE
forward over a window of contiguous store rows (decode.py, slot_rows.py), then prefills new generations straight
into free rows (prefill.py). This module is the generation table and the step's order; the parts:
- ``slot_rows.SlotRows``: the store and which row holds which generation, the decode window;
- ``prefill.Prefiller`` and ``decode.Decoder``: the forwards;
- ``token_choice.TokenChoice``: logits to tokens (sampling, grammar masks, forced tokens, the end);
- ``kv_offload``: the device KV budget, offload to host and back;
- ``layer_gate.LayerGate``: a step cut short between decoder layers when ``interrupt_check`` says so; a cut-short
  forward leaves its generations exactly as before the step, so the result is token-exact with it never having run;
- ``kv_evict``: TimeBill's prompt-KV eviction;
- ``slot_attention.SlotAttention`` and ``packed_linear.pack_linears``: how the forwards compute on CPU.
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Callable, Sequence

import torch

from timely_llm_ros.core.engine import Engine, EngineCapabilities, EngineError, MemoryStats, StepResult, TextStream
from timely_llm_ros.engine.transformers import kv_offload
from timely_llm_ros.engine.transformers.decode import Decoder
from timely_llm_ros.engine.transformers.generation_state import GenerationState
from timely_llm_ros.engine.generation_table import GenerationTable
from timely_llm_ros.engine.transformers.kv_cache import KVShape
from timely_llm_ros.engine.transformers.kv_evict import evict_prompt_kv
from timely_llm_ros.engine.transformers.layer_gate import LayerGate, StepInterrupted
from timely_llm_ros.engine.transformers.loader import LoadedModel
from timely_llm_ros.engine.transformers.packed_linear import pack_linears
from timely_llm_ros.engine.transformers.prefill import Prefiller
from timely_llm_ros.engine.transformers.prefix_cache import PrefixCache
from timely_llm_ros.engine.transformers.sampling import SamplingParams, generator_for
from timely_llm_ros.engine.transformers.slot_attention import SlotAttention
from timely_llm_ros.engine.transformers.slot_rows import SlotRows
from timely_llm_ros.engine.transformers.token_choice import TokenChoice, eos_ids


class TransformersEngine(GenerationTable, Engine):
    """Continuous batching over a transformers model, with KV kept across suspension."""

    def __init__(self, loaded: LoadedModel, kv_budget_mb: float | None = None,
                 sampling: SamplingParams | None = None, headroom_tokens: int = 256,
                 batch_prefill: bool = True, prefill_tokens: int = 16384,
                 prefix_cache_mb: float | None = None, prefix_min_tokens: int = 32,
                 step_token_budget: int | None = None, kv_store_rows: int = 0, kv_store_tokens: int = 0) -> None:
        if step_token_budget is not None and step_token_budget < 1:
            raise EngineError(f"step_token_budget must be >= 1 or None, got {step_token_budget}")
        self.step_token_budget = step_token_budget     # chunked prefill (None: whole prompts in one step)
        self.last_step_tokens = 0                      # tokens the last step ran (decodes + prompt tokens)
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.bos_token_id = self.tokenizer.bos_token_id
        self.device, self.dtype, self.source = loaded.device, loaded.dtype, loaded.source
        pack_linears(self.model)                     # CPU fp32: weights in oneDNN's layout (packed_linear.py)
        self._attention = SlotAttention(self.model)  # the step's forwards attend without repeating KV heads
        self.kv_shape = KVShape.of(self.model.config, self.dtype)
        self.kv_budget_bytes = math.inf if kv_budget_mb is None else float(kv_budget_mb) * 2**20
        self.max_context = getattr(self.model.config, "max_position_embeddings", None)
        self.prefix_cache = PrefixCache(prefix_cache_mb * 2**20, prefix_min_tokens) if prefix_cache_mb else None
        self.sampling = sampling or SamplingParams()
        self.tokens = TokenChoice(self.tokenizer, self.model.config.vocab_size, self.sampling,
                                  eos_ids(self.tokenizer, self.model.generation_config))
        self.eos_token_id = min(self.tokens.eos_ids) if self.tokens.eos_ids else None
        self.rows = SlotRows(self.kv_shape, self.device, headroom_tokens, self.max_context, kv_store_rows,
                             kv_store_tokens)
        self.prefiller = Prefiller(self.model, self.device, self.rows, self.tokens, self.prefix_cache,
                                   prefill_tokens, batch_prefill)
        self.decoder = Decoder(self.model, self.device, self.rows, self.tokens)
        self._pin = self.device.type == "cuda"        # host copies of KV in pinned memory (async transfers)
        self._gens: dict[str, GenerationState] = {}
        self._released: set[str] = set()
        self._suspend_counter = itertools.count(1)
        # set by the driver; asked between decoder layers while a step runs
        self.interrupt_check: Callable[[], bool] | None = None
        self.interrupted_steps = 0
        self._gate = LayerGate(self.model)
        self.capabilities = EngineCapabilities(
            interruptible=self._gate.available, interrupt_granularity="layer" if self._gate.available else "step",
            step_token_budget=step_token_budget, prefill_left=True, evict_prompt_kv=True)

    # ----- tokenizer -----
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def describe(self) -> str:
        return self.source

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def text_stream(self) -> TextStream:
        table = getattr(self.tokenizer, "byte_table", None)   # byte-level BPE: incremental
        return table.stream() if table is not None else super().text_stream()

    # ----- lifecycle of a generation -----
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        self._check_new(gen_id, prompt_ids, max_new_tokens)
        forced = self._forced_output(gen_id, forced_ids, self.bos_token_id)
        gen = GenerationState(gen_id, list(prompt_ids), int(max_new_tokens), forced,
                              generator_for(gen_id, self.sampling, self.device))
        self._admit(gen, grammar, self.tokens.grammar_compiler)

    def prepare_grammar(self, grammar: str) -> None:
        self.tokens.grammar_compiler().compile(grammar)

    # suspend/resume enter inference mode only when they move tensors: entering it costs ~4 us, and they run
    # at every segment boundary (part of the segmentation overhead)
    def suspend(self, gen_id: str) -> None:
        gen = self._get(gen_id, "suspend")
        if gen.suspended:
            return
        gen.suspended, gen.suspended_seq = True, next(self._suspend_counter)
        self._enforce_budget()

    def resume(self, gen_id: str) -> None:
        gen = self._get(gen_id, "resume")
        if not gen.suspended:
            return
        if gen.kv is not None and gen.offloaded:
            kv_offload.reload(gen, self.device)
        gen.suspended = False
        self._enforce_budget()

    def release(self, gen_id: str) -> None:
        if gen_id in self._released:
            return
        gen = self._get(gen_id, "release")
        if gen.row is not None:
            self.rows.free(gen)
        gen.kv = None
        del self._gens[gen_id]
        if not self._gens:           # idle: the store goes back unless kept (a busy engine keeps it, sized for
            self.rows.idle()         # its peak)
        self._mark_released(gen_id)

    def close(self) -> None:
        self._gate.remove()
        self._gens.clear()
        self.rows.drop()
        self.model = self.prefiller.model = self.decoder.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ----- stepping -----
    def step(self, gen_ids: Sequence[str]) -> StepResult:
        start = time.perf_counter()
        gens = self._runnable(gen_ids)
        result = StepResult(tokens={})
        with torch.inference_mode(), self._attention:
            decoding = [g for g in gens if g.prefilled]
            new = [g for g in gens if not g.prefilled]
            before = sum(g.kv_len for g in new)
            self._gate.check = self.interrupt_check
            try:
                if decoding:
                    self.decoder.decode(decoding, result)
                if new and self.step_token_budget is not None:
                    self.prefiller.prefill_chunks(new, self.step_token_budget - len(decoding), result)
                elif new:
                    self.prefiller.prefill(new, result)
            except StepInterrupted:
                result.interrupted = True
                self.interrupted_steps += 1
            finally:
                self._gate.check = None
            prompt_tokens = sum(g.kv_len for g in new) - before
            self.last_step_tokens = max(len(result.tokens) - len(result.prefilled) + prompt_tokens, 0)
            self._enforce_budget()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        result.elapsed_s = time.perf_counter() - start
        return result

    def prefill_left(self, gen_id: str) -> int | None:
        return self.prefiller.left(self._get(gen_id, "prefill_left"))

    # ----- prompt-KV eviction (TimeBill) -----
    def evict_prompt_kv(self, gen_id: str, ratio: float) -> int:
        """Drop ``ratio`` of the prompt KV a prefilled generation holds now (kv_evict.evict_prompt_kv); returns the
        prompt columns kept."""
        gen = self._get(gen_id, "evict_prompt_kv")
        return evict_prompt_kv(self.model, gen, ratio, self.rows, self.device, self._pin)

    # ----- memory -----
    def memory(self) -> MemoryStats:
        return kv_offload.memory_stats(self._gens.values(), self.kv_shape.bytes_per_token, self.kv_budget_bytes)

    def held_bytes(self) -> dict[str, int]:
        """Bytes physically held by KV tensors (the store included), by location."""
        return kv_offload.held_bytes(self._gens.values(), self.rows, self.prefix_cache)

    def _enforce_budget(self) -> None:
        kv_offload.offload_over_budget(self._gens.values(), self.rows, self.kv_shape.bytes_per_token,
                                       self.kv_budget_bytes, self._pin)

    # ----- introspection -----
    def output_ids(self, gen_id: str) -> list[int]:
        """Tokens emitted so far by a generation."""
        return list(self._get(gen_id, "output_ids").output)

    def is_offloaded(self, gen_id: str) -> bool:
        """Whether a generation's KV currently lives in host memory."""
        return self._get(gen_id, "is_offloaded").offloaded
