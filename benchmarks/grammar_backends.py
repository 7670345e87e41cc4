#!/usr/bin/env python3
"""Which grammar library constrains decoding: xgrammar, llguidance and outlines-core side by side on the drone and
arm plan grammars (core/skills/grammar.py) with SmolLM2-135M-Instruct's tokenizer (49,152 tokens).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/grammar_backends.py [--plans 200] [--steps 300] [--walks 200]

Per library and grammar, one table row:
- compile: seconds from grammar text to a matcher (the tokenizer's own preparation, done once per model, is printed
  apart);
- mask: microseconds to fill the next token's bitmask, along the corpus's reference plans (teacher forcing: each row
  consumes its plan's own tokens), for 1 row and for 8 and 16 rows in parallel (the library's batch call with
  --threads threads; outlines-core has none, its rows are filled one after another); accept: the microseconds
  to advance one row by one token; apply: the CPU kernel masking a 1 x 49,152 logits row with a mask taken midway through a plan (xgrammar's
  kernel for all three: llguidance's own is torch.compile'd, outlines-core's a torch function);
- correctness: reference plans accepted (corpus plans, each with EOS allowed at its end), invalid plans rejected
  (mutations of reference plans that core/skills/minispec.py rejects, and hand-written ones), random walks through
  the mask that hit a dead end (a state allowing no token and no EOS) or ended in a text that does not parse;
- vllm: whether vLLM 0.32's structured outputs take the same text (its own validation for its xgrammar and
  guidance backends; its outlines backend takes only regular expressions and JSON schemas).

outlines-core builds a DFA over the vocabulary from a regular expression (no recursion, no rules): it gets a regex
of the same language where one is small. The arm language is (at most 16 calls). The drone language with its
statement bound and nesting is regular too, but counting statements across nesting multiplies the DFA's states, so
with --outlines-drone outlines-core gets a looser drone regex (depth 2, any number of statements, returns anywhere,
untyped comparisons); one run took 263 s to index it on this machine, and its Guide then refused the second
statement of the reference plans that Python's re accepts under the same regex (not investigated further), so it
is left out by default.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import SkillSet, load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills import grammar as G  # noqa: E402
from timely_llm_ros.core.skills.minispec import parse  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402
from tools.embedded_planner.corpus import generate  # noqa: E402

ROBOTS = ("drone", "arm")
HAND_INVALID = {
    "drone": ["fly(10);", "mf('ten');", "?iv('cat')==True{tp();", "tp();}", "g(cat);", "_1=;", "1001{tp();}",
              "mf(10,20);", "s('cat') tp();"],
    "arm": ["2{dr();}", "?True{dr();}", "->'done';", "pi(3);", "mv(1);", "dr() dr();", "gt('box'));"],
}


# ----------------------------------------------------------------------------- the libraries
class XGrammar:
    name = "xgrammar 0.2.8"

    def __init__(self, hf_tokenizer, threads: int) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        t0 = time.perf_counter()
        self.info = xgr.TokenizerInfo.from_huggingface(hf_tokenizer, vocab_size=len(hf_tokenizer))
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=threads, cache_enabled=False)
        self.prepare_s = time.perf_counter() - t0
        self.batch = xgr.BatchGrammarMatcher(max_threads=threads)
        self.vocab = len(hf_tokenizer)

    def compile(self, robot: SkillSet) -> Any:
        return self.compiler.compile_grammar(G.plan_grammar(robot))

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def bitmask(self, rows: int) -> torch.Tensor:
        return self.xgr.allocate_token_bitmask(rows, self.vocab)

    def fill(self, matchers: list, mask: torch.Tensor, parallel: bool) -> None:
        if parallel:
            self.batch.batch_fill_next_token_bitmask(matchers, mask)
        else:
            for i, m in enumerate(matchers):
                m.fill_next_token_bitmask(mask, i)

    def accept(self, matcher: Any, token: int) -> bool:
        return matcher.accept_token(token)

    def apply(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        self.xgr.apply_token_bitmask_inplace(logits, mask)


class LLGuidance:
    name = "llguidance 1.7.6"

    def __init__(self, hf_tokenizer, threads: int) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.ll, self.llt = llguidance, llguidance.torch
        t0 = time.perf_counter()
        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer)
        self.prepare_s = time.perf_counter() - t0
        self.executor = llguidance.LLExecutor(num_threads=threads)
        self.vocab = self.tokenizer.vocab_size

    def compile(self, robot: SkillSet) -> Any:
        lark = self.ll.grammar_from("gbnf", G.plan_grammar(robot))
        probe = self.ll.LLMatcher(self.tokenizer, lark, log_level=0)   # construction is the compile step
        if probe.is_error():
            raise RuntimeError(probe.get_error())
        return lark

    def matcher(self, compiled: Any) -> Any:
        return self.ll.LLMatcher(self.tokenizer, compiled, log_level=0)

    def bitmask(self, rows: int) -> torch.Tensor:
        return self.llt.allocate_token_bitmask(rows, self.vocab)

    def fill(self, matchers: list, mask: torch.Tensor, parallel: bool) -> None:
        if parallel:
            self.llt.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(matchers)], mask)
        else:
            for i, m in enumerate(matchers):
                self.llt.fill_next_token_bitmask(m, mask, i)

    def accept(self, matcher: Any, token: int) -> bool:
        return matcher.consume_token(token)

    def apply(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        # llguidance's own kernel is torch.compile'd (inductor on CPU); xgrammar's CPU kernel applies the same mask
        import xgrammar as xgr

        xgr.apply_token_bitmask_inplace(logits, mask)


class OutlinesCore:
    name = "outlines-core 0.2.14"

    def __init__(self, hf_tokenizer, threads: int) -> None:
        import outlines_core

        from timely_llm_ros.engine.detokenize import ByteTable

        self.oc = outlines_core
        t0 = time.perf_counter()
        table = ByteTable.build(hf_tokenizer)._table
        pieces: dict[bytes, list[int]] = {}
        for idx, piece in enumerate(table):
            if piece:
                pieces.setdefault(piece, []).append(idx)
        self.eos = hf_tokenizer.eos_token_id
        self.vocabulary = outlines_core.Vocabulary(self.eos, pieces)
        self.prepare_s = time.perf_counter() - t0
        self.vocab = len(hf_tokenizer)

    def compile(self, robot: SkillSet) -> Any:
        return self.oc.Index(plan_regex(robot), self.vocabulary)

    def matcher(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled, max_rollback=0)

    def bitmask(self, rows: int) -> torch.Tensor:
        return torch.zeros((rows, (self.vocab + 31) // 32), dtype=torch.int32)

    def fill(self, matchers: list, mask: torch.Tensor, parallel: bool) -> None:
        for i, m in enumerate(matchers):
            row = mask[i]
            m.write_mask_into(row.data_ptr(), row.numel(), row.element_size())

    def accept(self, matcher: Any, token: int) -> bool:
        try:
            matcher.advance(token, return_tokens=False)
            return True
        except ValueError:
            return False

    def apply(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        import xgrammar as xgr

        xgr.apply_token_bitmask_inplace(logits, mask)


def plan_regex(robot: SkillSet) -> str:
    """The skill set's language as a regular expression (outlines-core): the arm's exactly; the drone's without the
    statement bound (see the module docstring)."""
    b = G._Builder(robot.skills.values(), robot.statement_forms, G.max_statements(robot.max_plan_tokens))
    num = rf"-?(0|[1-9][0-9]{{0,{G.MAX_DIGITS - 1}}})"
    text = rf"'[a-zA-Z0-9][{G.STRING_CHARS}]{{0,{G.MAX_STRING - 1}}}'"
    var = "_[1-9]"
    kinds = {"int": f"({num}|{var})" if b.variables else num, "str": f"({text}|{var})" if b.variables else text,
             "any": f"({num}|{text}|True|False" + (f"|{var})" if b.variables else ")")}

    def call(skills) -> str:
        return "(" + "|".join(rf"{s.short}\(" + ", ?".join(kinds[a] for a in s.args) + r"\)" for s in skills) + ")"
    value = f"({kinds['any']}|{call(b.queries)})" if b.queries else kinds["any"]
    simple = ["call" in b.forms and call(b.skills), b.variables and f"{var}={call(b.queries)}",
              "return" in b.forms and f"->{value}"]
    simple_re = "(" + "|".join(s for s in simple if s) + ");"
    if not b.blocks:
        return rf"[ \n]?{simple_re}([ \n]?{simple_re}){{0,{b.n - 1}}}"
    cmp = f"{value}( ?(==|!=|>=|<=|>|<) ?{value})?"
    heads = []
    if "loop" in b.blocks:
        heads.append("[1-9][0-9]?")
    if "conditional" in b.blocks:
        heads.append(rf"\?{cmp}( ?[&|] ?{cmp}){{0,{G.MAX_COMPARISONS - 1}}}")
    head = "(" + "|".join(heads) + r")\{ ?"
    close = r" ?\};?"
    inner = rf"({head}{simple_re}([ \n]?{simple_re})*{close}|{simple_re})"
    outer = rf"({head}{inner}([ \n]?{inner})*{close}|{simple_re})"
    return rf"[ \n]?{outer}([ \n]?{outer})*"


# ----------------------------------------------------------------------------- measurements
def reference_plans(robot: str, n: int) -> list[str]:
    return [e.plan for e in generate(n * 4, seed=0) if e.robot_type == robot][:n]


def invalid_plans(robot: SkillSet, plans: list[str], rng: random.Random) -> list[str]:
    """Mutations of reference plans that the project's parser rejects, and the hand-written invalid ones."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_'(){};,?=&|<>- "
    out = set()
    for plan in plans:
        for _ in range(3):
            i = rng.randrange(len(plan))
            kind = rng.randrange(3)
            bad = (plan[:i] + plan[i + 1:] if kind == 0 else plan[:i] + rng.choice(alphabet) + plan[i:] if kind == 1
                   else plan[:i] + rng.choice(alphabet) + plan[i + 1:])
            if parse(bad, robot.skills, robot.statement_forms).problems or not bad.strip():
                out.add(bad)
    for bad in HAND_INVALID[robot.name]:
        assert parse(bad, robot.skills, robot.statement_forms).problems, bad
        out.add(bad)
    return sorted(out)


def runs_through(lib, compiled, ids: list[int], eos: int) -> bool:
    """Whether a fresh matcher takes every token of ``ids`` and then allows EOS."""
    m = lib.matcher(compiled)
    if not all(lib.accept(m, t) for t in ids):
        return False
    mask = lib.bitmask(1)
    lib.fill([m], mask, parallel=False)
    return bool((int(mask[0, eos // 32]) >> (eos % 32)) & 1)


def allowed(mask_row: torch.Tensor, vocab: int) -> list[int]:
    bits = ((mask_row[:, None] >> torch.arange(32, dtype=torch.int32)) & 1).flatten()[:vocab]
    return bits.nonzero().flatten().tolist()


def random_walks(lib, compiled, robot: SkillSet, tok, walks: int, rng: random.Random) -> tuple[int, int]:
    """(dead ends, unparsable endings) over random walks: each step takes a uniformly random allowed token (EOS,
    when allowed, with probability 1/4) until EOS or 400 tokens."""
    dead = unparsable = 0
    eos = tok.eos_token_id
    mask = lib.bitmask(1)
    for _ in range(walks):
        m, ids = lib.matcher(compiled), []
        for _ in range(400):
            lib.fill([m], mask, parallel=False)
            choices = allowed(mask[0], lib.vocab)
            if not choices:
                dead += 1
                break
            if eos in choices and (len(choices) == 1 or rng.random() < 0.25):
                text = tok.decode(ids)
                unparsable += bool(parse(text, robot.skills, robot.statement_forms).problems)
                break
            token = rng.choice([c for c in choices if c != eos])
            if not lib.accept(m, token):
                dead += 1
                break
            ids.append(token)
    return dead, unparsable


def mask_times(lib, compiled, plans_ids: list[list[int]], rows: int, steps: int, parallel: bool
               ) -> tuple[float, float]:
    """Median microseconds of one bitmask fill for ``rows`` rows, and of one accept, along the reference plans
    (each row runs through plans one after another, teacher-forced)."""
    mask = lib.bitmask(rows)
    cursors = [[i * 7 % len(plans_ids), 0] for i in range(rows)]
    matchers = [lib.matcher(compiled) for _ in range(rows)]
    fills, accepts = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        lib.fill(matchers, mask, parallel)
        fills.append(time.perf_counter() - t0)
        for r, cur in enumerate(cursors):
            plan = plans_ids[cur[0]]
            if cur[1] == len(plan):        # plan done: the next one, fresh matcher (not timed)
                cur[0], cur[1] = (cur[0] + 1) % len(plans_ids), 0
                matchers[r] = lib.matcher(compiled)
                plan = plans_ids[cur[0]]
            t0 = time.perf_counter()
            ok = lib.accept(matchers[r], plan[cur[1]])
            accepts.append(time.perf_counter() - t0)
            assert ok, "a reference plan's token was refused while timing"
            cur[1] += 1
    return statistics.median(fills) * 1e6, statistics.median(accepts) * 1e6


def apply_time(lib, compiled, plans_ids: list[list[int]], reps: int = 200) -> float:
    """Median microseconds to apply one row's mask to 49,152 logits, the masks taken midway through reference
    plans (a mask allowing nearly everything costs the kernel almost nothing; these allow a few tokens)."""
    masks = []
    for ids in plans_ids[:20]:
        m = lib.matcher(compiled)
        for t in ids[:len(ids) // 2]:
            lib.accept(m, t)
        masks.append(lib.bitmask(1))
        lib.fill([m], masks[-1], parallel=False)
    logits = torch.randn(1, lib.vocab)
    times = []
    for i in range(reps):
        row = logits.clone()
        t0 = time.perf_counter()
        lib.apply(row, masks[i % len(masks)])
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def vllm_accepts(text: str) -> str:
    """vLLM's own validation of a grammar request, for its xgrammar and guidance backends."""
    from timely_llm_ros.engine.vllm.engine import configure_environment

    configure_environment()
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    verdicts = []
    for name, check in (("xgrammar", validate_xgrammar_grammar), ("guidance", validate_guidance_grammar)):
        try:
            check(SamplingParams(structured_outputs=StructuredOutputsParams(grammar=text)))
            verdicts.append(f"{name} yes")
        except Exception as exc:   # the validators raise their own error types
            verdicts.append(f"{name} NO ({type(exc).__name__})")
    return ", ".join(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=200, help="reference plans per robot type")
    parser.add_argument("--steps", type=int, default=300, help="mask fills timed per configuration")
    parser.add_argument("--walks", type=int, default=200, help="random walks per library and grammar")
    parser.add_argument("--threads", type=int, default=2, help="threads of the batched (parallel) mask fills")
    parser.add_argument("--libraries", default="xgrammar,llguidance,outlines")
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM's validation (its import takes seconds)")
    parser.add_argument("--outlines-drone", action="store_true", help="index the drone regex with outlines-core too "
                        "(minutes)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(weights_folder(model_spec("smollm2")), local_files_only=True)
    skill_sets = load_skill_sets()
    classes: dict[str, Callable] = {"xgrammar": XGrammar, "llguidance": LLGuidance, "outlines": OutlinesCore}
    libs = [classes[name](tok, args.threads) for name in args.libraries.split(",")]
    rng = random.Random(0)
    data = {}
    for robot in ROBOTS:
        plans = reference_plans(robot, args.plans)
        data[robot] = (plans, [tok.encode(" " + p) for p in plans] + [tok.encode(p) for p in plans],
                       invalid_plans(skill_sets[robot], plans, rng))
    vllm = {r: ("-" if args.no_vllm else vllm_accepts(G.plan_grammar(skill_sets[r]))) for r in ROBOTS}
    print(f"SmolLM2 tokenizer ({len(tok)} tokens); mask fills over {args.steps} steps; parallel fills with "
          f"{args.threads} threads; torch {torch.__version__} CPU")
    print("tokenizer preparation (once per model): " + ", ".join(f"{lib.name} {lib.prepare_s:.2f} s" for lib in libs))
    head = (f"{'library':22s} {'grammar':7s} {'compile':>8s} {'mask x1':>8s} {'x8 par':>8s} {'x16 par':>8s} "
            f"{'x16 seq':>8s} {'accept':>7s} {'apply':>7s} {'refs ok':>9s} {'invalid':>9s} {'dead':>5s} "
            f"{'unpars':>6s}  notes")
    print(head)
    print("-" * len(head))
    for lib in libs:
        for robot in ROBOTS:
            if isinstance(lib, OutlinesCore) and robot == "drone" and not args.outlines_drone:
                print(f"{lib.name:22s} {robot:7s} not run (--outlines-drone: a looser regex, minutes to index)")
                continue
            skill_set = skill_sets[robot]
            plans, ids, invalid = data[robot]
            t0 = time.perf_counter()
            compiled = lib.compile(skill_set)
            compile_s = time.perf_counter() - t0
            refs_ok = sum(runs_through(lib, compiled, i, tok.eos_token_id) for i in ids)
            rejected = sum(not runs_through(lib, compiled, tok.encode(b), tok.eos_token_id) for b in invalid)
            dead, unparsable = random_walks(lib, compiled, skill_set, tok, args.walks, rng)
            fill1, accept_us = mask_times(lib, compiled, ids, 1, args.steps, parallel=False)
            fill8 = mask_times(lib, compiled, ids, 8, args.steps, parallel=True)[0]
            fill16 = mask_times(lib, compiled, ids, 16, args.steps, parallel=True)[0]
            fill16s = mask_times(lib, compiled, ids, 16, args.steps, parallel=False)[0]
            apply_us = apply_time(lib, compiled, ids)
            notes = "no statement bound (regex)" if isinstance(lib, OutlinesCore) and robot == "drone" else ""
            if not isinstance(lib, OutlinesCore):
                notes = "vllm: " + vllm[robot]
            print(f"{lib.name:22s} {robot:7s} {compile_s:7.3f}s {fill1:6.0f}us {fill8:6.0f}us {fill16:6.0f}us "
                  f"{fill16s:6.0f}us {accept_us:5.1f}us {apply_us:5.0f}us {refs_ok:4d}/{len(ids):<4d} "
                  f"{rejected:4d}/{len(invalid):<4d} {dead:5d} {unparsable:6d}  {notes}")
    print("mask: median per fill of all rows; accept: per row and token; apply: xgrammar's CPU kernel on one "
          "49,152-logit row; refs ok: reference plans (with and without a leading space) taken with EOS allowed "
          "at the end; invalid: invalid plans rejected; dead/unpars: random walks that hit a state allowing nothing, "
          "or ended in a text core/skills/minispec.py rejects")


if __name__ == "__main__":
    main()
