"""Run every integration target with ansible-playbook against a fresh fake upstream.

Each directory under ``tests/integration/targets`` is an ansible-test style target (a role with
``tasks/main.yml``). The play is generated here; the variables it gets are documented in
``docs/dev/CONTRACTS.md``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.conftest import COLLECTIONS, REPO

TARGETS = REPO / "tests" / "integration" / "targets"
FIXTURES = REPO / "tests" / "fixtures"
BIN = pathlib.Path(sys.executable).parent


def _targets():
    if not TARGETS.is_dir():
        return []
    return sorted(p.name for p in TARGETS.iterdir() if (p / "tasks" / "main.yml").is_file())


def system_python() -> str:
    """A plain interpreter for `uv venv --python` (not this test venv's)."""
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def run_playbook(play: pathlib.Path, extra_vars: dict, tmp_path: pathlib.Path, *args: str):
    import json

    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_ROLES_PATH": str(TARGETS),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-remote"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    cmd = [
        str(BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(play),
        "-e",
        json.dumps(extra_vars),
        *args,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)


@pytest.mark.integration
@pytest.mark.parametrize("target", _targets())
def test_target(target, upstream, tmp_path):
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n"
        "  connection: local\n"
        "  gather_facts: false\n"
        f"  roles:\n    - {target}\n"
    )
    uv = shutil.which("uv", path=str(BIN)) or shutil.which("uv")
    extra = {
        "upstream_url": upstream.url,
        "target_dir": str(target_dir),
        "uv_bin": uv,
        "test_python": system_python(),
        "fixtures_dir": str(FIXTURES),
    }
    result = run_playbook(play, extra, tmp_path, "-v")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"target {target} failed:\n{output[-20000:]}"
    assert "failed=0" in output, output[-20000:]
