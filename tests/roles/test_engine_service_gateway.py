"""The engine_service role's rollout behind a real HAProxy gateway (Debian's haproxy, started by the test
on 127.0.0.1 with the configuration llmfleet.engines.engine_gateway_haproxy_cfg renders), run for real
against the fake systemd (tests/roles).

The gateway fronts the node's model with two servers: the node's unit (the fake vllm serve, which stops
as vLLM 0.32.0 does: completions answered 500 while /health says 200, for the whole shutdown timeout)
and another server (tests.unit.plugins.vllm_fakes.FakeVllm) that stands for the rest of the fleet. The
inventory has the gateway in the group llmfleet_engine_gateway, so the role drains the node's server
through the gateway's admin socket (llmfleet.engines.haproxy_server, delegated to the gateway) before it
stops the unit, and makes it ready after the readiness gate.

What it proves: during an upgrade with a client sending requests to the gateway only, no request fails;
the gateway saw the node's server DRAIN while the unit stopped, and no request reached the node while it
was drained; the server is ready again after. A gateway whose socket cannot be reached, or that lacks the
node's server, fails the drain before anything stops, and the node serves as before.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy
from tests.haproxy_gateway import Gateway
from tests.roles.conftest import http_json
from tests.unit.plugins.vllm_fakes import FakeVllm

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"
STARTING = ("start", "restart", "try-restart", "reload-or-restart", "stop", "kill")


class Client(threading.Thread):
    """Completions sent to the gateway one after the other until stopped; counts answers and failures, and
    samples the gateway's view of the node's server (status, sessions) after each answer."""

    def __init__(self, gateway, model, node_server):
        super().__init__(daemon=True)
        self.gateway, self.model, self.node_server = gateway, model, node_server
        self.ok = self.failed = 0
        self.failures = []
        self.samples = []
        self.halt = threading.Event()

    def run(self):
        body = json.dumps({"model": self.model, "prompt": "ping", "max_tokens": 1}).encode()
        while not self.halt.is_set():
            request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % self.gateway.port, data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    answer.read()
                self.ok += 1
            except (urllib.error.URLError, OSError) as exc:
                self.failed += 1
                self.failures.append(str(exc))
            self.samples.append(self.gateway.statuses().get(self.node_server))
            time.sleep(0.02)


@pytest.fixture()
def fleet(served, tmp_path):
    """The served node's model (conftest's Served: OLD serves it, NEW is on disk) behind a gateway, with another
    server beside it; both stopped after the test."""
    model = served.node.models[0]
    other = FakeVllm(models=(model["name"],), version="0.11.2").start()
    gateway = Gateway(tmp_path / "gateway", {"node": model["port"], "other": other.port}, model["name"])
    try:
        yield model, gateway, other
    finally:
        gateway.stop()
        other.stop()


def gateway_vars(gateway, model, **more):
    return {"gw": dict({"engine_gateway_models": [{"name": model["name"], "port": gateway.port}],
                        "engine_gateway_socket": gateway.socket,
                        "engine_gateway_state_file": str(gateway.dir / "servers.state")}, **more)}


@pytest.mark.parametrize("broken", ["socket", "server"])
def test_a_gateway_that_cannot_drain_the_node_stops_nothing(served, fleet, broken, tmp_path):
    node = served.node
    model, gateway, _other = fleet
    unit = node.unit(model)
    pid = node.main_pid(unit)
    unit_text = (node.unit_dir / unit).read_text()
    gateways = gateway_vars(gateway, model)
    lacking = None
    if broken == "socket":
        gateways["gw"]["engine_gateway_socket"] = str(gateway.dir / "nothing-here.sock")
    else:
        # a gateway that fronts the model without this node (its configuration was made before the node
        # joined): its other server must not be drained either
        lacking = Gateway(tmp_path / "gateway-lacking", {"other": _other.port}, model["name"])
        gateways = gateway_vars(lacking, model)
    try:
        run = node.play(pending=NEW, current=OLD, gateways=gateways)
    finally:
        try:
            lacking_states = lacking.statuses() if lacking else {}
        finally:
            if lacking:
                lacking.stop()
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    error = run.result["error"] or ""
    assert "draining the node on the gateways failed" in error and "nothing was stopped" in error, error
    assert ("nothing-here.sock did not answer" in error) if broken == "socket" else (
        "has no server llmfleet_%s/node" % model["name"] in error and "llmfleet_%s/other" % model["name"] in error), error
    assert run.verbs(*STARTING) == [], run.calls
    assert node.main_pid(unit) == pid and node.current() == OLD
    # nor rewritten (a check the serve scenario made under real systemd, now made here)
    assert (node.unit_dir / unit).read_text() == unit_text
    assert gateway.statuses()["node"][0] != "DRAIN"
    assert all(not status.startswith("DRAIN") for status, _sessions in lacking_states.values()), lacking_states


def test_a_drain_an_interrupted_rollout_left_is_made_ready_by_the_next_run(served, fleet):
    """The rollout was cut after its drain (saved to the state file and the gateway's record): the next run,
    steady, makes the server ready after its gate; the other server, drained by hand, stays drained."""
    node = served.node
    model, gateway, _other = fleet
    gateway.wait_up("node", "other")
    name = "%s/node" % gateway.backend
    mark = gateway.dir / "rollout-drained.json"
    assert _haproxy.command(gateway.socket, "set server %s state drain" % name).strip() == ""
    mark.write_text(json.dumps([name]))
    _haproxy.save_state(gateway.socket, gateway.state_file)
    assert _haproxy.command(gateway.socket, "set server %s/other state drain" % gateway.backend).strip() == ""

    run = node.play(gateways=gateway_vars(gateway, model))
    assert run.rc == 0 and run.result["mode"] == "steady", run.explain()
    assert _haproxy.admin_states(gateway.socket)[name] == "ready"
    assert _haproxy.admin_states(gateway.socket)["%s/other" % gateway.backend] == "drain"
    assert json.loads(mark.read_text()) == []
    gateway.wait_up("node")
    # and it stays ready across a reload of the gateway (the state file was saved with it)
    gateway.reload()
    assert _haproxy.admin_states(gateway.socket)[name] == "ready"


def test_an_upgrade_behind_the_gateway_is_drained_through_it_and_no_request_fails(served, fleet):
    node = served.node
    model, gateway, _other = fleet
    unit = node.unit(model)
    gateway.wait_up("node", "other")

    client = Client(gateway, model["name"], "node")
    client.start()
    try:
        deadline = time.monotonic() + 20
        while client.ok < 20:
            assert time.monotonic() < deadline and client.is_alive(), client.failures
            time.sleep(0.05)
        run = node.play(pending=NEW, current=OLD, gateways=gateway_vars(gateway, model))
        gateway.wait_up("node")
        served_before = client.ok
        deadline = time.monotonic() + 20
        while client.ok < served_before + 20:
            assert time.monotonic() < deadline, client.failures
            time.sleep(0.05)
    finally:
        client.halt.set()
        client.join(60)
    assert run.rc == 0, run.explain()
    assert client.failed == 0, "%d of %d requests failed through the gateway: %s" % (
        client.failed, client.ok + client.failed, client.failures[:5])

    drain = run.task("Drain this node's servers on each gateway")
    assert drain and drain[0]["result"]["results"][0]["changed"], run.explain()
    assert drain[0]["result"]["results"][0]["servers"][0]["status"] == "DRAIN"
    # saved where the gateway's configuration loads it after a reload, and ready again at the end
    saved = (gateway.dir / "servers.state").read_text()
    assert [line.split()[6] for line in saved.splitlines() if " node " in line] == ["0"], saved
    stop = run.index(lambda c: c[0] == "systemctl" and "stop" in c and unit in " ".join(c))
    start = run.index(lambda c: c[0] == "systemctl" and "start" in c and unit in " ".join(c))
    assert stop < start, run.calls
    # while the node's server was drained the gateway sent it nothing: its session count did not move
    drained = [sample for sample in client.samples if sample and sample[0].startswith("DRAIN")]
    assert drained, "the client never saw the node's server drained: %s" % client.samples[-20:]
    assert len({sessions for _status, sessions in drained}) == 1, drained
    # and it is back: ready, UP, taking requests again
    assert gateway.statuses()["node"][0] == "UP"
    assert client.samples[-1][1] > drained[0][1], "no request reached the node after the upgrade"
    status, body = http_json(model["port"], "/version")
    assert status == 200 and body["version"] == "0.15.1"
    assert node.current() == NEW
