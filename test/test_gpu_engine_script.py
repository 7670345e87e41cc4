"""benchmarks/gpu_engine.py, the GPU benchmark, runs end to end on CPU with a tiny shape, without ROS or vLLM.
(No GPU here: on CPU it checks the script, not the numbers a GPU would give.)"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import runpy, sys
sys.argv = ["gpu_engine.py", "--device", "cpu", "--tiny", "--threads", "1"]
try:
    runpy.run_path("benchmarks/gpu_engine.py", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
pulled = sorted(m for m in sys.modules if m.split(".")[0] in ("rclpy", "vllm", "timely_llm_ros.ros"))
print("PULLED", pulled)
"""


def test_the_gpu_benchmark_prints_its_table_on_cpu_and_imports_neither_ros_nor_vllm():
    out = subprocess.run([sys.executable, "-c", RUN], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    table = [line for line in out.stdout.splitlines() if line.startswith("| tiny")]
    parts = {line.split("|")[2].strip() for line in table}
    assert parts == {"bandwidth", "decode", "prefill", "resume", "offload", "interrupt", "mask"}, out.stdout
    decode = [line.split("|")[3] for line in table if line.split("|")[2].strip() == "decode"]
    assert [case.split(",")[0].strip() for case in decode] == ["batch 1", "batch 8", "batch 32"]
    assert "PULLED []" in out.stdout
