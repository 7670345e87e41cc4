"""engine/transformers/profiler.py writes a latency YAML the simulator loads, headed by how it was made and its check points."""
from __future__ import annotations

import torch

from timely_llm_ros.evaluation.sim import load_latency_model
from timely_llm_ros.engine.transformers import profiler


def test_the_profile_of_a_tiny_model_loads_and_says_how_it_was_made_and_how_well_it_predicts(tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "tiny.yaml"
    args = ["--random-config", "tiny", "--threads", "1", "--reps", "1", "--clock", "cpu", "--prefill-lengths", "8",
            "32", "--batches", "1", "2", "--contexts", "8", "24", "--decode-steps", "3", "--check", "3:16",
            "--out", str(out)]
    profiler.main(args)
    header = [line for line in out.read_text().splitlines() if line.startswith("#")]
    assert header[0] == "# made by: python -m timely_llm_ros.engine.transformers.profiler " + " ".join(args)
    assert any("process's CPU time" in line for line in header)
    assert any(line.startswith("# decode check outside the fit: batch 3 x 16 tokens: measured") for line in header)
    model = load_latency_model(str(out))
    assert model.layers == 2 and model.decode_base + model.decode_per_seq > 0
    assert len(model.extra["fit"]["decode_points"]) == 4
