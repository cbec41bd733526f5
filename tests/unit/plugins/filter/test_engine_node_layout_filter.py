"""engine_node_layout: the directories the role makes under engine_node_root (uv's cache dropped first
when engine_layout says so; <root>/python only where uv may use a managed Python), and the environment
`current` names once a run is over, for every action, in check mode and not."""

from __future__ import annotations

import pytest

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

FILTERS = filter_plugin("engine_node_layout").FilterModule().filters()
dirs = FILTERS["engine_node_layout_dirs"]
now = FILTERS["engine_node_now"]


def test_the_layout_in_order_with_uv_s_cache_dropped_first_only_when_asked():
    assert dirs({"drop_uv_cache": False}) == [
        {"path": "", "mode": "0755"}, {"path": "/cache", "mode": "0755"}, {"path": "/cache/uv", "mode": "0700"},
        {"path": "/uv", "mode": "0755"}, {"path": "/python", "mode": "0755"}, {"path": "/engines", "mode": "0755"},
        {"path": "/engines/vllm", "mode": "0755"}]
    dropped = dirs({"drop_uv_cache": True, "take_back": True}, "managed")
    assert [d["path"] for d in dropped][:4] == ["", "/cache", "/cache/uv", "/cache/uv"]
    assert dropped[2] == {"path": "/cache/uv", "state": "absent"} and dropped[3]["mode"] == "0700"
    assert "/python" not in [d["path"] for d in dirs({"drop_uv_cache": False}, "only-system")]
    assert "/python" in [d["path"] for d in dirs({"drop_uv_cache": False}, "system")]


@pytest.mark.parametrize("layout, preference, words", [
    ({}, "only-managed", "must be engine_layout's result"),
    (None, "only-managed", "must be engine_layout's result"),
    ({"drop_uv_cache": False}, "newest", "python_preference is 'newest', allowed: only-managed, managed, system, only-system"),
])
def test_bad_input_is_refused_naming_it(layout, preference, words):
    with pytest.raises(filter_error(), match=words):
        dirs(layout, preference)


JOB = {"name": "0.20.0-cu129", "build": "cu129"}


@pytest.mark.parametrize("action, kw, expected", [
    ("none", {}, ""),
    ("none", {"check_mode": True}, ""),
    ("unchanged", {}, "0.20.0-cu13"),
    ("unchanged", {"check_mode": True}, "0.20.0-cu13"),
    ("switch", {}, "0.20.0-cu13"),
    ("switch", {"check_mode": True}, "0.19.1-cu13"),
    ("install", {"job": JOB, "installed": True}, "0.20.0-cu129"),
    ("install", {"job": JOB, "installed": "true"}, "0.20.0-cu129"),
    ("install", {"job": JOB, "installed": False}, "0.19.1-cu13"),
    ("install", {"job": JOB, "installed": True, "ok": False}, "0.19.1-cu13"),
    ("install", {"job": JOB, "check_mode": True}, "0.19.1-cu13"),
    ("look", {}, "0.19.1-cu13"),
])
def test_what_current_names_after_the_run(action, kw, expected):
    assert now(action, "0.20.0-cu13", "0.19.1-cu13", **kw) == expected


def test_an_unknown_action_or_an_install_without_its_job_is_refused():
    with pytest.raises(filter_error(), match="action is 'installed', allowed: none, unchanged, look, switch, install"):
        now("installed", "0.20.0-cu13", "")
    with pytest.raises(filter_error(), match="needs its job"):
        now("install", "0.20.0-cu13", "", job=None, installed=True)


result = FILTERS["engine_node_result"]
stats = FILTERS["engine_node_stats"]
PLAN = {"version": "0.20.0", "build": "cu13", "why": "auto: the driver runs CUDA 13"}


def test_a_node_with_nothing_to_do_is_summed_up_as_unchanged():
    out = result("n1", PLAN, "auto", "unchanged", "0.20.0-cu13", "0.20.0-cu13", "/r/engines/vllm")
    assert out == {"host": "n1", "version": "0.20.0", "requested": "auto", "wanted": "cu13", "effective": "cu13",
                   "current": "0.20.0-cu13", "pending": "", "path": "/r/engines/vllm/0.20.0-cu13",
                   "action": "unchanged", "fallback": None, "error": None, "fleet_lock": None,
                   "why": "auto: the driver runs CUDA 13", "check_mode": False}
    assert stats(out) == {"n1": {k: v for k, v in out.items() if k not in ("why", "check_mode")}}


def test_an_install_left_for_engine_service_is_pending_and_current_stays():
    job = {"name": "0.20.0-cu13", "build": "cu13"}
    out = result("n1", PLAN, "auto", "install", "0.20.0-cu13", "0.15.1-cu129", "/r/engines/vllm", switch="false",
                 job=job, installed=True, fleet_lock={"path": "/l/g.lock", "lock_sha256": "ab" * 32})
    assert (out["action"], out["current"], out["pending"], out["effective"]) == (
        "installed", "0.15.1-cu129", "0.20.0-cu13", "cu13")
    assert out["fleet_lock"] == {"path": "/l/g.lock", "sha256": "ab" * 32}
    switched = result("n1", PLAN, "auto", "install", "0.20.0-cu13", "0.15.1-cu129", "/r/engines/vllm", job=job,
                      installed=True)
    assert (switched["current"], switched["pending"], switched["fleet_lock"]) == ("0.20.0-cu13", "", None)


def test_a_failed_install_keeps_what_ran_and_names_auto_s_second_try():
    out = result("n1", PLAN, "auto", "install", "0.20.0-cu13", "0.15.1-cu129", "/r/engines/vllm",
                 job={"name": "0.20.0-cu129", "build": "cu129"}, failure={"msg": "no"}, retry=True,
                 first_job={"build": "cu13"}, first_failure={"classification": "no_kernel_image"}, other="cu129",
                 error="it failed")
    assert (out["action"], out["current"], out["error"]) == ("failed", "0.15.1-cu129", "it failed")
    assert out["fallback"] == {"from": "cu13", "to": "cu129", "reason": "no_kernel_image", "since": "this run"}
    kept = result("n1", PLAN, "auto", "unchanged", "0.20.0-cu129", "0.20.0-cu129", "/r/engines/vllm",
                  kept={"from": "cu13", "to": "cu129", "classification": "no_kernel_image", "at": "2026-12-01T00:00:00Z"})
    assert kept["fallback"] == {"from": "cu13", "to": "cu129", "reason": "no_kernel_image",
                                "since": "2026-12-01T00:00:00Z"}
    would = result("n1", PLAN, "auto", "switch", "0.20.0-cu13", "0.15.1-cu129", "/r/engines/vllm", check_mode=True)
    assert (would["action"], would["current"], would["check_mode"]) == ("would switched", "0.15.1-cu129", True)


def test_a_plan_that_is_not_a_mapping_is_refused():
    with pytest.raises(filter_error(), match="plan must be the build plan"):
        result("n1", "cu13", "auto", "none", "", "", "/r")
