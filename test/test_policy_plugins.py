"""Policies are plug-ins: a package declares one in the entry-point group timely_llm_ros.policies and the server,
the simulator and the benchmarks build it by name, without this package being edited (docs/policies.md). The
plug-in here is a real distribution on sys.path (a package and its .dist-info, as pip installs one), found by
importlib.metadata."""
from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from timely_llm_ros.core.composition import PolicyChoice, build_policy
from timely_llm_ros.core.policies import BUILTIN_POLICIES, ENTRY_POINT_GROUP, catalog, make_policy
from timely_llm_ros.core.policies.registry import PolicyRegistry
from timely_llm_ros.core.request import RequestState
from timely_llm_ros.core.skills import load_skill_sets
from timely_llm_ros.evaluation.sim import load_latency_model
from timely_llm_ros.evaluation.sim.simulator import simulate
from timely_llm_ros.evaluation.workload import get_trace
from timely_llm_ros.evaluation.workload.generator import WorkloadTask

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


@pytest.fixture
def registry(monkeypatch):
    """A registry of its own for the test (discovery runs afresh; the session's registry is left as it was).

    monkeypatch mocks nothing here: it swaps in a fresh instance of the real PolicyRegistry, so that the plug-ins
    these tests install do not stay in the process-wide registry for the tests that follow, and (syspath_prepend) it
    puts each test's installed package, a real .dist-info with its entry_points.txt, on sys.path as pip would."""
    fresh = PolicyRegistry()
    monkeypatch.setattr(catalog, "POLICIES", fresh)
    yield fresh
    for name in ("lcfs_policy", "broken_policy"):
        sys.modules.pop(name, None)


def task(name: str, arrival: float, trace_id: int) -> WorkloadTask:
    t = get_trace(trace_id)
    return WorkloadTask(name, arrival, 0, f"agent_{name}", trace_id, t.robot_type, t.urgency, t.task, t.context,
                        t.plan, 2884)


def test_a_policy_from_another_package_is_found_by_its_entry_point_and_plans(tmp_path, monkeypatch, registry):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "lcfs_policy", "lcfs_policy", LCFS_MODULE, "lcfs = lcfs_policy:LastComeFirstServed")
    with pytest.raises(ValueError, match="unknown policy 'lcfs'.*timely_llm_ros.policies"):
        make_policy("lcfs")
    monkeypatch.syspath_prepend(str(site))
    # composed as the server and the simulator compose any policy
    policy = build_policy(PolicyChoice("lcfs", max_batch=1), load_skill_sets())
    assert type(policy).__module__ == "lcfs_policy" and "lcfs" in registry
    tasks = [task("first", 0.0, 1), task("second", 0.01, 2), task("third", 0.02, 3)]
    result = simulate(policy, load_latency_model("llama3-8b-rtx4090"), tasks)
    assert result.policy == "lcfs"
    outcomes = {o.req.req_id: o for o in result.outcomes}
    assert all(o.state == RequestState.DONE and o.plan_text.strip() == o.req.forced_plan for o in outcomes.values())
    # one generation per step: once the first request's segment is out, the latest arrival is served first
    assert outcomes["third"].segments[0].dispatched < outcomes["second"].segments[0].dispatched


def test_a_plugin_that_does_not_fit_its_entry_is_left_out_and_asking_for_it_says_why(tmp_path, monkeypatch,
                                                                                       registry):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "broken_policy", "broken_policy", LCFS_MODULE, "newest = broken_policy:LastComeFirstServed")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ValueError, match="newest = broken_policy:LastComeFirstServed.*whose name is 'lcfs'"):
        make_policy("newest")
    assert "timely" in registry and "newest" not in registry      # the others still load


def test_a_plugin_cannot_take_a_built_in_name(tmp_path, monkeypatch, registry):
    site = tmp_path / "site"
    site.mkdir()
    install(site, "lcfs_policy", "lcfs_policy", LCFS_MODULE.replace('"lcfs"', '"timely"'),
            "timely = lcfs_policy:LastComeFirstServed")
    monkeypatch.syspath_prepend(str(site))
    assert type(make_policy("timely")).__module__ == "timely_llm_ros.core.policies.timely"


def test_setup_py_declares_the_built_in_policies_as_the_source_tree_fallback_lists_them():
    tree = ast.parse((REPO / "setup.py").read_text())
    entry_points = next(kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                        for kw in node.keywords if kw.arg == "entry_points")
    declared = ast.literal_eval(entry_points)[ENTRY_POINT_GROUP]
    assert dict(tuple(part.strip() for part in line.split("=")) for line in declared) == BUILTIN_POLICIES
