"""Train the output-length predictors (evaluation/predictor_training.py) on the embedded planner's corpus and write them
to models/predictors/.

    python -m tools.train_predictors [--n 4000] [--out models/predictors]

Labels are the planner's own output lengths in its own tokens: the reference plan of each corpus example (the
planner is trained to emit exactly it; its held-out exact-plan rate is in models/default_planner/README.md)
tokenized by the planner's tokenizer, plus EOS. Accuracy is measured on the corpus's held-out split (unseen
task-template/object pairs) and written to metrics.json beside the weights.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from timely_llm_ros.core.predictors.features import request_text
from timely_llm_ros.core.predictors.length import predictor_dir
from timely_llm_ros.evaluation.predictor_training import train_and_write
from timely_llm_ros.paths import default_model_dir
from tools.embedded_planner.corpus import generate, split


def token_counter():
    """Count tokens as the planner does (its tokenizer.json via `tokenizers`), else the simulator's pieces."""
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
        return lambda s: len(tok.encode(s, add_special_tokens=False).ids), "planner tokenizer"
    except Exception:  # pragma: no cover - tokenizers ships with transformers
        from timely_llm_ros.evaluation.sim.tokenizer import PieceTokenizer

        return PieceTokenizer().count, "simulator piece tokenizer"


def length_dataset(n: int, seed: int = 0) -> tuple[list[str], np.ndarray, list[str], np.ndarray, str]:
    """(train texts, train lengths, held-out texts, held-out lengths, tokenizer name) from the planner corpus."""
    count, name = token_counter()
    train, held = split(generate(n, seed))

    def xy(exs):
        return [request_text(e.task, e.context) for e in exs], np.array([count(" " + e.plan) + 1 for e in exs],
                                                                         np.float32)
    return (*xy(train), *xy(held), name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4000, help="corpus examples to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=predictor_dir())
    args = p.parse_args(argv)
    xt, yt, xh, yh, tok = length_dataset(args.n, args.seed)
    report = train_and_write(args.out, xt, yt, xh, yh, f"planner corpus reference plans, {tok}, + EOS", args.seed)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
