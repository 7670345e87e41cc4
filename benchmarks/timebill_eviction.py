"""Plan validity under TimeBill's real prompt-KV eviction on the embedded planner (transformers engine).

    .venv/bin/python benchmarks/timebill_eviction.py [--n 40] [--context-tokens 300] [--seeds 1,2,3,4,5]

Held-out corpus tasks (model/evaluate.py's split) with their scene padded by distractor objects to about
--context-tokens prompt tokens, so there is prompt KV to evict. Each row decodes every prompt greedily, 8 at a
time, with its prompt KV evicted after the prefill (engine.evict_prompt_kv, SnapKV-style choice), and counts the
plans that are valid under the core grammar (model/evaluate.py's plan_checker). Fixed ratios 0/0.25/0.5/0.75/0.95,
then TimeBill's adaptive alpha* (core/predictors/ete.py alpha_star, N_hat from TimeBill's length predictor,
N_W = min(5 N_hat, cap), the TimeBill preset's ETE p/q) for budgets that leave each request its fixed step cost
plus a share u ~ U(0, 1) (seeded) of its no-eviction KV-reading time. The seeds change the padding and u.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from report import parse_seeds  # noqa: E402

from timely_llm_ros.core.predictors.ete import alpha_star, wcet_tokens  # noqa: E402
from timely_llm_ros.core.eviction import EvictingEngine  # noqa: E402
from timely_llm_ros.engine.transformers.loader import load_pretrained  # noqa: E402
from timely_llm_ros.engine.transformers.engine import TransformersEngine  # noqa: E402
from tools.embedded_planner.corpus import BLOCKS, FILLER_OBJECTS  # noqa: E402
from tools.embedded_planner.evaluate import heldout_examples, plan_checker  # noqa: E402
from timely_llm_ros.paths import default_model_dir  # noqa: E402

RATIOS = (0.0, 0.25, 0.5, 0.75, 0.95)
P, Q = 6.4e-7, 0.040          # TimeBill preset's ETE (benchmarks/paper_presets.py TIMEBILL_ETE)
MAX_NEW = 120


def long_prompts(examples, tokenizer, target: int, rng: random.Random) -> list[list[int]]:
    """Each example's prompt with distractors appended to its scene list until ~target tokens."""
    out = []
    for e in examples:
        pool = BLOCKS if e.robot_type == "arm" else FILLER_OBJECTS
        extra: list[str] = []
        while True:
            ctx = e.context + "".join(f", {x}" for x in extra)
            ids = tokenizer.encode(dataclasses.replace(e, context=ctx).prompt)
            if len(ids) >= target or len(extra) > 200:
                out.append(ids)
                break
            extra.append(rng.choice(pool))
    return out


def decode_all(engine: TransformersEngine, prompts: list[list[int]], ratios: list[float], batch: int = 8) -> list[str]:
    ev = EvictingEngine(engine, lambda g: ratios[int(g)])
    texts = []
    for start in range(0, len(prompts), batch):
        ids = [str(i) for i in range(start, min(start + batch, len(prompts)))]
        for g in ids:
            ev.add(g, prompts[int(g)], MAX_NEW)
        live = set(ids)
        while live:
            live -= ev.step(sorted(live, key=int)).finished
        for g in ids:
            out = engine.output_ids(g)
            if out and out[-1] in engine.tokens.eos_ids:
                out = out[:-1]
            texts.append(engine.decode(out).strip())
            ev.release(g)
    return texts


def adaptive(examples, prompts, rng: random.Random) -> list[float]:
    from timely_llm_ros.core.predictors.length import default_bucket_predictor

    pred = default_bucket_predictor()
    alphas = []
    for e, ids in zip(examples, prompts):
        n_x, n_w = len(ids), wcet_tokens(int(pred.predict(e.task, e.context)), MAX_NEW)
        budget = (n_w - 1) * Q + rng.random() * (n_w - 1) * P * n_x
        alphas.append(alpha_star(budget, n_x, n_w, P, Q))
    return alphas


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="held-out prompts per seed")
    ap.add_argument("--context-tokens", type=int, default=300, help="prompt length to pad to (model max 512)")
    ap.add_argument("--seeds", default="1,2,3,4,5", help="seeds (list or ranges: 1-5)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_pretrained(str(default_model_dir()), "cpu")
    grammar, check = plan_checker()
    examples = heldout_examples(args.n)
    rows: dict[str, list[float]] = {}
    mean_alpha: list[float] = []
    t0 = time.perf_counter()
    for seed in parse_seeds(args.seeds):
        rng = random.Random(seed)
        prompts = long_prompts(examples, loaded.tokenizer, args.context_tokens, rng)
        alphas = adaptive(examples, prompts, rng)
        mean_alpha.append(statistics.mean(alphas))
        short = [loaded.tokenizer.encode(e.prompt) for e in examples]     # reference: the corpus prompt unpadded
        runs = [("unpadded 0.00", short, [0.0] * len(short)),
                *((f"fixed {r:.2f}", prompts, [r] * len(prompts)) for r in RATIOS), ("timebill", prompts, alphas)]
        for name, prompts_, ratios in runs:
            plans = decode_all(TransformersEngine(loaded), prompts_, ratios)
            valid = sum(not check(e.robot_type, p) for e, p in zip(examples, plans)) / len(plans)
            rows.setdefault(name, []).append(valid)
    print(f"# plan validity ({grammar} grammar), {args.n} held-out prompts padded to ~{args.context_tokens} tokens, "
          f"seeds {args.seeds}, {time.perf_counter() - t0:.0f} s")
    print("| eviction | prompt KV evicted (mean) | valid plans: mean [min-max] |")
    print("|---|---|---|")
    for name, vals in rows.items():
        evicted = f"{statistics.mean(mean_alpha):.2f}" if name == "timebill" else name.split()[1]
        print(f"| {name} | {evicted} | {statistics.mean(vals):.3f} [{min(vals):.3f}-{max(vals):.3f}] |")


if __name__ == "__main__":
    main()
