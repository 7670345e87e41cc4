"""The transformers engine: batching, suspend/resume and offload are token-exact vs solo greedy decoding."""
from __future__ import annotations

import random

import pytest
import torch

from timely_llm_ros.engine import EngineError
from timely_llm_ros.engine.transformers.loader import build_random_model
from timely_llm_ros.engine.transformers.sampling import SamplingParams
from timely_llm_ros.engine.transformers.engine import TransformersEngine


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)   # a tiny model gains nothing from more; avoids spinning against other jobs
    return build_random_model("tiny", device="cpu", seed=1)


def make(tiny, **kw) -> TransformersEngine:
    return TransformersEngine(tiny, **kw)


def prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [256] + [rng.randrange(256) for _ in range(length - 1)]


def solo_greedy(tiny, ids: list[int], max_new: int) -> list[int]:
    """Reference: transformers' own generate, greedy, one sequence."""
    with torch.inference_mode():
        out = tiny.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  max_new_tokens=max_new, do_sample=False, eos_token_id=257, pad_token_id=0)
    return out[0, len(ids):].tolist()


def run_to_end(engine: TransformersEngine, gen_id: str) -> list[int]:
    while True:
        res = engine.step([gen_id])
        if gen_id in res.finished:
            return engine.output_ids(gen_id)


def test_uninterrupted_generation_equals_generate_greedy(tiny):
    ids = prompt(0, 23)
    engine = make(tiny)
    engine.add("g", ids, 30)
    assert run_to_end(engine, "g") == solo_greedy(tiny, ids, 30)


def test_suspend_resume_at_arbitrary_points_is_token_exact(tiny):
    ids, other = prompt(1, 31), prompt(2, 9)
    engine = make(tiny)
    engine.add("g", ids, 40)
    engine.add("o", other, 200)
    rng = random.Random(3)
    while "g" not in engine._gens or not engine._gens["g"].finished:
        engine.step(["g", "o"])
        if rng.random() < 0.3:
            engine.suspend("g")
            for _ in range(rng.randrange(1, 4)):   # the batch mate keeps decoding meanwhile
                engine.step(["o"])
            engine.resume("g")
    assert engine.output_ids("g") == solo_greedy(tiny, ids, 40)


def test_a_leaver_stays_parked_in_the_store_and_rejoins_token_exact(tiny):
    ids = [prompt(10 + i, 11 + 4 * i) for i in range(4)]
    outs = {}
    for slide in (True, False):
        engine = make(tiny)
        engine.rows.slide_window = slide
        for i, p in enumerate(ids):
            engine.add(f"g{i}", p, 24)
        engine.step([f"g{i}" for i in range(4)])
        for rnd in range(5):                   # a middle row leaves for two steps, then rejoins
            leaver = f"g{1 + rnd % 2}"
            row = engine._gens[leaver].row
            engine.suspend(leaver)
            others = [f"g{i}" for i in range(4) if f"g{i}" != leaver]
            engine.step(others)
            gen, lo = engine._gens[leaver], engine.rows.lo
            if slide:                          # not copied: the window of the 3 others moved away from it
                assert gen.kv is None and gen.row == row and not lo <= row < lo + 3
            else:                              # parked in a store row outside the window [0, 3)
                assert gen.kv is None and gen.row is not None and gen.row >= 3 and lo == 0
            engine.step(others)
            engine.resume(leaver)
            engine.step([f"g{i}" for i in range(4)])
        outs[slide] = [engine.output_ids(f"g{i}") for i in range(4)]
    assert outs[True] == outs[False]
    for i in range(4):
        assert outs[True][i] == solo_greedy(tiny, ids[i], 24)[:len(outs[True][i])]


@pytest.mark.parametrize("slide", [True, False])
def test_a_leaver_at_the_edge_of_the_window_moves_no_kv_when_the_window_slides(tiny, slide):
    engine = make(tiny)
    engine.rows.slide_window = slide
    ids = {f"g{i}": prompt(20 + i, 8 + 3 * i) for i in range(4)}
    for gid, p in ids.items():
        engine.add(gid, p, 20)
    engine.step(list(ids))
    engine.step(list(ids))
    assert engine.rows.lo == 0 and all(g is not None for g in engine.rows.slots[:4])
    bottom = engine.rows.slots[0].gen_id
    others = [g for g in ids if g != bottom]
    before = engine.rows.store.moves
    engine.suspend(bottom)
    engine.step(others)
    # sliding: the window becomes rows [1, 4) and nothing moves; fixed at [0, 3): the leaver moves out and the
    # generation in row 3 moves down into row 0
    assert engine.rows.store.moves - before == (0 if slide else 2)
    assert engine.rows.lo == (1 if slide else 0)
    engine.resume(bottom)
    while not all(engine._gens[g].finished for g in ids):
        engine.step([g for g in ids if not engine._gens[g].finished])
    for gid, p in ids.items():
        assert engine.output_ids(gid) == solo_greedy(tiny, p, 20), gid


@pytest.mark.parametrize("slide", [True, False], ids=["sliding-window", "fixed-window"])
def test_random_churn_of_a_multi_row_batch_is_token_exact(tiny, slide):
    """Generations leave and rejoin at random, finish and are released while others arrive (parked rows move out
    of the window and back, a newcomer takes a released generation's row); every generation still equals its solo
    greedy output."""
    rng = random.Random(11)
    specs = {f"g{i}": (prompt(40 + i, rng.randrange(3, 40)), rng.randrange(10, 45)) for i in range(7)}
    engine = make(tiny)
    engine.rows.slide_window = slide
    arrivals = {gid: 3 * i for i, gid in enumerate(specs)}
    out_of_batch: dict[str, int] = {}
    done: set[str] = set()
    outputs: dict[str, list[int]] = {}
    for t in range(400):
        for gid, at in arrivals.items():
            if at == t:
                engine.add(gid, *specs[gid])
        for gid in [g for g, left in out_of_batch.items() if left == 0]:
            engine.resume(gid)
            del out_of_batch[gid]
        out_of_batch = {g: left - 1 for g, left in out_of_batch.items()}
        running = [g for g, at in arrivals.items() if at <= t and g not in done and g not in out_of_batch]
        if not running:
            if len(done) == len(specs):
                break
            continue
        res = engine.step(running)
        done |= res.finished
        for gid in res.finished:              # released at once, as the scheduler does: newcomers reuse the row
            outputs[gid] = engine.output_ids(gid)
            engine.release(gid)
        for gid in running:
            if gid not in res.finished and rng.random() < 0.25:
                engine.suspend(gid)
                out_of_batch[gid] = rng.choice([0, 1, 2, 5])
    assert done == set(specs)
    for gid, (ids, max_new) in specs.items():
        assert outputs[gid] == solo_greedy(tiny, ids, max_new), gid


def test_resume_never_prefills_again(tiny):
    engine = make(tiny)
    engine.add("g", prompt(4, 50), 10)
    first = engine.step(["g"])
    engine.suspend("g")
    engine.resume("g")
    second = engine.step(["g"])
    assert first.prefilled == ["g"] and second.prefilled == []


def test_offloaded_kv_comes_back_token_exact(tiny):
    ids, mate = prompt(5, 40), prompt(6, 12)
    engine = make(tiny, kv_budget_mb=1e-4)   # smaller than any context: every suspended KV goes to host
    engine.add("g", ids, 30)
    engine.add("m", mate, 200)
    offloaded_seen = 0
    while not engine._gens["g"].finished:
        engine.step(["g", "m"])
        engine.suspend("g")
        engine.step(["m"])
        offloaded_seen += engine.is_offloaded("g")
        assert engine.memory().kv_host_bytes > 0
        engine.resume("g")
        assert not engine.is_offloaded("g")
    assert offloaded_seen > 0
    assert engine.output_ids("g") == solo_greedy(tiny, ids, 30)


def test_least_recently_suspended_is_offloaded_first(tiny):
    engine = make(tiny)
    for gid, seed in (("a", 7), ("b", 8)):
        engine.add(gid, prompt(seed, 30), 10)
    engine.step(["a", "b"])
    per_gen = engine.memory().kv_device_bytes / 2
    engine.kv_budget_bytes = per_gen * 1.5                # room for one of the two
    engine.suspend("a")
    engine.suspend("b")
    assert engine.is_offloaded("a") and not engine.is_offloaded("b")


@pytest.mark.parametrize("batch_prefill", [True, False])
def test_generations_of_different_lengths_and_arrivals_each_equal_their_solo_output(tiny, batch_prefill):
    lengths = {"a": 7, "b": 64, "c": 15, "d": 33, "e": 3}
    max_new = {"a": 25, "b": 12, "c": 40, "d": 18, "e": 30}
    arrival = {"a": 0, "b": 0, "c": 3, "d": 5, "e": 5}
    prompts = {g: prompt(10 + i, n) for i, (g, n) in enumerate(lengths.items())}
    engine = make(tiny, batch_prefill=batch_prefill)
    rng = random.Random(11)
    done: set[str] = set()
    for it in range(400):
        for g, t in arrival.items():
            if t == it:
                engine.add(g, prompts[g], max_new[g])
        live = [g for g, t in arrival.items() if t <= it and g not in done]
        if not live and len(done) == len(lengths):
            break
        chosen = [g for g in live if it == arrival[g] or rng.random() < 0.7] or live[:1]   # a policy's pick
        res = engine.step(chosen)
        assert set(res.tokens) == set(chosen)
        done |= res.finished
    assert done == set(lengths)
    for g in lengths:
        assert engine.output_ids(g) == solo_greedy(tiny, prompts[g], max_new[g]), g


def test_a_step_decodes_all_prefilled_generations_in_one_forward_and_prefills_new_ones_in_another(tiny):
    engine = make(tiny)
    calls = []
    handle = tiny.model.register_forward_hook(lambda mod, args, kwargs_out: calls.append(1))
    try:
        for g, seed in (("a", 20), ("b", 21), ("c", 22)):
            engine.add(g, prompt(seed, 10 + seed), 20)
        engine.step(["a", "b"])                 # two prefills
        engine.add("d", prompt(23, 28), 20)      # similar length to c: one padded prefill
        calls.clear()
        res = engine.step(["a", "b", "c", "d"])  # one batched decode + one batched prefill
        assert len(calls) == 2 and sorted(res.prefilled) == ["c", "d"]
        calls.clear()
        engine.step(["a", "b", "c", "d"])
        assert len(calls) == 1
    finally:
        handle.remove()


def test_forced_ids_are_emitted_exactly_then_finish(tiny):
    forced = [72, 105, 33, 257, 10, 11]     # an EOS inside the trace does not stop it early
    engine = make(tiny)
    engine.add("t", prompt(30, 20), 100, forced_ids=forced)
    engine.add("free", prompt(31, 8), 100)
    emitted, finished_at = [], None
    for i in range(20):
        res = engine.step(["t", "free"] if finished_at is None else ["free"])
        if finished_at is None:
            emitted.append(res.tokens["t"])
            if "t" in res.finished:
                finished_at = i
    assert emitted == forced and finished_at == len(forced) - 1


def test_release_returns_memory_to_baseline(tiny):
    engine = make(tiny, kv_budget_mb=0.01)
    baseline = engine.memory()
    assert engine.held_bytes() == {"device": 0, "host": 0}
    for i in range(4):
        engine.add(f"g{i}", prompt(40 + i, 20 + 10 * i), 30)
    for _ in range(5):
        engine.step([f"g{i}" for i in range(4)])
    engine.suspend("g1")
    engine.suspend("g2")
    engine.step(["g0", "g3"])
    during = engine.memory()
    assert during.kv_device_bytes + during.kv_host_bytes > 0 and during.generations == 4
    engine.release("g2")                      # cancel a suspended one
    engine.release("g0")                      # and a running one
    engine.step(["g3"])
    for g in ("g1", "g3"):
        engine.release(g)
    after = engine.memory()
    assert (after.kv_device_bytes, after.kv_host_bytes, after.generations) == \
        (baseline.kv_device_bytes, baseline.kv_host_bytes, baseline.generations)
    assert engine.held_bytes() == {"device": 0, "host": 0}


def test_memory_counts_context_tokens(tiny):
    engine = make(tiny)
    engine.add("g", prompt(50, 17), 10)
    engine.step(["g"])
    engine.step(["g"])
    stats = engine.memory()
    assert stats.kv_device_bytes == 18 * stats.kv_bytes_per_token   # prompt + first token in KV


def test_step_with_unknown_or_released_id_raises_engine_error(tiny):
    engine = make(tiny)
    with pytest.raises(EngineError, match="never added"):
        engine.step(["ghost"])
    engine.add("g", prompt(60, 5), 5)
    engine.step(["g"])
    engine.release("g")
    with pytest.raises(EngineError, match="released"):
        engine.step(["g"])


def test_step_with_suspended_or_finished_generation_raises(tiny):
    engine = make(tiny)
    engine.add("g", prompt(61, 5), 1)
    engine.add("s", prompt(62, 5), 5)
    engine.step(["g", "s"])
    engine.suspend("s")
    with pytest.raises(EngineError, match="suspended"):
        engine.step(["s"])
    with pytest.raises(EngineError, match="finished"):
        engine.step(["g"])


def test_seeded_sampling_is_reproducible(tiny):
    outs = []
    for _ in range(2):
        engine = make(tiny, sampling=SamplingParams(temperature=0.9, top_p=0.9, seed=5))
        engine.add("g", prompt(70, 10), 20)
        outs.append(run_to_end(engine, "g"))
    assert outs[0] == outs[1]


def test_a_leading_bos_in_forced_ids_is_not_emitted(tiny):
    engine = make(tiny)
    plan = engine.encode(" mf(10);")           # the tokenizer prepends BOS, as the scheduler's encode() does
    assert plan[0] == 256
    engine.add("t", prompt(32, 12), 50, forced_ids=plan)
    assert engine.decode(run_to_end(engine, "t")) == " mf(10);"
    assert engine.output_ids("t") == plan[1:]


def byte_level_tokenizer():
    """A small byte-level BPE trained here, as transformers and our adapter see it, and a plan's ids that split
    multi-byte characters across tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from timely_llm_ros.engine.transformers.loader import HFTokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = ["s('cat');g('cat');tp();", "mu(80);mb(100);", "déjà vu ünïcode 🤖 plan", "?iv('cup')==True{pi('cup');}"]
    bpe.train_from_iterator(texts * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<bos>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    hf = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<bos>", eos_token="<eos>")
    tok = HFTokenizer(hf)
    ids = tok.encode(" déjà vu: s('cat');🤖 mu(80);") + [hf.eos_token_id]
    return hf, tok, ids


def test_fast_byte_level_detokenizer_matches_the_tokenizer_on_every_prefix():
    hf, tok, ids = byte_level_tokenizer()
    assert tok._bytes is not None                       # the fast path is in use
    for n in range(len(ids) + 1):                       # partial UTF-8 sequences included
        assert tok.decode(ids[:n]) == hf.decode(ids[:n], skip_special_tokens=True)


def test_text_streams_give_the_tokenizers_text_token_by_token():
    from timely_llm_ros.core.engine import PrefixDiffStream
    from timely_llm_ros.engine.detokenize import ByteStream

    hf, tok, ids = byte_level_tokenizer()
    streams = [tok.byte_table.stream(), PrefixDiffStream(lambda i: hf.decode(i, skip_special_tokens=True))]
    assert isinstance(streams[0], ByteStream)           # incremental for byte-level BPE
    texts = ["", ""]
    held = 0
    for n, token in enumerate(ids, 1):
        whole = hf.decode(ids[:n], skip_special_tokens=True)
        complete = whole[:-1] if whole.endswith("\ufffd") else whole    # without an incomplete last character
        for k, stream in enumerate(streams):
            texts[k] += stream.push(token)
        assert texts[0] == complete, n                  # the byte stream: every complete character at once
        assert complete.startswith(texts[1]) and (texts[1] == whole or whole.endswith("\ufffd")), n
        held += whole.endswith("\ufffd")
    assert held >= 2                                    # the ids did split characters
    assert texts == [hf.decode(ids, skip_special_tokens=True)] * 2


def test_prompts_sharing_a_cached_prefix_prefill_only_the_rest_and_stay_token_exact(tiny):
    shared = prompt(80, 40)
    prompts = {"first": shared + prompt(81, 9)[1:], "other": shared + prompt(82, 14)[1:],
               "same": shared + prompt(81, 9)[1:], "short": shared[:30]}
    engine = make(tiny, prefix_cache_mb=1, prefix_min_tokens=8)
    engine.add("first", prompts["first"], 15)
    run_to_end(engine, "first")
    for g in ("other", "same", "short"):
        engine.add(g, prompts[g], 15)
    res = engine.step(["other", "same", "short"])
    assert sorted(res.prefilled) == ["other", "same", "short"]
    while not all(engine._gens[g].finished for g in ("other", "same", "short")):
        engine.step([g for g in ("other", "same", "short") if not engine._gens[g].finished])
    assert engine.prefix_cache.hits == 3
    assert engine.prefix_cache.reused_tokens == 40 + (len(prompts["same"]) - 1) + 29
    for g, ids in prompts.items():
        assert engine.output_ids(g) == solo_greedy(tiny, ids, 15), g


def test_prompts_of_similar_lengths_prefill_in_one_padded_forward_token_exact(tiny):
    """The multi-row prefill path (right-padded, per-row causal mask) gives each row its solo greedy output."""
    prompts = {"a": prompt(90, 20), "b": prompt(91, 23), "c": prompt(92, 26), "d": prompt(93, 24)}
    engine = make(tiny)
    calls = []
    handle = tiny.model.register_forward_hook(lambda mod, args, out: calls.append(args[0].shape if args else None))
    try:
        for g, ids in prompts.items():
            engine.add(g, ids, 20)
        res = engine.step(list(prompts))
        assert len(calls) == 1 and sorted(res.prefilled) == sorted(prompts)   # one forward, 4 padded rows
    finally:
        handle.remove()
    while not all(engine._gens[g].finished for g in prompts):
        engine.step([g for g in prompts if not engine._gens[g].finished])
    for g, ids in prompts.items():
        assert engine.output_ids(g) == solo_greedy(tiny, ids, 20), g


def test_chunked_prefill_stays_within_the_step_budget_mixes_with_decodes_and_is_token_exact(tiny):
    """A 16-token step budget: long prompts are split over steps (no token until the prompt is complete),
    decodes run in the same steps, and every output equals the unchunked (solo greedy) one."""
    prompts = {"long": prompt(100, 57), "mid": prompt(101, 23), "short": prompt(102, 6)}
    engine = make(tiny, step_token_budget=16, prefix_cache_mb=1, prefix_min_tokens=8)
    engine.add("short", prompts["short"], 25)
    engine.step(["short"])                                  # short is decoding from now on
    engine.add("long", prompts["long"], 12)
    engine.add("mid", prompts["mid"], 12)
    steps_to_first_token = {}
    for i in range(200):
        live = [g for g in ("short", "long", "mid") if not engine._gens[g].finished]
        if not live:
            break
        res = engine.step(live)
        assert engine.last_step_tokens <= 16
        for g in ("long", "mid"):
            if g in res.tokens and g not in steps_to_first_token:
                steps_to_first_token[g] = i + 1
    assert steps_to_first_token["long"] >= 57 // 15            # split across at least 4 steps
    for g, ids in prompts.items():
        assert engine.output_ids(g) == solo_greedy(tiny, ids, 25 if g == "short" else 12), g
    # a prompt sharing the long one's prefix reuses its KV, then chunks the rest
    again = prompts["long"][:50] + prompt(103, 9)[1:]
    engine.add("again", again, 8)
    while not engine._gens["again"].finished:
        engine.step(["again"])
    assert engine.prefix_cache.hits == 1 and engine.output_ids("again") == solo_greedy(tiny, again, 8)


def test_an_idle_engine_keeps_its_store_only_when_asked(tiny):
    for keep in (False, True):
        engine = make(tiny)
        engine.rows.keep_when_idle = keep
        engine.add("a", prompt(70, 12), 8)
        run_to_end(engine, "a")
        engine.release("a")
        assert (engine.rows.store is not None) == keep
        engine.add("b", prompt(71, 15), 20)             # the kept store (rows of a released plan) serves anew
        assert run_to_end(engine, "b") == solo_greedy(tiny, prompt(71, 15), 20)


def test_the_cpu_store_grows_inside_its_reservation_without_a_copy_and_stays_token_exact(tiny):
    """The default CPU store sits in a reservation of address space: twelve generations joining grow its rows and
    columns by widening a view of the same memory (the buffer's data pointer stays), and every output still equals
    its solo greedy one. With the reservation off (ablation) the same joins reallocate the buffer."""
    reserved, copying = make(tiny), make(tiny)
    copying.rows.reserve = False
    for engine in (reserved, copying):
        engine.add("g0", prompt(80, 10), 12)
        engine.step(["g0"])
    first = reserved.rows.store
    ptrs = {e: e.rows.store.buffer.data_ptr() for e in (reserved, copying)}
    rows, cols = first.rows, first.capacity
    assert first.reservation[0] >= 256 and copying.rows.store.reservation == (copying.rows.store.rows, copying.rows.store.capacity)
    ids = {f"g{i}": prompt(80 + i, 8 + 2 * i) for i in range(1, 13)}      # longer prompts: the columns grow too
    for engine in (reserved, copying):
        for g, p in ids.items():
            engine.add(g, p, 12)
        engine.step(list(ids))
    store = reserved.rows.store
    assert store is first and store.rows > rows and store.capacity > cols
    assert store.buffer.data_ptr() == ptrs[reserved] and store.reservation == first.reservation
    assert copying.rows.store.rows == store.rows and copying.rows.store.buffer.data_ptr() != ptrs[copying]
    for g, p in ids.items():
        assert run_to_end(reserved, g) == solo_greedy(tiny, p, 12), g


def test_a_growth_that_fits_the_reservation_is_clamped_to_it_and_one_past_it_copies_the_rows():
    """Amortised growth asks for more than needed (rows x2, columns x1.5 + headroom); when what is needed fits the
    reservation the growth stops at its edge instead of leaving it, and a growth past it copies every row."""
    from timely_llm_ros.engine.transformers.kv_cache import KVShape, SlotKV

    store = SlotKV(KVShape(2, 2, 4, torch.float32), "cpu", rows=8, capacity=100, reserve=(16, 120))
    kv = torch.arange(2 * 2 * 2 * 30 * 4, dtype=torch.float32).view(2, 2, 2, 30, 4)
    store.write_row(5, kv)
    ptr = store.buffer.data_ptr()
    store.ensure(12, 110, headroom=50)                 # asks for 16 x 160; 12 x 110 fits 16 x 120
    assert (store.rows, store.capacity) == (16, 120) and store.buffer.data_ptr() == ptr
    store.ensure(20, 110)                               # past the reservation: a new buffer, rows copied
    assert store.rows == 32 and store.buffer.data_ptr() != ptr and store.reservation == (32, 120)
    assert torch.equal(store.read_row(5, 30), kv)


def test_a_reserved_store_is_made_at_its_size_kept_when_idle_and_never_grown_below_it(tiny):
    """kv_store_rows/kv_store_tokens: the first generation gets a store of at least that size; twelve more join
    without the store being reallocated (a growth makes a new buffer); it stays when the engine goes idle; and
    every output still equals its solo greedy one. The default engine starts at 8 rows and grows."""
    grown = make(tiny)
    reserved = make(tiny, kv_store_rows=16, kv_store_tokens=120)
    for engine in (grown, reserved):
        engine.add("g0", prompt(80, 10), 12)
        engine.step(["g0"])
    first = reserved.rows.store
    assert first.rows >= 16 and first.capacity >= 120 and grown.rows.store.rows == 8
    ids = {f"g{i}": prompt(80 + i, 8 + i) for i in range(1, 13)}
    for engine in (grown, reserved):
        for g, p in ids.items():
            engine.add(g, p, 12)
        engine.step(list(ids))
    assert reserved.rows.store.buffer is first.buffer and grown.rows.store.rows == 16   # only the default one grew
    for g, p in ids.items():
        assert run_to_end(reserved, g) == solo_greedy(tiny, p, 12), g
    for g in ["g0", *ids]:
        reserved.release(g)
    assert reserved.rows.store is first


class LayerTrip:
    """An interrupt_check that says "stop" at the n-th layer it is asked about in a step (armed per step)."""

    def __init__(self) -> None:
        self.asked = 0
        self.at: int | None = None

    def arm(self, at: int | None) -> None:
        self.asked, self.at = 0, at

    def __call__(self) -> bool:
        self.asked += 1
        return self.at is not None and self.asked >= self.at


@pytest.mark.parametrize("kw", [{}, {"batch_prefill": False}, {"step_token_budget": 16},
                                {"prefix_cache_mb": 1, "prefix_min_tokens": 8}],
                         ids=["batched-prefill", "one-by-one", "chunked", "prefix-cache"])
def test_steps_cut_short_at_random_layers_leave_every_generation_token_exact(tiny, kw):
    """Steps interrupted before any layer of their decode or prefill forwards (one or several of them) emit nothing
    for the forward cut short, keep the tokens of the forwards that completed, and every generation still equals
    its solo greedy output: a cut-short decode or prefill leaves no trace in the KV."""
    rng = random.Random(21)
    shared = prompt(110, 30)
    specs = {f"g{i}": (shared[:rng.randrange(12, 30)] + prompt(111 + i, rng.randrange(3, 20))[1:],
                       rng.randrange(8, 30)) for i in range(6)}
    engine = make(tiny, **kw)
    trip = LayerTrip()
    engine.interrupt_check = trip
    layers = tiny.model.config.num_hidden_layers
    arrivals = {gid: 2 * i for i, gid in enumerate(specs)}
    outputs: dict[str, list[int]] = {}
    cut = 0
    for t in range(600):
        for gid, at in arrivals.items():
            if at == t:
                engine.add(gid, *specs[gid])
        live = [g for g, at in arrivals.items() if at <= t and g not in outputs]
        if not live:
            if len(outputs) == len(specs):
                break
            continue
        before = {g: engine.output_ids(g) for g in live}
        decoding = {g for g in live if engine._gens[g].prefilled}
        trip.arm(rng.randrange(1, 2 * layers + 1) if rng.random() < 0.5 else None)
        res = engine.step(live)
        if res.interrupted:
            cut += 1
            assert trip.asked == trip.at                    # it ended at the first layer told to stop
        for g in live:
            advanced = engine.output_ids(g)[:-1] == before[g] and g in res.tokens
            assert advanced or engine.output_ids(g) == before[g], g   # one token, or none at all
        assert res.interrupted or decoding <= set(res.tokens)
        for gid in res.finished:
            outputs[gid] = engine.output_ids(gid)
            engine.release(gid)
    assert cut >= 10 and engine.interrupted_steps == cut
    for gid, (ids, max_new) in specs.items():
        assert outputs[gid] == solo_greedy(tiny, ids, max_new), gid


def test_the_layer_gate_asks_nothing_outside_a_step_and_goes_with_its_engine(tiny):
    """interrupt_check is asked once per decoder layer of an engine step, never by other forwards of the model
    (a reference generate), and an engine that is gone leaves no hook on the shared model."""
    import gc

    layers = tiny.model.model.layers
    gc.collect()                               # engines of earlier tests
    hooks_before = sum(len(layer._forward_pre_hooks) for layer in layers)
    engine = make(tiny)
    asked = []
    engine.interrupt_check = lambda: asked.append(1) or False
    engine.add("g", prompt(120, 9), 3)
    engine.step(["g"])
    assert len(asked) == tiny.model.config.num_hidden_layers
    solo_greedy(tiny, prompt(121, 5), 3)
    assert len(asked) == tiny.model.config.num_hidden_layers
    assert sum(len(layer._forward_pre_hooks) for layer in layers) == hooks_before + len(layers)
    del engine
    gc.collect()
    assert sum(len(layer._forward_pre_hooks) for layer in layers) == hooks_before
