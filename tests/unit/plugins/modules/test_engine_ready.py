"""engine_ready: main() with patched arguments against a real HTTP server on 127.0.0.1 and a fake
systemd unit (``systemctl``/``journalctl`` on PATH); the JSON result checked."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import engine_ready
from tests.unit.plugins.lookup_fakes import run_module
from tests.unit.plugins.vllm_fakes import FakeUnit, FakeVllm, ProcessVllm, free_port

KEY = "sk-TOPSECRET-0123456789"
JOURNAL = ["ValueError: The model's max seq len (131072) is larger than the maximum number of tokens "
           "that can be stored in KV cache (40960)", "vllm.service: Failed with result 'exit-code'."]
SHOW = ("systemctl show -p ActiveState -p SubState -p ActiveEnterTimestampMonotonic "
        "-p ExecMainStartTimestampMonotonic -p NRestarts -p Result -p MainPID vllm.service")


@pytest.fixture
def servers():
    started = []

    def make(**kw):
        fake = FakeVllm(**kw)
        started.append(fake)
        return fake.start()

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def unit(tmp_path, monkeypatch):
    return FakeUnit(tmp_path).on_path(monkeypatch)


def ready(capsys, **kw):
    return run_module(engine_ready.main, kw, capsys)


@pytest.mark.parametrize("check_mode", [False, True])
def test_ready_in_check_and_normal_mode(servers, unit, capsys, check_mode):
    fake = servers(models=["Qwen/Qwen3-8B"])
    start_us = unit.set(started_ago=60)
    code, result, _out = ready(capsys, url=fake.url, model="Qwen/Qwen3-8B", version="0.20.0", unit="vllm.service",
                               wait=0, _ansible_check_mode=check_mode)
    assert code == 0 and "failed" not in result and result["changed"] is False
    assert (result["ready"], result["phase"], result["version"], result["models"]) == (
        True, "ready", "0.20.0", ["Qwen/Qwen3-8B"])
    assert 60 <= result["health_s"] <= result["since_start_s"] < 62
    assert 0 < result["completion_ms"] < 2000
    assert result["unit_state"] == {
        "ActiveState": "active", "SubState": "running", "ActiveEnterTimestampMonotonic": start_us,
        "ExecMainStartTimestampMonotonic": start_us, "NRestarts": 0, "Result": "success", "MainPID": os.getpid()}
    assert "journal" not in result and "msg" not in result
    assert fake.seen() == ["GET /health", "GET /version", "GET /v1/models", "POST /v1/completions"]
    assert unit.calls() == [SHOW]


def test_not_ready_yet_does_not_fail(servers, capsys):
    fake = servers(health=503)
    code, result, _out = ready(capsys, url=fake.url + "/", model="m", wait=1)
    assert code == 0 and "failed" not in result
    assert (result["ready"], result["phase"], result["health_s"], result["unit_state"]) == (False, "health", None, None)
    assert result["msg"] == (
        "vLLM at %s, model m: not ready yet after 1 s since this check began (deadline 900 s): phase health "
        "(last: GET %s/health: answered 503 Service Unavailable)" % (fake.url, fake.url))


def test_failed_unit_fails_with_the_journal(unit, capsys):
    fake = FakeVllm()  # nothing listens
    unit.set(active="failed", sub="failed", result="exit-code")
    unit.journal(JOURNAL)
    code, result, _out = ready(capsys, url=fake.url, model="m", unit="vllm.service", journal_lines=2, wait=30)
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["msg"] == (
        "vLLM at %s (unit vllm.service), model m: the unit is failed (SubState failed, Result exit-code), so the "
        "server will not answer; see why in its journal and start it again; journal of vllm.service (last lines; "
        "2 in 'journal'): %s / vllm.service: Failed with result 'exit-code'" % (fake.url, JOURNAL[0]))
    assert (result["ready"], result["phase"], result["journal"]) == (False, "starting", JOURNAL)
    assert unit.calls() == [SHOW, "journalctl -u vllm.service -n 2 --no-pager -o cat"]


def test_deadline_passed_fails(servers, unit, capsys):
    fake = servers(health=503)
    unit.set(active="activating", sub="start", started_ago=61)
    unit.journal(["INFO Loading safetensors checkpoint shards: 10% Completed"])
    code, result, _out = ready(capsys, url=fake.url, model="m", unit="vllm.service", deadline=60, wait=30)
    assert code == 1 and result["failed"] is True
    assert result["msg"] == (
        "vLLM at %s (unit vllm.service), model m: not ready after 61 s since the unit started, past the deadline "
        "of 60 s: phase health (last: GET %s/health: answered 503 Service Unavailable); journal of vllm.service "
        "(last lines; 1 in 'journal'): INFO Loading safetensors checkpoint shards: 10%% Completed" % (fake.url, fake.url))
    assert result["journal"] == ["INFO Loading safetensors checkpoint shards: 10% Completed"]


def test_model_missing_fails(servers, capsys):
    fake = servers(models=["a", "b"])
    code, result, _out = ready(capsys, url=fake.url, model="m", wait=30)
    assert code == 1 and result["models"] == ["a", "b"] and result["phase"] == "models"
    assert result["msg"] == (
        "vLLM at %s, model m: the server does not serve the model; it serves: a, b (the model's name is vLLM's "
        "--served-model-name, else the model path)" % fake.url)
    assert "journal" not in result


def test_version_mismatch_fails(servers, capsys):
    fake = servers(version="0.19.1")
    code, result, _out = ready(capsys, url=fake.url, model="m", version="0.20.0", wait=30)
    assert code == 1 and result["version"] == "0.19.1"
    assert result["msg"].startswith("vLLM at %s, model m: %s/version answers 0.19.1, not 0.20.0: " % (fake.url, fake.url))


def test_api_key_is_never_in_the_output(servers, capsys):
    fake = servers(api_key="sk-other", echo_auth=True)
    code, result, out = ready(capsys, url=fake.url, model="m", api_key=KEY, wait=30)
    assert code == 1
    assert result["msg"] == (
        "vLLM at %s, model m: GET %s/v1/models answered 401 (Unauthorized: Bearer ******** is not valid): "
        "api_key is not the server's --api-key" % (fake.url, fake.url))
    assert KEY not in out
    assert fake.requests[-1]["auth"] == "Bearer " + KEY

    code, result, out = ready(capsys, url=fake.url, model="m", api_key="sk-other", wait=0)
    assert code == 0 and result["ready"] is True and "sk-other" not in out


def test_another_users_server_at_a_node_address_gets_no_key(unit, capsys):
    """Issue 44, A.1: engine_service_host set to an address of the node (here 127.0.0.2, the unit's vLLM on
    127.0.0.1 with the same port): another user's server there fails the task and never sees the key; the unit's
    own server at its address passes."""
    port = free_port()
    other = ProcessVllm(user=65534, host="127.0.0.2", port=port, api_key=KEY)
    own = ProcessVllm(host="127.0.0.1", port=port, api_key=KEY)
    try:
        unit.set(main_pid=own.pid)
        code, result, out = ready(capsys, url=other.url, model="m", api_key=KEY, unit="vllm.service", wait=30)
        assert code == 1 and result["ready"] is False, result
        assert result["msg"].startswith(
            "vLLM at %s (unit vllm.service), model m: 127.0.0.2 port %d is held by process %d ("
            % (other.url, port, other.pid))
        assert ", user nobody), not by the unit's main process %d or its children" % own.pid in result["msg"]
        assert KEY not in out
        code, result, out = ready(capsys, url=own.url, model="m", api_key=KEY, unit="vllm.service", wait=0)
        assert code == 0 and result["ready"] is True and KEY not in out
    finally:
        other.stop()
        own.stop()
    assert other.requests == []
    assert [r["auth"] for r in own.requests] == [None, "Bearer " + KEY, "Bearer " + KEY]


@pytest.mark.parametrize("option, value, msg", [
    ("wait", -1, "wait must be at least 0, not -1"),
    ("deadline", 0, "deadline must be at least 1, not 0"),
    ("timeout", 0, "timeout must be at least 1, not 0"),
    ("journal_lines", 0, "journal_lines must be at least 1, not 0"),
    ("url", "127.0.0.1:8000", "url must be an http:// or https:// base URL, such as http://127.0.0.1:8000, not '127.0.0.1:8000'"),
    ("unit", "--all", "unit must be a systemd unit name, such as vllm.service, not '--all'"),
    ("model", " ", "model must be the served model name, not empty"),
])
def test_options_are_checked(capsys, option, value, msg):
    args = {"model": "m", option: value}
    code, result, _out = ready(capsys, **args)
    assert (code, result["failed"], result["msg"]) == (1, True, msg)
