"""The suite runs from a clone anywhere, with nothing set in the environment.

A copy of this checkout (every file git tracks or would track) is made under ``/tmp``, where many
people clone to try something, and under a closed home directory (0700, as ``/root`` is), and a
role test and the system-packages check run there with the tool venv's Python and no
``LLMFLEET_*`` or ``ANSIBLE_*`` variable. The role tests need node roots that the collection's
privilege rule trusts and that the service user can cross: the clone's ``build/role-tests`` where
its path allows it (``/tmp/<clone>``: a root-owned entry of the sticky ``/tmp``), else a fresh
directory of the run in ``/var/tmp`` (tests/roles/conftest.py, ``_pick_roots``).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
ROLE_TEST = "tests/roles/test_engine_service_role.py::test_fresh_node_serves_and_a_second_run_changes_nothing"


def _copy_checkout(dest: pathlib.Path):
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, target)


@pytest.mark.skipif(os.geteuid() != 0, reason="the role tests run the role as root, with a service user")
@pytest.mark.parametrize("where", ["tmp", "closed-home"])
def test_a_clone_under_tmp_or_a_closed_home_runs_the_role_tests_with_nothing_set(where):
    base = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-clone-", dir="/tmp"))
    try:
        base.chmod(0o755)
        if where == "closed-home":
            home = base / "home"
            home.mkdir(mode=0o700)
            home.chmod(0o700)
            clone = home / "llmfleet"
        else:
            clone = base / "llmfleet"
        _copy_checkout(clone)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LLMFLEET_", "ANSIBLE_", "PYTEST_")) and k != "PYTHONPATH"}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", ROLE_TEST, "tests/unit/test_system_packages.py"],
            cwd=clone, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, "from %s:\n%s\n%s" % (clone, done.stdout[-6000:], done.stderr[-3000:])
        assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
        in_clone = clone / "build" / "role-tests"
        if where == "tmp":
            # the clone's own directory was good enough: its node root was made there (and removed)
            assert in_clone.is_dir(), "the role test did not use %s" % in_clone
        else:
            # a service user cannot cross the 0700 home: the node roots went elsewhere
            assert not in_clone.exists(), "%s is below a 0700 directory, yet the role tests used it" % in_clone
    finally:
        shutil.rmtree(str(base), ignore_errors=True)
