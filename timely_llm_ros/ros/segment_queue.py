"""The order in which one robot runs the segments it receives (no ROS types; used by the executor node)."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable


class SegmentQueue:
    """One segment at a time; requests in order of arrival, each request's segments in index order.

    Segment k of a request waits for segment k-1 of the same request (up to `gap_timeout_s`, in case
    k-1 was never sent or got lost), so segments sent in a burst run in plan order even when their
    goals are handled by different threads in another order.
    """

    def __init__(self, gap_timeout_s: float = 1.0, remember: int = 1000) -> None:
        self._cv = threading.Condition()
        self._busy = False
        self._order: OrderedDict[str, int] = OrderedDict()   # request id -> arrival rank
        self._last_done: dict[str, int] = {}
        self._waiting: set[tuple[int, int]] = set()
        self._gap_timeout_s = gap_timeout_s
        self._remember = remember
        self._rank = 0

    def acquire(self, request_id: str, index: int, cancelled: Callable[[], bool]) -> bool:
        """Block until it is this segment's turn; False if cancelled meanwhile."""
        with self._cv:
            rank = self._order.get(request_id)
            if rank is None:
                rank = self._order[request_id] = self._rank
                self._rank += 1
                while len(self._order) > self._remember:
                    old, _ = self._order.popitem(last=False)
                    self._last_done.pop(old, None)
            key = (rank, index)
            self._waiting.add(key)
            since = time.monotonic()
            while True:
                if cancelled():
                    self._waiting.discard(key)
                    self._cv.notify_all()
                    return False
                prev_done = index == 0 or self._last_done.get(request_id, -1) >= index - 1 \
                    or time.monotonic() - since > self._gap_timeout_s
                if not self._busy and prev_done and key == min(self._waiting):
                    self._waiting.discard(key)
                    self._busy = True
                    return True
                self._cv.wait(0.02)

    def release(self, request_id: str, index: int) -> None:
        """The segment is finished (or failed): let the next one run."""
        with self._cv:
            self._busy = False
            self._last_done[request_id] = max(index, self._last_done.get(request_id, -1))
            self._cv.notify_all()
