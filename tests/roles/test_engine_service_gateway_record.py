"""The engine_service role's rollout against a gateway's admin socket, run for real against the fake systemd,
with the fake HAProxy admin socket (tests/fake_haproxy.py: HAProxy's commands, admin bits and answers), so
that these run where Debian's haproxy is not installed (tests/roles/test_engine_service_gateway.py has the real
one, with traffic): the gateway's state is put right on every run.

- a failed drain on one gateway makes the servers already drained on another ready again, and stops nothing;
- after a rollback that served, the gateway's servers are made ready;
- a server a rollout left drained (an interrupted rollout: the gateway's record says so) is made ready by the
  next steady run after its gate, and an operator's drain or maintenance is left alone.
"""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest

from tests.fake_haproxy import FakeHaproxy

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"
STARTING = ("start", "restart", "try-restart", "reload-or-restart", "stop", "kill")
NEW_FAILS = {"FAKE_VLLM_SERVE_FAIL": "start", "FAKE_VLLM_SERVE_FAIL_VERSIONS": "0.15.1"}


class Gw:
    """A fake gateway in a short directory (a Unix socket's path is at most 107 bytes) fronting the node's model
    with the node's server and another one; ``broken``: its socket is not there."""

    def __init__(self, model, broken=False):
        self.dir = tempfile.mkdtemp(prefix="gw")
        self.backend = "llmfleet_" + model["name"]
        self.name = "%s/node" % self.backend
        self.mark = self.dir + "/rollout-drained.json"
        self.fake = None if broken else FakeHaproxy(self.dir + "/admin.sock", {
            self.backend: {"node": "127.0.0.1:%d" % model["port"], "other": "127.0.0.1:1"}})
        self.vars = {"engine_gateway_models": [{"name": model["name"], "port": 1}],
                     "engine_gateway_socket": self.dir + ("/nothing-here.sock" if broken else "/admin.sock"),
                     "engine_gateway_state_file": self.dir + "/servers.state"}

    def marks(self):
        with open(self.mark, encoding="utf-8") as handle:
            return json.load(handle)

    def close(self):
        if self.fake:
            self.fake.stop()
        shutil.rmtree(self.dir)


@pytest.fixture()
def gateways(node):
    made = []

    def make(broken=False):
        made.append(Gw(node.models[0], broken))
        return made[-1]

    yield make
    for gateway in made:
        gateway.close()


def serve_old(node, gateway, **extra):
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    first = node.play(gateways={"gw1": gateway.vars}, extra_vars=extra)
    assert first.rc == 0, first.explain()
    assert gateway.fake.admin(gateway.name) == "ready"
    return node.unit(node.models[0])


def test_a_failed_drain_makes_the_servers_already_drained_ready_again(node, gateways):
    good, broken = gateways(), gateways(broken=True)
    unit = serve_old(node, good)
    pid = node.main_pid(unit)
    node.make_env(*NEW.split("-"))
    run = node.play(pending=NEW, current=OLD, gateways={"gw1": good.vars, "gw2": broken.vars})
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert "draining the node on the gateways failed" in (run.result["error"] or ""), run.result
    # drained on gw1 before gw2 failed, then made ready again there; nothing stopped
    drained = [c for c in good.fake.commands if c == "set server %s state drain" % good.name]
    assert drained, good.fake.commands
    assert good.fake.commands.index(drained[0]) < good.fake.commands.index("set server %s state ready" % good.name)
    assert good.fake.admin(good.name) == "ready" and good.marks() == []
    assert run.verbs(*STARTING) == [], run.calls
    assert node.main_pid(unit) == pid and node.current() == OLD


def test_after_a_rollback_that_served_the_gateways_servers_are_made_ready(node, gateways):
    gateway = gateways()
    failing = {"engine_service_environment": NEW_FAILS}
    serve_old(node, gateway, **failing)
    node.make_env(*NEW.split("-"))
    run = node.play(pending=NEW, current=OLD, gateways={"gw1": gateway.vars}, extra_vars=failing)
    assert run.rc != 0 and run.result["rolled_back"] and node.current() == OLD, run.explain()
    assert "set server %s state drain" % gateway.name in gateway.fake.commands
    assert gateway.fake.admin(gateway.name) == "ready", gateway.fake.commands
    assert gateway.marks() == []


def test_a_server_a_rollout_left_drained_is_made_ready_by_the_next_run_and_a_hand_made_drain_is_left(node, gateways):
    gateway = gateways()
    unit = serve_old(node, gateway)
    pid = node.main_pid(unit)
    # an interrupted rollout: the server drained, the gateway's record says the rollout did it; an operator
    # drained the other server by hand
    gateway.fake.answer("set server %s state drain" % gateway.name)
    with open(gateway.mark, "w", encoding="utf-8") as handle:
        json.dump([gateway.name], handle)
    gateway.fake.answer("set server %s/other state drain" % gateway.backend)

    run = node.play(gateways={"gw1": gateway.vars})
    assert run.rc == 0, run.explain()
    assert run.result["mode"] == "steady" and run.verbs(*STARTING) == [], run.calls
    assert gateway.fake.admin(gateway.name) == "ready", gateway.fake.commands
    assert gateway.fake.admin("%s/other" % gateway.backend) == "drain"
    assert gateway.marks() == [] and node.main_pid(unit) == pid

    # an operator's maintenance of the node's server is left as it is by every run
    gateway.fake.answer("set server %s state maint" % gateway.name)
    again = node.play(gateways={"gw1": gateway.vars})
    assert again.rc == 0 and gateway.fake.admin(gateway.name) == "maint", again.explain()
    assert again.result["warnings"] == [], again.result

    # a gateway that cannot be asked: the node serves, and the run says so
    unreachable = dict(gateway.vars, engine_gateway_socket=gateway.dir + "/nothing-here.sock")
    down = node.play(gateways={"gw1": unreachable})
    assert down.rc == 0 and node.main_pid(unit) == pid, down.explain()
    (warning,) = down.result["warnings"]
    assert warning.startswith("making ready on gw1 the servers a rollout left drained (%s) failed: " % gateway.name)
    assert "nothing-here.sock did not answer" in warning, warning
