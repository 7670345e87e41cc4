"""Tables and CSV files shared by the benchmark scripts (run from benchmarks/, so importable as `report`)."""
from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping

from timely_llm_ros.ros.process_signals import stopping_with_this_process
from timely_llm_ros.ros.process_memory import resident_mib

# (robot type, task, scene) of the requests the engine benchmarks decode (engine_llamacpp.py, grammar.py): drone and
# arm alternated, each kind of plan once (search, stack, sort, avoid, clean, check, put)
ENGINE_TASKS = [
    ("drone", "find a toy under the bed", "room: bedroom; objects: bed, chair, cup"),
    ("arm", "stack the red block on the blue block", "table: green block, red block, blue block"),
    ("drone", "look for the cat", "room: living room; objects: sofa, lamp, plant"),
    ("arm", "sort the fruits", "table: apple, carrot, banana; baskets: fruit basket, vegetable basket"),
    ("drone", "evade the bird", "bird above, 120 cm away"),
    ("arm", "clean the desk", "desk: paper, can, tissue; places: trash bin, drawer, tray"),
    ("drone", "check the book on the cabinet", "room: office; objects: cabinet, book, chair"),
    ("arm", "put the cup in the tray", "desk: cup, pen; places: tray, drawer"),
]

METRIC_COLUMNS = ["utility", "utility_share", "response_time", "waiting_time", "served", "dropped"]


def fmt(v, pad: bool = True) -> str:
    """A metric cell: '-' for NaN, three decimals for floats (padded to 6 characters for tables)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "   -  " if pad else "-"
        return f"{v:6.3f}" if pad else f"{v:.3f}"
    return str(v)


def print_table(rows: list[dict], with_batch: bool = False) -> None:
    """One line per policy (and max batch) and group: the per-task-type metrics."""
    lead = f"{'policy':14s} " + (f"{'batch':>5s} " if with_batch else "") + f"{'group':>9s} {'n':>4s} "
    print(lead + " ".join(f"{c[:13]:>13s}" for c in METRIC_COLUMNS))
    for r in rows:
        head = f"{r['policy']:14s} " + (f"{r['max_batch']:5d} " if with_batch else "") + f"{r['group']:>9s} {r['n']:4d} "
        print(head + " ".join(f"{fmt(r[c]):>13s}" for c in METRIC_COLUMNS))


def parse_seeds(text: str) -> list[int]:
    """Seeds from a comma-separated list whose items may be ranges: "1,2,5-7" -> [1, 2, 5, 6, 7]."""
    seeds: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise SystemExit(f"--seeds: {item!r} is neither a seed nor a range like 1-30") from None
        if last < first:
            raise SystemExit(f"--seeds: range {item!r} ends before it starts")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise SystemExit("--seeds: no seed given (e.g. --seeds 1,2,3 or --seeds 1-30)")
    return seeds


def write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (all its threads), from /proc/<pid>/stat (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process (MiB), from /proc/<pid>/statm (Linux): the server's own reader."""
    return resident_mib(pid)


def interrupt(proc, timeout_s: float = 30.0) -> int | None:
    """Ctrl-C a child process (SIGINT, as a terminal would), wait for it, kill it if it does not exit in time;
    its exit code (None if it had to be killed)."""
    import signal
    import subprocess

    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return None


def start_executor_host(agents: str, ros_args: list[str] | tuple[str, ...] = ()):
    """The simulated executor host (``agent:robot_type,...``) as a child process on loopback, output discarded;
    ros_args follow ``--ros-args``. Stop it with interrupt()."""
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH", "")])))
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    argv = [sys.executable, "-m", "timely_llm_ros.ros.executor.host", "--agents", agents]
    if ros_args:
        argv += ["--ros-args", *ros_args]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=stopping_with_this_process(env), cwd=repo)



def run_sub_command(doc: str, commands: Mapping[str, Callable[[list[str]], int | None]], argv: list[str]) -> int:
    """Run the sub-command a script's first argument names with the rest of the arguments; without one, print the
    script's usage (its docstring) and return 2."""
    if not argv or argv[0] not in commands:
        print(doc, file=sys.stderr)
        print(f"error: the first argument is a sub-command: {', '.join(commands)}", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:]) or 0
