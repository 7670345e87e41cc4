"""The real engine: a transformers causal LM with continuous batching and suspend/resume.

A generation's KV lives either in a row of the shared slot store (SlotKV) or, when it left the
batch, in its own tensor ``[layers, 2, kv_heads, n, head_dim]`` on the device or offloaded to host
memory. A step decodes all already-prefilled generations in ONE forward over a window of B contiguous
rows [lo, lo + B) of the store, then prefills new generations one by one straight into free rows.
Rows are independent (left-aligned, each appends at its own column), so the batch changing costs only
copies of the rows that leave or join, never a re-pack of the whole batch, and the window slides to
where the fewest rows must move (a generation leaving at either edge moves nothing).
With ``decode_gaps`` the decode instead runs over the rows the batch occupies, leavers left in place as
gap rows (no copies, a wasted decode row each); off by default, see ``_arrange``.
Invariant: a prefilled generation's KV holds prompt + output[:-1]; output[-1] is the next input.
Interrupts: a forward pre-hook on every decoder layer asks ``interrupt_check`` (set by the driver) during a step;
when it says so the forward stops there (``StepInterrupted``). A cut-short decode leaves every length as it was (the
keys/values its first layers wrote at each row's next column are overwritten when the row decodes again), a cut-short
prefill frees its rows as a failed one does, so the step's result is token-exact with the step not having run.
Grammars: a generation added with one has its logits row masked to the tokens the grammar allows wherever logits
become tokens (``_choose_tokens``), and its matcher advances only with the token it emits (``_emit``);
engine/grammar.py.
"""
from __future__ import annotations

import functools
import itertools
import math
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..core.engine import Engine, EngineError, MemoryStats, StepResult, TextStream
from .generation_table import GenerationTable
from .grammar import GrammarCompiler, RowMasks, advance
from .kv_cache import KVShape, SlotKV
from .loader import LoadedModel
from .packed_linear import pack_linears
from .prefix_cache import PrefixCache
from .sampling import SamplingParams, choose_tokens, generator_for
from .slot_attention import SlotAttention

# address space the CPU slot store reserves (rows x token columns, the columns capped by the model's context);
# only written pages become memory: 256 x 512 columns of the embedded planner is 1 GiB of address space
RESERVE_ROWS, RESERVE_TOKENS = 256, 4096


@dataclass(eq=False)
class _Generation:
    """Engine-side state of one generation."""

    gen_id: str
    prompt: list[int]
    max_new_tokens: int
    forced: list[int] | None
    generator: torch.Generator | None
    output: list[int] = field(default_factory=list)
    kv_len: int = 0                      # tokens of context held in KV
    kv: torch.Tensor | None = None       # own KV when not in the batch (device or host)
    row: int | None = None               # row of the slot store when its KV lives there
    prefilled: bool = False
    suspended: bool = False
    suspended_seq: int = 0               # order of suspension (least recent offloads first)
    finished: bool = False
    offloaded: bool = False              # kv lives in host memory
    prompt_kv: int = 0                   # prompt columns still in the KV (prompt eviction shrinks it)
    kept_pos: list[int] | None = None    # original positions of those columns (None: all of the prompt)
    pos_offset: int = 0                  # next position = kv_len + pos_offset (evicted columns counted back)
    matcher: object | None = None        # grammar state (engine/grammar.py) of a constrained generation

    def remaining(self) -> int:
        cap = self.max_new_tokens if self.forced is None else min(self.max_new_tokens, len(self.forced))
        return max(cap - len(self.output), 0)


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
        self.device, self.dtype, self.source = loaded.device, loaded.dtype, loaded.source
        pack_linears(self.model)                     # CPU fp32: weights in oneDNN's layout (packed_linear.py)
        self._attention = SlotAttention(self.model)  # the step's forwards attend without repeating KV heads
        self.kv_shape = KVShape.of(self.model.config, self.dtype)
        self.sampling = sampling or SamplingParams()
        self.headroom_tokens = headroom_tokens
        self.batch_prefill, self.prefill_tokens = batch_prefill, prefill_tokens
        self.prefix_cache = (PrefixCache(prefix_cache_mb * 2**20, prefix_min_tokens)
                             if prefix_cache_mb else None)
        self.kv_budget_bytes = math.inf if kv_budget_mb is None else float(kv_budget_mb) * 2**20
        self._eos_ids = _eos_ids(loaded)
        self.eos_token_id = min(self._eos_ids) if self._eos_ids else None
        self.max_context = getattr(self.model.config, "max_position_embeddings", None)
        self._pin = self.device.type == "cuda"
        self._gens: dict[str, _Generation] = {}
        self._released: set[str] = set()
        self._grammars: GrammarCompiler | None = None   # made by the first constrained add
        self._masks: RowMasks | None = None
        self._store: SlotKV | None = None
        self._slots: list[_Generation | None] = []    # resident generation of each store row
        self._last_active: list[_Generation | None] = []
        self._lo = 0                                    # first store row of the last decode's window
        self._suspend_counter = itertools.count(1)
        self.park_rows = True      # leavers stay in spare store rows (False: cloned out; ablation)
        # the decode window [lo, lo + B) goes wherever the fewest rows must move, so a generation leaving at either
        # edge of it moves nothing (False: the window is always [0, B); ablation)
        self.slide_window = True
        # keep the slot store when the last generation is released: its memory pages stay mapped, so the next
        # busy period's first writes and row moves do not page-fault (a fresh row costs ~4x a warm one on CPU)
        # a store of at least this size (rows x token columns) when the first generation needs one, kept when
        # idle; 0 = start at 8 rows, grow on demand, give it back when idle
        self.kv_store_rows, self.kv_store_tokens = max(0, int(kv_store_rows)), max(0, int(kv_store_tokens))
        self.keep_idle_store = self.kv_store_rows > 0
        # on CPU the store sits in a reservation of address space (RESERVE_ROWS x the model's context, pages
        # mapped only where written): it grows inside it by widening a view. Without it (False; ablation) a growth
        # allocates a larger buffer and copies the whole store: 17-100 ms on an idle CPU, 175-210 ms under a
        # ROS burst's load (benchmarks/kv_store_growth.py)
        self.reserve_store = True
        # decode over the rows the batch occupies, gaps included, instead of compacting them into a window: no row
        # copies, but every gap row costs decode compute. Off: on the embedded planner (CPU) a gap row adds
        # ~0.5 ms to a step while a row move costs ~0.2 ms (benchmarks/segmentation_overhead.py)
        self.decode_gaps = False
        self.gap_rent_steps = 2    # rows are compacted once a gap outlives this many decode steps (ski rental)
        self.gap_row_steps = 0     # gap rows decoded so far (load-independent cost of decode_gaps)
        self._gap_age: dict[int, int] = {}   # decode steps each gap row of the range has been a gap
        # interrupts: every decoder layer first asks interrupt_check while a step runs (_gate)
        self.interrupt_check: Callable[[], bool] | None = None
        self.interrupted_steps = 0
        self._gate_open = False
        layers = decoder_layers(self.model)
        self.interruptible = bool(layers)
        # the hooks hold the engine weakly and go when it does: a model outlives its engines (tests, a reconfigure)
        gate = functools.partial(_gate, weakref.ref(self))
        self._gate_hooks = [layer.register_forward_pre_hook(gate) for layer in layers]
        weakref.finalize(self, _remove_hooks, list(self._gate_hooks))

    # ----- tokenizer -----
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def text_stream(self) -> TextStream:
        table = getattr(self.tokenizer, "byte_table", None)   # byte-level BPE: incremental
        return table.stream() if table is not None else super().text_stream()

    # ----- lifecycle of a generation -----
    def add(self, gen_id: str, prompt_ids: Sequence[int], max_new_tokens: int,
            forced_ids: Sequence[int] | None = None, grammar: str | None = None) -> None:
        self._check_new(gen_id, prompt_ids, max_new_tokens)
        if forced_ids is not None and len(forced_ids) == 0:
            raise EngineError(f"add: generation {gen_id!r} has empty forced_ids")
        forced = None if forced_ids is None else list(forced_ids)
        bos = getattr(self.tokenizer, "bos_token_id", None)
        if forced and len(forced) > 1 and forced[0] == bos:   # encode() of a plan may prepend BOS: not output
            forced = forced[1:]
        gen = _Generation(gen_id, list(prompt_ids), int(max_new_tokens), forced,
                          generator_for(gen_id, self.sampling, self.device))
        if grammar is not None and forced is None:     # a forced (replayed) output is never masked
            gen.matcher = self._grammar_compiler().matcher(grammar)
        self._released.discard(gen_id)
        self._gens[gen_id] = gen

    def prepare_grammar(self, grammar: str) -> None:
        self._grammar_compiler().compile(grammar)

    def _grammar_compiler(self) -> GrammarCompiler:
        if self._grammars is None:
            vocab = self.model.config.vocab_size
            self._grammars = GrammarCompiler(self.tokenizer, vocab, self._eos_ids)
            self._masks = RowMasks(vocab)
        return self._grammars

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
            with torch.inference_mode():
                gen.kv, gen.offloaded = gen.kv.to(self.device, non_blocking=True), False
        gen.suspended = False
        self._enforce_budget()

    def release(self, gen_id: str) -> None:
        if gen_id in self._released:
            return
        gen = self._get(gen_id, "release")
        if gen.row is not None:
            self._free_row(gen)
        gen.kv = None
        del self._gens[gen_id]
        if not self._gens and not self.keep_idle_store:   # idle: give the store back (a busy engine keeps
            self._store, self._slots, self._last_active = None, [], []   # it, sized for its peak)
        self._mark_released(gen_id)

    def close(self) -> None:
        _remove_hooks(self._gate_hooks)
        self._gens.clear()
        self._store, self._slots, self._last_active = None, [], []
        self.model = None
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
            self._gate_open = self.interrupt_check is not None
            try:
                if decoding:
                    self._decode(decoding, result)
                if new and self.step_token_budget is not None:
                    self._prefill_chunks(new, self.step_token_budget - len(decoding), result)
                elif new:
                    self._prefill(new, result)
            except StepInterrupted:
                result.interrupted = True
                self.interrupted_steps += 1
            finally:
                self._gate_open = False
            self.last_step_tokens = max(len(result.tokens) - len(result.prefilled) + sum(g.kv_len for g in new) - before, 0)
            self._enforce_budget()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        result.elapsed_s = time.perf_counter() - start
        return result

    def _prefill(self, gens: list[_Generation], result: StepResult) -> None:
        """Prefill new generations into free rows. A prompt that starts like a cached one copies that
        prefix's KV and prefills only the rest; the others run one forward per group of similar
        lengths (at most prefill_tokens padded tokens, at most 50% padding), or one by one when
        batch_prefill is off."""
        fresh = []
        for gen in gens:
            reused, kv = self.prefix_cache.lookup(gen.prompt) if self.prefix_cache else (0, None)
            if kv is not None:
                self._prefill_after_prefix(gen, reused, kv, result)
            else:
                fresh.append(gen)
        if not self.batch_prefill:
            for gen in fresh:
                self._prefill_group([gen], result)
            return
        group: list[_Generation] = []
        real = 0
        for gen in sorted(fresh, key=lambda g: len(g.prompt)):
            padded = (len(group) + 1) * len(gen.prompt)
            if group and (padded > self.prefill_tokens or padded > 1.5 * (real + len(gen.prompt))):
                self._prefill_group(group, result)       # too big, or too much padding: start a new group
                group, real = [], 0
            group.append(gen)
            real += len(gen.prompt)
        if group:
            self._prefill_group(group, result)

    def _prefill_chunks(self, gens: list[_Generation], room: int, result: StepResult) -> None:
        """Chunked prefill: spend ``room`` prompt tokens on these generations in order; a prompt that does not
        fit continues in later steps (its partial KV kept like a suspended generation's), and only a completed
        prompt emits its first token."""
        for gen in gens:
            if room <= 0:
                return
            n = len(gen.prompt)
            if gen.kv_len == 0 and gen.row is None and gen.kv is None and self.prefix_cache is not None:
                reused, kv = self.prefix_cache.lookup(gen.prompt)
                if kv is not None:
                    self._store_for(rows=0, capacity=n + 1, gens=[gen])
                    self._store.write_row(self._claim_slot(gen), kv[..., :reused, :])
                    gen.kv_len = reused
            done = gen.kv_len
            take = min(room, n - done)
            store = self._store_for(rows=0, capacity=n + 1, gens=[gen])
            if gen.row is None:
                row = self._claim_slot(gen)
                if gen.kv is not None:                 # partial prompt KV evicted since the last chunk
                    store.write_row(row, gen.kv)
                    gen.kv = None
            store.begin_prefill([gen.row], offset=done)
            try:
                cols = torch.arange(done + take, device=self.device)
                ids = torch.tensor([gen.prompt[done:done + take]], dtype=torch.long, device=self.device)
                if done == 0:
                    out = self.model(input_ids=ids, past_key_values=store, use_cache=True, logits_to_keep=1)
                else:
                    mask = cols[None, :] <= cols[done:, None]
                    out = self.model(input_ids=ids, position_ids=cols[None, done:], attention_mask=mask[None, None],
                                     past_key_values=store, use_cache=True, logits_to_keep=1)
            except StepInterrupted:
                gen.kv_len = done                   # the chunks before this one stay in its row
                raise
            except Exception:
                self._free_row(gen)
                gen.kv_len = 0
                raise
            finally:
                store.end_prefill()
            gen.kv_len = done + take
            room -= take
            if gen.kv_len == n:
                if self.prefix_cache is not None:
                    self.prefix_cache.insert(gen.prompt, store.read_row(gen.row, n))
                self._finish_prefill([gen], [n], out.logits[:, -1], result)

    def prefill_left(self, gen_id: str) -> int | None:
        gen = self._get(gen_id, "prefill_left")
        if gen.prefilled:
            return 0
        if gen.kv_len == 0 and gen.row is None and gen.kv is None and self.prefix_cache is not None:
            return len(gen.prompt) - self.prefix_cache.reusable(gen.prompt)   # the cached prefix is not prefilled
        return len(gen.prompt) - gen.kv_len

    def _prefill_after_prefix(self, gen: _Generation, reused: int, kv: torch.Tensor, result: StepResult) -> None:
        n = len(gen.prompt)
        store = self._store_for(rows=0, capacity=n + 1, gens=[gen])
        row = self._claim_slot(gen)
        store.write_row(row, kv[..., :reused, :])
        store.begin_prefill([row], offset=reused)
        try:
            cols = torch.arange(n, device=self.device)
            mask = cols[None, :] <= cols[reused:, None]          # suffix token i sees columns [0, reused + i]
            out = self.model(input_ids=torch.tensor([gen.prompt[reused:]], dtype=torch.long, device=self.device),
                             position_ids=cols[None, reused:], attention_mask=mask[None, None],
                             past_key_values=store, use_cache=True, logits_to_keep=1)
        except Exception:
            self._free_row(gen)
            raise
        finally:
            store.end_prefill()
        self._finish_prefill([gen], [n], out.logits[:, -1], result)

    def _prefill_group(self, gens: list[_Generation], result: StepResult) -> None:
        lengths = [len(g.prompt) for g in gens]
        width = max(lengths)
        store = self._store_for(rows=0, capacity=width + 1, gens=gens)
        rows = [self._claim_slot(g) for g in gens]
        store.begin_prefill(rows)
        try:
            if len(gens) == 1:               # causal attention, no mask, logits of the last position only
                ids = torch.tensor([gens[0].prompt], dtype=torch.long, device=self.device)
                out = self.model(input_ids=ids, past_key_values=store, use_cache=True, logits_to_keep=1)
            else:                            # right-padded: row i's tokens [0, n_i) see only themselves
                ids = torch.tensor([g.prompt + [0] * (width - len(g.prompt)) for g in gens],
                                   dtype=torch.long, device=self.device)
                n = torch.tensor(lengths, device=self.device)
                cols = torch.arange(width, device=self.device)
                mask = (cols[None, :] <= cols[:, None])[None] & (cols[None, None, :] < n[:, None, None])
                # logits of the last `keep` positions cover every row's last real token; an int
                # logits_to_keep means the same in every transformers 5.x (a per-row index tensor does not)
                keep = width - min(lengths) + 1
                out = self.model(input_ids=ids, position_ids=cols[None].expand(len(gens), width),
                                 attention_mask=mask[:, None], past_key_values=store, use_cache=True,
                                 logits_to_keep=keep)
                last = n - 1 - (width - keep)
                out.logits = out.logits[torch.arange(len(gens), device=self.device), last][:, None]
        except Exception:
            for gen in gens:                 # leave them unprefilled and rowless, as before the step
                self._free_row(gen)
            raise
        finally:
            store.end_prefill()
        if self.prefix_cache is not None:
            for gen, n_tokens in zip(gens, lengths):
                self.prefix_cache.insert(gen.prompt, store.read_row(gen.row, n_tokens))
        self._finish_prefill(gens, lengths, out.logits[:, -1], result)

    def _finish_prefill(self, gens: list[_Generation], lengths: list[int], logits: torch.Tensor,
                        result: StepResult) -> None:
        tokens = self._choose_tokens(logits, gens)
        for gen, n_tokens, token in zip(gens, lengths, tokens):
            gen.kv_len, gen.prefilled, gen.prompt_kv = n_tokens, True, n_tokens
            result.prefilled.append(gen.gen_id)
            self._emit(gen, token, result)

    def _decode(self, gens: list[_Generation], result: StepResult) -> None:
        changed, order = self._arrange(gens)
        store = self._store
        mask = store.begin_decode([None if g is None else g.kv_len for g in order], changed, self._lo)
        ids = torch.tensor([[0 if g is None else g.output[-1]] for g in order], dtype=torch.long, device=self.device)
        positions = store.positions()
        if any(g is not None and g.pos_offset for g in order):   # evicted prompt KV: original positions kept
            positions = positions + torch.tensor([[0 if g is None else g.pos_offset] for g in order],
                                                 dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                         past_key_values=store, use_cache=True)
        store.end_decode()
        logits = out.logits[:, -1]
        live = order
        if store.gaps:
            logits, live = logits[store.row_index], [g for g in order if g is not None]
            self.gap_row_steps += store.gaps
        tokens = self._choose_tokens(logits, live)
        for gen, token in zip(live, tokens):
            gen.kv_len += 1
            self._emit(gen, token, result)

    def _choose_tokens(self, logits: torch.Tensor, gens: list[_Generation]) -> list[int]:
        """The next token of each row (sampling.py), a constrained generation's among the tokens its grammar allows
        (engine/grammar.py). Called once a forward has returned: on a GPU the masks are filled on the CPU while the
        forward's kernels still execute; greedy rows on a CPU are masked only where their top token is not allowed."""
        matchers = [g.matcher for g in gens]
        if self._masks is not None and any(m is not None for m in matchers):
            if self.sampling.greedy and logits.device.type == "cpu":
                return self._masks.greedy_tokens(logits, matchers)
            self._masks.apply(logits, matchers)
        return choose_tokens(logits, self.sampling, [g.generator for g in gens])

    def _emit(self, gen: _Generation, token: int, result: StepResult) -> None:
        if gen.forced is not None:
            token = gen.forced[len(gen.output)]
        elif gen.matcher is not None:
            advance(gen.matcher, int(token), gen.gen_id)
        gen.output.append(int(token))
        result.tokens[gen.gen_id] = gen.output[-1]
        hit_eos = gen.forced is None and gen.output[-1] in self._eos_ids
        if hit_eos or gen.remaining() == 0:
            gen.finished = True
            result.finished.add(gen.gen_id)

    # ----- prompt-KV eviction (TimeBill) -----
    @torch.inference_mode()
    def evict_prompt_kv(self, gen_id: str, ratio: float) -> int:
        """Drop ``ratio`` of the prompt KV a prefilled generation holds now, keeping the columns its last prompt
        window attends to most (engine/kv_evict.py) and the window itself; its output KV is untouched and its
        later tokens keep their original positions. Works wherever the KV lives (store row, own tensor, host).
        Returns the prompt columns kept."""
        from .kv_evict import snapkv_keep

        gen = self._get(gen_id, "evict_prompt_kv")
        if not 0.0 <= ratio < 1.0:
            raise EngineError(f"evict_prompt_kv: ratio must be in [0, 1), got {ratio}")
        if not gen.prefilled:
            raise EngineError(f"evict_prompt_kv: generation {gen_id!r} is not prefilled yet; evict after its prefill")
        p = gen.prompt_kv
        keep = max(1, round(p * (1.0 - ratio)))
        if keep >= p:
            return p
        kv = self._store.read_row(gen.row, gen.kv_len) if gen.row is not None else gen.kv
        positions = gen.kept_pos if gen.kept_pos is not None else list(range(p))
        tokens = [gen.prompt[i] for i in positions]
        prompt_kv = kv[..., :p, :].to(self.device)
        idx = snapkv_keep(self.model, prompt_kv, tokens, positions, keep)
        idx_all = torch.cat([idx, torch.arange(p, gen.kv_len, device=idx.device)])
        kept = kv.index_select(-2, idx_all.to(kv.device))
        if gen.row is not None:
            self._store.write_row(gen.row, kept)
            self._last_active = []               # row lengths changed: the next decode re-reads them
        else:
            gen.kv = kept.pin_memory() if gen.offloaded and self._pin else kept
        new_len = kept.shape[-2]
        gen.pos_offset += gen.kv_len - new_len
        gen.kv_len, gen.prompt_kv = new_len, keep
        gen.kept_pos = [positions[i] for i in idx.tolist()]
        return keep

    # ----- slot store -----
    def _arrange(self, gens: list[_Generation]) -> tuple[bool, list[_Generation | None]]:
        """Place these generations in store rows for one decode; returns whether the decode rows changed since
        the previous decode, and the generation of each row of the decode range (None: a gap row).

        With ``decode_gaps`` nobody moves: a generation that left stays in its row, and the decode runs
        over rows [0, R) that cover every wanted row, parked or empty rows inside being gaps (a dummy token each,
        no KV write). A generation without a row (cloned out or offloaded) is written into the lowest free row,
        which fills gaps first. Gaps cost decode rows, so once a row has been a gap for more than
        ``gap_rent_steps`` decodes the rows are compacted as below (ski rental: a move reads and writes a row's
        KV, a gap step reads it once in attention, so two gap steps cost about one move where attention's memory
        traffic dominates; where per-row compute dominates, as on CPU, gaps cost more and stay off).
        Without ``decode_gaps`` (default) the rows are compacted at every membership change (``_compact``).
        """
        batch = len(gens)
        if self._store is not None and max(g.kv_len for g in gens) < self._store.capacity:
            rows = [g.row for g in gens]
            if None not in rows and max(rows) - min(rows) == batch - 1 and (self.slide_window or min(rows) == 0):
                lo = min(rows)                      # a window of rows already holds exactly these: nothing to place
                order = self._slots[lo:lo + batch]
                changed = order != self._last_active or lo != self._lo
                self._last_active, self._lo, self._gap_age = order, lo, {}
                return changed, order
        if self.park_rows and self.decode_gaps:
            order, moved = self._place_in_gaps(gens)
            self._gap_age = {r: self._gap_age.get(r, 0) + 1 for r, g in enumerate(order) if g is None}
            if max(self._gap_age.values(), default=0) <= self.gap_rent_steps:
                changed = moved or order != self._last_active or self._lo != 0
                self._last_active, self._lo = order, 0     # gap rows: the decode range starts at row 0
                return changed, order
        self._gap_age = {}
        return self._compact(gens)

    def _place_in_gaps(self, gens: list[_Generation]) -> tuple[list[_Generation | None], bool]:
        """Give rowless generations the lowest free rows; the decode range is [0, highest wanted row]."""
        store = self._store_for(rows=0, capacity=max(g.kv_len for g in gens) + 1, gens=gens)
        moved = False
        for gen in gens:
            if gen.row is None:
                store.write_row(self._claim_slot(gen), gen.kv)
                gen.kv, moved = None, True
        wanted = set(gens)
        top = max(g.row for g in gens) + 1
        return [g if g in wanted else None for g in self._slots[:top]], moved

    def _compact(self, gens: list[_Generation]) -> tuple[bool, list[_Generation | None]]:
        """Make a window of rows [lo, lo + B) hold exactly these generations, copying only rows that leave or join.

        A generation leaving the batch stays resident ("parked") in a store row outside the window: it is moved
        only if it sat inside the new window, then to the free row nearest the window (so that a rejoin may only
        widen it), and rejoins with one row move or none. With ``slide_window`` the window goes where the fewest
        rows must move (``_window``), so a generation leaving at either edge of the last window moves nothing;
        without it the window is [0, B). Moving between rows of the store is ~3-5x cheaper than cloning the row
        into a fresh tensor (no allocation, no page faults). With ``park_rows`` off (ablation) leaving rows are
        cloned out as before.
        """
        batch, wanted = len(gens), set(gens)
        if not self.park_rows:
            for gen in [g for g in self._slots if g is not None and g not in wanted]:
                self._evict(gen, to_host=False)
        parked = sum(1 for g in self._slots if g is not None and g not in wanted)
        self._store_for(rows=batch + parked, capacity=max(g.kv_len for g in gens) + 1, gens=gens)
        store, slots = self._store, self._slots
        lo = self._window(batch, wanted) if self.slide_window else 0
        hi = lo + batch
        outside = [g for g in gens if g.row is not None and not lo <= g.row < hi]
        moved = bool(outside)

        def move(gen: _Generation, dst: int) -> None:
            store.move_row(gen.row, dst, gen.kv_len)
            slots[gen.row], slots[dst], gen.row = None, gen, dst

        free_in = [r for r in range(lo, hi) if slots[r] is None]
        while outside and free_in:                  # rows freed outside can take the leavers below
            move(outside.pop(), free_in.pop())
        nearest = sorted((r for r in range(len(slots)) if slots[r] is None and not lo <= r < hi),
                         key=lambda r: lo - r if r < lo else r - hi, reverse=True)
        for r in range(lo, hi):                     # park leavers that sit in the window
            gen = slots[r]
            if gen is not None and gen not in wanted:
                if nearest:
                    move(gen, nearest.pop())
                else:
                    self._evict(gen, to_host=False)
                moved = True
        free_in = [r for r in range(lo, hi) if slots[r] is None]
        for gen in outside:
            move(gen, free_in.pop())
        for gen in gens:
            if gen.row is None:
                dst = free_in.pop()
                store.write_row(dst, gen.kv)
                slots[dst], gen.row, gen.kv, moved = gen, dst, None, True
        active = slots[lo:hi]
        changed = moved or active != self._last_active or lo != self._lo
        self._last_active, self._lo = active, lo
        return changed, active

    def _window(self, batch: int, wanted: set[_Generation]) -> int:
        """First row of the window of ``batch`` store rows that needs the fewest row copies: parked generations
        inside it move out, wanted ones outside it move in. Ties go to the window nearest the store's middle
        (room on both sides to park the next leavers next to it)."""
        slots = self._slots
        # +1 for a parked row (it would move out), -1 for a wanted row (it would not move in)
        marks = [0 if g is None else -1 if g in wanted else 1 for g in slots]
        acc = [0, *itertools.accumulate(marks)]
        span = len(slots) - batch
        return min(range(span + 1), key=lambda lo: (acc[lo + batch] - acc[lo], abs(2 * lo - span)))

    def _store_for(self, rows: int, capacity: int, gens: list[_Generation]) -> SlotKV:
        """The slot store, created or grown to hold ``rows`` rows of ``capacity`` columns."""
        headroom = self._headroom(gens)
        if self._store is None:
            reserve = (RESERVE_ROWS, min(self.max_context or RESERVE_TOKENS, RESERVE_TOKENS)) \
                if self.reserve_store else None
            self._store = SlotKV(self.kv_shape, self.device, rows=max(rows, 8, self.kv_store_rows),
                                 capacity=max(capacity + headroom, self.kv_store_tokens), reserve=reserve)
        self._store.ensure(rows, capacity, headroom)
        self._slots.extend([None] * (self._store.rows - len(self._slots)))
        return self._store

    def _claim_slot(self, gen: _Generation) -> int:
        """Give a generation the lowest free row (growing the store if none is free)."""
        for r, resident in enumerate(self._slots):
            if resident is None:
                self._slots[r], gen.row = gen, r
                return r
        self._store.ensure(len(self._slots) + 1, 0)
        self._slots.extend([None] * (self._store.rows - len(self._slots)))
        return self._claim_slot(gen)

    def _evict(self, gen: _Generation, to_host: bool) -> None:
        """Copy a resident generation's row out of the store (to its own device tensor or to host)."""
        src = self._store.read_row(gen.row, gen.kv_len)
        if to_host:
            gen.kv = torch.empty(src.shape, dtype=src.dtype, device="cpu", pin_memory=self._pin)
            gen.kv.copy_(src, non_blocking=self._pin)
            gen.offloaded = True
        else:
            gen.kv = src.clone()
        self._free_row(gen)

    def _free_row(self, gen: _Generation) -> None:
        self._slots[gen.row], gen.row = None, None

    def _headroom(self, gens: list[_Generation]) -> int:
        return max(1, min(self.headroom_tokens, max(g.remaining() for g in gens)))

    # ----- memory -----
    def memory(self) -> MemoryStats:
        bpt = self.kv_shape.bytes_per_token
        device = host = 0
        for gen in self._gens.values():
            if gen.offloaded:
                host += gen.kv_len * bpt
            elif gen.prefilled:
                device += gen.kv_len * bpt
        return MemoryStats(float(device), float(host), self.kv_budget_bytes, float(bpt), len(self._gens))

    def held_bytes(self) -> dict[str, int]:
        """Bytes physically held by KV tensors (batch buffer included), by location."""
        held = {"device": self._store.nbytes() if self._store is not None else 0, "host": 0}
        if self.prefix_cache is not None:
            held["device"] += self.prefix_cache.nbytes()
        for gen in self._gens.values():
            if gen.kv is not None:
                base = gen.kv.untyped_storage().nbytes()
                held["host" if gen.offloaded else "device"] += base
        return held

    def _enforce_budget(self) -> None:
        """Offload suspended generations' KV to host, least recently suspended first, until under budget."""
        if math.isinf(self.kv_budget_bytes):
            return
        used = self.memory().kv_device_bytes
        if used <= self.kv_budget_bytes:
            return
        victims = sorted((g for g in self._gens.values() if g.suspended and g.prefilled and not g.offloaded),
                         key=lambda g: g.suspended_seq)
        with torch.inference_mode():
            for gen in victims:
                if used <= self.kv_budget_bytes:
                    break
                self._offload(gen)
                used -= gen.kv_len * self.kv_shape.bytes_per_token

    def _offload(self, gen: _Generation) -> None:
        if gen.row is not None:
            self._evict(gen, to_host=True)
            return
        host = torch.empty(gen.kv.shape, dtype=gen.kv.dtype, device="cpu", pin_memory=self._pin)
        host.copy_(gen.kv, non_blocking=self._pin)
        gen.kv, gen.offloaded = host, True

    # ----- introspection -----
    def output_ids(self, gen_id: str) -> list[int]:
        """Tokens emitted so far by a generation."""
        return list(self._get(gen_id, "output_ids").output)

    def is_offloaded(self, gen_id: str) -> bool:
        """Whether a generation's KV currently lives in host memory."""
        return self._get(gen_id, "is_offloaded").offloaded


class StepInterrupted(Exception):
    """Raised between decoder layers when the engine's interrupt_check asks to end the step (never escapes step)."""


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: the module list as long as its config's num_hidden_layers (``model.layers`` in
    Llama-family models). Empty when there is none to find (the engine then cannot be interrupted)."""
    n = getattr(model.config, "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return list(module)
    return []


def _gate(engine_ref: "weakref.ref[TransformersEngine]", module: torch.nn.Module, args) -> None:
    """Forward pre-hook of each decoder layer: end the step here if the engine's interrupt_check says so."""
    engine = engine_ref()
    if engine is not None and engine._gate_open and engine.interrupt_check():
        engine._gate_open = False
        raise StepInterrupted


def _remove_hooks(handles: list) -> None:
    for handle in handles:
        handle.remove()
    handles.clear()


def _eos_ids(loaded: LoadedModel) -> set[int]:
    ids: set[int] = set()
    for source in (loaded.tokenizer.eos_token_id, getattr(loaded.model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return ids
