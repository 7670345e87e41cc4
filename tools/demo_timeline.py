"""The demo's timeline: engine steps, each request's generation and its robot's execution, and the moment an urgent
request arrived while other plans were generating, drawn from what one run recorded.

Inputs, both written by the run itself (`make demo` puts them in build/demo/): the server's step trace
(``steps.csv``, its step_trace_csv parameter, core/step_trace.py) and the workload's events (``events.csv``, its
events_csv parameter, ros/fleet/workload_timeline.py). Both are stamped with the machine's monotonic clock.

    python -m tools.demo_timeline build/demo            # writes build/demo/timeline.png
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from timely_llm_ros.core.step_trace import StepRecord, read_step_trace

STATE_COLORS = {"queued": "#d0d0d0", "generating": "#3b6fb6", "suspended": "#f0a030"}
EXECUTED_COLOR = "#3a9a50"
URGENT_COLOR = "#c0392b"


@dataclass
class RequestTrack:
    """One goal as the workload saw it: its states (Plan feedback), segments generated and executed."""

    label: str                    # <agent>#<n>
    agent: str
    urgency: str = ""
    request_id: str = ""
    sent: float = 0.0
    states: list[tuple[float, str]] = field(default_factory=list)       # (t, state entered)
    segments: list[tuple[float, int]] = field(default_factory=list)     # (t, index) a segment was generated
    executed: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, index) on the robot
    result: str = ""
    ended: float | None = None

    def spans(self, until: float) -> list[tuple[float, float, str]]:
        """(start, end, state) for each state it was in, the last one up to its result (or ``until``)."""
        end = self.ended if self.ended is not None else until
        marks = self.states + [(end, "")]
        return [(t0, t1, s) for (t0, s), (t1, _) in zip(marks, marks[1:]) if t1 > t0]


@dataclass
class Contention:
    """The urgent request held back for the moment of contention, and what the others did while it waited."""

    request: RequestTrack
    arrival: float
    first_segment: float
    steps: int                          # engine steps that ran while it waited for its first segment
    suspended: dict[str, float]         # other request -> seconds it spent suspended meanwhile
    cut: list[str]                      # of those, the ones suspended in the middle of a segment


def read_events(path: str | Path) -> dict[str, RequestTrack]:
    """The requests of an events CSV, with their robots' execution matched by the server's request id."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [(float(r["t"]), r["agent"], r["request"], r["request_id"], r["kind"], r["value"])
                for r in csv.DictReader(f)]
    tracks: dict[str, RequestTrack] = {}
    robot_rows = []
    for t, agent, label, request_id, kind, value in rows:
        if kind == "robot":
            robot_rows.append((t, agent, request_id, value))
            continue
        track = tracks.setdefault(label, RequestTrack(label, agent))
        track.request_id = track.request_id or request_id
        if kind == "sent":
            track.sent, track.urgency = t, value
        elif kind == "contention":
            track.urgency = f"{track.urgency} (held)"
        elif kind == "state":
            track.states.append((t, value))
        elif kind == "segment":
            track.segments.append((t, int(value)))
        elif kind == "result":
            track.result, track.ended = value, t
    by_id = {t.request_id: t for t in tracks.values() if t.request_id}
    running: dict[str, tuple[float, str, int]] = {}   # agent -> (since, request id, segment) it runs now
    for t, agent, request_id, value in robot_rows:      # a segment still running when the recording ended is left out
        now = (request_id, int(value[5:])) if value.startswith("busy:") else None
        if agent in running and running[agent][1:] != now:
            since, rid, index = running.pop(agent)
            if rid in by_id:
                by_id[rid].executed.append((since, t, index))
        if now is not None and agent not in running:
            running[agent] = (t, *now)
    return tracks


def find_contention(tracks: dict[str, RequestTrack], steps: Sequence[StepRecord]) -> Contention | None:
    """The held urgent request (the first urgent one if none was held) and, while it waited for its first segment,
    the engine steps and the other requests' time suspended; None if no urgent request got a segment."""
    candidates = sorted((t for t in tracks.values() if t.urgency.startswith("urgent") and t.segments),
                        key=lambda t: (not t.urgency.endswith("(held)"), t.sent))
    if not candidates:
        return None
    urgent = candidates[0]
    arrival, first = urgent.sent, urgent.segments[0][0]
    suspended, cut = {}, []
    for other in tracks.values():
        if other is urgent:
            continue
        spans = other.spans(first)
        seconds = sum(min(t1, first) - max(t0, arrival) for t0, t1, s in spans
                      if s == "suspended" and t1 > arrival and t0 < first)
        if seconds >= 1e-3:
            suspended[other.label] = seconds
        for t0, _, s in spans:
            if s == "suspended" and arrival <= t0 <= first and not _segment_just_before(other, t0):
                cut.append(other.label)
                break
    ran = sum(1 for s in steps if arrival <= s.t <= first)
    return Contention(urgent, arrival, first, ran, suspended, cut)


def _segment_just_before(track: RequestTrack, t: float) -> bool:
    """Whether the request's last observation before ``t`` was a new segment of its own (suspended at a segment's
    end, not in the middle of one)."""
    before = [(ts, "segment") for ts, _ in track.segments if ts <= t] + [(ts, "state") for ts, _ in track.states
                                                                          if ts < t]
    return bool(before) and max(before)[1] == "segment"


def summary(contention: Contention | None, t0: float) -> str:
    """One paragraph saying what the picture shows."""
    if contention is None:
        return "no urgent request got a segment in this run: nothing to show about contention"
    c = contention
    waited = ", ".join(f"{label} {s * 1e3:.0f} ms" for label, s in sorted(c.suspended.items())) or "none"
    return (f"urgent request {c.request.label} arrived at {c.arrival - t0:.2f} s; its first segment came "
            f"{(c.first_segment - c.arrival) * 1e3:.0f} ms later, after {c.steps} engine steps; suspended meanwhile: "
            f"{waited}" + (f"; suspended mid-segment for it: {', '.join(c.cut)}" if c.cut else ""))


def plot_timeline(tracks: dict[str, RequestTrack], steps: Sequence[StepRecord], path: str | Path) -> Contention | None:
    """Write the picture (PNG) and return the contention it shows; needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ordered = sorted(tracks.values(), key=lambda t: (t.agent, t.sent))
    t0 = min(t.sent for t in ordered)
    end = max(max((e for _, e, _ in t.executed), default=t.ended or t.sent) for t in ordered)
    contention = find_contention(tracks, steps)
    fig, (zoom, whole) = plt.subplots(2, 1, figsize=(12, 8.5), gridspec_kw={"height_ratios": [1.1, 1]})
    if contention is not None:
        wait = max(contention.first_segment - contention.arrival, 0.02)
        window = (max(contention.arrival - 1.5 * wait - t0, 0.0), contention.first_segment + 2.0 * wait - t0)
    else:
        window = (0.0, min(end - t0, 2.0))

    for ax, (lo, hi), detail in ((zoom, window, True), (whole, (0.0, end - t0), False)):
        shown = [t for t in ordered if not detail or (t.sent - t0 <= hi and (t.ended or end) - t0 >= lo)]
        for y, track in enumerate(shown):
            for a, b, state in track.spans(end):
                if state in STATE_COLORS:
                    ax.barh(y - 0.17, b - a, left=a - t0, height=0.32, color=STATE_COLORS[state], linewidth=0)
            for a, b, _ in track.executed:
                ax.barh(y + 0.17, b - a, left=a - t0, height=0.32, color=EXECUTED_COLOR, edgecolor="white",
                        linewidth=0.6)
            ax.plot([s - t0 for s, _ in track.segments], [y - 0.17] * len(track.segments), "|", color="black",
                    markersize=11 if detail else 7)
        engine_y = len(shown) + 0.2
        for step in steps:
            if lo <= step.t - t0 <= hi or not detail:
                ax.barh(engine_y, step.engine_s, left=step.t - t0, height=0.6,
                        color="#555555" if step.prefills else "#999999", edgecolor="white", linewidth=0.3)
        labels = [f"{t.label} {t.urgency}" for t in shown] + ["engine steps"]
        ax.set_yticks(list(range(len(shown))) + [engine_y], labels, fontsize=8)
        for tick, track in zip(ax.get_yticklabels(), shown):
            if contention is not None and track is contention.request:
                tick.set_color(URGENT_COLOR)
                tick.set_fontweight("bold")
        if contention is not None:
            ax.axvline(contention.arrival - t0, color=URGENT_COLOR, linestyle="--", linewidth=1.2)
            ax.axvline(contention.first_segment - t0, color=URGENT_COLOR, linestyle=":", linewidth=1.2)
        ax.set_xlim(lo, hi)
        ax.set_ylim(-0.6, engine_y + 0.5)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    zoom.set_title("The moment of contention: " + _wrap(summary(contention, t0)), fontsize=9, loc="left")
    whole.axvspan(*window, color="#eeeeee", zorder=0)
    whole.set_title("The whole run (the shaded band is the moment above)", fontsize=9, loc="left")
    for ax in (zoom, whole):
        ax.set_xlabel("seconds since the first goal was sent", fontsize=8)
    legend = [Patch(color=c, label=s) for s, c in STATE_COLORS.items()] + [
        Patch(color=EXECUTED_COLOR, label="segment executing on the robot"),
        Patch(color="#555555", label="engine step with a prefill"), Patch(color="#999999", label="decode step"),
        plt.Line2D([], [], color="black", marker="|", linestyle="", markersize=9, label="segment generated"),
        plt.Line2D([], [], color=URGENT_COLOR, linestyle="--", label="urgent request arrives"),
        plt.Line2D([], [], color=URGENT_COLOR, linestyle=":", label="its first segment")]
    fig.legend(handles=legend, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return contention


def _wrap(text: str, width: int = 125) -> str:
    words, lines = text.split(" "), [""]
    for word in words:
        if len(lines[-1]) + len(word) + 1 > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.demo_timeline",
                                     description="Draw the demo's timeline from a run's steps.csv and events.csv.")
    parser.add_argument("folder", help="the run's folder (steps.csv from the server, events.csv from the workload)")
    parser.add_argument("--out", default="", help="the PNG to write (default: <folder>/timeline.png)")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    out = Path(args.out) if args.out else folder / "timeline.png"
    try:
        steps = read_step_trace(folder / "steps.csv")
        tracks = read_events(folder / "events.csv")
    except (OSError, KeyError, ValueError) as exc:
        print(f"cannot read the run in {folder}: {exc} (run `make demo` first: the server's step_trace_csv and the "
              "workload's events_csv write them)", file=sys.stderr)
        return 2
    if not tracks:
        print(f"{folder / 'events.csv'}: no goals recorded", file=sys.stderr)
        return 1
    contention = plot_timeline(tracks, steps, out)
    print(summary(contention, min(t.sent for t in tracks.values())))
    print(f"timeline: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
