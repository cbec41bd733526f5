"""plugins/filter/engine_service_stage.py and engine_service_rollout.py: the locks kept from a look-up, the commits staging keeps, the
readiness line. Where a filter replaced a Jinja expression of the role's task files, the test renders
that expression (as it was) beside the filter: the same text comes out."""

from __future__ import annotations

import base64

import jinja2
import pytest

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

STAGE = filter_plugin("engine_service_stage")
ROLLOUT = filter_plugin("engine_service_rollout")
AnsibleFilterError = filter_error()
A, B, C = "a" * 40, "b" * 40, "c" * 40

# main.yml's readiness message before it became engine_service_readiness (the folded scalar's newlines
# are spaces)
OLD_READINESS = (
    "{{ inventory_hostname }} readiness: {% for gate in __engine_service_gates %}{{ gate.unit }} ({{ gate.environment }}, "
    "{{ gate.stage }}) {{ 'ready, %.1f s after the unit started' % gate.ready_s if gate.ready and gate.ready_s is not none"
    " else 'not ready' }}{{ ', one-token completion %.0f ms' % gate.completion_ms if gate.completion_ms is not none else ''"
    " }}{{ '; ' if not loop.last else '' }}{% endfor %}")


def gate(unit, ready=True, ready_s=1.25, completion_ms=None, stage="rollout"):
    return {"unit": unit, "environment": "0.11.2-cu129", "stage": stage, "ready": ready, "ready_s": ready_s,
            "health_s": 0.5, "completion_ms": completion_ms, "tries": 1, "at": "now"}


@pytest.mark.parametrize("gates", [
    [gate("llmfleet-vllm-a.service")],
    [gate("llmfleet-vllm-a.service", completion_ms=12.6), gate("llmfleet-vllm-b.service", ready=False, ready_s=None)],
    [gate("u1", ready=False, ready_s=3.0, completion_ms=None), gate("u2", ready=True, ready_s=None, completion_ms=0.4),
     gate("u3", ready_s=0.04, completion_ms=99.5, stage="steady")],
])
def test_readiness_tells_what_the_old_expression_told(gates):
    old = jinja2.Environment().from_string(OLD_READINESS).render(inventory_hostname="n1", __engine_service_gates=gates)
    assert ROLLOUT.engine_service_readiness(gates, "n1") == old


def test_readiness_line():
    line = ROLLOUT.engine_service_readiness([gate("a.service", completion_ms=12.6), gate("b.service", ready=False)], "n1")
    assert line == ("n1 readiness: a.service (0.11.2-cu129, rollout) ready, 1.2 s after the unit started, one-token"
                    " completion 13 ms; b.service (0.11.2-cu129, rollout) not ready")


def test_readiness_refuses_a_record_without_its_fields():
    with pytest.raises(AnsibleFilterError, match="'unit'"):
        ROLLOUT.engine_service_readiness([{"ready": True, "ready_s": 1, "completion_ms": None}], "n1")
    with pytest.raises(AnsibleFilterError, match="a list"):
        ROLLOUT.engine_service_readiness("gates", "n1")


def test_kept_locks_add_the_resolved_and_keep_the_known():
    known = {"org/a@v1": {"commit": A}, "org/b@main": {"commit": B}}
    results = [{"item": {"key": "org/b@main"}, "lock": {"commit": C}, "changed": False},
               {"item": {"key": "org/c@v2"}, "lock": {"commit": A}},
               {"item": {"key": "org/d@v3"}, "skipped": True}]
    assert STAGE.engine_service_kept_locks(known, results) == {
        "org/a@v1": {"commit": A}, "org/b@main": {"commit": C}, "org/c@v2": {"commit": A}}
    assert known == {"org/a@v1": {"commit": A}, "org/b@main": {"commit": B}}, "the input was changed"
    assert STAGE.engine_service_kept_locks({}, []) == {}


def test_kept_locks_refuse_what_is_not_a_lookup():
    with pytest.raises(AnsibleFilterError, match="'key'"):
        STAGE.engine_service_kept_locks({}, [{"item": {}, "lock": {}}])
    with pytest.raises(AnsibleFilterError, match="a mapping"):
        STAGE.engine_service_kept_locks([], [])
    with pytest.raises(AnsibleFilterError, match="a list"):
        STAGE.engine_service_kept_locks({}, {"results": []})


def unit_read(text, source="/etc/systemd/system/llmfleet-vllm-x.service"):
    return {"content": base64.b64encode(text.encode()).decode(), "source": source, "item": source}


def test_in_use_is_the_pinned_commits_and_what_the_units_serve_sorted_once():
    pins = [{"key": "org/a@v1", "repo": "org/a"}, {"key": "org/b@main", "repo": "org/b"}]
    locks = {"org/a@v1": {"commit": C}, "org/b@main": {"commit": A}, "org/z@old": {"commit": "f" * 40}}
    reads = [unit_read("ExecStart=/x/vllm serve org/a --revision %s --tokenizer-revision %s\n" % (B, B)),
             unit_read("ExecStart=/x/vllm serve org/b --revision %s\n" % A),
             unit_read("ExecStart=/x/vllm serve org/q --revision main --revision %s\n" % ("A" * 40))]
    assert STAGE.engine_service_in_use(pins, locks, reads) == [A, B, C]
    assert STAGE.engine_service_in_use([], {}, []) == []


def test_in_use_names_a_pin_without_a_lock():
    with pytest.raises(AnsibleFilterError, match="org/a@v1 has no lock"):
        STAGE.engine_service_in_use([{"key": "org/a@v1"}], {}, [])
    with pytest.raises(AnsibleFilterError, match="'content'"):
        STAGE.engine_service_in_use([], {}, [{"failed": True}])
