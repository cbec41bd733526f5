"""engine_cache: devpi-init gets the root password's hash without it ever being on a command line,
and devpi's data directory is the service user's alone (issue 17).

The role's own task is read from its task files (tasks/*.yml), its argv and stdin rendered as Ansible would, and
run against a fake venv: a ``devpi_server.auth.hash_password`` that marks its input, and a fake
``devpi-init`` that records the argv and the environment it got. ``init_command`` is what
tests/system/test_devpi.py runs against the real devpi-server too.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys

import jinja2
import pytest
import yaml

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "engine_cache"
INIT_TASK = "Initialize devpi's data with the root password"
PASSWORD = "s3cret root password"


def _role_tasks():
    """Every task of the role's task files, blocks opened."""
    out = []
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        out.extend(_all_tasks(yaml.safe_load(path.read_text())))
    return out


def _task(name):
    found = [t for t in _role_tasks() if t.get("name") == name]
    assert len(found) == 1, "the role's task files have %d tasks named %r" % (len(found), name)
    return found[0]


def init_command(venv, root, password):
    """The role's devpi-init task rendered for ``venv`` and ``engine_cache_root`` ``root``:
    ``(task, argv, stdin)``."""
    task = _task(INIT_TASK)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    context = {"__engine_cache_venv": str(venv), "engine_cache_root": str(root), "engine_cache_password": password}
    for key, value in (task.get("vars") or {}).items():
        context[key] = env.from_string(value).render(context) if isinstance(value, str) else value
    args = task["ansible.builtin.command"]
    argv = [env.from_string(item).render(context) for item in args["argv"]]
    stdin = env.from_string(args["stdin"]).render(context)
    if args.get("stdin_add_newline", True):
        stdin += "\n"
    return task, argv, stdin


FAKE_AUTH = "def hash_password(password):\n    return '$argon2id$fake$' + password[::-1]\n"
FAKE_INIT = """#!{python}
import json, os, sys
with open({record!r}, "w") as out:
    json.dump({{"argv": sys.argv, "environ": dict(os.environ)}}, out)
"""


@pytest.fixture
def fake_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    package = tmp_path / "site" / "devpi_server"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "auth.py").write_text(FAKE_AUTH)
    record = tmp_path / "devpi-init.json"
    init = venv / "bin" / "devpi-init"
    init.write_text(FAKE_INIT.format(python=sys.executable, record=str(record)))
    init.chmod(0o755)
    return venv, tmp_path / "site", record


def test_devpi_init_gets_the_hash_in_its_environment_never_in_argv(fake_venv, tmp_path):
    venv, site, record = fake_venv
    root = tmp_path / "root"
    (root / "server").mkdir(parents=True)
    task, argv, stdin = init_command(venv, root, PASSWORD)
    pwhash = "$argon2id$fake$" + PASSWORD[::-1]

    # what ps would show of the task's process, and of devpi-init after the exec
    assert not any(PASSWORD in item or pwhash in item or PASSWORD[::-1] in item for item in argv), argv
    before = set(os.listdir(tmp_path))
    subprocess.run(argv, input=stdin, text=True, check=True, timeout=60,
                   env=dict(os.environ, PYTHONPATH=str(site)))
    seen = json.loads(record.read_text())
    assert seen["argv"] == [str(venv / "bin" / "devpi-init"), "--serverdir", str(root / "server"), "--no-root-pypi"]
    assert not any("passwd" in item for item in seen["argv"])
    assert seen["environ"]["DEVPISERVER_ROOT_PASSWD_HASH"] == pwhash
    assert not any(PASSWORD in value for value in seen["environ"].values())
    # no file written on the way (only the fake's record)
    assert set(os.listdir(tmp_path)) - before == {record.name}
    assert os.listdir(root / "server") == []

    # and Ansible shows none of it, and runs it as the service user, once
    assert task["no_log"] is True
    assert task["become_user"] == "llmfleet-devpi"
    assert task["ansible.builtin.command"]["creates"] == "{{ engine_cache_root }}/server/.nodeinfo"
    assert "environment" not in task  # Ansible puts `environment:` on the module's shell command line


def _all_tasks(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _all_tasks(task.get(key))


def test_no_command_of_the_role_has_the_password_or_a_hash_in_its_argv():
    tasks = _role_tasks()
    commands = [t for t in tasks if "ansible.builtin.command" in t]
    assert commands
    for task in commands:
        argv = " ".join(task["ansible.builtin.command"].get("argv") or [])
        assert "engine_cache_password" not in argv and "--root-passwd" not in argv and ".stdout" not in argv, task["name"]


def test_devpi_data_is_the_service_users_alone():
    top = _task("Make the cache's root directory (root's)")["ansible.builtin.file"]
    assert (top["path"], top["owner"], top["mode"]) == ("{{ engine_cache_root }}", "root", "0755")
    data = _task("Make devpi's data directory (its service user's alone, made without following links)")
    data = data["llmfleet.engines.service_dirs"]
    assert (data["root"], data["paths"], data["owner"], data["mode"]) == (
        "{{ engine_cache_root }}", ["{{ engine_cache_root }}/server"], "llmfleet-devpi", "0700")
    unit = (ROLE / "templates" / "llmfleet-devpi.service.j2").read_text()
    assert "\nUMask=0077\n" in unit and "\nUser=llmfleet-devpi\n" in unit
    assert stat.S_IMODE(int(data["mode"], 8)) & 0o077 == 0
