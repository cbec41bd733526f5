"""site.yml on a host whose PID 1 is not systemd (a container, WSL, a CI runner) with models to
serve: one line naming the host and what is missing, before engine_node builds anything (issue 20)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
# what systemctl answers where systemd is not PID 1 (systemd 252 to 255 say this)
NO_SYSTEMD = """#!/bin/sh
echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
echo "Failed to connect to bus: Host is down" >&2
exit 1
"""


def test_serving_on_a_host_without_systemd_fails_in_one_line_before_anything_is_built(tmp_path):
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "systemctl").write_text(NO_SYSTEMD)
    (fakebin / "systemctl").chmod(0o755)
    root = tmp_path / "root"
    models = tmp_path / "serve.yml"
    models.write_text("engine_service_models:\n  - {name: qwen, model: Qwen/Qwen3-0.6B, port: 8000}\n")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    run = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "inventories/local", "playbooks/site.yml",
         "-e", "@%s" % models, "-e", "engine_node_root=%s" % root,
         # the role runs systemctl by this absolute path (engine_service_systemctl), never a name on PATH
         "-e", "engine_service_systemctl=%s" % (fakebin / "systemctl"),
         # none: even with the check gone, nothing would be downloaded here
         "-e", "engine_node_build=none", "-e", "ansible_python_interpreter=%s" % sys.executable],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert ("host localhost: engine_service_models is set, but this host does not run systemd as PID 1 (System has not"
            " been booted with systemd as init system (PID 1). Can't operate. Failed to connect to bus: Host is down)"
            in out), out
    assert "Nothing was built." in out
    # before engine_node looked at the node at all
    assert "Read the driver and GPUs of the node" not in out, out
    assert not root.exists(), "something was made under engine_node_root"
