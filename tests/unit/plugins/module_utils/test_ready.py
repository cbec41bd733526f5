"""_ready: the readiness gate against a real HTTP server on 127.0.0.1 and a fake systemd unit
(``systemctl``/``journalctl`` scripts run through the real ``_proc.Runner``)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import threading
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _ready
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import HttpClient
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner
from tests.unit.plugins import vllm_fakes
from tests.unit.plugins.vllm_fakes import FakeUnit, FakeVllm, ProcessVllm, base_url, free_port, has_ipv6_loopback

SHOW = ("show -p ActiveState -p SubState -p ActiveEnterTimestampMonotonic -p ExecMainStartTimestampMonotonic "
        "-p NRestarts -p Result -p MainPID vllm.service")
OOM = [
    "INFO 05-04 10:00:01 [api_server.py:1090] vLLM API server version 0.20.0",
    "INFO 05-04 10:00:09 [model_runner.py:1100] Loading model weights took 15.2 GiB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "vllm.service: Main process exited, code=exited, status=1/FAILURE",
    "vllm.service: Failed with result 'exit-code'.",
]


@pytest.fixture
def servers():
    started = []

    def make(after=0.0, **kw):
        fake = FakeVllm(**kw)
        started.append(fake)
        return fake.start(after)

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def unit(tmp_path):
    return FakeUnit(tmp_path)


def gate(url, model="m", api_key=None, unit=None, journal_lines=40, deadline_from_unit=True, **kw):
    client = HttpClient(timeout=2, retries=0)
    if unit is not None:
        unit = _ready.Unit(Runner(), "vllm.service", str(unit.bin / "systemctl"), str(unit.bin / "journalctl"),
                           journal_lines)
    return _ready.Gate(client, url, model, unit=unit, api_key=api_key, from_unit_start=deadline_from_unit, **kw)


def timed(fn):
    started = time.monotonic()
    try:
        return fn(), time.monotonic() - started
    except _ready.ReadyError as exc:
        return exc, time.monotonic() - started


def test_refused_while_loading_then_ready_within_one_call(servers):
    fake = servers(after=1.5)  # connection refused for 1.5 s, as while vLLM loads
    result, took = timed(gate(fake.url, wait=10).run)
    assert (result["ready"], result["phase"], result["models"], result["version"]) == (True, "ready", ["m"], None)
    assert 1.5 <= result["health_s"] <= result["since_start_s"] < 5
    assert 0 < result["completion_ms"] < 2000
    assert "msg" not in result and "journal" not in result and result["unit_state"] is None
    assert took < 5
    assert fake.seen() == ["GET /health", "GET /v1/models", "POST /v1/completions"]
    assert fake.requests[2]["body"] == {"model": "m", "prompt": "ping", "max_tokens": 1}


def test_not_ready_after_wait_returns_without_failing(servers):
    fake = servers(health=503)
    result, took = timed(gate(fake.url, wait=2).run)
    assert (result["ready"], result["phase"], result["health_s"], result["models"]) == (False, "health", None, None)
    assert result["msg"] == (
        "vLLM at %s, model m: not ready yet after 2 s since this check began (deadline 900 s): phase health "
        "(last: GET %s/health: answered 503 Service Unavailable)" % (fake.url, fake.url))
    assert 2 <= took < 3.5
    assert fake.seen() == ["GET /health"] * 3  # at 0, 1 and 2 s


def test_nothing_listening_is_phase_starting(servers):
    fake = FakeVllm()  # never started
    result = gate(fake.url, wait=0).run()
    assert (result["ready"], result["phase"]) == (False, "starting")
    assert result["msg"] == (
        "vLLM at %s, model m: not ready yet after 0 s since this check began (deadline 900 s): phase starting "
        "(last: GET %s/health: connection failed: [Errno 111] Connection refused)" % (fake.url, fake.url))


def test_completion_loading_then_ready(servers):
    fake = servers(completion=[503, 200])
    result = gate(fake.url, wait=5).run()
    assert (result["ready"], result["phase"]) == (True, "ready")
    assert fake.seen() == ["GET /health", "GET /v1/models", "POST /v1/completions"] * 2


def test_completion_not_answering_yet_is_phase_completion(servers):
    fake = servers(completion=503)
    result = gate(fake.url, wait=0).run()
    assert (result["ready"], result["phase"], result["models"], result["completion_ms"]) == (False, "completion", ["m"], None)
    assert result["msg"].endswith(
        "phase completion (last: POST %s/v1/completions: answered 503 Service Unavailable: loading)" % fake.url)


def test_deadline_passed_without_unit_fails(servers):
    fake = servers(health=503)
    exc, took = timed(gate(fake.url, deadline=1, wait=30).run)
    assert isinstance(exc, _ready.DeadlinePassed) and isinstance(exc, LlmfleetError)
    assert exc.msg == (
        "vLLM at %s, model m: not ready after 1 s since this check began, past the deadline of 1 s: phase health "
        "(last: GET %s/health: answered 503 Service Unavailable)" % (fake.url, fake.url))
    assert (exc.details["ready"], exc.details["phase"], "journal" in exc.details) == (False, "health", False)
    assert 1 <= took < 2.5


def test_deadline_counts_from_the_units_start_and_quotes_the_journal(servers, unit):
    fake = servers(health=503)
    unit.set(started_ago=1000.2, restarts=2)
    unit.journal(OOM[:2])
    exc, took = timed(gate(fake.url, unit=unit, deadline=900, wait=30).run)
    assert isinstance(exc, _ready.DeadlinePassed)
    assert exc.msg == (
        "vLLM at %s (unit vllm.service), model m: not ready after 1000 s since the unit started, past the deadline "
        "of 900 s: phase health (last: GET %s/health: answered 503 Service Unavailable); systemd restarted it 2 "
        "times; journal of vllm.service (last lines; 2 in 'journal'): %s / %s" % (fake.url, fake.url, OOM[0], OOM[1]))
    assert exc.details["journal"] == OOM[:2]
    assert 1000 < exc.details["since_start_s"] < 1002
    assert exc.details["unit_state"]["NRestarts"] == 2
    assert took < 2  # at the first attempt
    assert unit.calls() == ["systemctl " + SHOW, "journalctl -u vllm.service -n 40 --no-pager -o cat"]


def test_a_unit_started_days_ago_is_judged_by_a_window_of_this_call(servers, unit):
    """Issue 17, item 4: on an hourly run the unit started days ago; a busy server's slow first
    answer is "not yet" within the window of this run, not past a deadline counted from the start."""
    fake = servers(health=[503, 200])
    unit.set(started_ago=3 * 86400.0)
    result = gate(fake.url, unit=unit, deadline=30, wait=30, deadline_from_unit=False).run()
    assert (result["ready"], result["phase"]) == (True, "ready")
    assert result["since_start_s"] < 10
    # the same server, judged from the unit's start, fails at the first slow answer
    fake.health = [503, 200]
    exc, _took = timed(gate(fake.url, unit=unit, deadline=30, wait=30).run)
    assert isinstance(exc, _ready.DeadlinePassed)
    # a failed unit still fails at once within a window
    unit.set(active="failed", sub="failed", result="exit-code")
    exc, took = timed(gate(fake.url, unit=unit, deadline=30, wait=30, deadline_from_unit=False).run)
    assert isinstance(exc, _ready.UnitDead) and took < 2


def test_since_start_is_from_the_units_start(servers, unit):
    fake = servers()
    start_us = unit.set(started_ago=100.0)
    result = gate(fake.url, unit=unit, wait=0).run()
    assert (result["ready"], result["phase"]) == (True, "ready")
    assert 100 <= result["health_s"] <= result["since_start_s"] < 102
    assert result["unit_state"] == {
        "ActiveState": "active", "SubState": "running", "ActiveEnterTimestampMonotonic": start_us,
        "ExecMainStartTimestampMonotonic": start_us, "NRestarts": 0, "Result": "success", "MainPID": os.getpid()}
    assert unit.calls() == ["systemctl " + SHOW]


def test_model_missing_fails_at_once_listing_the_served_models(servers):
    fake = servers(models=["Qwen/Qwen3-8B", "lora-a"])
    exc, took = timed(gate(fake.url, model="Qwen/Qwen3-32B", wait=30).run)
    assert isinstance(exc, _ready.ModelMissing)
    assert exc.msg == (
        "vLLM at %s, model Qwen/Qwen3-32B: the server does not serve the model; it serves: Qwen/Qwen3-8B, lora-a "
        "(the model's name is vLLM's --served-model-name, else the model path)" % fake.url)
    assert (exc.details["phase"], exc.details["models"]) == ("models", ["Qwen/Qwen3-8B", "lora-a"])
    assert took < 1
    assert fake.seen() == ["GET /health", "GET /v1/models"]


def test_version_mismatch_fails_at_once(servers):
    fake = servers(version="0.19.1")
    exc, took = timed(gate(fake.url, version="0.20.0", wait=30).run)
    assert isinstance(exc, _ready.VersionMismatch)
    assert exc.msg == (
        "vLLM at %s, model m: %s/version answers 0.19.1, not 0.20.0: another server (an old one still running, or "
        "another process on that port) is the one answering" % (fake.url, fake.url))
    assert (exc.details["phase"], exc.details["version"], exc.details["models"]) == ("models", "0.19.1", None)
    assert took < 1
    assert fake.seen() == ["GET /health", "GET /version"]


def test_version_that_matches_is_returned(servers):
    fake = servers(version="0.20.0")
    result = gate(fake.url, version="0.20.0", wait=0).run()
    assert (result["ready"], result["version"]) == (True, "0.20.0")
    assert fake.seen() == ["GET /health", "GET /version", "GET /v1/models", "POST /v1/completions"]


@pytest.mark.parametrize("answered, wanted, same", [
    ("0.20.0", "0.20.0", True), ("0.20.0+cu129", "0.20.0", True), ("0.20.0+cu129", "0.20.0+cu129", True),
    ("0.20.0", "0.20.0+cu129", False), ("0.20.0+cu130", "0.20.0+cu129", False), ("0.20.01", "0.20.0", False),
    ("0.20", "0.20.0", False), (None, "0.20.0", False)])
def test_a_local_label_of_the_wanted_release_is_that_release(answered, wanted, same):
    assert _ready.version_is(answered, wanted) is same


def test_a_github_build_answers_its_release_with_a_local_label(servers):
    fake = servers(version="0.20.0+cu129")
    result = gate(fake.url, version="0.20.0", wait=0).run()
    assert (result["ready"], result["version"]) == (True, "0.20.0+cu129")


def test_api_key_is_sent_and_a_401_fails_without_leaking_it(servers):
    fake = servers(api_key="sk-right-key")
    result = gate(fake.url, api_key="sk-right-key", wait=0).run()
    assert result["ready"] is True
    # the key goes only with the requests vLLM checks it on: not /health
    assert [(r["path"], r["auth"]) for r in fake.requests] == [
        ("/health", None), ("/v1/models", "Bearer sk-right-key"), ("/v1/completions", "Bearer sk-right-key")]

    exc, took = timed(gate(fake.url, api_key="sk-wrong-key", wait=30).run)
    assert isinstance(exc, _ready.ServerRefused)
    assert exc.msg == (
        "vLLM at %s, model m: GET %s/v1/models answered 401 (Unauthorized): api_key is not the server's --api-key"
        % (fake.url, fake.url))
    assert "sk-wrong-key" not in repr(exc.details) and took < 1

    exc, _took = timed(gate(fake.url, wait=30).run)
    assert exc.msg == (
        "vLLM at %s, model m: GET %s/v1/models answered 401 (Unauthorized): give api_key, the server's --api-key"
        % (fake.url, fake.url))


def test_an_api_key_echoed_by_the_server_is_masked(servers):
    fake = servers(api_key="sk-right-key", echo_auth=True)
    exc, _took = timed(gate(fake.url, api_key="sk-wrong-key", wait=30).run)
    assert exc.msg == (
        "vLLM at %s, model m: GET %s/v1/models answered 401 (Unauthorized: Bearer ******** is not valid): "
        "api_key is not the server's --api-key" % (fake.url, fake.url))


def test_completion_without_one_choice_fails(servers):
    fake = servers(choices=0)
    exc, _took = timed(gate(fake.url, wait=30).run)
    assert isinstance(exc, _ready.ServerRefused)
    assert exc.msg == "vLLM at %s, model m: POST %s/v1/completions answered 200 with 0 choices instead of one choice" % (
        fake.url, fake.url)
    assert exc.details["phase"] == "completion"


def test_failed_unit_fails_at_once_with_the_journal(servers, unit):
    fake = FakeVllm()  # nothing listens: without the unit's state the call would wait 30 s
    unit.set(active="failed", sub="failed", result="exit-code")
    unit.journal(OOM)
    exc, took = timed(gate(fake.url, unit=unit, journal_lines=5, wait=30).run)
    assert isinstance(exc, _ready.UnitDead)
    assert exc.msg == (
        "vLLM at %s (unit vllm.service), model m: the unit is failed (SubState failed, Result exit-code), so the "
        "server will not answer; see why in its journal and start it again; journal of vllm.service (last lines; "
        "5 in 'journal'): %s" % (fake.url, " / ".join(OOM).rstrip(".")))
    assert exc.details["journal"] == OOM
    assert (exc.details["ready"], exc.details["phase"], exc.details["unit_state"]["Result"]) == (False, "starting", "exit-code")
    assert took < 1
    assert unit.calls() == ["systemctl " + SHOW, "journalctl -u vllm.service -n 5 --no-pager -o cat"]


def test_inactive_unit_fails_at_once(servers, unit):
    fake = servers()  # even a server that answers: the unit is not the one running it
    unit.set(active="inactive", sub="dead", started_ago=None, result="success")
    exc, _took = timed(gate(fake.url, unit=unit, wait=30).run)
    assert isinstance(exc, _ready.UnitDead)
    assert exc.msg == (
        "vLLM at %s (unit vllm.service), model m: the unit is inactive (SubState dead, Result success), so the "
        "server will not answer; see why in its journal and start it again; journal of vllm.service (last lines; "
        "0 in 'journal'): empty" % fake.url)
    assert exc.details["journal"] == [] and fake.seen() == []


def test_unit_that_fails_during_the_call(servers, unit):
    fake = servers(health=503)
    unit.set(active="activating", sub="start", started_ago=5)
    fails = threading.Timer(1.2, lambda: unit.set(active="failed", sub="failed", result="signal"))
    fails.start()
    try:
        exc, took = timed(gate(fake.url, unit=unit, wait=30).run)
    finally:
        fails.join()
    assert isinstance(exc, _ready.UnitDead)
    assert exc.msg.startswith("vLLM at %s (unit vllm.service), model m: the unit is failed (SubState failed, "
                              "Result signal)" % fake.url)
    assert exc.details["phase"] == "health" and 1.2 <= took < 3


def test_systemctl_that_fails_is_an_error(servers, unit):
    fake = servers()
    unit.show_fails(1, "System has not been booted with systemd as init system (PID 1). Can't operate.")
    exc, _took = timed(gate(fake.url, unit=unit, wait=30).run)
    assert isinstance(exc, _ready.UnitUnreadable)
    assert exc.msg == (
        "vLLM at %s (unit vllm.service), model m: reading the state of unit vllm.service failed: %s %s exited 1: "
        "System has not been booted with systemd as init system (PID 1). Can't operate; is it a systemd node, "
        "and may this user read the unit?" % (fake.url, unit.bin / "systemctl", SHOW))


def test_parse_show():
    assert _ready.parse_show("ActiveState=active\nNRestarts=3\nExecMainStartTimestampMonotonic=\nResult=success\nnoise\n") == {
        "ActiveState": "active", "NRestarts": 3, "ExecMainStartTimestampMonotonic": None, "Result": "success"}


def test_a_unit_that_died_and_waits_to_restart_fails_at_once(servers, unit):
    """Restart=on-failure: between two starts the unit is activating/auto-restart; every new start
    would count the deadline afresh, so the gate fails instead of waiting for ever."""
    fake = servers()
    unit.set(active="activating", sub="auto-restart", started_ago=None, result="exit-code")
    exc, took = timed(gate(fake.url, unit=unit, wait=30).run)
    assert isinstance(exc, _ready.UnitDead)
    assert exc.msg.startswith(
        "vLLM at %s (unit vllm.service), model m: the unit is activating (SubState auto-restart, Result exit-code),"
        " so the server will not answer" % fake.url)
    assert took < 1 and fake.seen() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="reading which process holds a port needs root")
def test_the_key_goes_only_to_the_units_own_process(servers, unit):
    """A local user that binds the port between the stop and the start (here: this test process,
    not the unit's main process) gets no API key; the unit's own process (or a child of it) does."""
    fake = servers(api_key="sk-right-key")
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        unit.set(main_pid=stranger.pid)  # the unit's process is another one than the port's holder
        exc, _took = timed(gate(fake.url, api_key="sk-right-key", unit=unit, wait=30).run)
        assert isinstance(exc, _ready.ServerRefused), exc
        assert "port %d is held by process %d" % (fake.port, os.getpid()) in exc.msg, exc.msg
        assert "the API key was not sent" in exc.msg
        assert all(r["auth"] is None for r in fake.requests), fake.requests
        assert "sk-right-key" not in repr(exc.details)
    finally:
        stranger.kill()
        stranger.wait()
    # the holder is the unit's main process: the gate goes on and sends the key
    unit.set(main_pid=os.getpid())
    assert gate(fake.url, api_key="sk-right-key", unit=unit, wait=0).run()["ready"] is True
    # and a parent of the holder (the holder is a child of the unit's main process)
    unit.set(main_pid=os.getppid())
    assert gate(fake.url, api_key="sk-right-key", unit=unit, wait=0).run()["ready"] is True


def test_the_far_end_of_a_connection_is_found_once_accepted():
    """socket_inode: the far end's socket (its own address is our peer, its peer is us): 0 while it waits in the
    listener's queue, its inode once accepted (held by the accepting process), None for no socket of this node."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), 5) as conn:
            mine, theirs = _ready.socket_address(conn.getsockname()), _ready.socket_address(conn.getpeername())
            assert _ready.socket_inode(theirs, mine) == 0
            accepted, _addr = listener.accept()
            with accepted:
                inode = _ready.socket_inode(theirs, mine)
                assert inode and os.readlink("/proc/self/fd/%d" % accepted.fileno()) == "socket:[%d]" % inode
                # (whether every other process of the machine could be read depends on it: not asserted)
                assert _ready.socket_holders(inode)[0] == {os.getpid()}
                assert _ready.socket_holders(inode, [os.getppid()]) == (set(), False)
            # our own end is not the far end; an address that is not this node's has no socket here
            assert _ready.socket_inode(mine, theirs) != inode
            assert _ready.socket_inode((ipaddress.ip_address("192.0.2.7"), theirs[1]), mine) is None
    assert os.getpid() in _ready.process_tree(os.getppid())


def test_the_kernel_finds_the_far_end_by_its_addresses_and_a_listener_never_stands_for_it(monkeypatch):
    """socket_inode asks sock_diag for the one socket (the tables are not read for it), and the kernel's answer
    counts only when it is that socket: asked for a connection that does not exist, the kernel answers with the
    listener of the port (bound to every address), which is not the far end of anything."""
    def no_tables(_proc):
        raise AssertionError("the tables were read: sock_diag did not answer")

    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), 5) as conn:
            mine, theirs = _ready.socket_address(conn.getsockname()), _ready.socket_address(conn.getpeername())
            with monkeypatch.context() as patched:
                patched.setattr(_ready, "_tcp_rows", no_tables)
                assert _ready.socket_inode(theirs, mine) == 0
                accepted, _addr = listener.accept()
                with accepted:
                    assert "socket:[%d]" % _ready.socket_inode(theirs, mine) == \
                        os.readlink("/proc/self/fd/%d" % accepted.fileno())
        # no connection from 192.0.2.9: the kernel's lookup ends at the listener, which does not count
        stranger = (ipaddress.ip_address("192.0.2.9"), 4444)
        for local in (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("192.0.2.7")):
            assert _ready._diag_inode((local, port), stranger) is None
            assert _ready.socket_inode((local, port), stranger) is None
    # without sock_diag (a sandbox without netlink) the tables answer the same
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), 5) as conn:
            accepted, _addr = listener.accept()
            with accepted, monkeypatch.context() as patched:
                patched.setattr(_ready, "_diag_inode", lambda local, remote: None)
                inode = _ready.socket_inode(_ready.socket_address(conn.getpeername()),
                                            _ready.socket_address(conn.getsockname()))
                assert os.readlink("/proc/self/fd/%d" % accepted.fileno()) == "socket:[%d]" % inode


def test_a_dual_stack_listeners_socket_is_found_by_its_ipv4_address():
    """A listener on :: takes 127.0.0.1 too: its socket is in /proc/net/tcp6, as ::ffff:127.0.0.1."""
    with socket.socket(socket.AF_INET6) as listener:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::", 0))
        listener.listen(1)
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1]), 5) as conn:
            accepted, _addr = listener.accept()
            with accepted:
                inode = _ready.socket_inode(_ready.socket_address(conn.getpeername()),
                                            _ready.socket_address(conn.getsockname()))
                assert os.readlink("/proc/self/fd/%d" % accepted.fileno()) == "socket:[%d]" % inode


# -- the gate talks only to the unit's own process -------------------------------------------------

KEY = "sk-peer-0123456789"
OTHER_UID = 65534  # nobody: another user's server


def loopbacks():
    """(gate's host, where the other user's server listens, where the unit's listens), the same port for both:
    the unit holding that port number somewhere does not make every listener on it the unit's."""
    second = "::1" if has_ipv6_loopback() else "127.0.0.3"
    cases = [("127.0.0.1", "127.0.0.1", second), ("127.0.0.2", "127.0.0.2", "127.0.0.1")]
    if has_ipv6_loopback():
        cases.append(("::1", "::1", "127.0.0.1"))
    # localhost: whichever address it resolves to first is the one the gate's connection reaches
    first = socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)[0][4][0]
    cases.append(("localhost", first, "127.0.0.1" if ":" in first else second))
    return cases


@pytest.fixture
def processes():
    started = []

    def make(**kw):
        fake = ProcessVllm(**kw)
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.mark.parametrize("host, other_at, unit_at", loopbacks())
def test_another_users_server_on_the_gates_address_gets_nothing(processes, unit, host, other_at, unit_at):
    """Issue 44, A.1: the gate's own connection must reach the unit's process. Another user's server on the
    address the gate connects to (the unit listening on that port at another address of the node) is asked
    nothing, the API key least of all, on 127.0.0.1, ::1, localhost and a second address of the node."""
    port = free_port(other_at)
    other = processes(user=OTHER_UID, host=other_at, port=port, api_key=KEY)
    own = processes(host=unit_at, port=port, api_key=KEY)
    unit.set(main_pid=own.pid)
    url = base_url(host, port)
    exc, took = timed(gate(url, api_key=KEY, unit=unit, wait=30).run)
    assert isinstance(exc, _ready.PeerRefused) and isinstance(exc, _ready.ServerRefused), exc
    # the kernel's name of the other user's process: the interpreter it runs
    comm = os.path.basename(vllm_fakes._interpreter_for(OTHER_UID))[:15]  # pylint: disable=protected-access
    where = "%s port %d" % (other_at, port) if host == other_at else "%s port %d (%s)" % (host, port, other_at)
    assert exc.msg == (
        "vLLM at %s (unit vllm.service), model m: %s is held by process %d (%s, user nobody), not by the "
        "unit's main process %d or its children: the gate's connection reached another program there, and nothing "
        "was sent to it (the API key was not sent)" % (url, where, other.pid, comm, own.pid)), exc.msg
    assert exc.details["phase"] == "starting" and took < 5 and KEY not in repr(exc.details)
    assert other.stop().requests == []  # not the key, not /health: nothing
    assert own.stop().requests == []


@pytest.mark.parametrize("host, _other_at, unit_at", loopbacks())
def test_the_units_own_server_passes_the_gate_and_gets_the_key(processes, unit, host, _other_at, unit_at):
    first = socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)[0][4][0]
    own = processes(host=first, api_key=KEY)
    unit.set(main_pid=own.pid)
    result = gate(base_url(host, own.port), api_key=KEY, unit=unit, wait=0).run()
    assert (result["ready"], result["phase"]) == (True, "ready")
    assert [(r["path"], r["auth"]) for r in own.stop().requests] == [
        ("/health", None), ("/v1/models", "Bearer " + KEY), ("/v1/completions", "Bearer " + KEY)]
    assert unit_at  # the same cases as above


@pytest.fixture
def descriptors_closed(monkeypatch):
    """Root without CAP_SYS_PTRACE (a podman or docker container's default): /proc/<pid>/fd of another process
    lists, and each of its links is refused (EACCES), as the kernel's ptrace check refuses them there."""
    own = "/proc/%d/" % os.getpid()

    def readlink(path):
        if path.startswith("/proc/") and "/fd/" in path and not path.startswith((own, "/proc/self/")):
            raise PermissionError(13, "Permission denied", path)
        return os.readlink(path)

    monkeypatch.setattr(_ready, "_readlink", readlink)


def test_where_descriptors_cannot_be_read_the_units_own_user_stands_for_its_process(processes, unit,
                                                                                    descriptors_closed):
    """The real engine under systemd in a container: root cannot read the service user's descriptors, so the
    socket's owner (/proc/net/tcp's uid) is judged instead - the unit's own server passes and gets the key."""
    own = processes(host="127.0.0.1", api_key=KEY)
    unit.set(main_pid=own.pid)
    result = gate(base_url("127.0.0.1", own.port), api_key=KEY, unit=unit, wait=0).run()
    assert (result["ready"], result["phase"]) == (True, "ready"), result
    assert [r["auth"] for r in own.stop().requests] == [None, "Bearer " + KEY, "Bearer " + KEY]


def test_where_descriptors_cannot_be_read_another_users_server_still_gets_nothing(processes, unit,
                                                                                  descriptors_closed):
    port = free_port("127.0.0.1")
    other = processes(user=OTHER_UID, host="127.0.0.1", port=port, api_key=KEY)
    own = processes(host="127.0.0.2", port=port, api_key=KEY)
    unit.set(main_pid=own.pid)
    url = base_url("127.0.0.1", port)
    exc, _took = timed(gate(url, api_key=KEY, unit=unit, wait=30).run)
    assert isinstance(exc, _ready.PeerRefused), exc
    assert "belongs to user nobody, not to the unit's user root" in exc.msg, exc.msg
    assert "nothing was sent to it" in exc.msg and KEY not in repr(exc.details)
    assert other.stop().requests == [] and own.stop().requests == []


def test_a_unit_without_a_main_process_is_asked_nothing(servers, unit):
    """ExecStartPre runs (MainPID 0): whatever answers on the port is not the unit's server."""
    fake = servers(api_key=KEY)
    unit.set(active="activating", sub="start-pre", main_pid=0)
    result = gate(fake.url, api_key=KEY, unit=unit, wait=0).run()
    assert (result["ready"], result["phase"]) == (False, "starting")
    assert result["msg"].endswith("phase starting (last: the unit has no main process yet (MainPID 0); its port is "
                                  "not asked before it has one)")
    assert fake.seen() == []


def test_nothing_is_sent_before_the_connection_is_accepted(unit):
    """vLLM holds its port while it loads and accepts nothing: the gate waits (not yet) and writes nothing into
    the listener's queue, whoever would read it later."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = "http://127.0.0.1:%d" % listener.getsockname()[1]
        client = HttpClient(timeout=1, retries=0)
        started = time.monotonic()
        result = _ready.Gate(client, url, "m", unit=_ready.Unit(Runner(), "vllm.service", str(unit.bin / "systemctl"),
                                                                str(unit.bin / "journalctl")),
                             api_key=KEY, wait=0).run()
        assert (result["ready"], result["phase"]) == (False, "starting")
        assert "timed out after 1 s" in result["msg"] and 1 <= time.monotonic() - started < 3
        listener.settimeout(2)
        queued, _addr = listener.accept()
        with queued:
            queued.settimeout(2)
            assert queued.recv(65536) == b""  # the gate closed it without a byte


def test_a_unit_restarted_since_it_was_read_is_judged_by_its_new_main_process(servers, unit):
    """systemd restarted the unit between this attempt's read and the connection: the new main process accepted
    it, and the gate reads the unit again before it refuses."""
    fake = servers(api_key=KEY)
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        unit.set(main_pid=stranger.pid)
        unit.set(main_pid=os.getpid(), then=True)
        result = gate(fake.url, api_key=KEY, unit=unit, wait=0).run()
    finally:
        stranger.kill()
        stranger.wait()
    assert (result["ready"], result["unit_state"]["MainPID"]) == (True, os.getpid())
    assert unit.calls() == ["systemctl " + SHOW] * 2
    assert fake.seen() == ["GET /health", "GET /v1/models", "POST /v1/completions"]


def test_an_https_server_of_the_unit_is_checked_then_spoken_to_over_tls(tls_origin, unit):
    """vLLM with --ssl-keyfile: the gate's checked connection carries TLS (the client's context), the key
    inside it."""
    tls_origin.route("/health", body=b"").route("/v1/models", body={"data": [{"id": "m"}]})
    tls_origin.route("/v1/completions", body={"choices": [{"text": " pong"}]}, method="POST")
    client = HttpClient(timeout=2, retries=0, validate_certs=False)
    u = _ready.Unit(Runner(), "vllm.service", str(unit.bin / "systemctl"), str(unit.bin / "journalctl"))
    result = _ready.Gate(client, tls_origin.url, "m", unit=u, api_key=KEY, wait=0).run()
    assert (result["ready"], result["phase"]) == (True, "ready")
    assert [(e["path"], e["headers"].get("Authorization")) for e in tls_origin.log()] == [
        ("/health", None), ("/v1/models", "Bearer " + KEY), ("/v1/completions", "Bearer " + KEY)]
    # the certificate is still checked on that connection
    exc, _took = timed(_ready.Gate(HttpClient(timeout=2, retries=0), tls_origin.url, "m", unit=u, wait=30).run)
    assert isinstance(exc, _ready.ServerRefused) and "certificate" in exc.msg, exc
