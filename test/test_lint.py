"""Static checks in the spirit of ament's linters: pyflakes finds no problem, the core imports without ROS or torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_pyflakes_is_clean():
    """pyflakes exits 0, or 1 with only findings on lines marked `# noqa` (registration imports, re-exports).
    Anything on stderr (a syntax error, an unreadable file) or another exit status fails."""
    run = subprocess.run([sys.executable, "-m", "pyflakes", "timely_llm_ros", "benchmarks", "test"], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode in (0, 1) and not run.stderr, f"pyflakes exited {run.returncode}:\n{run.stderr}"
    findings = run.stdout.splitlines()
    assert (run.returncode == 1) == bool(findings), f"pyflakes exited {run.returncode} reporting {findings}"
    problems = []
    for line in findings:
        path, lineno = line.split(":")[:2]
        src = (REPO / path).read_text().splitlines()[int(lineno) - 1]
        if "noqa" not in src:
            problems.append(line)
    assert not problems, "\n".join(problems)


def test_core_imports_without_ros_or_torch():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('rclpy', 'torch', 'transformers'):\n"
            "            raise ImportError('blocked: ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import timely_llm_ros.core.scheduler, timely_llm_ros.evaluation.sim.simulator, timely_llm_ros.core.policies\n"
            "from timely_llm_ros.core.policies import make_policy\n"
            "make_policy('timely'); print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
