"""engine_service_stage_space: the models a node stages at once are counted together, per filesystem."""

from __future__ import annotations

import pytest

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

# imported without leaving the process in controller mode (see _plugins)
engine_service_stage_space = filter_plugin("engine_service_stage").engine_service_stage_space
AnsibleFilterError = filter_error()

MIB = 1024 * 1024


def look(repo, need, free, device=1, margin=1024, changed=True, place="/opt/llmfleet/models"):
    return {"changed": changed, "repo": repo, "commit": "c" * 40, "bytes_downloaded": need,
            "space": {"free_bytes": free, "place": place, "device": device, "margin_mib": margin}}


def test_models_that_fit_alone_but_not_together_are_named():
    free = 1024 * MIB + 150
    problems = engine_service_stage_space([look("org/a", 100, free), look("org/b", 100, free)], "n1")
    assert len(problems) == 1
    assert problems[0].startswith("host n1: the 2 pinned models staged together need 0.0 MiB (200 bytes: org/a@cccccccccccc")
    assert "plus the margin of 1024 MiB, and the filesystem of /opt/llmfleet/models has" in problems[0]
    assert "Nothing was fetched" in problems[0]


def test_models_that_fit_together_and_other_filesystems_pass():
    free = 1024 * MIB + 200
    assert engine_service_stage_space([look("org/a", 100, free), look("org/b", 100, free)], "n1") == []
    # on two filesystems each has its own room
    assert engine_service_stage_space([look("org/a", 150, free - 50), look("org/b", 150, free - 50, device=2)]) == []
    # a model with nothing to fetch (no space in its result) or unchanged is not counted
    assert engine_service_stage_space([look("org/a", 150, free), {"changed": True, "bytes_downloaded": 0},
                                       look("org/b", 150, free, changed=False)]) == []


def test_not_a_list_is_refused():
    with pytest.raises(AnsibleFilterError):
        engine_service_stage_space("x")


# -- engine_service_stage_jobs: the downloads stage_weights.yml started, for engine_service_follow ----------------

engine_service_stage_jobs = filter_plugin("engine_service_stage").engine_service_stage_jobs


def started(jid, key, file):
    """One result of the looped model_snapshot started with async (its item: the check-mode look, whose item is
    the pin)."""
    out = {"started": 1, "finished": 0, "item": {"changed": True, "item": {"key": key, "file": file}}}
    if jid:
        out["ansible_job_id"] = jid
    return out


def test_each_started_download_is_a_job_with_its_pin_and_progress_file():
    results = [started("j1.1", "org/chat@main", "org--chat@main.json"), started(None, "org/x@v1", "org--x@v1.json"),
               started("j1.2", "org/code@v1", "org--code@v1.json")]
    assert engine_service_stage_jobs(results, "/opt/llmfleet/models") == [
        {"jid": "j1.1", "name": "org/chat@main", "progress": "/opt/llmfleet/models/org--chat@main.json.progress"},
        {"jid": "j1.2", "name": "org/code@v1", "progress": "/opt/llmfleet/models/org--code@v1.json.progress"}]
    assert engine_service_stage_jobs([], "/m") == []


@pytest.mark.parametrize("results, words", [
    ({"results": []}, "must be the results of the looped model_snapshot"),
    ([{"ansible_job_id": "j1", "item": {"changed": True}}], "each model_snapshot look must be a mapping with 'item'"),
])
def test_what_is_not_the_started_downloads_is_refused(results, words):
    with pytest.raises(AnsibleFilterError) as failed:
        engine_service_stage_jobs(results, "/m")
    assert words in str(failed.value)
