"""The llamacpp engine: a GGUF model run by llama.cpp (llama-cpp-python's low-level API), one sequence per generation.

Every generation placed in the KV pool owns a llama.cpp sequence id and that sequence's stream of cells (native.py:
a stream per sequence keeps its attention to its own cells, whatever the rest of the pool holds; which generations
share a step still changes the last bits of its matrix products, as in bare llama-cpp-python, so a greedy near-tie
can go either way between a batched run and a run alone). A step is ONE ``llama_decode``
over exactly the generations it is given: a decode token for each prefilled one, the prompt tokens (or, with
step_token_budget, a chunk of them) of each new one; llama.cpp splits it into micro-batches itself. With a stream
per sequence it puts into one micro-batch only a run of consecutive, increasing sequence ids (llama_batch_allocr's
sequential split_equal): a step's tokens go in sequence order, and a new generation takes the lowest free sequence,
so that the batch's sequences form as few runs as the pool allows (in descending order, eight decode tokens ran as
eight micro-batches: 1.6x the step time at batch 8). Logits come back
one row per generation that emits, and are turned into tokens by the same ``TokenChoice`` as the transformers
engine's (sampling, grammar masks per row, forced tokens, the end), on a zero-copy torch view.

- suspend: nothing moves; the generation's sequence keeps its cells, so resume costs no prefill.
- the pool: ``kv_budget_mb`` of f16 KV (default: 16 sequences) split into sequences of ``context_tokens`` cells. A step that needs a
  sequence when none is free offloads the least recently suspended generation to host memory (llama.cpp's sequence
  state; it comes back on resume), and only when every sequence holds a generation of the step fails with EngineError,
  which the scheduler reports as GENERATION_FAILED.
- the prefix cache (prefix_cache.py): each robot type's system prompt is prefilled once; a new prompt's sequence
  loads the longest cached prefix (a copy of its KV from host memory) and prefills only the rest. A generation's
  sequence (its prompt and output) is kept when it is released, off the path of any request's first step.
- release: the sequence's cells are removed and its id is free again.
- interrupts (abortable_decode.py): ``interrupt_check`` is asked every ``interrupt_poll_s`` while a decode runs and
  the decode ends at the next graph node; a cut-short step leaves every generation exactly as before it.
"""
from __future__ import annotations

import heapq
import itertools
import math
import os
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from timely_llm_ros.core.engine import Engine, EngineCapabilities, EngineError, MemoryStats, StepResult, TextStream
from timely_llm_ros.engine.generation_table import GenerationTable
from timely_llm_ros.engine.llamacpp.abortable_decode import AbortableDecode
from timely_llm_ros.engine.llamacpp.generation import LlamaGeneration
from timely_llm_ros.engine.llamacpp.native import GgufModel, KvContext, LoraAdapter, TokenBatch, lib
from timely_llm_ros.engine.llamacpp.prefix_cache import StatePrefixCache
from timely_llm_ros.engine.llamacpp.tokenizer import gguf_tokenizer
from timely_llm_ros.engine.transformers.sampling import SamplingParams, generator_for
from timely_llm_ros.engine.transformers.token_choice import TokenChoice

DEFAULT_SEQUENCES = 16        # the pool without a KV budget: twice the server's default max_batch (SmolLM2: 0.9 GiB)
DEFAULT_CONTEXT = 2560         # cells per sequence: the server's max_prompt_tokens (2048) + max_new_tokens (512)
KV_ELEMENT_BYTES = 2           # llama.cpp's default K and V cell type is f16
HOST_BANDWIDTH = 2e9           # bytes/s assumed for a reload until one is measured


class LlamaCppEngine(GenerationTable, Engine):
    """Continuous batching over llama.cpp sequences, with KV kept across suspension (see the module docstring)."""

    def __init__(self, gguf: str | Path, kv_budget_mb: float | None = None, sampling: SamplingParams | None = None,
                 num_threads: int | None = None, prefix_cache_mb: float | None = None, prefix_min_tokens: int = 32,
                 step_token_budget: int | None = None, context_tokens: int | None = None,
                 flash_attention: bool | None = True, interrupt_poll_s: float = 0.002, gpu_layers: int = 0,
                 model_cache_dir: str | None = None, lora: str | Path | None = None) -> None:
        if step_token_budget is not None and step_token_budget < 1:
            raise EngineError(f"step_token_budget must be >= 1 or None, got {step_token_budget}")
        path = Path(gguf)
        self.model_file = GgufModel(path, gpu_layers)       # EngineError for an unknown architecture, naming both
        try:
            self.tokenizer = gguf_tokenizer(path, model_cache_dir or None)
        except Exception as exc:
            self.model_file.close()
            raise EngineError(f"llamacpp: no tokenizer for {path}: {exc}") from exc
        try:            # a LoRA GGUF (adapt/lora_gguf.py) applied on every step: the entry's adapter
            self.lora = LoraAdapter(self.model_file, lora) if lora else None
        except EngineError:
            self.model_file.close()
            raise
        self.source = str(path)
        self.bos_token_id = self.tokenizer.bos_token_id
        self.step_token_budget = step_token_budget
        self.capabilities = EngineCapabilities(interruptible=True, interrupt_granularity="graph-node",
                                               interrupt_poll_s=interrupt_poll_s, step_token_budget=step_token_budget,
                                               prefill_left=True, reload=True)
        self.last_step_tokens = 0
        self.kv_bytes_per_token = self.model_file.kv_bytes_per_token(KV_ELEMENT_BYTES)
        context = int(context_tokens or min(self.model_file.n_ctx_train or DEFAULT_CONTEXT, DEFAULT_CONTEXT))
        if kv_budget_mb is None or not math.isfinite(kv_budget_mb):
            sequences = DEFAULT_SEQUENCES
        else:
            sequences = min(int(kv_budget_mb * 2**20 // (context * self.kv_bytes_per_token)), 256)
        if sequences < 1:
            self.model_file.close()
            raise EngineError(f"llamacpp: a KV budget of {kv_budget_mb:g} MiB holds no sequence of {context} tokens "
                              f"({context * self.kv_bytes_per_token / 2**20:.0f} MiB each): raise kv_budget_mb or lower "
                              "llamacpp_context_tokens")
        self.threads = int(num_threads or len(os.sched_getaffinity(0)))
        self.ctx = KvContext(self.model_file, sequences, context, self.threads, flash_attention=flash_attention,
                             lora=self.lora)
        self.max_context = self.ctx.context
        self.kv_budget_bytes = float(self.ctx.n_seq_max * self.ctx.context * self.kv_bytes_per_token)
        self.sampling = sampling or SamplingParams()
        self.tokens = TokenChoice(self.tokenizer, self.model_file.n_vocab, self.sampling, self._stop_ids())
        self.eos_token_id = min(self.tokens.eos_ids) if self.tokens.eos_ids else None
        self.prefix_cache = (StatePrefixCache(self.ctx, prefix_cache_mb * 2**20, prefix_min_tokens)
                             if prefix_cache_mb else None)
        self.runner = AbortableDecode(self.ctx, interrupt_poll_s)
        self.interrupt_check: Callable[[], bool] | None = None
        self.interrupted_steps = 0
        self._batch = TokenBatch()
        self._free_seqs = list(range(self.ctx.n_seq_max))    # a heap: the lowest free id is handed out first
        self._gens: dict[str, LlamaGeneration] = {}
        self._released: set[str] = set()
        self._suspend_counter = itertools.count(1)
        self._host_bandwidth = HOST_BANDWIDTH

    def _stop_ids(self) -> set[int]:
        """The tokenizer's EOS and llama.cpp's EOS and end-of-turn tokens of this vocabulary."""
        llama_cpp, vocab = lib(), self.model_file.vocab
        ids = {self.tokenizer.eos_token_id, llama_cpp.llama_vocab_eos(vocab), llama_cpp.llama_vocab_eot(vocab)}
        return {int(i) for i in ids if i is not None and 0 <= int(i) < self.model_file.n_vocab}

    def describe(self) -> str:
        """One line for the configure log: the model as llama.cpp loaded it, threads, the KV pool."""
        m = self.model_file
        return (f"{m.path.name} ({m.description}, {m.architecture}) on llama.cpp, {self.threads} threads, KV pool "
                f"{self.kv_budget_bytes / 2**20:.0f} MiB of f16 KV: {self.ctx.n_seq_max} sequences of "
                f"{self.ctx.context} tokens; interrupts every {self.runner.poll_s * 1e3:.1f} ms at a graph node")

    # ----- tokenizer -----
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def text_stream(self) -> TextStream:
        table = self.tokenizer.byte_table           # byte-level BPE: incremental
        return table.stream() if table is not None else super().text_stream()

    # ----- lifecycle of a generation -----
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        self._check_new(gen_id, prompt_ids, max_new_tokens)
        forced = self._forced_output(gen_id, forced_ids, self.tokenizer.bos_token_id)
        if len(prompt_ids) + 1 > self.max_context:
            raise EngineError(f"add: generation {gen_id!r}: its prompt of {len(prompt_ids)} tokens leaves no room in "
                              f"this engine's {self.max_context}-token context (the KV pool: raise kv_budget_mb)")
        max_new = min(int(max_new_tokens), self.max_context - len(prompt_ids))
        gen = LlamaGeneration(gen_id, [int(t) for t in prompt_ids], max_new, forced,
                              generator_for(gen_id, self.sampling, torch.device("cpu")))
        self._admit(gen, grammar, self.tokens.grammar_compiler)

    def prepare_grammar(self, grammar: str) -> None:
        self.tokens.grammar_compiler().compile(grammar)

    def suspend(self, gen_id: str) -> None:
        gen = self._get(gen_id, "suspend")
        if not gen.suspended:
            gen.suspended, gen.suspended_seq = True, next(self._suspend_counter)

    def resume(self, gen_id: str) -> None:
        gen = self._get(gen_id, "resume")
        if not gen.suspended:
            return
        if gen.offloaded:
            self._reload(gen)
        gen.suspended = False

    def release(self, gen_id: str) -> None:
        if gen_id in self._released:
            return
        gen = self._get(gen_id, "release")
        if self.prefix_cache is not None and gen.prefilled and gen.seq is not None:
            # kept at release, not when its prompt was prefilled: saving the state (about 8 ms for SmolLM2's 800-token
            # drone prompt) then lengthened every request's first step, the one an urgent request waits for
            self.prefix_cache.insert((gen.prompt + gen.output)[:gen.kv_len], gen.seq)
        self._free_sequence(gen)
        gen.host_state = None
        del self._gens[gen_id]
        self._mark_released(gen_id)

    def close(self) -> None:
        self.runner.close()
        self._gens.clear()
        if getattr(self, "ctx", None) is not None:
            self.ctx.close()
        if getattr(self, "lora", None) is not None:
            self.lora.close()          # after the context that applies it, before the model it belongs to
        self.model_file.close()

    # ----- stepping -----
    def step(self, gen_ids: Sequence[str]) -> StepResult:
        start = time.perf_counter()
        gens = self._runnable(gen_ids)
        result = StepResult(tokens={})
        decoding = sorted((g for g in gens if g.prefilled), key=lambda g: g.seq)   # in sequence order (above)
        new = [g for g in gens if not g.prefilled]
        for gen in new:
            self._place(gen, gens)
        allowance = None if self.step_token_budget is None else max(self.step_token_budget - len(decoding), 0)
        chunks: list[tuple[LlamaGeneration, int]] = []        # (new generation, prompt tokens it runs now)
        for gen in new:
            take = len(gen.prompt) - gen.kv_len
            if allowance is not None:
                take = min(take, allowance)
                allowance -= take
            if take > 0:
                chunks.append((gen, take))
        chunks.sort(key=lambda chunk: chunk[0].seq)    # budget in the step's order, the batch in sequence order
        batch = self._batch
        batch.clear()
        for gen in decoding:
            batch.add_one(gen.output[-1], gen.kv_len, gen.seq)
        for gen, take in chunks:
            batch.add(gen.prompt[gen.kv_len:gen.kv_len + take], gen.kv_len, gen.seq,
                      gen.kv_len + take == len(gen.prompt))
        ran = decoding + [gen for gen, _ in chunks]
        if batch.n:
            rc = self.runner.decode(batch, self.interrupt_check)
            if rc != 0:
                for gen in ran:                  # as before the step: drop what llama.cpp kept of it
                    self.ctx.remove(gen.seq, gen.kv_len)
                if rc != 2:
                    raise EngineError(f"step: llama_decode failed with code {rc} over {batch.n} tokens of "
                                      f"{len(ran)} generations")
                result.interrupted = True
                self.interrupted_steps += 1
                self.last_step_tokens = 0
                result.elapsed_s = time.perf_counter() - start
                return result
        emitting = list(decoding)
        for gen in decoding:
            gen.kv_len += 1
        for gen, take in chunks:
            gen.kv_len += take
            if gen.kv_len == len(gen.prompt):
                gen.prefilled = True
                result.prefilled.append(gen.gen_id)
                emitting.append(gen)
        if emitting:
            logits = torch.from_numpy(self.ctx.logits(len(emitting)))
            for gen, token in zip(emitting, self.tokens.choose(logits, emitting)):
                self.tokens.emit(gen, token, result)
        self.last_step_tokens = batch.n
        result.elapsed_s = time.perf_counter() - start
        return result

    def prefill_left(self, gen_id: str) -> int | None:
        gen = self._get(gen_id, "prefill_left")
        if gen.prefilled:
            return 0
        if gen.seq is None and gen.kv_len == 0 and self.prefix_cache is not None:
            return len(gen.prompt) - self.prefix_cache.reusable(gen.prompt)
        return len(gen.prompt) - gen.kv_len

    def reload_s(self, gen_id: str) -> float:
        gen = self._get(gen_id, "reload_s")
        return len(gen.host_state) / self._host_bandwidth if gen.host_state is not None else 0.0

    # ----- the pool -----
    def _place(self, gen: LlamaGeneration, protect: Sequence[LlamaGeneration]) -> None:
        """Give a new generation a sequence, holding its prompt's longest cached prefix."""
        if gen.seq is not None:
            return
        gen.seq = self._take_seq(protect)
        if gen.kv_len == 0 and self.prefix_cache is not None:
            gen.kv_len = self.prefix_cache.load_into(gen.prompt, gen.seq)

    def _take_seq(self, protect: Sequence[LlamaGeneration]) -> int:
        """A free sequence id; the least recently suspended generation (not among ``protect``) goes to host memory
        when none is free; EngineError when every sequence holds a generation that cannot leave."""
        if not self._free_seqs:
            victim = self._oldest_suspended(protect)
            if victim is None:
                raise EngineError(f"llamacpp: KV budget exhausted: all {self.ctx.n_seq_max} sequences of the pool "
                                  f"({self.kv_budget_bytes / 2**20:.0f} MiB, {self.ctx.context} tokens each) hold "
                                  "generations that are running; raise kv_budget_mb (or lower "
                                  "llamacpp_context_tokens) or lower max_batch")
            self._offload(victim)
        return heapq.heappop(self._free_seqs)

    def _oldest_suspended(self, protect: Sequence[LlamaGeneration]) -> LlamaGeneration | None:
        held = [g for g in self._gens.values() if g.suspended and g.seq is not None and g not in protect]
        return min(held, key=lambda g: g.suspended_seq, default=None)

    def _offload(self, gen: LlamaGeneration) -> None:
        t0 = time.perf_counter()
        state = self.ctx.save(gen.seq)
        self._free_sequence(gen)
        gen.host_state = state
        self._measured_bandwidth(len(state), time.perf_counter() - t0)

    def _reload(self, gen: LlamaGeneration) -> None:
        t0 = time.perf_counter()
        seq = self._take_seq([gen])
        self.ctx.load(seq, gen.host_state)
        self._measured_bandwidth(len(gen.host_state), time.perf_counter() - t0)
        gen.seq, gen.host_state = seq, None

    def _measured_bandwidth(self, nbytes: int, seconds: float) -> None:
        if seconds > 0 and nbytes > 0:
            self._host_bandwidth = 0.7 * self._host_bandwidth + 0.3 * nbytes / seconds

    def _free_sequence(self, gen: LlamaGeneration) -> None:
        if gen.seq is not None:
            self.ctx.remove(gen.seq)
            heapq.heappush(self._free_seqs, gen.seq)
            gen.seq = None

    # ----- memory -----
    def memory(self) -> MemoryStats:
        host = sum(len(g.host_state) for g in self._gens.values() if g.host_state is not None)
        held = sum(g.kv_len for g in self._gens.values() if g.seq is not None)
        return MemoryStats(float(held * self.kv_bytes_per_token), float(host), self.kv_budget_bytes,
                           float(self.kv_bytes_per_token), len(self._gens))

    # ----- introspection -----
    def output_ids(self, gen_id: str) -> list[int]:
        """Tokens emitted so far by a generation."""
        return list(self._get(gen_id, "output_ids").output)

    def is_offloaded(self, gen_id: str) -> bool:
        """Whether a generation's KV currently lives in host memory."""
        return self._get(gen_id, "is_offloaded").offloaded
