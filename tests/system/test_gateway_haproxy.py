"""The engine_gateway role's HAProxy with traffic: a real haproxy (Debian's package) started by the test with
the configuration ``engine_gateway_haproxy_cfg`` renders (plugins/filter/engine_gateway.py), before two fake
vLLM servers on 127.0.0.1 (tests/unit/plugins/vllm_fakes.py's FakeVllm, one per inventory host), driven through
the modules haproxy_server and haproxy_info as Ansible runs them (``python <module>.py args.json``).

haproxy runs in master-worker mode (``-W``, in the foreground, ``-p`` pidfile), on 127.0.0.1 and free ports,
its admin socket and state file under the test's temporary directory, health checks every second; it is
stopped by its PID (SIGTERM to the master) and a reload is SIGUSR2 to the master, as systemd's unit does it.

What it proves:

- both servers come UP (haproxy_info) and the gateway spreads the requests over them;
- a drain through haproxy_server (``state: drain``, ``wait_idle``) sends every later request to the other
  server, ``ready`` puts the server back in rotation; check mode says what would change, with its diff, and
  changes nothing;
- a server that answers every completion 500 while its /health still answers 200 (vLLM 0.32.0 for several
  seconds after SIGTERM), not drained, costs a client of N sequential requests no failure, thanks to the
  default ``retry-on`` with 500; the same configuration without 500 in ``retry-on`` lets failures through
  (so a default that lost its 500 fails this test);
- a server killed outright (its listening socket closed: connections refused) costs the client no failure
  (``conn-failure`` retried on the other server), and haproxy marks it DOWN; the time it takes is printed;
- a drain saved with ``save_state`` survives a reload (``load-server-state-from-file``); without the saved
  state the reloaded gateway puts the server back in rotation;
- a drained server whose engine then stopped (DOWN, as during a rollout) is made ready again by ``state:
  ready`` run before haproxy has seen the engine back (the rollout's order: its readiness gate, then ready): once
  its checks pass it is UP, not left drained;
- an admin socket nobody listens on fails the module with a message naming the socket; a server the gateway
  lacks fails it naming that server and the ones the gateway has, before any server's state changes.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy
from tests.haproxy_gateway import Gateway
from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.vllm_fakes import FakeVllm

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "build" / "collections"
MODULES = REPO / "plugins" / "modules"
GATEWAY = filter_plugin("engine_gateway")
MODEL = "tiny"
BACKEND = GATEWAY.BACKEND_PREFIX + MODEL
HOSTS = ("n1", "n2")
COMPLETION = json.dumps({"model": MODEL, "prompt": "ping", "max_tokens": 1})
# the pause between a request's headers and its body (see complete())
BODY_AFTER = 0.005


class Engine(FakeVllm):
    """A fake vLLM serving MODEL that names itself (``server``) in each completion it answers 200.
    ``completion = 500``: a stopping vLLM (completions 500, /health 200); ``stop()``: killed (the listening
    socket closed, connections refused); ``start()`` again: back on the same port."""

    def __init__(self, name):
        super().__init__(models=(MODEL,))
        self.name = name

    def answer(self, method, path, headers, body):
        status, data = super().answer(method, path, headers, body)
        if status == 200 and path == "/v1/completions":
            data["server"] = self.name
        return status, data

    def _listen(self):
        super()._listen()
        # haproxy closes its health checks' connections with a reset once it has read the status line: no
        # traceback for each
        self._server.handle_error = lambda request, client_address: None

    def completions(self):
        """How many completions it was sent (whatever it answered)."""
        return self.seen().count("POST /v1/completions")


@pytest.fixture
def engines():
    started = []
    try:
        for name in HOSTS:
            started.append(Engine(name).start())
        yield dict((engine.name, engine) for engine in started)
    finally:
        for engine in started:
            engine.stop()


@pytest.fixture
def gateway_of(tmp_path, engines):
    """``gateway_of(**values)``: a gateway before both engines, both servers UP; stopped after the test."""
    started = []

    def start(**values):
        root = tmp_path / ("gw%d" % len(started))
        gateway = Gateway(root, {name: engine.port for name, engine in engines.items()}, MODEL, **values)
        started.append(gateway)
        for host in HOSTS:
            gateway.wait_status(host, "UP")
        return gateway

    try:
        yield start
    finally:
        for gateway in started:
            gateway.stop()


def run_module(name, tmp_path, args):
    args_file = tmp_path / ("%s-args.json" % name)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    proc = subprocess.run([sys.executable, str(MODULES / (name + ".py")), str(args_file)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + proc.stdout + proc.stderr)


def statuses(gateway, tmp_path):
    """haproxy_info's status of each server of the model's backend."""
    result = run_module("haproxy_info", tmp_path, {"socket": gateway.socket, "backends": [BACKEND]})
    assert not result.get("failed"), result
    return {row["server"]: row["status"] for row in result["servers"]}


def complete(port, body=COMPLETION):
    """One completion through the gateway: (status, the server that answered or None). The body goes in a
    second TCP segment BODY_AFTER seconds after the headers, as a client that writes them separately (httpx,
    the openai client's) reaches a gateway over a network, or as any prompt larger than a segment does."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.putrequest("POST", "/v1/completions", skip_accept_encoding=True)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(body)))
        connection.connect()
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.endheaders()
        time.sleep(BODY_AFTER)
        connection.send(body.encode())
        response = connection.getresponse()
        data = response.read()
        return response.status, (json.loads(data).get("server") if response.status == 200 else None)
    finally:
        connection.close()


class Client:
    """Sequential completions through the gateway: ``served`` (server -> count) and ``failures`` (a status
    other than 200, or the error)."""

    def __init__(self, port):
        self.port = port
        self.served = collections.Counter()
        self.failures = []
        self.sent = 0

    def send(self, count):
        for _unused in range(count):
            self.one()
        return self

    def one(self):
        self.sent += 1
        try:
            status, server = complete(self.port)
        except (OSError, http.client.HTTPException) as exc:
            self.failures.append(repr(exc))
            return
        if status == 200:
            self.served[server] += 1
        else:
            self.failures.append(status)


def test_both_servers_come_up_and_share_the_requests(gateway_of, engines, tmp_path):
    gateway = gateway_of()
    assert statuses(gateway, tmp_path) == {"n1": "UP", "n2": "UP"}
    client = Client(gateway.port).send(20)
    assert client.failures == []
    assert client.served["n1"] > 0 and client.served["n2"] > 0, client.served
    assert sum(client.served.values()) == 20
    assert engines["n1"].completions() + engines["n2"].completions() == 20


def test_drain_sends_the_requests_to_the_other_server_and_ready_brings_it_back(gateway_of, engines, tmp_path):
    gateway = gateway_of()
    drain = {"socket": gateway.socket, "servers": [BACKEND + "/n1"], "state": "drain", "wait_idle": 5}

    checked = run_module("haproxy_server", tmp_path, dict(drain, _ansible_check_mode=True, _ansible_diff=True))
    assert not checked.get("failed"), checked
    assert checked["changed"] is True
    assert checked["diff"] == {"before": BACKEND + "/n1: ready\n", "after": BACKEND + "/n1: drain\n"}
    assert statuses(gateway, tmp_path) == {"n1": "UP", "n2": "UP"}  # nothing set in check mode

    drained = run_module("haproxy_server", tmp_path, drain)
    assert not drained.get("failed"), drained
    assert drained["changed"] is True and drained["busy"] == []
    assert [row["status"] for row in drained["servers"]] == ["DRAIN"]
    assert statuses(gateway, tmp_path) == {"n1": "DRAIN", "n2": "UP"}
    before = engines["n1"].completions()
    client = Client(gateway.port).send(20)
    assert client.failures == []
    assert client.served == {"n2": 20}
    assert engines["n1"].completions() == before

    again = run_module("haproxy_server", tmp_path, drain)
    assert again["changed"] is False, again  # already drained

    ready = run_module("haproxy_server", tmp_path, dict(drain, state="ready", wait_idle=0))
    assert not ready.get("failed"), ready
    assert ready["changed"] is True
    assert statuses(gateway, tmp_path) == {"n1": "UP", "n2": "UP"}
    client = Client(gateway.port).send(20)
    assert client.failures == []
    assert client.served["n1"] > 0 and client.served["n2"] > 0, client.served


@pytest.mark.parametrize("retry_on", [None, [item for item in GATEWAY.RETRY_ON if item != "500"]],
                         ids=["default-retry-on", "retry-on-without-500"])
def test_a_stopping_engine_answering_500_costs_the_client_nothing(gateway_of, engines, retry_on):
    """n1 answers every completion 500 and /health 200 (vLLM 0.32.0 after SIGTERM), not drained. Each request's
    body reaches haproxy after its headers (complete()): haproxy retries a request only when it holds the whole
    of it before it sends it to a server."""
    gateway = gateway_of() if retry_on is None else gateway_of(retry_on=retry_on)
    assert ("retry-on " + " ".join(retry_on or GATEWAY.RETRY_ON)) in gateway.text
    engines["n1"].completion = 500
    client = Client(gateway.port).send(200)
    assert engines["n1"].completions() > 0  # it was in rotation: the client's requests met its 500s
    print("\nretry-on %s: %d failures of 200, n1 sent %d completions and is %s, the backend retried %d, "
          "redispatched %d" % (" ".join(retry_on or GATEWAY.RETRY_ON), len(client.failures),
                               engines["n1"].completions(), gateway.status("n1"), gateway.backend_stat("wretr"),
                               gateway.backend_stat("wredis")))
    if retry_on is None:
        assert client.failures == []
        assert client.served == {"n2": 200}
    else:
        assert len(client.failures) > 0 and set(client.failures) == {500}, client.failures


def test_a_killed_engine_costs_the_client_nothing_and_goes_down(gateway_of, engines, tmp_path):
    gateway = gateway_of()
    client = Client(gateway.port).send(10)
    assert client.served["n1"] > 0, client.served
    stop = threading.Event()

    def traffic():
        while not stop.is_set():
            client.one()

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        time.sleep(0.2)
        sent, killed = client.sent, time.monotonic()
        engines["n1"].stop()  # its listening socket closed: connections refused, as after kill -9
        down = gateway.wait_status("n1", "DOWN", seconds=30)
        meanwhile = client.sent - sent
        after = client.sent
        while client.sent < after + 20 and time.monotonic() - killed < 60:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
    reason = [line.split(" : ", 1)[-1] for line in gateway.output().splitlines() if "n1 is DOWN" in line][:1]
    print("\nkilled n1: haproxy reported it DOWN after %.2f s (%s); %d requests sent meanwhile, %d in all, %d "
          "failures; the backend retried %d, redispatched %d" % (
              down, reason[0] if reason else "no reason logged", meanwhile, client.sent, len(client.failures),
              gateway.backend_stat("wretr"), gateway.backend_stat("wredis")))
    assert client.failures == []
    assert gateway.backend_stat("wredis") > 0  # requests did meet the dead server, and went to n2
    assert statuses(gateway, tmp_path)["n1"].startswith("DOWN")
    assert client.served["n2"] > 0


@pytest.mark.parametrize("save", [True, False], ids=["saved", "not-saved"])
def test_a_saved_drain_survives_a_reload(gateway_of, tmp_path, save):
    gateway = gateway_of()
    args = {"socket": gateway.socket, "servers": [BACKEND + "/n1"], "state": "drain"}
    if save:
        args["save_state"] = gateway.state_file
    drained = run_module("haproxy_server", tmp_path, args)
    assert not drained.get("failed"), drained
    assert drained["saved"] == (2 if save else 0)
    assert os.path.exists(gateway.state_file) is save
    if save:
        assert oct(os.stat(gateway.state_file).st_mode & 0o777) == "0o600"
    assert statuses(gateway, tmp_path)["n1"] == "DRAIN"

    old = gateway.worker
    assert gateway.reload() != old
    after = statuses(gateway, tmp_path)
    if save:
        assert after == {"n1": "DRAIN", "n2": "UP"}
    else:
        assert not after["n1"].startswith("DRAIN") and not after["n2"].startswith("DRAIN"), after
        assert _haproxy.admin_states(gateway.socket) == {"llmfleet_tiny/n1": "ready", "llmfleet_tiny/n2": "ready"}


def test_ready_undoes_the_drain_of_a_server_that_went_down(gateway_of, engines, tmp_path):
    """The rollout's order: drain, the engine stops (haproxy marks it DOWN), the engine is back and ready, then
    ``state: ready``, while haproxy's checks have not yet seen it back."""
    gateway = gateway_of()
    args = {"socket": gateway.socket, "servers": [BACKEND + "/n1"], "state": "drain"}
    assert run_module("haproxy_server", tmp_path, args)["changed"] is True
    engines["n1"].stop()
    gateway.wait_status("n1", "DOWN")
    engines["n1"].start()  # the same port again
    ready = run_module("haproxy_server", tmp_path, dict(args, state="ready"))
    assert not ready.get("failed"), ready
    assert ready["changed"] is True, ready  # the drain is undone, whatever the checks say now
    deadline = time.monotonic() + 20
    while gateway.status("n1").startswith("DOWN") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gateway.wait_status("n1", "UP", seconds=5) >= 0  # UP again, not DRAIN
    assert statuses(gateway, tmp_path) == {"n1": "UP", "n2": "UP"}


def test_an_unreachable_socket_or_an_unknown_server_fails_naming_it_and_changes_nothing(gateway_of, tmp_path):
    gateway = gateway_of()
    # a socket file nobody listens on any more (haproxy stopped), and one that is not there at all
    stale = str(tmp_path / "stale.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(stale)
    listener.close()
    for path in (stale, str(tmp_path / "absent.sock")):
        result = run_module("haproxy_server", tmp_path, {"socket": path, "servers": [BACKEND + "/n1"],
                                                         "state": "drain"})
        assert result.get("failed") is True, result
        assert path in result["msg"], result["msg"]

    result = run_module("haproxy_server", tmp_path, {"socket": gateway.socket, "state": "drain",
                                                     "servers": [BACKEND + "/n1", BACKEND + "/n3"]})
    assert result.get("failed") is True, result
    assert "no server %s/n3" % BACKEND in result["msg"], result["msg"]
    assert "%s/n1, %s/n2" % (BACKEND, BACKEND) in result["msg"], result["msg"]
    assert result["missing"] == [BACKEND + "/n3"]
    assert statuses(gateway, tmp_path) == {"n1": "UP", "n2": "UP"}  # n1, named first, was not drained
