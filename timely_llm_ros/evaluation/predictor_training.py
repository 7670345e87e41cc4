"""Train the output-length predictors from labelled request texts (the data comes from the caller:
tools/train_predictors.py labels the embedded planner's corpus) and write them to a folder."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from timely_llm_ros.core.predictors.features import N_FEATURES, rule_features
from timely_llm_ros.core.predictors.length import HASH_DIMS, bucket_features
from timely_llm_ros.core.predictors.mlp import MLP

N_MAX = 200


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


def train_and_write(out: Path, xt: list[str], yt: np.ndarray, xh: list[str], yh: np.ndarray, labels: str,
                    seed: int = 0) -> dict:
    """Train both predictors on (texts, lengths) with a held-out split, write their weights and metrics.json to
    out; the report written."""
    out.mkdir(parents=True, exist_ok=True)
    rt_net, rt_m = train_rtlm(xt, yt, xh, yh, seed=seed)
    rt_net.save(out / "rtlm_length.npz", tau=rt_m["tau"], n_max=N_MAX)
    tb_net, tb_m = train_timebill(xt, yt, xh, yh, seed=seed)
    tb_net.save(out / "timebill_rlp.npz", bucket=16, n_max=N_MAX)
    report = {"labels": labels, "train": len(yt), "heldout": len(yh), "heldout_mean_tokens": float(yh.mean()),
              "rtlm_mlp": rt_m, "timebill_rlp_b16": tb_m}
    with open(out / "metrics.json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    return report
