"""engine_service runs systemctl by the absolute path engine_service_systemctl, judged before its first use
(tasks/systemd.yml, the step site.yml runs before anything is built): a systemctl in a directory anyone may
write is never run, and a bare name is refused (issue #44, F)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.roles import conftest

PLANTED = "#!/bin/sh\necho planted >> '%s'\necho Version=255\n"


def _systemd_step(tmp_path, systemctl):
    site = tmp_path / "site.yml"
    site.write_text(json.dumps([{
        "name": "the systemd step", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Check systemd", "ansible.builtin.include_role": {
            "name": "llmfleet.engines.engine_service", "tasks_from": "systemd"}}]}]))
    (tmp_path / "extra.json").write_text(json.dumps({
        "ansible_connection": "local", "ansible_python_interpreter": conftest.PYTHON,
        "engine_service_systemctl": systemctl}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(conftest.COLLECTIONS), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(conftest.ANSIBLE_PLAYBOOK), "-i", "localhost,", str(site), "-e",
                          "@%s" % (tmp_path / "extra.json")], env=env, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=300, check=False)
    return run.returncode, " ".join((run.stdout + run.stderr).split())


def test_a_systemctl_another_user_can_replace_is_never_run(tmp_path):
    hostile = tmp_path / "hostile-bin"
    hostile.mkdir()
    marker = tmp_path / "ran"
    (hostile / "systemctl").write_text(PLANTED % marker)
    (hostile / "systemctl").chmod(0o755)
    hostile.chmod(0o777)
    code, out = _systemd_step(tmp_path, str(hostile / "systemctl"))
    assert code != 0, out
    assert not marker.exists(), "the planted systemctl ran: " + out
    assert ("host localhost: engine_service_systemctl %s/systemctl is not run: the program %s/systemctl, which root "
            "runs: %s (owner root, mode 0777) is writable by others, who can replace %s/systemctl in it"
            % (hostile, hostile, hostile, hostile)) in out, out


def test_a_trusted_systemctl_runs_by_its_path(tmp_path):
    trusted = tmp_path / "bin"
    trusted.mkdir()
    marker = tmp_path / "ran"
    (trusted / "systemctl").write_text(PLANTED % marker)
    (trusted / "systemctl").chmod(0o755)
    code, out = _systemd_step(tmp_path, str(trusted / "systemctl"))
    assert code == 0, out
    assert marker.read_text() == "planted\n"


def test_a_bare_name_is_refused(tmp_path):
    code, out = _systemd_step(tmp_path, "systemctl")
    assert code != 0, out
    assert ('host localhost: variable engine_service_systemctl is "systemctl", allowed: the absolute path of '
            "systemctl, such as /usr/bin/systemctl") in out, out
