#!/usr/bin/env python3
"""What grammar-constrained decoding costs a decode step of the transformers engine: every row constrained against no
row constrained, same prompts, same tokens, same batch, side by side.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/grammar_mask_cost.py [--batches 1,8,16] [--steps 24] [--reps 5]

On SmolLM2-135M-Instruct (the `smollm2` model entry, fp32, --threads torch threads): B generations of the drone and
arm tasks on today's raw prompt, each under its robot type's grammar (engine A), and the same B prompts in a second
engine on the same weights whose generations are forced (trace replay, never masked) to emit exactly the tokens the
constrained run emitted (engine B). A first run of A records those tokens. Then, per repetition, both engines run
their generations to the end with their steps alternated (A, B, A, B ...; the order flips every repetition), and
each decode step of A is paired with the same step of B: same positions, same context, same batch. The paired
ratio A/B over the decode steps with all B rows live (medians and the 10th-90th percentiles over all pairs of all
repetitions) is the cost of filling and applying the bitmasks and advancing the matchers; target: at most 1.03.
On a machine shared with other jobs the step times swing by tens of percent: the table also pairs the steps' CPU
time (this thread's, ``time.thread_time``: with one torch thread the whole step runs on it, and time spent waiting
for a core while other jobs run does not count), and gives the grammar's
own time per step, timed around the two places it runs: the engine's ``tokens.choose`` (in A: filling the masks,
the greedy choice, the mask kernel for rows whose top token the grammar refuses; in B: the plain argmax, subtracted
pair by pair) and ``grammar.advance`` per emitted token; its median per step and its share of A's median step, and
the share of constrained rows the mask kernel masked (engine/grammar.py, ``RowMasks.greedy_tokens``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.core.models import model_spec  # noqa: E402
from timely_llm_ros.core.skills import load_skill_sets  # noqa: E402
from timely_llm_ros.core.skills.grammar import plan_grammar  # noqa: E402
from timely_llm_ros.engine.transformers.loader import load_pretrained  # noqa: E402
from timely_llm_ros.engine.models import weights_folder  # noqa: E402
from timely_llm_ros.engine.transformers import token_choice  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402

TASKS = [
    ("drone", "find a toy under the bed", "room: bedroom; objects: bed, chair, cup"),
    ("arm", "stack the red block on the blue block", "table: green block, red block, blue block"),
    ("drone", "look for the cat", "room: living room; objects: sofa, lamp, plant"),
    ("arm", "sort the fruits", "table: apple, carrot, banana; baskets: fruit basket, vegetable basket"),
    ("drone", "evade the bird", "bird above, 120 cm away"),
    ("arm", "clean the desk", "desk: paper, can, tissue; places: trash bin, drawer, tray"),
    ("drone", "check the book on the cabinet", "room: office; objects: cabinet, book, chair"),
    ("arm", "put the cup in the tray", "desk: cup, pen; places: tray, drawer"),
]


def requests(engine: TransformersEngine, batch: int) -> list[tuple[str, list[int], str]]:
    """(id, prompt ids, grammar) of ``batch`` generations, cycling through TASKS (distinct ids, repeated prompts)."""
    skills = load_skill_sets()
    out = []
    for i in range(batch):
        robot, task, scene = TASKS[i % len(TASKS)]
        out.append((f"g{i}", engine.encode(skills[robot].build_prompt(task, scene)), plan_grammar(skills[robot])))
    return out


def run(constrained: TransformersEngine, forced: TransformersEngine, reqs, steps: int,
        reference: dict[str, list[int]] | None, a_first: bool, clocks: dict[str, GrammarClock]
        ) -> tuple[list[tuple[float, ...]], dict]:
    """One repetition: add the generations to both engines (B forced to ``reference``; without a reference only A
    runs), step them to the end alternately; the (A, B, grammar's time, A's CPU time, B's CPU time) of the decode
    steps with every row live, and A's outputs."""
    for gid, ids, grammar in reqs:
        constrained.add(gid, ids, steps, grammar=grammar)
        if reference is not None:
            forced.add(gid, ids, steps, forced_ids=reference[gid])
    live = [gid for gid, _, _ in reqs]
    pairs: list[tuple[float, ...]] = []
    outputs: dict[str, list[int]] = {}
    first = True
    while live:
        order = [(constrained, "a"), (forced, "b")] if a_first else [(forced, "b"), (constrained, "a")]
        times = {}
        for engine, arm in order:
            if arm == "b" and reference is None:
                continue
            clocks[arm].take()
            t0, c0 = time.perf_counter(), time.thread_time()
            res = engine.step(live)
            times[arm], times[arm + "-cpu"] = time.perf_counter() - t0, time.thread_time() - c0
            times[arm + "-choose"] = clocks[arm].take()
            if arm == "a":
                finished = res.finished
        if not first and len(live) == len(reqs) and reference is not None:
            pairs.append((times["a"], times["b"], times["a-choose"] - times["b-choose"], times["a-cpu"],
                          times["b-cpu"]))
        first = False
        for gid in finished:
            outputs[gid] = constrained.output_ids(gid)
            constrained.release(gid)
            if reference is not None:
                forced.release(gid)
        live = [g for g in live if g not in finished]
    return pairs, outputs


class GrammarClock:
    """Seconds an engine spends choosing tokens and advancing matchers (wrapped for this benchmark only)."""

    def __init__(self, engine: TransformersEngine) -> None:
        self.spent = 0.0
        choose = engine.tokens.choose

        def timed_choose(logits, gens):
            t0 = time.perf_counter()
            tokens = choose(logits, gens)
            self.spent += time.perf_counter() - t0
            return tokens
        engine.tokens.choose = timed_choose

    def time_advance(self) -> None:
        advance = token_choice.advance

        def timed_advance(matcher, token, gen_id):
            t0 = time.perf_counter()
            advance(matcher, token, gen_id)
            self.spent += time.perf_counter() - t0
        token_choice.advance = timed_advance

    def take(self) -> float:
        spent, self.spent = self.spent, 0.0
        return spent


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,8,16")
    parser.add_argument("--steps", type=int, default=24, help="tokens per generation (decode steps paired: fewer)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_pretrained(weights_folder(model_spec("smollm2")), "cpu", "float32")
    constrained, forced = TransformersEngine(loaded), TransformersEngine(loaded)
    clocks = {"a": GrammarClock(constrained), "b": GrammarClock(forced)}
    clocks["a"].time_advance()        # only A's generations have matchers
    constrained.tokens.grammar_compiler()
    print(f"SmolLM2-135M-Instruct fp32, cpu x{torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"{args.steps} tokens a generation, {args.reps} repetitions alternated")
    head = (f"{'batch':>5s} {'pairs':>5s} {'constrained':>12s} {'unconstrained':>14s} {'ratio':>7s} "
            f"{'p10-p90':>13s} {'cpu ratio':>9s} {'p10-p90':>13s} {'grammar/step':>13s} {'share':>6s} {'masked':>7s}")
    print(head)
    print("-" * len(head))
    for batch in (int(b) for b in args.batches.split(",")):
        reqs = requests(constrained, batch)
        _, reference = run(constrained, forced, reqs, args.steps, None, True, clocks)
        pairs: list[tuple[float, ...]] = []
        constrained.tokens.masks.masked_rows = constrained.tokens.masks.kept_rows = 0
        for rep in range(args.reps):
            got, outputs = run(constrained, forced, reqs, args.steps, reference, rep % 2 == 0, clocks)
            assert outputs == reference, "a constrained run emitted other tokens than the reference run"
            pairs += got
        ratios = [p[0] / p[1] for p in pairs]
        cpu = [p[3] / p[4] for p in pairs]
        a_ms = statistics.median(p[0] for p in pairs) * 1e3
        b_ms = statistics.median(p[1] for p in pairs) * 1e3
        grammar_us = statistics.median(p[2] for p in pairs) * 1e6
        masks = constrained.tokens.masks
        masked = masks.masked_rows / max(1, masks.masked_rows + masks.kept_rows)
        print(f"{batch:5d} {len(pairs):5d} {a_ms:9.2f} ms {b_ms:11.2f} ms {statistics.median(ratios):7.4f} "
              f"{percentile(ratios, 0.1):6.3f}-{percentile(ratios, 0.9):.3f} {statistics.median(cpu):9.4f} "
              f"{percentile(cpu, 0.1):6.3f}-{percentile(cpu, 0.9):.3f} {grammar_us:10.0f} us "
              f"{grammar_us / 1e3 / a_ms:6.2%} {masked:7.0%}")
    print("ratio: median of the paired step-time ratios constrained/unconstrained (p10-p90 of them); cpu ratio: the "
          "same of the steps' CPU time; grammar/step: "
          "median time in the grammar's code per constrained step; share: of the median constrained step; masked: rows "
          "the apply kernel masked (the others' top token was allowed: left as they were)")


if __name__ == "__main__":
    main()
