"""Helpers the benchmark scripts share: seed lists with ranges, and compare_policies' per-block table."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import compare_policies as cp  # noqa: E402
from report import parse_seeds  # noqa: E402


def test_seed_lists_take_single_seeds_and_ranges_in_the_order_given():
    assert parse_seeds("1-3") == [1, 2, 3]
    assert parse_seeds("7, 1,4-5,") == [7, 1, 4, 5]


@pytest.mark.parametrize("text", ["", "1,x", "5-2", "1-"])
def test_a_bad_seed_list_stops_with_a_message(text):
    with pytest.raises(SystemExit, match="--seeds"):
        parse_seeds(text)


def _row(seed: int, policy: str, group: str, utility: float, bound: float = float("nan")) -> dict:
    return {"preset": "WID1", "seed": seed, "policy": policy, "group": group, "utility": utility,
            "share_of_max": utility / 2.0, "bound": bound}


def test_blocks_average_each_run_of_consecutive_seeds_and_leave_a_short_tail_out():
    urgent = {1: 1.6, 2: 1.8, 3: 2.0, 4: 1.0, 5: 1.4}       # seeds 1-2, 3-4 are blocks; seed 5 is a tail
    rows = [_row(s, "timely", "urgent", u, bound=u + 0.2) for s, u in urgent.items()]
    text = cp.blocks_md(rows, 2)
    # all five seeds: mean 1.56 / 2 = 0.78; blocks (1.6 + 1.8) / 4 = 0.85 and (2.0 + 1.0) / 4 = 0.75
    assert "| timely | urgent | 0.780 | 0.850 | 0.750 |" in text
    assert "seeds 5-5" not in text
    # the bound in share-of-max units: (u + 0.2) / 2 per seed
    assert "| class-alone bound | urgent | 0.880 | 0.950 | 0.850 |" in text


def test_blocks_refuse_a_swept_run_before_writing_anything(tmp_path):
    args = cp.parse_args(["--blocks", "5", "--batch-sweep", "4,8", "--no-bound", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="--blocks"):
        cp.run(args)
    assert not (tmp_path / "out").exists()


def test_a_variant_from_the_command_line_carries_typed_options():
    cp.variant_from_arg("t-cap=timely:step_prefill_s=0.05,prefill_alone=true")
    assert cp.VARIANTS["t-cap"] == ("timely", {"step_prefill_s": 0.05, "prefill_alone": True}, {})
    policy, _ = cp.build("t-cap", 16, cp.load_latency_model("llama3-8b-rtx4090"), 2884)
    assert policy.step_prefill_s == 0.05 and policy.prefill_alone is True


@pytest.mark.parametrize("text, message", [
    ("t=timely:step_prefil_s=0.05", "unknown option .step_prefil_s."),   # misspelt: would be ignored silently
    ("t=no-such-policy", "unknown policy"),
    ("t=timely:step_prefill_s", "is not KEY=VALUE"),
    ("timely", "expected NAME=POLICY"),
])
def test_a_bad_variant_stops_with_a_message(text, message):
    with pytest.raises(SystemExit, match=message):
        cp.variant_from_arg(text)
