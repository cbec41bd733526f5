"""plugins/filter/engine_service_rollout.py's engine_service_rollout_may: the rollout's steps read from its one
state fact (roll.yml's __engine_service_rollout). Each step's answer is checked against the condition
roll.yml wrote with its six flags before the state was one fact, rendered as it was, for every
reachable combination of those flags; then the states it refuses."""

from __future__ import annotations

import itertools

import jinja2
import pytest

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

ROLLOUT = filter_plugin("engine_service_rollout")
AnsibleFilterError = filter_error()
may = ROLLOUT.engine_service_rollout_may

# roll.yml's conditions on its flags, as they were (the parts that read the user's settings or the
# pending environment stay in the task files)
OLD = {
    "drain_tasks": "not __engine_service_gateway_drain_failed | default(false)",
    "restart": "not __engine_service_drain_failed | default(false)",
    "undrain": "not __engine_service_drain_failed | default(false) and"
               " (not __engine_service_rolled_back or __engine_service_rollback_served | default(false))",
    "record": "not __engine_service_drain_failed | default(false) and not __engine_service_rolled_back",
    "prune": "not __engine_service_drain_failed | default(false) and not __engine_service_rolled_back"
             " and (engine_service_undrain_tasks == '' or __engine_service_undrained | default(false))"
             " and not __engine_service_gateway_unready | default(false)",
}


def start(**changes):
    """roll.yml's starting state (with undrain tasks set), changed."""
    state = {"drain": "ok", "drain_why": "", "undo_why": "", "failure": "", "rolled_back": False, "rollback_why": "",
             "rollback_served": False, "gateway_unready": False, "undrained": False}
    state.update(changes)
    return state


def old_flags():
    """Every combination of the old flags that roll.yml could reach (a gateway drain failure is a drain failure;
    a rollback that served is a rollback), with or without undrain tasks; unset flags left undefined as they were."""
    for drain, rolled, served, undrained, unready, tasks in itertools.product(
            ("ok", "tasks", "gateways"), *[(False, True)] * 5):
        if served and not rolled:
            continue
        flags = {"__engine_service_rolled_back": rolled, "engine_service_undrain_tasks": "undrain.yml" if tasks else ""}
        if drain != "ok":
            flags["__engine_service_drain_failed"] = True
        if drain == "gateways":
            flags["__engine_service_gateway_drain_failed"] = True
        if served:
            flags["__engine_service_rollback_served"] = True
        if undrained:
            flags["__engine_service_undrained"] = True
        if unready:
            flags["__engine_service_gateway_unready"] = True
        state = start(drain={"ok": "ok", "tasks": "failed_in_tasks", "gateways": "failed_on_gateways"}[drain],
                      rolled_back=rolled, rollback_served=served, gateway_unready=unready,
                      # roll.yml starts it as engine_service_undrain_tasks == ''
                      undrained=undrained or not tasks)
        yield flags, state


def render_old(condition, flags):
    return jinja2.Environment().from_string("{{ %s }}" % condition).render(**flags) == "True"


@pytest.mark.parametrize("step", sorted(OLD))
def test_each_step_is_taken_where_the_old_flags_took_it(step):
    cases = list(old_flags())
    assert len(cases) == 72
    taken = 0
    for flags, state in cases:
        assert may(state, step) is render_old(OLD[step], flags), (step, flags, state)
        taken += may(state, step)
    # each step is taken in some states and not in others
    assert 0 < taken < len(cases)


def test_the_protections_read_from_the_state():
    # a failed drain stops nothing, undrains nothing (its rescue readies what it drained), records and prunes nothing
    for drain in ("failed_on_gateways", "failed_in_tasks"):
        failed = start(drain=drain, undrained=True)
        assert [s for s in ("restart", "undrain", "record", "prune") if may(failed, s)] == []
    # the drain tasks' own failure keeps their block's condition true, so that its rescue runs
    assert may(start(drain="failed_in_tasks"), "drain_tasks") and not may(start(drain="failed_on_gateways"), "drain_tasks")
    # a rollback that served goes back in rotation but is neither recorded nor pruned
    rolled = start(rolled_back=True, rollback_served=True, undrained=True)
    assert may(rolled, "undrain") and not may(rolled, "record") and not may(rolled, "prune")
    assert not may(start(rolled_back=True), "undrain")
    # no prune while the undrain tasks have not put the node back, or the gateways have not
    assert not may(start(), "prune") and may(start(undrained=True), "prune")
    assert not may(start(undrained=True, gateway_unready=True), "prune")
    assert may(start(undrained=True, gateway_unready=True), "record")


@pytest.mark.parametrize("state, step, words", [
    (None, "prune", "must be the dict roll.yml starts"),
    ({}, "prune", "lacks drain, drain_why"),
    (start(drain="failed"), "restart", "drain is 'failed'; it must be one of ok, failed_on_gateways, failed_in_tasks"),
    (start(rolled_back="True"), "record", "rolled_back is 'True'; it must be true or false"),
    (start(), "stop", "the step is 'stop'; it must be one of drain_tasks, restart, undrain, record, prune"),
])
def test_a_state_or_step_it_does_not_know_is_refused(state, step, words):
    with pytest.raises(AnsibleFilterError, match="engine_service_rollout_may") as err:
        may(state, step)
    assert words in str(err.value)
