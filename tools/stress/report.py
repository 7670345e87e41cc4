"""Score a phase's GoalRecords into one table row, and print the table."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from goals import CODE_NAMES


@dataclass
class Row:
    phase: str
    goals: int = 0
    no_response: int = 0
    rejected: int = 0
    no_result: int = 0
    unexpected: int = 0
    crashes: int = 0
    left_running: int = -1
    rss_before: float = math.nan
    rss_after: float = math.nan
    deliver_p50_ms: float = math.nan
    deliver_p99_ms: float = math.nan
    in_server_p99_ms: float = math.nan
    seg_wait_p99_s: float = math.nan        # a plan's later segments: start of k minus end of k-1
    first_wait_p99_s: float = math.nan      # segment 0: start minus the goal's sending (queueing + generation)
    codes: Counter = field(default_factory=Counter)
    unexpected_kinds: Counter = field(default_factory=Counter)
    unexpected_examples: list = field(default_factory=list)   # the first few: (request id, robot, time, message)

    @property
    def ok(self) -> bool:
        return not (self.no_response or self.rejected or self.no_result or self.unexpected or self.crashes
                    or self.left_running != 0)


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def score(phase: str, records: list, timing: dict) -> Row:
    """Counts and codes from the records; latencies from the server's and executors' timing lines (one
    monotonic clock on the box). Delivery: the server publishes a segment's Plan feedback -> the executor's
    ExecuteSegment goal callback has it; in server: published -> the goal request handed to the middleware."""
    row = Row(phase, goals=len(records))
    deliver, in_server, waits, first_waits = [], [], [], []
    for r in records:
        if r.accepted is None:
            row.no_response += 1
        elif r.accepted is False:
            row.rejected += 1
        elif r.done is None:
            row.no_result += 1
        else:
            row.codes[r.code] += 1
            if r.code not in r.expect:
                row.unexpected += 1
                row.unexpected_kinds[f"{r.kind}->{CODE_NAMES.get(r.code, r.code)}"] += 1
                if len(row.unexpected_examples) < 5:
                    row.unexpected_examples.append((r.request_id, f"{r.fields.get('agent_id', '?')} {r.request_id} "
                                                    f"sent at {r.sent:.3f}: {CODE_NAMES.get(r.code, r.code)}: "
                                                    f"{r.message}"))
        for index in sorted(r.segment_fb):
            ev = timing.get((r.request_id, index), {})
            if "received" in ev and "published" in ev:
                deliver.append(ev["received"] - ev["published"])
            if "sent" in ev and "published" in ev:
                in_server.append(ev["sent"] - ev["published"])
            prev_end = timing.get((r.request_id, index - 1), {}).get("ended")
            if "started" in ev and index == 0:
                first_waits.append(ev["started"] - r.sent)
            elif "started" in ev and prev_end is not None:
                waits.append(ev["started"] - prev_end)
    row.deliver_p50_ms, row.deliver_p99_ms = 1000 * pct(deliver, 50), 1000 * pct(deliver, 99)
    row.in_server_p99_ms = 1000 * pct(in_server, 99)
    row.seg_wait_p99_s = pct(waits, 99)
    row.first_wait_p99_s = pct(first_waits, 99)
    return row


def _codes(c: Counter) -> str:
    return " ".join(f"{CODE_NAMES.get(k, k)}:{v}" for k, v in sorted(c.items()))


def _num(x: float, digits: int) -> str:
    """A table cell: "-" for what a phase does not measure (nan)."""
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def table(rows: list[Row]) -> str:
    head = ("| phase | goals | no response | rejected | no result | unexpected code | server crash | left running "
            "| RSS before->after (MiB) | delivery p50/p99 (ms) (in server p99) | wait p99 (s): segment 0 / later | result |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r.phase} | {r.goals} | {r.no_response} | {r.rejected} | {r.no_result} | {r.unexpected} "
                     f"| {r.crashes} | {r.left_running} | {_num(r.rss_before, 0)}->{_num(r.rss_after, 0)} "
                     f"| {_num(r.deliver_p50_ms, 1)}/{_num(r.deliver_p99_ms, 1)} ({_num(r.in_server_p99_ms, 1)}) "
                     f"| {_num(r.first_wait_p99_s, 2)} / {_num(r.seg_wait_p99_s, 2)} "
                     f"| {'ok' if r.ok else 'FAIL'} |")
    lines.append("")
    lines.append("error codes by phase:")
    for r in rows:
        lines.append(f"  {r.phase}: {_codes(r.codes)}")
        if r.unexpected_kinds:
            lines.append("    unexpected (category->code): "
                         + ", ".join(f"{k} x{v}" for k, v in r.unexpected_kinds.most_common()))
            lines += [f"      {m}" for _, m in r.unexpected_examples]
    return "\n".join(lines)
