"""engine_service's preflight asks, as the service user, whether it may read each model given as a path
(roles/engine_service/tasks/preflight.yml). Issue 44, item 2: runuser's child is the user's, who may stop
it; the check runs under ``timeout -s KILL`` so that a stopped check fails the node instead of holding
root's play, and every program root runs there is named by its absolute path. The argv is rendered here
by Ansible's own templar, as the task renders it, and run."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = pathlib.Path(__file__).resolve().parents[3]
TASK = "Check that the service user can read the models given as paths"


def check_argv(path, isdir, user="nobody"):
    tasks = yaml.safe_load((REPO / "roles" / "engine_service" / "tasks" / "preflight.yml").read_text(encoding="utf-8"))
    task = next(t for t in tasks if t.get("name") == TASK)
    argv = task["ansible.builtin.command"]["argv"]
    variables = {"engine_service_user": user, "item": {"stat": {"path": path, "isdir": isdir}}}
    rendered = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(argv))
    return [str(word) for word in rendered]


@pytest.fixture
def open_dir():
    """A directory everyone may enter (pytest's own are root's alone)."""
    path = tempfile.mkdtemp(prefix="llmfleet-preflight-")
    os.chmod(path, 0o755)
    yield pathlib.Path(path)
    shutil.rmtree(path)


def test_the_check_runs_every_program_by_its_path_under_a_kill_deadline():
    argv = check_argv("/srv/models/m", True, user="llmfleet-vllm")
    assert argv == ["/usr/bin/timeout", "-s", "KILL", "30", "/usr/sbin/runuser", "-u", "llmfleet-vllm", "--",
                    "/usr/bin/test", "-r", "/srv/models/m", "-a", "-x", "/srv/models/m"]
    assert check_argv("/srv/models/m.gguf", False)[8:] == ["/usr/bin/test", "-r", "/srv/models/m.gguf"]


@pytest.mark.skipif(os.geteuid() != 0, reason="runuser needs root")
def test_the_check_says_what_the_user_may_read_and_a_stopped_check_is_killed(open_dir):
    """As the look's check says it (tests/unit/plugins/module_utils/test_servicelook.py): a directory must be
    read and entered, a file read. Then the user stops its own check (what runuser runs as the user): the
    deadline kills it, with the rc the preflight reports as "could not be checked"."""
    private, shared, weights = open_dir / "private", open_dir / "shared", open_dir / "model.gguf"
    private.mkdir(mode=0o700)
    shared.mkdir(mode=0o755)
    weights.write_bytes(b"GGUF")
    weights.chmod(0o644)
    for path, expected in ((private, 1), (shared, 0), (weights, 0)):
        argv = check_argv(str(path), path.is_dir())
        assert subprocess.run(argv, check=False, timeout=60).returncode == expected, path

    argv = check_argv(str(shared), True)
    assert argv[3] == "30"
    # the same wrapper, a 1 s deadline, and the user's side stopping itself instead of test(1)
    stopped = argv[:3] + ["1"] + argv[4:argv.index("--") + 1] + ["/bin/sh", "-c", "kill -STOP $$; exit 0"]
    started = time.monotonic()
    done = subprocess.run(stopped, check=False, timeout=30)
    assert time.monotonic() - started < 10
    # what the preflight's assert reads as "could not be checked" (the command module's rc: -9, killed)
    assert done.returncode in unchecked_rcs(), done.returncode


def unchecked_rcs():
    """The rcs preflight.yml reports as "could not be checked" (its selectattr('rc', 'in', [...]) list)."""
    text = (REPO / "roles" / "engine_service" / "tasks" / "preflight.yml").read_text(encoding="utf-8")
    found = re.findall(r"selectattr\('rc', 'in', \[([-0-9, ]+)\]\)", text)
    assert len(found) == 1, found
    return [int(word) for word in found[0].split(",")]
