"""plugins/filter/engine_service_rollout.py: the unit files kept for a rollback, the units a change rewrites;
and engine_service_seconds_problem (engine_service_checks.py), engine_service_tensor_parallel
(engine_service_placement.py)."""

from __future__ import annotations

import base64

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.engines.plugins.filter import engine_service_checks as checks
from ansible_collections.llmfleet.engines.plugins.filter import engine_service_placement as placement
from ansible_collections.llmfleet.engines.plugins.filter import engine_service_rollout as rollout


def read(unit, text=None):
    item = {"unit": unit, "text": "x"}
    if text is None:
        return {"item": item, "failed": True, "msg": "file not found"}
    return {"item": item, "content": base64.b64encode(text.encode()).decode(), "source": "/u/" + unit}


def test_saved_units_keep_the_text_and_none_for_a_missing_file():
    assert rollout.engine_service_saved_units([read("a.service", "[Unit]\n"), read("b.service")]) == {
        "a.service": "[Unit]\n", "b.service": None}


def test_changed_units_are_the_missing_and_the_different_in_the_units_order():
    units = [{"unit": "a.service", "text": "same\n"}, {"unit": "b.service", "text": "new\n"},
             {"unit": "c.service", "text": "c\n"}]
    results = [read("c.service"), read("b.service", "old\n"), read("a.service", "same\n")]
    assert rollout.engine_service_changed_units(results, units) == ["b.service", "c.service"]
    # a trailing newline is a difference (what systemd reads is what was written)
    assert rollout.engine_service_changed_units([read("a.service", "same")], units[:1]) == ["a.service"]


@pytest.mark.parametrize("bad", [[{"item": "a.service", "content": ""}], ["not a dict"]])
def test_results_that_are_not_a_looped_slurp_of_units_are_refused(bad):
    with pytest.raises(AnsibleFilterError):
        rollout.engine_service_saved_units(bad)


@pytest.mark.parametrize("value, least, ok", [
    (0, 0, True), ("600", 0, True), (59, 60, False), (-1, 0, False), ("1.5", 0, False), (True, 0, False),
    (None, 0, False), ("60\n", 60, True),
])
def test_seconds_problem(value, least, ok):
    problems = checks.engine_service_seconds_problem(value, "engine_service_lock_wait", least)
    assert (problems == []) is ok
    if not ok:
        assert problems[0].startswith("variable engine_service_lock_wait is ")
        assert problems[0].endswith("allowed: a whole number of seconds, %d or more" % least)


@pytest.mark.parametrize("args, size", [
    (None, 1), ([], 1), (["--tensor-parallel-size", "4"], 4), (["--tensor-parallel-size=2"], 2), (["-tp", 8], 8),
    (["--max-model-len", "4096"], 1), (["--tensor-parallel-size", "two"], 0), (["--tensor-parallel-size"], 0),
    (["--tensor_parallel_size", "2"], 2), (["-tp=3"], 3),
])
def test_tensor_parallel_size(args, size):
    assert placement.engine_service_tensor_parallel({"name": "m", "args": args}) == size


@pytest.mark.parametrize("gpus, args, size", [
    ([0, 1], [], 2), ([0, 1, 2, 3], ["--pipeline-parallel-size", "2"], 2), ([0, 1, 2, 3], ["-pp", "2", "-dp", "2"], 1),
    ([0, 1, 2], ["-pp", "2"], 3), ([0, 1], ["-tp", "1"], 1),
])
def test_tensor_parallel_size_of_a_model_with_gpus(gpus, args, size):
    """Without --tensor-parallel-size in its args, a model on gpus runs on all of them (the role passes the size)."""
    assert placement.engine_service_tensor_parallel({"name": "m", "gpus": gpus, "args": args}) == size
