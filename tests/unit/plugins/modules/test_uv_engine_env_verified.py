"""uv_engine_env state=verified (an environment already on disk, checked before the role switches to
it) and state=absent's removal through a trash name (issue 30, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envdir
from tests.unit.plugins.modules.test_uv_engine_env import base, fake, run_module  # noqa: F401  pylint: disable=unused-import

NOBODY = 65534


def verified_args(base):  # noqa: F811
    return {"path": base["path"], "state": "verified", "engine": "vllm", "version": "0.11.0"}


@pytest.fixture
def built(fake, base, capsys):  # noqa: F811
    code, result = run_module(base, capsys)
    assert code == 0 and result["changed"] is True, result.get("msg")
    fake.calls.clear()
    return base["path"]


def test_an_intact_environment_is_import_checked_with_its_own_python(fake, base, built, capsys):  # noqa: F811
    code, result = run_module(verified_args(base), capsys)
    assert code == 0 and result["ok"] is True and result["changed"] is False, result
    assert result["reason"] is None and result["verified"] == {"import": "vllm", "version": "0.11.0"}
    assert fake.kinds() == ["verify"]
    assert fake.calls[0][1][0] == os.path.join(built, "bin", "python")


def test_a_marker_only_directory_is_not_switched_to(fake, base, tmp_path, capsys):  # noqa: F811
    """What a killed prune could leave: the marker and nothing else."""
    os.makedirs(base["path"])
    with open(os.path.join(base["path"], _envdir.MARKER_NAME), "w") as handle:
        handle.write('{"format": 1, "spec": {"engine": "vllm", "version": "0.11.0"}, "lock": {"sha256": "x"}}\n')
    code, result = run_module(verified_args(base), capsys)
    assert code == 0 and result["ok"] is False, result
    assert "bin/python is missing" in result["reason"] and "cannot be switched to" in result["msg"]
    assert fake.kinds() == []


def test_a_missing_lock_file_fails_the_inspection(fake, base, built, capsys):  # noqa: F811
    os.unlink(os.path.join(built, _envdir.LOCK_FILE_NAME))
    code, result = run_module(verified_args(base), capsys)
    assert code == 0 and result["ok"] is False and "the lock file" in result["reason"], result
    assert fake.kinds() == []


def test_an_environment_whose_engine_does_not_import_is_not_switched_to(fake, base, built, capsys):  # noqa: F811
    fake.fail["verify"] = (1, "", "ModuleNotFoundError: No module named 'vllm'\n")
    code, result = run_module(verified_args(base), capsys)
    assert code == 0 and result["ok"] is False, result
    assert "'import vllm' fails there" in result["reason"] and "No module named" in result["reason"]


def test_a_marker_for_another_version_is_not_switched_to(fake, base, built, capsys):  # noqa: F811
    code, result = run_module(dict(verified_args(base), version="0.12.0"), capsys)
    assert code == 0 and result["ok"] is False and "version is '0.11.0', not '0.12.0'" in result["reason"], result
    assert fake.kinds() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")
def test_an_interpreter_another_user_owns_fails_the_task(fake, base, built, capsys, tmp_path):  # noqa: F811
    planted = tmp_path / "planted-python"
    planted.write_text("#!/bin/sh\nexit 0\n")
    planted.chmod(0o755)
    os.chown(str(planted), NOBODY, NOBODY)
    python = os.path.join(built, "bin", "python")
    os.unlink(python)
    os.symlink(str(planted), python)
    code, result = run_module(verified_args(base), capsys)
    assert code == 1 and result["msg"].startswith("path %s cannot be trusted" % python), result
    assert "%s (owner nobody" % planted in result["msg"] and "It is not run." in result["msg"]
    assert fake.kinds() == []


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_prune_renames_the_environment_away_before_deleting_it(fake, base, built, capsys, monkeypatch):  # noqa: F811
    """A removal killed half way (here: the delete fails after a part of the tree is gone) leaves
    no half environment under the environment's name, only a trash name."""
    real = _envdir.remove_tree

    def half(path):
        os.unlink(os.path.join(path, "bin", "python"))
        raise OSError(5, "killed half way")

    monkeypatch.setattr(_envdir, "remove_tree", half)
    code, result = run_module({"path": built, "state": "absent"}, capsys)
    assert code == 1
    assert not os.path.lexists(built)
    trash = _envdir.trash_name(built)
    assert os.path.isdir(trash) and not os.path.lexists(os.path.join(trash, "bin", "python"))
    monkeypatch.setattr(_envdir, "remove_tree", real)


def test_leftover_trash_is_removed_by_the_next_run(fake, base, built, capsys):  # noqa: F811
    parent = os.path.dirname(built)
    left = _envdir.trash_name(os.path.join(parent, "0.10.0"), pid=dead_pid())
    os.makedirs(os.path.join(left, "lib"))
    busy = _envdir.trash_name(os.path.join(parent, "0.9.0"), pid=os.getppid())  # a live process's
    os.makedirs(busy)
    code, result = run_module(base, capsys)
    assert code == 0 and result["changed"] is True and left in result["debris"], result
    assert not os.path.lexists(left) and os.path.isdir(busy)
    # the role never takes a trash name for an environment
    assert not any(__import__("re").match(r"^[0-9][0-9A-Za-z.+!]*-(cu13|cu129)$", name) for name in os.listdir(parent)
                   if _envdir.is_trash(name))
