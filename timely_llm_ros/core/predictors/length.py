"""Output-length predictors: RT-LM's regression MLP on the six rule features, TimeBill's bucketed classifier.

Both read only the request text and predict the number of tokens the planner will emit (its own output lengths
are the training labels: see train.py). numpy only.
"""
from __future__ import annotations

import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from timely_llm_ros.paths import share_dir
from timely_llm_ros.core.predictors.features import request_text, rule_features
from timely_llm_ros.core.predictors.mlp import MLP

HASH_DIMS = 96


def predictor_dir() -> Path:
    """models/predictors/ of the source tree."""
    return share_dir() / "models" / "predictors"


def hashed_words(text: str, dims: int = HASH_DIMS) -> list[float]:
    """Bag of words hashed into dims counts (crc32, stable across runs)."""
    v = [0.0] * dims
    for w in text.lower().replace("|", " ").replace(",", " ").split():
        v[zlib.crc32(w.encode()) % dims] += 1.0
    return v


def bucket_features(text: str) -> list[float]:
    """TimeBill classifier input: rule features plus hashed words."""
    return rule_features(text) + hashed_words(text)


class RuleLengthPredictor:
    """RT-LM: u = MLP(six rule features) = predicted output tokens; tau = 90th percentile of training u."""

    def __init__(self, net: MLP, tau: float, n_max: int = 200) -> None:
        self.net, self.tau, self.n_max = net, tau, n_max

    def predict(self, task: str, context: str = "") -> float:
        u = float(self.net.predict([rule_features(request_text(task, context))])[0])
        return min(max(u, 1.0), float(self.n_max))

    @classmethod
    def load(cls, path: str | Path | None = None) -> "RuleLengthPredictor":
        net, meta = MLP.load(path or predictor_dir() / "rtlm_length.npz")
        return cls(net, meta["tau"], int(meta.get("n_max", 200)))


class BucketLengthPredictor:
    """TimeBill RLP: classify into buckets of B tokens; N_hat = min(N_max, (bucket + 1) * B), the bucket's upper
    end (the paper numbers buckets from 1 and multiplies by B)."""

    def __init__(self, net: MLP, bucket: int, n_max: int = 200) -> None:
        self.net, self.bucket, self.n_max = net, bucket, n_max

    def predict(self, task: str, context: str = "") -> int:
        p = self.net.predict([bucket_features(request_text(task, context))])[0]
        return min(self.n_max, (int(np.argmax(p)) + 1) * self.bucket)

    @classmethod
    def load(cls, path: str | Path | None = None) -> "BucketLengthPredictor":
        net, meta = MLP.load(path or predictor_dir() / "timebill_rlp.npz")
        return cls(net, int(meta["bucket"]), int(meta.get("n_max", 200)))


@lru_cache(maxsize=None)
def default_rule_predictor() -> RuleLengthPredictor:
    return RuleLengthPredictor.load()


@lru_cache(maxsize=None)
def default_bucket_predictor() -> BucketLengthPredictor:
    return BucketLengthPredictor.load()
