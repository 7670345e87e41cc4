"""docs/results.md as a whole: every measured figure of the project, each with the command that made it and the
machine it ran on.

    PYTHONPATH=. .venv/bin/python benchmarks/results.py [--quick] [--rerun NAME,...|all] [--only NAME,...]
        [--render-only] [--list]

Each section (SECTIONS, in benchmarks/results_sections.py) is one benchmark script run with fixed arguments. Its raw
outputs live in docs/results/<name>/: the script's own files (CSV, JSON, summary tables, PNG plots), its standard
output (stdout.txt) and run.json (the command, the machine, the wall time, the exit status). docs/results.md is
always rendered from those folders, so a section that is not re-run keeps the figures of its stored run, and the
document says, per section, whether this invocation re-ran it or read the stored run.

Which sections run:
  default        every section but the long ones (cost "long": the ROS burst on SmolLM2, the full plan-quality pass),
                 which are read from their stored runs;
  --quick        only the fast ones (cost "fast": the simulator and the overhead benchmarks);
  --rerun        also these long sections (all: every section; a "gpu" section only where CUDA is present);
  --only         exactly these sections;
  --render-only  none: rewrite docs/results.md from the stored runs.
docs/results.md's header sums each mode's wall time from the stored runs. ROS sections use the caller's
ROS_DOMAIN_ID (run them on a domain no other process uses).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_machine import machine  # noqa: E402
from results_render import render  # noqa: E402
from results_sections import SECTIONS, Section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
DOC = REPO / "docs" / "results.md"


def chosen(args: argparse.Namespace) -> list[Section]:
    """The sections this invocation re-runs."""
    names = {s.name for s in SECTIONS}
    for flag in ("only", "rerun"):
        unknown = {n for n in getattr(args, flag).split(",") if n and n != "all"} - names
        if unknown:
            raise SystemExit(f"--{flag}: unknown section(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(names))}")
    if args.render_only:
        return []
    if args.only:
        wanted = set(args.only.split(","))
        todo = [s for s in SECTIONS if s.name in wanted]
    else:
        rerun = set(args.rerun.split(",")) if args.rerun else set()
        costs = {"fast"} if args.quick else {"fast", "regular"}
        todo = [s for s in SECTIONS if s.cost in costs or s.name in rerun or "all" in rerun]
    gpu = [s for s in todo if s.cost == "gpu"]
    if gpu and not _has_cuda():     # a GPU section's stored run is never replaced by a run that cannot measure
        for s in gpu:
            print(f"== {s.name}: needs a CUDA GPU, none here: its stored run is kept", flush=True)
        todo = [s for s in todo if s.cost != "gpu"]
    return todo


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def run_section(section: Section) -> dict:
    """Run one section's command into docs/results/<name>/ (emptied first); returns its run record."""
    folder = RESULTS / section.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    argv = section.argv(folder.relative_to(REPO))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    print(f"== {section.name}: {' '.join(argv)}", flush=True)
    at_start = machine()
    t0 = time.monotonic()
    with open(folder / "stdout.txt", "w", encoding="utf-8") as out:
        proc = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    for pattern in section.discard:               # per-run logs and traces that the document does not use
        for path in folder.glob(pattern):
            path.unlink() if path.is_file() else shutil.rmtree(path)
    record = {"command": section.command(), "machine": at_start, "wall_s": round(wall, 1),
              "load_average_1min_at_end": round(os.getloadavg()[0], 2), "exit_status": proc.returncode,
              "date": time.strftime("%Y-%m-%d", time.gmtime())}
    (folder / "run.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"   exit {proc.returncode} after {wall:.0f} s", flush=True)
    return record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="re-run only the fast sections")
    p.add_argument("--rerun", default="", help="also re-run these long sections (comma-separated, or all)")
    p.add_argument("--only", default="", help="re-run exactly these sections")
    p.add_argument("--render-only", action="store_true", help="re-run nothing; rewrite docs/results.md")
    p.add_argument("--list", action="store_true", help="list the sections and their cost")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for s in SECTIONS:
            print(f"{s.name:24s} {s.cost:8s} ~{s.minutes:g} min  {s.command()}")
        return 0
    todo = chosen(args)
    t0 = time.monotonic()
    failed = [s.name for s in todo if run_section(s)["exit_status"] != 0]
    DOC.write_text(render(SECTIONS, {s.name for s in todo}, RESULTS, REPO), encoding="utf-8")
    print(f"wrote {DOC.relative_to(REPO)}: re-ran {len(todo)} of {len(SECTIONS)} sections in "
          f"{(time.monotonic() - t0) / 60:.1f} min" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
