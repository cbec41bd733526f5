"""engine_current list_only: the environments on disk as the pruning sees them (a marker, a name
like an environment; not current, not a *.partial, not a link), with their marker times; a missing
directory has none; nothing changes, in check mode or not."""

from __future__ import annotations

import os

from ansible_collections.llmfleet.engines.plugins.modules import engine_current
from tests.unit.plugins.lookup_fakes import run_module
from tests.unit.plugins.modules.test_engine_current import env

REGEX = r"^[0-9][0-9A-Za-z.+!]*-(cu13|cu129)$"


def listing(capsys, root, **kw):
    return run_module(engine_current.main, dict({"path": str(root), "list_only": True, "pattern": REGEX}, **kw),
                      capsys)[:2]


def test_lists_the_environments_with_their_marker_times_and_changes_nothing(capsys, tmp_path):
    root = tmp_path / "vllm"
    env(root, "0.20.0-cu129", 1000)
    env(root, "0.19.1-cu13", 2000)
    env(root, "0.21.0-cu129.partial", 900)
    (root / "0.18.0-cu129").mkdir()  # no marker: not an environment
    env(tmp_path, "0.17.0-cu129", 500)
    os.symlink(tmp_path / "0.17.0-cu129", root / "0.17.0-cu129")  # a link is never one
    os.symlink("0.20.0-cu129", root / "current")
    before = sorted(os.listdir(root))
    for check in (True, False):
        code, result = listing(capsys, root, _ansible_check_mode=check)
        assert code == 0 and result["changed"] is False, result
        assert result["environments"] == [{"name": "0.19.1-cu13", "mtime": 2000.0},
                                          {"name": "0.20.0-cu129", "mtime": 1000.0}], result
        assert result["current"] == "0.20.0-cu129" and result["removed"] == []
    assert sorted(os.listdir(root)) == before and os.readlink(root / "current") == "0.20.0-cu129"


def test_a_missing_directory_has_none_and_a_current_that_is_not_a_link_is_not_refused(capsys, tmp_path):
    code, result = listing(capsys, tmp_path / "nothing")
    assert code == 0 and result["environments"] == [] and result["current"] == "", result
    root = tmp_path / "vllm"
    env(root, "0.20.0-cu129", 1000)
    (root / "current").mkdir()
    code, result = listing(capsys, root)
    assert code == 0 and result["current"] == "" and [e["name"] for e in result["environments"]] == ["0.20.0-cu129"]


def test_without_list_only_present_still_needs_a_target(capsys, tmp_path):
    code, result = run_module(engine_current.main, {"path": str(tmp_path)}, capsys)[:2]
    assert code == 1 and result["msg"] == "state is present but all of the following are missing: target", result
    code, result = listing(capsys, tmp_path, list_only=False)
    assert code == 1 and result["msg"] == "state is present but all of the following are missing: target", result
