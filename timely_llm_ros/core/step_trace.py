"""Per-step trace of a serving loop, and what it says about the machine the engine ran on.

A real server's engine steps take longer than its latency profile says when the box is busy (other processes share
the cores, the serving loop's own Python runs between forwards). A trace records, for every engine step, what the
step did (its prefills, its decode batch and their context) and what it took: the engine's forward (``engine_s``)
and the whole loop iteration around it (``iteration_s``: inbox, scheduling, the step, events). From a trace and the
profile, ``load_factors`` measures the two numbers the simulator needs to replay that run's machine:

  slowdown         sum(forward_s) / sum(profile's step time of the same steps): a ratio of sums, so long steps
                   weigh as much as the time they took (a mean of per-step ratios lets 1-ms steps dominate);
                   forward_s is engine_s without KV reloads, which the profile does not model
  step_overhead_s  mean(iteration_s - engine_s): the loop's own time per step

``LatencyModel.under_load(slowdown, step_overhead_s)`` is that machine (benchmarks/ros_burst.py: sim-as-run).
Steps an arrival interrupted ran only part of their forward and are left out of both.
"""
from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Iterable, Sequence

from timely_llm_ros.core.latency_model import LatencyModel


@dataclass(frozen=True)
class StepRecord:
    """One engine step of a serving loop."""

    t: float                          # the scheduler's clock when the step was chosen (s)
    engine_s: float                   # the engine's forward (KV reloads included), as it reported
    prefills: tuple[tuple[int, int], ...] = ()   # (tokens prefilled, context after them) per prompt in the step
    decode_batch: int = 0             # sequences decoded
    decode_kv_tokens: int = 0         # their context tokens in total
    reload_s: float = 0.0             # KV reloads paid in this step (part of engine_s, left out of the slowdown)
    # the loop iteration that ran the step (0: not measured) and its parts; what is left is scheduling_s
    iteration_s: float = 0.0
    inbox_s: float = 0.0              # requests posted to the loop (submits, cancels, robot feedback), their events
    events_s: float = 0.0             # this step's events handed on (feedback, segments sent to robots, results)
    idle_s: float = 0.0               # the loop's housekeeping after the step (timeouts, the state topic)
    policy: str = ""                  # the policy that chose the step (as the server names it)
    interrupted: bool = False         # an arrival cut it short: engine_s is the part that ran, the columns above
                                      # what was asked (left out of load_factors)

    @property
    def scheduling_s(self) -> float:
        """The iteration less the forward, the inbox, the events and the housekeeping: choosing the batch, applying
        it, and absorbing the new tokens (detokenize, segment)."""
        return max(self.iteration_s - self.engine_s - self.inbox_s - self.events_s - self.idle_s, 0.0)

    @property
    def forward_s(self) -> float:
        """The forward pass alone: engine_s without the KV reloads."""
        return max(self.engine_s - self.reload_s, 0.0)

    def predicted_s(self, latency: LatencyModel) -> float:
        """What the profile gives this step's forward."""
        return latency.step_s(self.prefills, self.decode_batch, self.decode_kv_tokens)


_COLUMNS = [f.name for f in fields(StepRecord)]
BREAKDOWN = ("forward", "reloads", "scheduling", "events", "inbox", "housekeeping")


def breakdown(record: StepRecord) -> dict[str, float]:
    """Where a step's loop iteration went, in seconds (parts of iteration_s; forward + reloads = engine_s)."""
    return {"forward": record.forward_s, "reloads": record.engine_s - record.forward_s,
            "scheduling": record.scheduling_s, "events": record.events_s, "inbox": record.inbox_s,
            "housekeeping": record.idle_s}


def _cell(name: str, value) -> str:
    if name == "prefills":
        return ";".join(f"{n}:{ctx}" for n, ctx in value)
    return repr(value) if isinstance(value, float) else str(value)   # repr: reads back exactly


class StepTraceWriter:
    """Appends StepRecords to a CSV file (one row per step; written by the loop's thread, flushed on close)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("w", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)
        self._csv.writerow(_COLUMNS)
        self.rows = 0
        self._sums = dict.fromkeys(BREAKDOWN, 0.0)

    def write(self, record: StepRecord) -> None:
        if self._file is None:
            return
        self._csv.writerow([_cell(k, v) for k, v in asdict(record).items()])
        self.rows += 1
        for part, seconds in breakdown(record).items():
            self._sums[part] += seconds

    def summary(self) -> str:
        """'N engine steps; per step (ms): forward 5.1, scheduling 1.0, ...' over what was written."""
        n = max(self.rows, 1)
        return f"{self.rows} engine steps; per step (ms): " + ", ".join(
            f"{part} {self._sums[part] / n * 1e3:.2f}" for part in BREAKDOWN)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_step_trace(path: str | Path) -> list[StepRecord]:
    """The records a StepTraceWriter wrote."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            pre = tuple(tuple(int(x) for x in p.split(":")) for p in row["prefills"].split(";") if p)
            out.append(StepRecord(t=float(row["t"]), engine_s=float(row["engine_s"]), prefills=pre,  # type: ignore[arg-type]
                                  decode_batch=int(row["decode_batch"]), decode_kv_tokens=int(row["decode_kv_tokens"]),
                                  reload_s=float(row["reload_s"]), iteration_s=float(row["iteration_s"]),
                                  inbox_s=float(row.get("inbox_s") or 0.0), events_s=float(row.get("events_s") or 0.0),
                                  idle_s=float(row.get("idle_s") or 0.0), policy=row["policy"],
                                  interrupted=row.get("interrupted") == "True"))
    return out


@dataclass(frozen=True)
class LoadFactors:
    """How a traced run's machine differs from the profile (see the module docstring)."""

    slowdown: float
    step_overhead_s: float
    steps: int


def load_factors(records: Sequence[StepRecord] | Iterable[StepRecord], latency: LatencyModel) -> LoadFactors:
    """Slowdown (a ratio of sums) and the mean per-step overhead of the records' steps against `latency`."""
    records = [r for r in records if not r.interrupted]   # a partial forward is no measure of the profile
    if not records:
        raise ValueError("load_factors: no steps in the trace (none that ran whole)")
    predicted = sum(r.predicted_s(latency) for r in records)
    measured = sum(r.forward_s for r in records)
    timed = [r for r in records if r.iteration_s > 0.0]
    overhead = sum(max(r.iteration_s - r.engine_s, 0.0) for r in timed) / len(timed) if timed else 0.0
    return LoadFactors(slowdown=measured / predicted if predicted > 0 else float("nan"),
                       step_overhead_s=overhead, steps=len(records))


# ---------------------------------------------------------------------------------------------- command line
def summary_table(records: Sequence[StepRecord], latency: LatencyModel | None = None) -> str:
    """Per policy (in order of appearance): steps, and per part of the loop iteration the mean, p99 and max per
    step in ms; with a profile, the load factors against it."""
    lines = []
    for policy in dict.fromkeys(r.policy for r in records):
        steps = [r for r in records if r.policy == policy]
        head = f"{policy or '(no policy)'}: {len(steps)} engine steps"
        if latency is not None:
            f = load_factors(steps, latency)
            head += f"; forward x{f.slowdown:.2f} the profile, loop {f.step_overhead_s * 1e3:.2f} ms a step beside it"
        lines += [head, f"  {'part':<13}{'mean':>9}{'p99':>9}{'max':>9}  (ms per step)"]
        for part in BREAKDOWN:
            values = sorted(breakdown(r)[part] * 1e3 for r in steps)
            p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
            lines.append(f"  {part:<13}{sum(values) / len(values):>9.2f}{p99:>9.2f}{values[-1]:>9.2f}")
    return "\n".join(lines)


def plot_trace(records: Sequence[StepRecord], path: str | Path) -> None:
    """Each step's loop iteration over time, stacked by part (one panel per policy); needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(r.policy for r in records))
    fig, axes = plt.subplots(len(policies), 1, figsize=(10, 2.6 * len(policies)), squeeze=False, sharey=True)
    for ax, policy in zip(axes[:, 0], policies):
        steps = [r for r in records if r.policy == policy]
        t = [r.t - steps[0].t for r in steps]
        ax.stackplot(t, *[[breakdown(r)[p] * 1e3 for r in steps] for p in BREAKDOWN], labels=BREAKDOWN, step="post")
        ax.set_title(f"{policy or '(no policy)'}: {len(steps)} steps", fontsize=9)
        ax.set_ylabel("ms per step")
    axes[-1, 0].set_xlabel("s since the policy's first step")
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=len(BREAKDOWN))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """python -m timely_llm_ros.core.step_trace TRACE.csv [--profile NAME|YAML] [--plot OUT.png]"""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m timely_llm_ros.core.step_trace",
                                description="Where a server's engine loop spent its time, from the CSV its "
                                            "step_trace_csv parameter wrote.")
    p.add_argument("trace", help="the step trace (CSV)")
    p.add_argument("--profile", default="", help="latency profile (config/latency name or YAML path): also print "
                   "the forward's slowdown against it and the loop's time per step")
    p.add_argument("--plot", default="", help="write a PNG of each step's time over the run, stacked by part")
    args = p.parse_args(argv)
    try:
        records = read_step_trace(args.trace)
    except (OSError, KeyError, ValueError) as exc:
        print(f"cannot read the step trace {args.trace!r}: {type(exc).__name__}: {exc} (a CSV that the server's "
              "step_trace_csv parameter wrote)", file=sys.stderr)
        return 2
    if not records:
        print(f"{args.trace}: no engine steps recorded", file=sys.stderr)
        return 1
    latency = None
    if args.profile:
        from timely_llm_ros.core.latency_model import load_latency_model
        try:
            latency = load_latency_model(args.profile)
        except (OSError, KeyError, ValueError) as exc:
            print(f"cannot load the latency profile {args.profile!r}: {exc}", file=sys.stderr)
            return 2
    print(summary_table(records, latency))
    if args.plot:
        plot_trace(records, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
