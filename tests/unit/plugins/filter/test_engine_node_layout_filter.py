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
