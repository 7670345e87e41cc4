"""vLLM's own v1 scheduler, restricted each step to the generations our policy chose (``scheduler_cls``).

vLLM schedules every running request every step; TimelyLLM's policies decide which generations step
(SLICE, segment-boundary suspension, preemption). This subclass hides the requests outside the chosen
set from vLLM's queues for the duration of one ``schedule()`` call, so vLLM plans the step (block
allocation, prefix-cache lookups, chunking, its own preemption) over exactly the chosen set, and puts
the others back untouched afterwards. A hidden running request keeps its KV blocks: parking it is the
suspension, and stepping it again is the resume (its next decode step, no prefill).

When the chosen set needs more KV blocks than are free, parked requests are preempted through vLLM's
own ``_preempt_request`` (blocks freed, recompute on resume, the prefix cache usually hits), least
recently suspended first. Per-step cost: two passes over the running list and the waiting queues
(O(requests held), microseconds for tens of requests), plus the block estimate for the chosen set.
"""
from __future__ import annotations

import time

from vllm.v1.core.sched.scheduler import Scheduler


class ChosenSetScheduler(Scheduler):
    """Schedules only the request ids in ``chosen`` (None = vLLM's usual behaviour, everything)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.chosen: set[str] | None = None
        self.park_order: dict[str, int] = {}     # request id -> suspension sequence (lower = older)
        self.preempted_parked: int = 0           # parked requests preempted to make room (KV dropped)

    def schedule(self, *args, **kwargs):
        chosen = self.chosen
        if chosen is None:
            return super().schedule(*args, **kwargs)
        parked = [r for r in self.running if r.request_id not in chosen]
        if parked:
            self.running = [r for r in self.running if r.request_id in chosen]
        hidden = []
        for queue in (self.waiting, self.kv_holding_waiting):
            out = [r for r in queue if r.request_id not in chosen]
            if out:
                queue.remove_requests(out)
                hidden.append((queue, out))
        try:
            parked, preempted = self._make_room(parked)
            if preempted:                        # back in vLLM's waiting queue, but not chosen: hide them too
                self.waiting.remove_requests(preempted)
                hidden.append((self.waiting, preempted))
            return super().schedule(*args, **kwargs)
        finally:
            self.running.extend(parked)
            for queue, out in hidden:
                for request in out:
                    queue.add_request(request)

    def blocks_held(self, request_id: str) -> int:
        """KV blocks a request holds now (0 when it holds none)."""
        try:
            return sum(len(g) for g in self.kv_cache_manager.get_block_ids(request_id))
        except (KeyError, AttributeError):
            return 0

    def _make_room(self, parked: list) -> tuple[list, list]:
        """Preempt parked requests (least recently suspended first) until the chosen set's next step fits."""
        if not parked:
            return parked, []
        pool = self.kv_cache_manager.block_pool
        size = self.cache_config.block_size
        need = 0
        for request in list(self.running) + list(self.waiting) + list(self.kv_holding_waiting):
            need += max(0, -(-(request.num_tokens + 1) // size) - self.blocks_held(request.request_id))
        if pool.get_num_free_blocks() >= need:
            return parked, []
        order = sorted(parked, key=lambda r: self.park_order.get(r.request_id, 0))
        preempted = []
        while order and pool.get_num_free_blocks() < need:
            victim = order.pop(0)
            self._preempt_request(victim, time.monotonic())
            preempted.append(victim)
            self.preempted_parked += 1
        return [r for r in parked if r not in preempted], preempted
