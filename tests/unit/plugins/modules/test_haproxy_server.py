"""haproxy_server and haproxy_info against a fake HAProxy admin socket (tests/fake_haproxy.py: HAProxy's
commands, formats, admin bits and answers): an operator's maintenance is never ended by a rollout, a ready of
"what the rollout drained" touches only the servers the record lists, a drain that would take a model off the
gateway while its other servers are drained or down is refused (or said), and a server the gateway could not
resolve is named."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from ansible.module_utils import _internal
from ansible.module_utils.common import warnings

from ansible_collections.llmfleet.engines.plugins.modules import haproxy_info, haproxy_server
from tests.conftest import COLLECTIONS
from tests.fake_haproxy import RMAINT, FakeHaproxy
from tests.unit.plugins.lookup_fakes import run_module, warnings_text

QWEN = "llmfleet_qwen"


@pytest.fixture(autouse=True)
def module_side(monkeypatch):
    """The modules' warnings reach their result only on the module's side (a test that imported controller code
    earlier in the process sets is_controller for it): these tests do not depend on their order."""
    monkeypatch.setattr(_internal, "is_controller", False)
    monkeypatch.setattr(warnings, "_global_warnings", {})


@pytest.fixture()
def gateway():
    # a short directory: a Unix socket's path is at most 107 bytes
    folder = tempfile.mkdtemp(prefix="hp")
    fake = FakeHaproxy(folder + "/admin.sock", {
        QWEN: {"node-1": "10.0.0.1:8000", "node-2": "10.0.0.2:8000", "node-3": "10.0.0.3:8000"},
        "llmfleet_small": {"node-1": "10.0.0.1:8001"}})
    fake.dir = folder
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(folder)


def server(capsys, gateway, **args):
    args = dict({"socket": gateway.path}, **args)
    return run_module(haproxy_server.main, args, capsys)[:2]


def test_a_server_in_maintenance_is_neither_made_ready_nor_drained_by_a_rollout(capsys, gateway):
    gateway.answer("set server %s/node-2 state maint" % QWEN)
    for state in ("ready", "drain"):
        code, result = server(capsys, gateway, servers=["%s/node-2" % QWEN, "%s/node-1" % QWEN], state=state)
        assert code == 0, result
        assert result["maint"] == ["%s/node-2" % QWEN], result
        assert any("node-2 is in maintenance" in w and "left as it is" in w for w in warnings_text(result)), result
        assert gateway.admin("%s/node-2" % QWEN) == "maint"
    assert gateway.admin("%s/node-1" % QWEN) == "drain"
    assert not any(c.endswith("node-2 state ready") or c.endswith("node-2 state drain") for c in gateway.commands)


def test_the_rollouts_record_makes_ready_only_what_a_rollout_drained(capsys, gateway):
    mark = gateway.dir + "/rollout-drained.json"
    code, result = server(capsys, gateway, servers=["%s/node-1" % QWEN], state="drain", mark=mark)
    assert code == 0 and result["changed"], result
    assert json.loads(open(mark, encoding="utf-8").read()) == ["%s/node-1" % QWEN]
    # an operator drains node-2 by hand: not the rollout's
    gateway.answer("set server %s/node-2 state drain" % QWEN)

    code, info = run_module(haproxy_info.main, {"socket": gateway.path, "mark": mark}, capsys)[:2]
    assert code == 0 and info["marked"] == ["%s/node-1" % QWEN], info

    names = ["%s/node-1" % QWEN, "%s/node-2" % QWEN]
    code, check = server(capsys, gateway, servers=names, state="ready", mark=mark, only_marked=True,
                         _ansible_check_mode=True)
    assert code == 0 and check["changed"] and check["readied"] == ["%s/node-1" % QWEN], check
    assert gateway.admin("%s/node-1" % QWEN) == "drain"

    code, result = server(capsys, gateway, servers=names, state="ready", mark=mark, only_marked=True)
    assert code == 0 and result["readied"] == ["%s/node-1" % QWEN], result
    assert gateway.admin("%s/node-1" % QWEN) == "ready" and gateway.admin("%s/node-2" % QWEN) == "drain"
    assert json.loads(open(mark, encoding="utf-8").read()) == []
    code, again = server(capsys, gateway, servers=names, state="ready", mark=mark, only_marked=True)
    assert code == 0 and not again["changed"] and gateway.admin("%s/node-2" % QWEN) == "drain", again


def test_a_drain_that_would_leave_a_model_with_no_server_in_rotation_is_refused_or_said(capsys, gateway):
    mark = gateway.dir + "/rollout-drained.json"
    # node-1 and node-2 in the same batch: node-3 is down
    gateway.server("%s/node-3" % QWEN).health = "DOWN"
    code, first = server(capsys, gateway, servers=["%s/node-1" % QWEN], state="drain", mark=mark, drain_last=False)
    assert code == 0 and first["changed"], first
    code, refused = server(capsys, gateway, servers=["%s/node-2" % QWEN], state="drain", mark=mark, drain_last=False)
    assert code == 1 and refused["failed"] and refused["last"] == [QWEN], refused
    assert "not draining %s/node-2" % QWEN in refused["msg"] and "no other server in rotation" in refused["msg"]
    assert "%s/node-1 DRAIN (drain)" % QWEN in refused["msg"] and "%s/node-3 DOWN (ready)" % QWEN in refused["msg"]
    assert gateway.admin("%s/node-2" % QWEN) == "ready"
    assert json.loads(open(mark, encoding="utf-8").read()) == ["%s/node-1" % QWEN]
    # asked for, it drains, and says so
    code, forced = server(capsys, gateway, servers=["%s/node-2" % QWEN], state="drain", mark=mark, drain_last=True)
    assert code == 0 and gateway.admin("%s/node-2" % QWEN) == "drain", forced
    assert any("no other server in rotation" in w for w in warnings_text(forced)), forced
    # the only server of a model: drained, said
    code, alone = server(capsys, gateway, servers=["llmfleet_small/node-1"], state="drain", drain_last=False)
    assert code == 0 and any("llmfleet_small has no other server" in w for w in warnings_text(alone)), alone


def test_a_drain_that_takes_nothing_out_of_rotation_is_neither_refused_nor_said(capsys, gateway):
    """A new fleet's first rollout: every server DOWN (no engine runs yet) - draining one takes nothing from the
    model's clients, so it is not refused as the last one in rotation, and the model's only server is drained
    without the warning."""
    mark = gateway.dir + "/rollout-drained.json"
    for name in ("node-1", "node-2", "node-3"):
        gateway.server("%s/%s" % (QWEN, name)).health = "DOWN"
    gateway.server("llmfleet_small/node-1").health = "DOWN"
    code, first = server(capsys, gateway, servers=["%s/node-1" % QWEN, "llmfleet_small/node-1"], state="drain",
                         mark=mark, drain_last=False)
    assert code == 0 and first["changed"] and not first.get("last"), first
    assert not any("no other server" in w for w in warnings_text(first)), first
    assert gateway.admin("%s/node-1" % QWEN) == "drain" and gateway.admin("llmfleet_small/node-1") == "drain"
    # node-2 drained too (its batch): the only server left UP is none, and none of the drained was in rotation
    code, second = server(capsys, gateway, servers=["%s/node-2" % QWEN], state="drain", mark=mark, drain_last=False)
    assert code == 0 and gateway.admin("%s/node-2" % QWEN) == "drain", second


def test_a_server_the_gateway_could_not_resolve_is_named(capsys, gateway):
    gateway.server("%s/node-3" % QWEN).admin |= RMAINT
    code, info = run_module(haproxy_info.main, {"socket": gateway.path}, capsys)[:2]
    assert code == 0 and info["unresolved"] == ["%s/node-3" % QWEN], info
    assert any("could not resolve the address of its server %s/node-3" % QWEN in w for w in warnings_text(info)), info
    assert [row["status"] for row in info["servers"] if row["server"] == "node-3"] == ["MAINT (resolution)"]


def test_two_drains_at_once_are_one_after_the_other_under_the_gateways_lock(gateway):
    """A batch drains several nodes at once: each drain reads, decides and sets under the lock beside the record,
    so the second sees the first's drain (and refuses to drain the model's last server in rotation)."""
    mark = gateway.dir + "/rollout-drained.json"
    gateway.server("%s/node-3" % QWEN).health = "DOWN"
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def drain(name):
        args = {"ANSIBLE_MODULE_ARGS": {"socket": gateway.path, "servers": ["%s/%s" % (QWEN, name)], "state": "drain",
                                        "mark": mark, "drain_last": False}}
        path = "%s/args-%s.json" % (gateway.dir, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(args, handle)
        return subprocess.Popen([sys.executable, "-m", "ansible_collections.llmfleet.engines.plugins.modules.haproxy_server",
                                 path], stdout=subprocess.PIPE, text=True, env=env)

    fd = os.open(mark + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        runs = [drain("node-1"), drain("node-2")]
        time.sleep(1.5)
        # both wait for the lock: nothing read, nothing set
        assert all(proc.poll() is None for proc in runs) and gateway.commands == []
    finally:
        os.close(fd)
    results = [json.loads(proc.communicate(timeout=60)[0]) for proc in runs]
    # whichever came first drained; the other saw it and drained nothing
    assert sorted(bool(r.get("failed")) for r in results) == [False, True], results
    assert sorted(gateway.admin("%s/%s" % (QWEN, n)) for n in ("node-1", "node-2")) == ["drain", "ready"]
    assert len(json.loads(open(mark, encoding="utf-8").read())) == 1
