"""Time-utility functions (TimelyLLM Eq. 1) and the urgency classes of the paper."""
import math

import pytest

from timely_llm_ros.core.errors import ErrorCode, RequestError
from timely_llm_ros.core.tuf import DEFAULT_URGENCY_CLASSES, TimeUtility, urgency_classes_from_config


def test_full_utility_until_ert_then_linear_decay():
    tuf = TimeUtility(ert=1.0, alpha=-2.0, beta=1.0)
    assert tuf(0.0) == tuf(1.0) == 1.0
    assert tuf(1.25) == pytest.approx(0.5)
    assert tuf(1.5) == pytest.approx(0.0)
    assert tuf(2.0) == pytest.approx(-1.0)  # keeps falling: late plans cost utility


def test_paper_classes_hit_zero_at_their_cutoffs():
    assert DEFAULT_URGENCY_CLASSES["normal"].zero_crossing() == pytest.approx(1.5)
    assert DEFAULT_URGENCY_CLASSES["urgent"].zero_crossing() == pytest.approx(0.5, abs=1e-3)
    assert DEFAULT_URGENCY_CLASSES["urgent"](0.2) == 2.0


def test_resumed_segments_have_zero_ert_and_inherit_slope():
    tuf = DEFAULT_URGENCY_CLASSES["urgent"]
    assert tuf.resumed(-3.0) == tuf.resumed(0.0) == tuf.beta
    assert tuf.resumed(0.1) == pytest.approx(tuf.beta + tuf.alpha * 0.1)
    assert tuf.resumed(0.1) < tuf(0.1)


def test_flat_tuf_never_crosses_zero():
    assert math.isinf(TimeUtility(ert=0.5, alpha=0.0, beta=1.0).zero_crossing())


@pytest.mark.parametrize("ert,alpha,beta", [(-1, -1, 1), (1, 0.5, 1), (1, -1, 0), (math.nan, -1, 1), (1, -1, math.inf)])
def test_invalid_parameters_are_rejected_with_their_code(ert, alpha, beta):
    with pytest.raises(RequestError) as err:
        TimeUtility(ert=ert, alpha=alpha, beta=beta)
    assert err.value.code == ErrorCode.INVALID_TIME_REQUIREMENT


def test_classes_from_config():
    classes = urgency_classes_from_config({"slow": {"ert": 3, "alpha": -0.5, "beta": 1}})
    assert classes["slow"](3.0) == 1.0 and classes["slow"](5.0) == pytest.approx(0.0)
