"""docs/results.md from the stored runs in docs/results/<section>/ (benchmarks/results.py), and the plots that no
benchmark script draws itself (the ROS burst against the simulator, plan quality)."""
from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

from results_machine import describe
from results_sections import Section

HEADER = """# Measured results

Every figure of the project, each with the command that made it and the machine it ran on. This file is written by
`make bench` (benchmarks/results.py) from the raw outputs in [docs/results/](results/); do not edit it by hand.

    make bench                      # re-runs every section but the long ones ({regular})
    make bench QUICK=1              # re-runs only the fast sections ({fast})
    make bench RERUN=plan_quality   # also re-runs a long section (RERUN=all: everything)
    make bench RENDER=1             # re-runs nothing; rewrites this file from docs/results/

(Durations: the sum of the stored runs' wall times on the machines they name; the long sections take {long}. A run
made while other jobs shared the machine, as each section's load average shows, takes several times what it takes on
an idle one.)
Sections not re-run by the invocation that wrote this file show their stored run (its machine and date are given).
Each benchmark measures the variants it compares side by side in one run (alternated, repeated); seeds, where they
apply, give mean [min-max] over the seeds. One section ran on a GPU (an H200: the transformers engine's table,
benchmarks/gpu_engine.py); the other CUDA paths (the ROS server on a GPU, the official vLLM build) are untested on
hardware.
"""


_PROGRESS_BAR = re.compile(r"\d+%\|.*\| \d+/\d+ \[")   # a tqdm line ("  5%|#   | 12/240 [00:03<...]")


def _md_output(text: str, drop: tuple[str, ...]) -> str:
    """A script's standard output as markdown: its tables as tables, the rest as preformatted text."""
    blocks: list[str] = []
    plain: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if plain and any(line.strip() for line in plain):
            blocks.append("```text\n" + "\n".join(plain).strip("\n") + "\n```")
        if table:
            blocks.append("\n".join(table))
        plain.clear()
        table.clear()

    for line in text.splitlines():
        if (drop and line.startswith(drop)) or _PROGRESS_BAR.search(line):
            continue
        if line.lstrip().startswith("|"):
            if plain:
                flush()
            table.append(line.strip())
        else:
            if table:
                flush()
            plain.append(line.rstrip())
    flush()
    return "\n\n".join(blocks)


def plot_ros_vs_sim(folder: Path) -> None:
    """ros_vs_sim.png: urgent and normal utility per policy, ROS beside each simulator source (mean, min-max bars)."""
    runs = folder / "runs.csv"
    if not runs.exists():
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(runs.open()))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(sources)
    for ax, cls in zip(axes, ("urgent", "normal")):
        for i, src in enumerate(sources):
            vals = [[float(r[cls]) for r in rows if r["policy"] == p and r["source"] == src] for p in policies]
            means = [statistics.fmean(v) if v else float("nan") for v in vals]
            lo = [m - min(v) if v else 0 for m, v in zip(means, vals)]
            hi = [max(v) - m if v else 0 for m, v in zip(means, vals)]
            ax.bar([j + i * width for j in range(len(policies))], means, width, yerr=[lo, hi], capsize=3, label=src)
        ax.set_xticks([j + width * (len(sources) - 1) / 2 for j in range(len(policies))], policies, rotation=20)
        ax.set_title(f"{cls} utility (mean, min-max over seeds)")
        ax.axhline(0, color="black", linewidth=0.5)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "ros_vs_sim.png", dpi=110)
    plt.close(fig)


def plot_plan_quality(folder: Path) -> None:
    """plan_quality.png: each measure over the test and heldout splits, per configuration and robot type."""
    summary = folder / "summary.json"
    if not summary.exists():
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    passes = json.loads(summary.read_text())
    measures = ["parses", "runs", "hallucinated", "roles", "achieved"]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(passes)
    for i, p in enumerate(passes):
        ax.bar([j + i * width for j in range(len(measures))], [100 * p["headline"][m] for m in measures], width,
               label=f"{p['config']} ({p['robot_type']})")
    ax.set_xticks([j + width * (len(passes) - 1) / 2 for j in range(len(measures))], measures)
    ax.set_ylabel("% of plans (test + heldout)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(folder / "plan_quality.png", dpi=110)
    plt.close(fig)


PLOTTERS = {"ros_burst_smollm2": plot_ros_vs_sim, "ros_burst_embedded": plot_ros_vs_sim,
            "plan_quality": plot_plan_quality}


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def section_md(s: Section, folder: Path, rerun: bool, repo: Path) -> str:
    """One section: title, what it measures, command, machine, provenance, the figures, the plots."""
    lines = [f"## {s.title}", "", s.what, "", "```bash", s.command(), "```", ""]
    record_path = folder / "run.json"
    if not record_path.exists():
        lines.append(f"*No stored run yet: `make bench RERUN={s.name}` makes one (about {s.minutes:g} min).*")
        return "\n".join(lines) + "\n"
    record = json.loads(record_path.read_text())
    how = "re-ran by this `make bench`" if rerun else \
        f"read from the stored run in [docs/results/{s.name}/](results/{s.name}/) (`make bench RERUN={s.name}` re-runs it)"
    status = "" if record["exit_status"] == 0 else f" **Exited {record['exit_status']}: the run failed.**"
    end_load = f", {record['load_average_1min_at_end']} at the end" if "load_average_1min_at_end" in record else ""
    lines += [f"Ran {record['date']}, {_minutes(record['wall_s'])}, {how}; load average "
              f"{record['machine']['load_average_1min']} at the start{end_load} (other jobs shared the machine "
              f"when it exceeds its {record['machine']['logical_cpus']} CPUs).{status}",
              f"Machine: {describe(record['machine'])}.", *([f"**Note:** {record['note']}"] if record.get("note") else []),
              ""]
    if s.name in PLOTTERS:
        PLOTTERS[s.name](folder)
    sources = [folder / f for f in s.show if (folder / f).exists()] or [folder / "stdout.txt"]
    for path in sources:
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="replace").replace(f"{repo}/", "")  # paths in the repo
            lines += [_md_output(text, s.drop), ""]
    pngs = sorted(folder.glob("*.png")) if "*" in s.plots else [folder / p for p in s.plots]
    for png in (p for p in pngs if p.exists()):
        lines += [f"![{png.stem}]({png.relative_to(repo / 'docs').as_posix()})", ""]
    return "\n".join(lines) + "\n"


def wall_s(s: Section, results: Path) -> float:
    """The section's stored run's wall time, else its nominal minutes."""
    record = results / s.name / "run.json"
    return json.loads(record.read_text())["wall_s"] if record.exists() else 60.0 * s.minutes


def render(sections: tuple[Section, ...], rerun: set[str], results: Path, repo: Path) -> str:
    """The whole document."""
    toc = ["| section | cost | wall time | this invocation |", "|---|---|---|---|"]
    total = {"fast": 0.0, "regular": 0.0, "long": 0.0, "gpu": 0.0}
    for s in sections:
        state = "re-ran" if s.name in rerun else ("stored run" if (results / s.name / "run.json").exists() else "none")
        anchor = "".join(c for c in s.title.lower().replace(" ", "-") if c.isalnum() or c in "-_")
        total[s.cost] += wall_s(s, results)
        toc.append(f"| [{s.title}](#{anchor}) | {s.cost} | {_minutes(wall_s(s, results))} | {state} |")
    body = [section_md(s, results / s.name, s.name in rerun, repo) for s in sections]
    header = HEADER.format(fast=_minutes(total["fast"]), regular=_minutes(total["fast"] + total["regular"]),
                           long=_minutes(total["long"]))
    return header + "\n" + "\n".join(toc) + "\n\n" + "\n".join(body)
