"""Property test of the robot's queue (core/execution/robot_queue.py): under any order of arrivals, refusals on
arrival, cancels of waiting segments, completions and preemptions, the robot never jams (once every segment has
arrived and every verdict has been given, whatever waits runs), runs each plan's segments in index order and never
goes back to a plan it left.

The schedule imitates the executor (ros/executor/robot_plans.py): a segment refused on arrival by the queue
(``refusal``) ends without ``end``; one refused for what it says (an unknown skill, a text that does not parse) ends
STOPPED later, when its verdict is answered; so do cancelled waiting segments, and a preempted plan's waiting ones
(PREEMPTED)."""
from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely_llm_ros.core.execution import Ended, RobotQueue

OUTCOMES = (Ended.DONE, Ended.DONE, Ended.STOPPED, Ended.RETURNED, Ended.PREEMPTED)


@dataclass
class Robot:
    """A RobotQueue driven like the executor drives it, with what it ran."""

    queue: RobotQueue
    plans: dict[str, int]                       # plan -> segments it has
    sent: dict[str, int] = field(default_factory=dict)          # plan -> segments that arrived so far
    verdicts: list[tuple[str, int, Ended]] = field(default_factory=list)   # ends still to be reported
    ran: list[tuple[str, int]] = field(default_factory=list)

    def arrive(self, plan: str, refused_for_text: bool, preempts: bool) -> None:
        index = self.sent.get(plan, 0)
        if index >= self.plans[plan]:
            return
        self.sent[plan] = index + 1
        if self.queue.refusal(plan, index) is not None:
            return                                          # NOT_RUN / PREEMPTED at once: no end()
        if refused_for_text:
            self.verdicts.append((plan, index, Ended.STOPPED))
            return
        arrival = self.queue.arrive(plan, index, (plan, index), preempts)
        assert arrival.refused is None
        self.verdicts += [(p, i, Ended.PREEMPTED) for p, i in arrival.preempted]

    def start(self) -> None:
        item = self.queue.next()
        if item is not None:
            self.ran.append(item)

    def finish(self, outcome: Ended) -> None:
        running = self.queue.running
        if running is not None:
            self._end(running.plan, running.index, outcome)

    def cancel(self, k: int) -> None:
        if self.queue.waiting:
            q = self.queue.waiting[k % len(self.queue.waiting)]
            self.queue.remove(q.item)
            self.verdicts.append((q.plan, q.index, Ended.STOPPED))

    def answer(self, k: int) -> None:
        if self.verdicts:
            self._end(*self.verdicts.pop(k % len(self.verdicts)))

    def _end(self, plan: str, index: int, ended: Ended) -> None:
        orphans = self.queue.end(plan, index, ended)
        assert all(p == plan and i > index for p, i in orphans)


action = st.one_of(
    st.tuples(st.just("arrive"), st.integers(0, 2), st.booleans(), st.booleans()),
    st.tuples(st.just("start")),
    st.tuples(st.just("finish"), st.sampled_from(OUTCOMES)),
    st.tuples(st.just("cancel"), st.integers(0, 7)),
    st.tuples(st.just("answer"), st.integers(0, 7)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=st.sampled_from(["queue", "urgent_preempts"]), sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       actions=st.lists(action, max_size=60))
def test_no_order_of_refusals_and_completions_jams_the_robot(rule, sizes, actions):
    plans = {f"p{i}": n for i, n in enumerate(sizes)}
    names = sorted(plans)
    robot = Robot(RobotQueue(rule), plans)
    for act in actions:
        if act[0] == "arrive":
            robot.arrive(names[act[1] % len(names)], act[2], act[3])
        elif act[0] == "start":
            robot.start()
        elif act[0] == "finish":
            robot.finish(act[1])
        elif act[0] == "cancel":
            robot.cancel(act[1])
        else:
            robot.answer(act[1])
    # every segment arrives, every verdict is answered, the robot runs what it may: nothing is left waiting
    for name in names:
        while robot.sent.get(name, 0) < plans[name]:
            robot.arrive(name, False, False)
    robot.finish(Ended.DONE)
    for _ in range(sum(sizes) + len(robot.verdicts) + 1):
        while robot.verdicts:
            robot.answer(0)
        robot.start()
        robot.finish(Ended.DONE)
    assert robot.queue.running is None
    assert not robot.queue.waiting, [(q.plan, q.index) for q in robot.queue.waiting]

    for name in names:     # each plan ran in index order
        indices = [i for p, i in robot.ran if p == name]
        assert indices == sorted(set(indices))
    order = [p for p, _ in robot.ran]   # a plan the robot left never runs again
    runs = [p for k, p in enumerate(order) if k == 0 or order[k - 1] != p]
    assert len(runs) == len(set(runs)), order


def test_a_segment_refused_on_arrival_while_an_earlier_one_waits_does_not_block_it():
    """The case that jammed: a1 is refused (its text names an unknown skill) while a0 waits behind plan b."""
    q = RobotQueue()
    q.arrive("b", 0, "b0")
    assert q.next() == "b0"
    q.arrive("a", 0, "a0")
    q.end("a", 1, Ended.STOPPED)
    q.end("b", 0, Ended.DONE)
    assert q.next() == "a0"
    q.end("a", 0, Ended.DONE)
    assert q.arrive("a", 1, "a1 again").refused is not None   # the plan is past segment 1 here
    assert not q.waiting and q.running is None


def test_a_segment_sent_twice_is_refused_at_once_and_the_robot_goes_on():
    """A client that sends the same segment twice (same plan, same index): the second copy used to wait for a turn
    it could never get (its plan was past it once the first copy ended), holding the robot from every other plan."""
    q = RobotQueue()
    q.arrive("a", 0, "a0")
    refused = q.arrive("a", 0, "a0 again").refused
    assert refused is not None and refused.ended == Ended.NOT_RUN and "sent twice" in refused.message
    assert q.next() == "a0"
    assert q.arrive("a", 0, "a0 a third time").refused is not None     # while it runs, too
    q.arrive("b", 0, "b0")
    q.end("a", 0, Ended.DONE)
    assert q.next() == "b0"
