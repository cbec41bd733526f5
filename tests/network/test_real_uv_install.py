"""uv_engine_env against the real PyPI: a small package with a console script and a few
dependencies (black 24.1.0: click, mypy-extensions, packaging, pathspec, platformdirs), resolved as
PyPI stood a day after its release, with the system Python.

Run in CI, where PyPI is reachable: ``pytest tests/network -m network``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.integration.test_targets import system_python

pytestmark = pytest.mark.network

MODULE = REPO / "plugins" / "modules" / "uv_engine_env.py"
UV = REPO / ".venv" / "bin" / "uv"
PYPI = "https://pypi.org"
PROJECT, VERSION = "black", "24.1.0"
DEPENDENCIES = {"click", "mypy-extensions", "packaging", "pathspec", "platformdirs"}


def pypi_project(name):
    request = urllib.request.Request(PYPI + "/pypi/%s/json" % name, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.load(resp)


def uploaded(files):
    return max(datetime.datetime.fromisoformat(f["upload_time_iso_8601"].replace("Z", "+00:00")) for f in files)


def run_module(tmp_path, name, args):
    args_file = tmp_path / (name + ".json")
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env["PYTHONPATH"] = str(COLLECTIONS)
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True,
                          env=env, timeout=900, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError("no JSON result:\n%s\n%s" % (proc.stdout, proc.stderr))


def test_real_install_from_pypi_as_of_the_release(tmp_path):
    published = uploaded(pypi_project(PROJECT)["releases"][VERSION])
    cutoff = published + datetime.timedelta(hours=24)
    path = tmp_path / "envs" / ("%s-%s" % (PROJECT, VERSION))
    args = {
        "path": str(path),
        "engine": PROJECT,
        "version": VERSION,
        "exclude_newer": cutoff.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": system_python(),
        "python_preference": "only-system",
        "uv": str(UV),
        "gpu_check": False,
        "timeout": 600,
    }
    result = run_module(tmp_path, "install", args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True
    locked = result["lock"]["packages"]
    assert locked[PROJECT] == VERSION
    assert DEPENDENCIES <= set(locked)

    # every locked file was on PyPI before the cut-off, and the cut-off mattered: at least one
    # dependency has a release after it that an unbounded resolution would have taken
    newer_exists = []
    for name, version in locked.items():
        project = pypi_project(name)
        assert uploaded(project["releases"][version]) <= cutoff, (name, version)
        later = [v for v, files in project["releases"].items() if files and uploaded(files) > cutoff]
        if name != PROJECT and later:
            newer_exists.append(name)
    assert newer_exists, "no dependency has a release after the cut-off: the test proves nothing"

    lock_text = (path / "llmfleet-requirements.txt").read_text()
    assert lock_text.count("--hash=sha256:") >= len(locked)
    assert "# from https://pypi.org/simple" in lock_text

    cli = subprocess.run([str(path / "bin" / "black"), "--version"], capture_output=True, text=True, check=True)
    assert cli.stdout.startswith("black, %s" % VERSION)

    again = run_module(tmp_path, "again", args)
    assert again["changed"] is False and again["lock"] == result["lock"]
