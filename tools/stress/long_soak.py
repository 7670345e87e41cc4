"""make stress's long mode (`--soak-goals N`): mixed goals for a long time while the server's memory is sampled.

After a warm-up of mixed goals (the server's pools, histories and per-robot clients reach their working size), it
sends N more: valid goals to live executors, dry-run goals, goals with hostile fields, goals to random agent names
that no executor serves, and goals cancelled at a random moment. Every ``N / samples`` goals it lets the open goals
end and records the server's resident memory and thread count (from /proc), its Python heap (tracemalloc, on
/diagnostics with trace_python_heap) and the ROS entities its nodes hold (/diagnostics). The verdict: every goal
ended with its category's code, RSS grew at most ``max_rss_growth`` from the first sample to the last, and the
entity and thread counts stayed flat.
"""
from __future__ import annotations

import csv
import math
import string
import time
from dataclasses import dataclass, fields
from pathlib import Path

from goals import CANCELLED, DROPPED, EXEC_UNAVAILABLE, NONE, draw_malformed, valid_goal
from report import Row, score

from timely_llm_ros.ros.process_memory import thread_count

# each goal's category, drawn with these weights (most of what an exposed server gets is not a valid goal)
MIX = {"hostile": 0.40, "unknown agent": 0.15, "dry-run": 0.20, "valid": 0.15, "cancel": 0.10}
EXPECT = {"unknown agent": {EXEC_UNAVAILABLE}, "dry-run": {NONE, DROPPED}, "valid": {NONE, DROPPED},
          "cancel": {CANCELLED, NONE, DROPPED}}
HOSTILE_POOL = 1000        # distinct malformed goals drawn once (hypothesis), then sent in random order
CANCEL_WITHIN_S = 2.0      # a cancelled goal is cancelled this long after it was sent, at most (uniform)
QUIET_S = 1.5              # a sample waits this long after the last goal: the server's memory_trim_idle_s (1 s)
                           # passes, so each sample reads the server as it stays between bursts
THREAD_SLACK = 2           # threads that may come and go (a liveliness check's timer) without counting as growth


@dataclass
class Sample:
    """The server as it was after ``goals`` goals past the warm-up had ended."""

    goals: int
    elapsed_s: float
    rss_mib: float
    python_heap_mib: float
    ros_entities: int
    threads: int


@dataclass
class Verdict:
    rss_growth: float          # last sample's RSS / first's - 1
    entities_flat: bool
    threads_flat: bool
    problems: list[str]


class MixedGoals:
    """Sends one goal of a category drawn from MIX per call, at most ``run.outstanding`` open."""

    def __init__(self, run, agents: list[str]) -> None:
        self.run, self.agents = run, agents
        self.hostile = draw_malformed(HOSTILE_POOL, agents[0], run.seed + 7)
        self.kinds, self.weights = list(MIX), list(MIX.values())
        self.cancel_due: list[tuple[float, object]] = []     # (when, record) of goals still to cancel

    def send(self, phase: str):
        rng, client = self.run.rng, self.run.client
        kind = rng.choices(self.kinds, self.weights)[0]
        if kind == "hostile":
            category, code, goal = self.hostile[rng.randrange(len(self.hostile))]
            return client.send(phase, f"hostile {category}", {code}, goal)
        if kind == "unknown agent":   # a valid namespace no executor serves: discovery gives up on it
            name = "x_" + "".join(rng.choice(string.ascii_lowercase) for _ in range(10))
            return client.send(phase, kind, EXPECT[kind], valid_goal(name, "drone"))
        agent = rng.choice(self.agents)
        rec = client.send(phase, kind, EXPECT[kind], valid_goal(agent, "drone", dry_run=kind == "dry-run"))
        if kind == "cancel":
            self.cancel_due.append((time.monotonic() + rng.uniform(0.0, CANCEL_WITHIN_S), rec))
        return rec

    def cancel_due_goals(self) -> None:
        now = time.monotonic()
        keep = []
        for when, rec in self.cancel_due:
            if rec.terminal:
                continue
            if when <= now and rec.handle is not None:
                rec.cancel_at_state = "timer"
                self.run.client.cancel(rec)
            else:
                keep.append((when, rec))
        self.cancel_due = keep


def _open(run, mixed: MixedGoals, open_records: list, limit: int) -> list:
    """Wait until fewer than ``limit`` goals are open (a goal without an answer after result_timeout_s counts as
    lost, not open); returns the open ones."""
    from phases import ServerDied
    while True:
        if not run.server.alive:
            raise ServerDied(f"server exited with {run.server.proc.returncode}")
        mixed.cancel_due_goals()
        now = time.monotonic()
        open_records = [r for r in open_records if not r.terminal and now - r.sent < run.result_timeout_s]
        if len(open_records) < limit:
            return open_records
        time.sleep(0.005)


def _add(total: Row, part: Row) -> None:
    """Add one chunk's counts to the phase's row (latencies are not measured in the long mode)."""
    for name in ("goals", "no_response", "rejected", "no_result", "unexpected"):
        setattr(total, name, getattr(total, name) + getattr(part, name))
    total.codes.update(part.codes)
    total.unexpected_kinds.update(part.unexpected_kinds)
    total.unexpected_examples += part.unexpected_examples[:max(0, 5 - len(total.unexpected_examples))]


def send_mixed(run, mixed: MixedGoals, n: int, phase: str, row: Row, every: int = 0, on_sample=None) -> None:
    """Send n mixed goals; every ``every`` goals (and after the last) let the open ones end, score what was sent
    since the last time into ``row``, forget those records and call ``on_sample(goals sent)``."""
    open_records: list = []
    for sent in range(1, n + 1):
        open_records = _open(run, mixed, open_records, run.outstanding)
        open_records.append(mixed.send(phase))
        if (every and sent % every == 0) or sent == n:
            end = time.monotonic() + run.result_timeout_s
            while open_records and time.monotonic() < end:
                mixed.cancel_due_goals()
                open_records = [r for r in open_records if not r.terminal]
                time.sleep(0.02)
            chunk = [r for r in list(run.client.records) if r.phase == phase]
            _add(row, score(phase, chunk, {}))
            run.client.forget(chunk)
            open_records = []
            if on_sample is not None:
                on_sample(sent)


def take_sample(run, goals: int, t0: float) -> Sample:
    time.sleep(QUIET_S)
    values = run.client.fresh_diagnostics(10.0)
    heap = float(values.get("python_heap_mib", "nan"))
    entities = int(values.get("ros_entities", -1))
    return Sample(goals, time.monotonic() - t0, run.server.rss_mb(), heap, entities, thread_count(run.server.proc.pid))


def long_soak(run, agents: list[str], n_goals: int, warmup: int, n_samples: int) -> tuple[list[Row], list[Sample]]:
    """The warm-up's row and the long soak's, and the samples (the first taken right after the warm-up)."""
    mixed = MixedGoals(run, agents)
    warm = Row("soak warm-up", rss_before=run.server.rss_mb())
    print(f"[stress] long soak: {warmup} mixed goals of warm-up, then {n_goals}", flush=True)
    send_mixed(run, mixed, warmup, "soak warm-up", warm)
    warm.crashes = 0 if run.server.alive else 1
    samples: list[Sample] = []
    t0 = time.monotonic()

    def sample(goals: int) -> None:
        s = take_sample(run, goals, t0)
        samples.append(s)
        print(f"[stress] {s.goals} goals, {s.elapsed_s:.0f} s: RSS {s.rss_mib:.1f} MiB, Python heap "
              f"{s.python_heap_mib:.1f} MiB, {s.ros_entities} ROS entities, {s.threads} threads", flush=True)

    sample(0)
    warm.rss_after = samples[0].rss_mib
    soak = Row("long soak", rss_before=samples[0].rss_mib)
    send_mixed(run, mixed, n_goals, "long soak", soak, every=max(1, n_goals // n_samples), on_sample=sample)
    soak.crashes = 0 if run.server.alive else 1
    soak.rss_after = samples[-1].rss_mib
    return [warm, soak], samples


def verdict(samples: list[Sample], max_rss_growth: float) -> Verdict:
    first, last = samples[0], samples[-1]
    growth = last.rss_mib / first.rss_mib - 1.0 if first.rss_mib > 0 else math.nan
    entities_flat = first.ros_entities >= 0 and all(s.ros_entities == first.ros_entities for s in samples)
    threads_flat = first.threads > 0 and max(s.threads for s in samples) <= first.threads + THREAD_SLACK
    problems = []
    if not growth <= max_rss_growth:
        problems.append(f"server RSS {first.rss_mib:.1f} -> {last.rss_mib:.1f} MiB after the warm-up "
                        f"({100 * growth:+.1f}%, more than {100 * max_rss_growth:g}%)")
    if not entities_flat:
        problems.append("ROS entities not flat: " + ", ".join(str(s.ros_entities) for s in samples))
    if not threads_flat:
        problems.append(f"threads not flat (more than {THREAD_SLACK} over the first sample): "
                        + ", ".join(str(s.threads) for s in samples))
    return Verdict(growth, entities_flat, threads_flat, problems)


def samples_table(samples: list[Sample]) -> str:
    first = samples[0]
    lines = ["| goals after warm-up | time (s) | RSS (MiB) | RSS growth | Python heap (MiB) | ROS entities | threads |",
             "|---|---|---|---|---|---|---|"]
    for s in samples:
        lines.append(f"| {s.goals} | {s.elapsed_s:.0f} | {s.rss_mib:.1f} | {100 * (s.rss_mib / first.rss_mib - 1):+.2f}% "
                     f"| {s.python_heap_mib:.2f} | {s.ros_entities} | {s.threads} |")
    return "\n".join(lines)


def write_outputs(out: Path, samples: list[Sample], table_text: str, result: Verdict, max_rss_growth: float) -> None:
    """samples.csv, summary.md (the samples' table and the verdict) and memory.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f.name for f in fields(Sample)])
        for s in samples:
            writer.writerow([getattr(s, f.name) for f in fields(Sample)])
    first, last = samples[0], samples[-1]
    summary = [f"Mixed goals ({', '.join(f'{k} {100 * v:.0f}%' for k, v in MIX.items())}); the first row is the "
               f"server right after the warm-up.", "", samples_table(samples), "",
               f"RSS {first.rss_mib:.1f} -> {last.rss_mib:.1f} MiB over {last.goals} goals "
               f"({100 * result.rss_growth:+.2f}%; limit +{100 * max_rss_growth:g}%), ROS entities "
               f"{'flat' if result.entities_flat else 'NOT flat'}, threads {'flat' if result.threads_flat else 'NOT flat'}.",
               "", "Goals by phase:", "", table_text, ""]
    (out / "summary.md").write_text("\n".join(summary), encoding="utf-8")
    _plot(out / "memory.png", samples, max_rss_growth)


def _plot(path: Path, samples: list[Sample], max_rss_growth: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    goals = [s.goals for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharex=True)
    panels = [("RSS (MiB)", [s.rss_mib for s in samples]), ("Python heap (MiB, tracemalloc)",
                                                            [s.python_heap_mib for s in samples]),
              ("ROS entities", [s.ros_entities for s in samples]), ("threads", [s.threads for s in samples])]
    for ax, (title, values) in zip(axes.flat, panels):
        ax.plot(goals, values, marker=".")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0][0].axhline(samples[0].rss_mib * (1 + max_rss_growth), ls="--", color="red",
                       label=f"+{100 * max_rss_growth:g}% of the first sample")
    axes[0][0].legend(loc="lower right")
    for ax in axes[1]:
        ax.set_xlabel("goals after the warm-up")
    fig.suptitle("make stress long soak: the server after each step of mixed goals")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
