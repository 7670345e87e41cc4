"""Predictors (core/predictors): rule features, the numpy MLP, and the committed trained artefacts."""
from __future__ import annotations

import json

import numpy as np
import pytest

from timely_llm_ros.core.predictors.features import rule_features
from timely_llm_ros.core.predictors.length import BucketLengthPredictor, RuleLengthPredictor, predictor_dir
from timely_llm_ros.core.predictors.mlp import MLP
from timely_llm_ros.evaluation.predictor_training import regression_metrics


def test_rule_features_pinned():
    f = rule_features("Sort all the fruits, then put some of them in two baskets")
    # structural 12 words/10; syntactic 'then' + 1 comma/2; ambiguity {put, them}/12*10; vague {sort, some};
    # open-ended {sort, all}; multi-part {two} + one comma
    assert f[:6] == pytest.approx([1.2, 1.5, 2 / 12 * 10, 2, 2, 2])
    assert rule_features("Stop")[:6] == pytest.approx([0.1, 0, 0, 0, 0, 0])


def test_mlp_learns_a_line_and_a_class_boundary(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (400, 2)).astype(np.float32)
    reg = MLP(2, [16], 1, "regression")
    losses = reg.fit(x, 3 * x[:, 0] - x[:, 1], epochs=40, lr=1e-2)
    assert losses[-1] < 0.05 * losses[0]
    assert reg.predict([[0.5, 0.5]])[0] == pytest.approx(1.0, abs=0.2)
    cls = MLP(2, [16], 2, "classifier")
    cls.fit(x, (x[:, 0] > 0).astype(int), epochs=40, lr=1e-2)
    assert cls.predict([[0.8, 0.0], [-0.8, 0.0]]).argmax(1).tolist() == [1, 0]
    reg.save(tmp_path / "m.npz", tau=1.5)
    back, meta = MLP.load(tmp_path / "m.npz")
    assert meta == {"tau": 1.5} and back.predict([[0.5, 0.5]])[0] == pytest.approx(reg.predict([[0.5, 0.5]])[0])


def test_regression_metrics_pinned():
    m = regression_metrics(np.array([10.0, 20.0, 40.0]), np.array([10.0, 30.0, 30.0]))
    assert m["mae_tokens"] == pytest.approx(20 / 3)
    assert m["r2"] == pytest.approx(1 - 200 / (800 / 3))   # ss_res 200, ss_tot 266.7 around the mean 23.3
    assert m["within_25pct"] == pytest.approx(1 / 3)   # only the exact one is within 25%


def test_committed_length_predictors_are_accurate_and_ordered():
    metrics = json.loads((predictor_dir() / "metrics.json").read_text())
    assert metrics["rtlm_mlp"]["mae_tokens"] < 6 and metrics["rtlm_mlp"]["r2"] > 0.8
    assert metrics["timebill_rlp_b16"]["r2"] > 0.5
    rt, tb = RuleLengthPredictor.load(), BucketLengthPredictor.load()
    short = ("Dodge the ball coming at you", "ball in front, 50 cm away")
    long = ("Sort the fruits and vegetables into their baskets",
            "table: apple, carrot, banana, potato; baskets: fruit basket, vegetable basket")
    assert rt.predict(*short) < 20 < rt.predict(*long)
    assert tb.predict(*short) < tb.predict(*long)
    assert sum(p.stat().st_size for p in predictor_dir().iterdir()) < 2_000_000


def test_urgency_labelled_set_is_split_by_template_and_classifier_metrics_committed():
    from timely_llm_ros.core.predictors.urgency import LEVEL_NAMES, labelled_set

    train, held = labelled_set(seed=0)
    assert {lv for _, lv in held} == set(range(len(LEVEL_NAMES))) and not {t for t, _ in train} & {t for t, _ in held}
    m = json.loads((predictor_dir() / "urgency_metrics.json").read_text())
    assert m["heldout_accuracy"] > 0.5 and m["per_level_accuracy"]["emergency"] > 0.9   # well above chance (0.2)
