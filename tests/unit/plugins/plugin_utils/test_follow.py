"""plugin_utils/_follow.py's loop, which engine_node_follow and engine_service_follow share: every job asked at
once and then every interval from the start (however long the questions take), the caller's work done after each
round while some job still runs, an end when every job has ended (finished, or failed as async_status fails for a
job it cannot find), and a bounded wait. Time is a clock the test moves: each question and each sleep advance it."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.plugin_utils._follow import follow


class Node:
    """Background jobs that end at given times, asked through async_status's answers, on a clock that each
    question moves by ``ask_cost`` seconds and each sleep by what was asked."""

    def __init__(self, ends, ask_cost=0.0):
        self.ends = ends  # jid -> (time it ends, its result), time None: never
        self.now = 100.0
        self.ask_cost = ask_cost
        self.asked = []  # (time, jid)
        self.slept = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.slept.append(seconds)
        self.now += seconds

    def ask(self, jid):
        self.asked.append((self.now, jid))
        self.now += self.ask_cost
        if jid not in self.ends:  # as async_status answers for a job file that is not there
            return {"failed": True, "finished": True, "msg": "could not find job", "ansible_job_id": jid}
        when, result = self.ends[jid]
        if when is None or self.now < when:
            return {"started": True, "finished": False, "ansible_job_id": jid}
        return dict(result, finished=True, ansible_job_id=jid)


def run(node, jids, interval=15, timeout=3600):
    calls = []

    def each_interval(running, elapsed, rounds):
        calls.append((list(running), round(elapsed, 3), rounds))

    return follow(node.ask, jids, interval, timeout, each_interval, clock=node.clock, sleep=node.sleep), calls


def test_every_job_is_followed_until_the_last_ends_and_the_work_runs_once_per_interval():
    node = Node({"a": (130.0, {"changed": True}), "b": (170.0, {"failed": True, "msg": "sha256 differs"})})
    (ended, running), calls = run(node, ["a", "b"])
    assert running == []
    # a failed job has ended too: the caller's collect step reports it
    assert ended["a"]["changed"] is True and ended["b"]["msg"] == "sha256 differs"
    # the work after each round while some job runs: at once (round 0), then every 15 s, with what still runs
    assert calls == [(["a", "b"], 0.0, 0), (["a", "b"], 15.0, 1), (["b"], 30.0, 2), (["b"], 45.0, 3), (["b"], 60.0, 4)]
    # a job that ended is not asked again; the last round finds b ended at 175 and calls nothing more
    assert [t for t, j in node.asked if j == "a"] == [100.0, 115.0, 130.0]
    assert node.asked[-1] == (175.0, "b")


def test_jobs_that_ended_before_are_seen_at_once_without_an_interval():
    node = Node({"a": (50.0, {"rc": 0}), "gone": None})
    node.ends.pop("gone")
    (ended, running), calls = run(node, ["a", "gone"])
    assert running == [] and calls == [] and node.slept == []
    assert ended["gone"]["msg"] == "could not find job"


def test_the_interval_counts_from_the_start_however_long_the_questions_take():
    node = Node({"a": (None, None), "b": (None, None)}, ask_cost=2.0)
    (_ended, running), calls = run(node, ["a", "b"], interval=10, timeout=45)
    # four seconds of questions each round: the sleeps make up the rest, the rounds stay 10 s apart
    assert [t for t, j in node.asked if j == "a"] == [100.0, 110.0, 120.0, 130.0, 140.0, 150.0]
    assert node.slept == [6.0] * 5
    assert [c[1] for c in calls] == [4.0, 14.0, 24.0, 34.0, 44.0]
    # given up once the timeout passed (after the round that found it passed): both still running, no work then
    assert running == ["a", "b"] and node.now == 154.0


def test_questions_slower_than_the_interval_never_sleep_a_negative_time():
    node = Node({"a": (None, None)}, ask_cost=20.0)
    (_ended, running), _calls = run(node, ["a"], interval=5, timeout=50)
    assert running == ["a"] and node.slept and all(s == 0.0 for s in node.slept)


def test_what_the_work_raises_ends_the_follow():
    node = Node({"a": (None, None)})

    class Lost(Exception):
        pass

    def each_interval(_running, _elapsed, rounds):
        if rounds == 2:
            raise Lost("another run took the lock over")

    with pytest.raises(Lost):
        follow(node.ask, ["a"], 15, 3600, each_interval, clock=node.clock, sleep=node.sleep)
    assert len(node.asked) == 3
