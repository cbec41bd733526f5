"""engine_cache: the cache host's privilege line (issue #44, 12). Root runs uv and devpi-server's environment
from under engine_cache_root, and skips installing them when they are there: before that, the role judges the
directories on the way, those trees whole and engine_cache_python, as engine_node judges a node's root
(engine_layout, _trust), and stops, naming the host and the variable.

The role's own tasks are read from tasks/install.yml, their arguments rendered as Ansible would, and given to
engine_layout against a layout under tmp_path (another user's files made with chown to nobody: root only).
"""

from __future__ import annotations

import os
import pathlib

import jinja2
import pytest
import yaml

from ansible_collections.llmfleet.engines.plugins.modules import engine_layout

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "engine_cache"
NOBODY = 65534
JUDGE = "Judge the uv, environment and Python root runs, and the directories on the way to {{ engine_cache_root }}"
STOP = "Stop when another user can change what root runs on the cache host"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")


def _install_tasks():
    out = []

    def walk(tasks):
        for task in tasks or []:
            out.append(task)
            for key in ("block", "rescue", "always"):
                walk(task.get(key))

    walk(yaml.safe_load((ROLE / "tasks" / "install.yml").read_text()))
    return out


def _render(value, context):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    if isinstance(value, list):
        return [_render(item, context) for item in value]
    return env.from_string(value).render(context)


def _layout(tmp_path):
    root = tmp_path / "srv" / "llmfleet-cache"
    (root / "uv" / "0.13.8").mkdir(parents=True)
    uv = root / "uv" / "0.13.8" / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    venv = root / "venv-0123456789ab"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "devpi-server").write_text("#!/bin/sh\n")
    (venv / "bin" / "devpi-server").chmod(0o755)
    return root, uv, venv


def _judged(tmp_path, root, venv, python="/usr/bin/python3"):
    """engine_layout run with the role's arguments; the fail task's message and whether it fires."""
    tasks = _install_tasks()
    names = [t.get("name") for t in tasks]
    judge, stop = tasks[names.index(JUDGE)], tasks[names.index(STOP)]
    # before anything of the role is installed or run (the uv install, the environment's build, the user)
    first_change = min(i for i, t in enumerate(tasks) if any(
        key in t for key in ("ansible.builtin.user", "ansible.builtin.file", "ansible.builtin.include_role",
                             "ansible.builtin.command", "ansible.builtin.stat")))
    assert names.index(JUDGE) < names.index(STOP) < first_change
    context = {"engine_cache_root": str(root), "__engine_cache_venv": str(venv), "engine_cache_python": python,
               "inventory_hostname": "cache1"}
    args = {key: _render(value, context) for key, value in judge["llmfleet.engines.engine_layout"].items()}
    result = engine_layout.judge(args["path"], trees=args["trees"], programs=args["programs"])
    context["__engine_cache_layout"] = result
    fires = _render("{{ %s }}" % stop["when"], context) == "True"
    return result, fires, _render(stop["ansible.builtin.fail"]["msg"], context)


def test_root_s_own_layout_passes(tmp_path):
    root, _uv, venv = _layout(tmp_path)
    result, fires, _msg = _judged(tmp_path, root, venv)
    assert result["problems"] == [] and not fires


def test_a_uv_of_another_user_already_there_stops_the_role(tmp_path):
    """The role would skip its install (the uv is there) and run that uv as root."""
    root, uv, venv = _layout(tmp_path)
    os.chown(str(uv), NOBODY, -1)
    result, fires, msg = _judged(tmp_path, root, venv)
    assert fires
    assert msg.startswith("cache1: refusing to install under engine_cache_root %s: root runs uv" % root), msg
    assert "%s (owner nobody, mode 0755) is owned by nobody" % uv in msg, msg


def test_an_environment_file_others_can_write_stops_the_role(tmp_path):
    root, _uv, venv = _layout(tmp_path)
    (venv / "bin" / "devpi-server").chmod(0o777)
    result, fires, msg = _judged(tmp_path, root, venv)
    assert fires and "%s (owner root, mode 0777) is writable by others" % (venv / "bin" / "devpi-server") in msg


def test_a_python_another_user_can_change_stops_the_role(tmp_path):
    root, _uv, venv = _layout(tmp_path)
    (tmp_path / "py").mkdir()
    python = tmp_path / "py" / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    os.chown(str(python), NOBODY, -1)
    result, fires, msg = _judged(tmp_path, root, venv, python=str(python))
    assert fires and "the program %s, which root runs: %s (owner nobody" % (python, python) in msg, msg


def test_a_directory_on_the_way_others_can_write_stops_the_role(tmp_path):
    root, _uv, venv = _layout(tmp_path)
    (tmp_path / "srv").chmod(0o777)
    result, fires, msg = _judged(tmp_path, root, venv)
    assert fires and "%s (owner root, mode 0777) is writable by others" % (tmp_path / "srv") in msg, msg
