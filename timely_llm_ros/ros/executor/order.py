"""Which queued segment a robot runs next (no ROS types; the executor base node holds one).

Requests run in order of arrival, each request's segments in index order. Segment k of a request waits for
segment k-1 of the same request (up to ``gap_timeout_s``, in case k-1 was never sent or got lost), so segments
sent in a burst run in plan order even when their goals arrive in another order.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(order=True)
class Waiting:
    rank: int
    index: int
    since: float = field(compare=False)
    request_id: str = field(compare=False)
    item: Any = field(compare=False)


class PlanOrder:
    """Waiting segments in plan order; not thread-safe (the caller holds its lock)."""

    def __init__(self, gap_timeout_s: float = 1.0, remember: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gap_timeout_s = gap_timeout_s
        self._clock = clock
        self._remember = remember
        self._rank: OrderedDict[str, int] = OrderedDict()   # request id -> arrival rank
        self._next_rank = 0
        self._last_done: dict[str, int] = {}
        self.waiting: list[Waiting] = []

    def known(self, request_id: str) -> bool:
        """True when a segment of this request was seen recently (running, queued or done)."""
        return request_id in self._rank

    def add(self, request_id: str, index: int, item: Any) -> None:
        rank = self._rank.get(request_id)
        if rank is None:
            rank = self._rank[request_id] = self._next_rank
            self._next_rank += 1
            while len(self._rank) > self._remember:
                old, _ = self._rank.popitem(last=False)
                self._last_done.pop(old, None)
        self.waiting.append(Waiting(rank, index, self._clock(), request_id, item))

    def remove(self, item: Any) -> bool:
        for i, w in enumerate(self.waiting):
            if w.item is item:
                del self.waiting[i]
                return True
        return False

    def pop_next(self) -> Any | None:
        """The first waiting segment in plan order, if its predecessor is done (or overdue); else None."""
        if not self.waiting:
            return None
        first = min(self.waiting)
        prev_done = first.index == 0 or self._last_done.get(first.request_id, -1) >= first.index - 1 \
            or self._clock() - first.since > self.gap_timeout_s
        if not prev_done:
            return None
        self.waiting.remove(first)
        return first.item

    def done(self, request_id: str, index: int) -> None:
        """The segment finished (in any way): its successor may run."""
        self._last_done[request_id] = max(index, self._last_done.get(request_id, -1))

    def __len__(self) -> int:
        return len(self.waiting)
