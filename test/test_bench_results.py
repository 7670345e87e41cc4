"""`make bench` (benchmarks/results.py): which sections an invocation re-runs, and how docs/results.md shows a section
from its stored run (command, machine, provenance, the script's tables)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import results  # noqa: E402
from results_machine import machine  # noqa: E402
from results_render import render  # noqa: E402
from results_sections import SECTIONS, Section  # noqa: E402


def names(argv: list[str]) -> set[str]:
    return {s.name for s in results.chosen(results.parse_args(argv))}


def test_quick_reruns_only_the_fast_sections_and_the_default_leaves_the_long_ones_to_their_stored_runs():
    by_cost = {c: {s.name for s in SECTIONS if s.cost == c} for c in ("fast", "regular", "long")}
    assert by_cost["fast"] and by_cost["long"]
    assert names(["--quick"]) == by_cost["fast"]
    assert names([]) == by_cost["fast"] | by_cost["regular"]
    long_one = sorted(by_cost["long"])[0]
    assert names(["--rerun", long_one]) == by_cost["fast"] | by_cost["regular"] | {long_one}
    gpu = {s.name for s in SECTIONS if s.cost == "gpu"}
    assert gpu and not torch.cuda.is_available()        # this suite runs where no GPU is
    assert names(["--rerun", "all"]) == {s.name for s in SECTIONS} - gpu
    assert names(["--only", ",".join(gpu)]) == set()     # a GPU section's stored run is kept where CUDA is missing
    assert names(["--render-only"]) == set()


def test_an_unknown_section_name_is_refused_with_the_known_ones():
    with pytest.raises(SystemExit, match="no_such_section.*known: .*sim_policies"):
        names(["--only", "no_such_section"])


def test_every_section_runs_a_script_of_the_repository_and_has_a_folder_of_its_own():
    assert len({s.name for s in SECTIONS}) == len(SECTIONS)
    for s in SECTIONS:
        assert (REPO / s.script).is_file(), s.script
        assert s.cost in ("fast", "regular", "long", "gpu"), s.name


def test_a_stored_run_is_shown_with_its_command_machine_and_tables_and_a_missing_one_says_how_to_make_it(tmp_path):
    stored = Section("stored", "A stored figure", "What it measures.", "benchmarks/x.py", ("--out", "{out}"),
                     drop=("[progress",))
    missing = Section("missing", "A missing figure", "Not run yet.", "benchmarks/y.py", cost="long", minutes=7)
    folder = tmp_path / "results" / "stored"
    folder.mkdir(parents=True)
    record = {"command": stored.command(), "machine": machine(), "wall_s": 75.0, "exit_status": 0,
              "date": "2026-01-02"}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "stdout.txt").write_text("[progress 1/2]\nheader line\n| a | b |\n|---|---|\n| 1 | 2 |\ntail line\n")
    doc = render((stored, missing), set(), tmp_path / "results", tmp_path)
    assert "PYTHONPATH=. .venv/bin/python benchmarks/x.py --out docs/results/stored" in doc
    assert "read from the stored run" in doc and "1.2 min" in doc and "2026-01-02" in doc
    assert record["machine"]["cpu"] in doc
    assert "| a | b |\n|---|---|\n| 1 | 2 |" in doc
    assert "header line" in doc and "tail line" in doc and "[progress" not in doc
    assert "No stored run yet: `make bench RERUN=missing`" in doc
    rerun_doc = render((stored,), {"stored"}, tmp_path / "results", tmp_path)
    assert "re-ran by this `make bench`" in rerun_doc
