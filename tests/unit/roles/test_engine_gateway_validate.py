"""engine_gateway writes HAProxy's configuration only once ``haproxy -c`` accepted it: a configuration HAProxy
refuses never replaces the one the gateway runs (a reload of a refused file would leave the gateway on the old
process until the next restart, which then fails for every model).

The role's own task (tasks/main.yml, "Write the gateway's HAProxy configuration", an ansible.builtin.template)
is run by ansible-playbook on this machine with its template replaced by a configuration HAProxy refuses (a bare ``retry-on``: "'retry-on' needs at
least one keyword"), then by one it accepts. The check is Debian's haproxy where it is installed; else a stand-in
at the same place in the task that refuses that line as HAProxy does and accepts the rest."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
TASK = "Write the gateway's HAProxy configuration"
HAPROXY = "/usr/sbin/haproxy"
GOOD = ("global\n    maxconn 100\n\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 5s\n"
        "    timeout server 5s\n\nfrontend llmfleet_qwen\n    bind 127.0.0.1:9000\n    default_backend llmfleet_qwen\n\n"
        "backend llmfleet_qwen\n    retry-on conn-failure\n    server n1 127.0.0.1:8000\n")
BAD = GOOD.replace("retry-on conn-failure", "retry-on")
STAND_IN = """#!%s
import sys
path = sys.argv[sys.argv.index("-f") + 1]
with open(path) as handle:
    for number, line in enumerate(handle, 1):
        if line.split() == ["retry-on"]:
            print("[ALERT] config : parsing [%%s:%%d] : 'retry-on' needs at least one keyword" %% (path, number))
            sys.exit(1)
sys.exit(0)
""" % sys.executable


def role_task():
    tasks = yaml.safe_load((REPO / "roles" / "engine_gateway" / "tasks" / "main.yml").read_text())
    (task,) = [t for t in tasks if t.get("name") == TASK]
    return task, [t.get("name") for t in tasks]


def run_task(tmp_path, template, text):
    (tmp_path / "haproxy.cfg.j2").write_text(text)
    template = dict(template, src=str(tmp_path / "haproxy.cfg.j2"))
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{"name": TASK, "ansible.builtin.template": template}]}]
    (tmp_path / "play.json").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="1")
    playbook = pathlib.Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run([str(playbook), "-i", "localhost,", "-c", "local", "-e",
                           "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.json")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def test_a_configuration_haproxy_refuses_never_replaces_the_one_the_gateway_runs(tmp_path):
    task, names = role_task()
    template = dict(task["ansible.builtin.template"])
    # written (and checked) before the gateway is reloaded with it
    assert names.index(TASK) < names.index("Run the gateway"), names
    validate = template.get("validate") or ""
    assert validate.split()[:2] == [HAPROXY, "-c"] and validate.split()[-1] == "%s", template
    checker = HAPROXY if os.access(HAPROXY, os.X_OK) else str(tmp_path / "haproxy")
    if checker != HAPROXY:
        pathlib.Path(checker).write_text(STAND_IN)
        os.chmod(checker, 0o755)
    dest = tmp_path / "haproxy.cfg"
    dest.write_text(GOOD)
    template.update(dest=str(dest), owner=None, group=None, validate=validate.replace(HAPROXY, checker, 1))
    template = {key: value for key, value in template.items() if value is not None}

    refused = run_task(tmp_path, template, BAD)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "failed to validate" in refused.stdout, refused.stdout
    if checker != HAPROXY:  # haproxy -c -q says nothing, only its status
        assert "'retry-on' needs at least one keyword" in refused.stdout, refused.stdout
    assert dest.read_text() == GOOD

    accepted = run_task(tmp_path, template, GOOD.replace("maxconn 100", "maxconn 200"))
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "maxconn 200" in dest.read_text()
    shutil.rmtree(tmp_path / "tmp", ignore_errors=True)
