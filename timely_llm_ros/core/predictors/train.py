"""Train the output-length predictors on the embedded planner's corpus and write them to models/predictors/.

    python -m timely_llm_ros.core.predictors.train [--n 4000] [--out models/predictors]

Labels are the planner's own output lengths in its own tokens: the reference plan of each corpus example (the
planner is trained to emit exactly it; its held-out exact-plan rate is in models/default_planner/README.md)
tokenized by the planner's tokenizer, plus EOS. Accuracy is measured on the corpus's held-out split (unseen
task-template/object pairs) and written to metrics.json beside the weights.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from ...paths import default_model_dir
from .features import N_FEATURES, request_text, rule_features
from .length import HASH_DIMS, bucket_features, predictor_dir
from .mlp import MLP

N_MAX = 200


def token_counter():
    """Count tokens as the planner does (its tokenizer.json via `tokenizers`), else the simulator's pieces."""
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
        return lambda s: len(tok.encode(s, add_special_tokens=False).ids), "planner tokenizer"
    except Exception:  # pragma: no cover - tokenizers ships with transformers
        from ..sim.tokenizer import PieceTokenizer

        return PieceTokenizer().count, "simulator piece tokenizer"


def length_dataset(n: int, seed: int = 0) -> tuple[list[str], np.ndarray, list[str], np.ndarray, str]:
    """(train texts, train lengths, held-out texts, held-out lengths, tokenizer name) from the planner corpus."""
    from ...model.corpus import generate, split

    count, name = token_counter()
    train, held = split(generate(n, seed))

    def xy(exs):
        return [request_text(e.task, e.context) for e in exs], np.array([count(" " + e.plan) + 1 for e in exs],
                                                                         np.float32)
    return (*xy(train), *xy(held), name)


def regression_metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """MAE (tokens), R^2, and the share of predictions within 25% of the truth."""
    err = pred - true
    ss_tot = float(((true - true.mean()) ** 2).sum())
    return {"mae_tokens": float(np.abs(err).mean()), "r2": 1.0 - float((err ** 2).sum()) / ss_tot,
            "within_25pct": float((np.abs(err) <= 0.25 * true).mean()), "n": int(len(true))}


def train_rtlm(xt, yt, xh, yh, epochs: int = 100, seed: int = 0) -> tuple[MLP, dict]:
    """RT-LM: MLP [100, 200, 200, 100] on the rule features, MSE, Adam lr 1e-4, 100 epochs (paper settings)."""
    Xt = np.array([rule_features(t) for t in xt], np.float32)
    Xh = np.array([rule_features(t) for t in xh], np.float32)
    net = MLP(N_FEATURES, [100, 200, 200, 100], 1, "regression", seed)
    net.fit(Xt, yt, epochs=epochs, lr=1e-4, seed=seed)
    train_u = net.predict(Xt)
    m = regression_metrics(net.predict(Xh), yh)
    m["tau"] = float(np.percentile(train_u, 90))
    return net, m


def train_timebill(xt, yt, xh, yh, bucket: int = 16, epochs: int = 60, seed: int = 0) -> tuple[MLP, dict]:
    """TimeBill RLP: classifier over buckets of `bucket` tokens (B = 16, the paper's best)."""
    n_buckets = math.ceil(N_MAX / bucket)
    Xt = np.array([bucket_features(t) for t in xt], np.float32)
    Xh = np.array([bucket_features(t) for t in xh], np.float32)
    cls = np.minimum((yt - 1) // bucket, n_buckets - 1).astype(int)
    net = MLP(N_FEATURES + HASH_DIMS, [128], n_buckets, "classifier", seed)
    net.fit(Xt, cls, epochs=epochs, lr=1e-3, seed=seed)
    pred = np.minimum(N_MAX, (net.predict(Xh).argmax(1) + 1) * bucket).astype(np.float32)
    m = regression_metrics(pred, yh)
    held_cls = np.minimum((yh - 1) // bucket, n_buckets - 1).astype(int)
    m["bucket_accuracy"] = float((net.predict(Xh).argmax(1) == held_cls).mean())
    return net, m


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4000, help="corpus examples to generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=predictor_dir())
    args = p.parse_args(argv)
    xt, yt, xh, yh, tok = length_dataset(args.n, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    rt_net, rt_m = train_rtlm(xt, yt, xh, yh, seed=args.seed)
    rt_net.save(args.out / "rtlm_length.npz", tau=rt_m["tau"], n_max=N_MAX)
    tb_net, tb_m = train_timebill(xt, yt, xh, yh, seed=args.seed)
    tb_net.save(args.out / "timebill_rlp.npz", bucket=16, n_max=N_MAX)
    report = {"labels": f"planner corpus reference plans, {tok}, + EOS", "train": len(yt), "heldout": len(yh),
              "heldout_mean_tokens": float(yh.mean()), "rtlm_mlp": rt_m, "timebill_rlp_b16": tb_m}
    with open(args.out / "metrics.json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
