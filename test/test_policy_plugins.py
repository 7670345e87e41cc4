"""Policies are plug-ins: a package declares one in the entry-point group timely_llm_ros.policies and the server,
the simulator and the benchmarks build it by name, without this package being edited (docs/policies.md). The
plug-in here is a real distribution (a package and its .dist-info, as pip installs one), found by importlib.metadata
in a fresh interpreter whose path holds it: nothing is mocked or patched."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from timely_llm_ros.core.policies import BUILTIN_POLICIES, ENTRY_POINT_GROUP, make_policy
from timely_llm_ros.core.request import RequestState

REPO = Path(__file__).resolve().parent.parent

# the example of docs/policies.md: the most recent request first
LCFS_MODULE = '''
from timely_llm_ros.core.policies import Policy


class LastComeFirstServed(Policy):
    """Segmented generation; the most recent request runs first."""

    name = "lcfs"

    def priority(self, gen, now):
        return gen.req.arrival
'''


def install(site: Path, distribution: str, module: str, source: str, entries: str) -> None:
    """What pip install leaves in site-packages: the module and its distribution's metadata with entry points."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{distribution}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entries}\n")


def run_with(site: Path, code: str) -> str:
    """Run ``code`` in a fresh interpreter whose sys.path holds ``site`` (as a team's pip install would leave it):
    discovery runs there from nothing, and no plug-in stays in this process. Returns its standard output; a failure
    shows its standard error."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_policy_from_another_package_is_found_by_its_entry_point_and_plans(tmp_path):
    with pytest.raises(ValueError, match="unknown policy 'lcfs'.*timely_llm_ros.policies"):
        make_policy("lcfs")                                   # not installed in this process
    site = tmp_path / "site"
    site.mkdir()
    install(site, "lcfs_policy", "lcfs_policy", LCFS_MODULE, "lcfs = lcfs_policy:LastComeFirstServed")
    out = run_with(site, """
        import json
        from timely_llm_ros.core.composition import PolicyChoice, build_policy
        from timely_llm_ros.core.policies import catalog
        from timely_llm_ros.core.skills import load_skill_sets
        from timely_llm_ros.evaluation.sim import load_latency_model
        from timely_llm_ros.evaluation.sim.simulator import simulate
        from timely_llm_ros.evaluation.workload import get_trace
        from timely_llm_ros.evaluation.workload.generator import WorkloadTask

        def task(name, arrival, trace_id):
            t = get_trace(trace_id)
            return WorkloadTask(name, arrival, 0, f"agent_{name}", trace_id, t.robot_type, t.urgency, t.task,
                                t.context, t.plan, 2884)
        # composed as the server and the simulator compose any policy
        policy = build_policy(PolicyChoice("lcfs", max_batch=1), load_skill_sets())
        tasks = [task("first", 0.0, 1), task("second", 0.01, 2), task("third", 0.02, 3)]
        result = simulate(policy, load_latency_model("llama3-8b-rtx4090"), tasks)
        print(json.dumps({"module": type(policy).__module__, "registered": "lcfs" in catalog.POLICIES,
                          "policy": result.policy,
                          "outcomes": {o.req.req_id: [o.state.value, o.plan_text.strip() == o.req.forced_plan,
                                                      o.segments[0].dispatched] for o in result.outcomes}}))
        """)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["module"] == "lcfs_policy" and seen["registered"] and seen["policy"] == "lcfs"
    outcomes = seen["outcomes"]
    assert all(state == RequestState.DONE.value and as_forced for state, as_forced, _ in outcomes.values())
    # one generation per step: once the first request's segment is out, the latest arrival is served first
    assert outcomes["third"][2] < outcomes["second"][2]


def test_a_plugin_that_does_not_fit_its_entry_is_left_out_and_asking_for_it_says_why(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "broken_policy", "broken_policy", LCFS_MODULE, "newest = broken_policy:LastComeFirstServed")
    out = run_with(site, """
        from timely_llm_ros.core.policies import catalog, make_policy
        try:
            make_policy("newest")
        except ValueError as exc:
            print("refused:", exc)
        print("timely" in catalog.POLICIES, "newest" in catalog.POLICIES)    # the others still load
        """)
    assert re.search(r"refused: .*newest = broken_policy:LastComeFirstServed.*whose name is 'lcfs'", out), out
    assert out.strip().splitlines()[-1] == "True False"


def test_a_plugin_cannot_take_a_built_in_name(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "lcfs_policy", "lcfs_policy", LCFS_MODULE.replace('"lcfs"', '"timely"'),
            "timely = lcfs_policy:LastComeFirstServed")
    out = run_with(site, """
        from timely_llm_ros.core.policies import make_policy
        print(type(make_policy("timely")).__module__)
        """)
    assert out.strip().splitlines()[-1] == "timely_llm_ros.core.policies.timely"


def test_setup_py_declares_the_built_in_policies_as_the_source_tree_fallback_lists_them():
    tree = ast.parse((REPO / "setup.py").read_text())
    entry_points = next(kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                        for kw in node.keywords if kw.arg == "entry_points")
    declared = ast.literal_eval(entry_points)[ENTRY_POINT_GROUP]
    assert dict(tuple(part.strip() for part in line.split("=")) for line in declared) == BUILTIN_POLICIES
