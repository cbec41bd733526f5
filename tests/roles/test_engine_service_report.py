"""playbooks/report.yml on a node that serves a pinned model (engine_service against the fake systemd
and the fake hub): the serving state (unit active, no restarts, the last gate's figures, the commit),
the Prometheus targets file, parsed and scraped; an inventory that pins another commit than the unit
serves shows up as a problem; then a crash that systemd restarts shows up as a problem. The units
run without uvicorn's access log and without prompts in the journal."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time

from tests.roles.conftest import REPO
from tests.roles.test_engine_service_models import commit_of, hub_vars, pinned

ENV = "0.11.2-cu129"
REPORT = REPO / "playbooks" / "report.yml"
KEY = "s3cret-api-key-of-the-report-test"


def report(node, tmp_path, name):
    out = tmp_path / name
    run = node.play(playbook=REPORT, extra_vars={"engine_report_dir": str(out), "engine_report_metrics_address": "127.0.0.1"})
    assert run.rc == 0, run.explain()
    files = {p.name: p.read_text() for p in out.iterdir()}
    assert sorted(files) == ["fleet.html", "fleet.json", "fleet.md", "prometheus-targets.json"]
    assert not [n for n, text in files.items() if KEY in text], "the API key is in the report"
    return run, files


def scrape(target):
    host, port = target.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_report_shows_the_serving_state_and_prometheus_targets(node, upstream, tmp_path):
    hub = upstream
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = pinned(node, "v1")
    unit, port, commit = node.unit(models[0]), models[0]["port"], commit_of(hub, "v1")
    served = dict(hub_vars(hub, tmp_path), engine_service_host="0.0.0.0", engine_service_api_key=KEY)
    node.models = models  # the report's inventory has them too (the state is read where they are defined)
    run = node.play(models, extra_vars=served)
    assert run.rc == 0, run.explain()
    unit_text = (node.unit_dir / unit).read_text()
    assert " --disable-uvicorn-access-log" in unit_text and "log-requests" not in unit_text

    # the gate's record: root's, without the key
    record_path = node.root / "engines" / "vllm" / (unit + ".gate.json")
    assert record_path.stat().st_uid == 0 and oct(record_path.stat().st_mode & 0o777) == "0o644"
    record = json.loads(record_path.read_text())
    assert KEY not in record_path.read_text()
    assert (record["unit"], record["environment"], record["stage"], record["ready"]) == (unit, ENV, "change", True)
    pid = node.main_pid(unit)

    run, files = report(node, tmp_path, "report")
    assert run.verbs("start", "stop", "restart", "kill", "daemon-reload", "enable") == [], run.calls
    assert node.main_pid(unit) == pid and json.loads(record_path.read_text()) == record
    (entry,) = json.loads(files["fleet.json"])["nodes"]
    (state,) = entry["serving"]
    assert (state["unit"], state["name"], state["model"], state["port"], state["listen"]) == (
        unit, models[0]["name"], models[0]["model"], port, "0.0.0.0")
    assert (state["active"], state["sub"], state["restarts"], state["main_pid"]) == ("active", "running", 0, pid)
    assert (state["environment"], state["engine_version"], state["build"], state["revision"]) == (
        ENV, "0.11.2", "cu129", commit)
    assert state["gate"] == record and isinstance(record["completion_ms"], float) and record["ready_s"] > 0
    assert state["problems"] == [] and state["gpus"] is None
    assert state["target"] == "127.0.0.1:%d" % port

    # Prometheus' file_sd: what the role rendered, and it answers
    targets = json.loads(files["prometheus-targets.json"])
    assert targets == [{"targets": ["127.0.0.1:%d" % port], "labels": {
        "host": "node", "unit": unit, "name": models[0]["name"], "model": models[0]["model"], "revision": commit,
        "engine_version": "0.11.2", "build": "cu129", "environment": ENV}}]
    assert "--port %d" % port in unit_text and "--revision %s" % commit in unit_text
    status, text = scrape(targets[0]["targets"][0])
    assert status == 200 and 'vllm:num_requests_waiting{engine="0",model_name="%s"}' % models[0]["name"] in text

    row = [line for line in files["fleet.md"].splitlines() if line.startswith("| node | %s" % models[0]["name"])]
    assert len(row) == 1 and "| active (running) |" in row[0] and "| %s |" % commit[:12] in row[0], files["fleet.md"]
    assert "| none |" in row[0] and "one token" in row[0]
    assert "<h2>Models served</h2>" in files["fleet.html"] and unit in files["fleet.html"]
    # pinned to a branch: the report cannot tell offline whether the commit is still its head
    assert (state["wanted_revision"], state["off_wanted"]) == ("v1", None)

    # the inventory now pins another commit than the one the unit serves (site.yml not run yet)
    other = "f" * 40 if commit != "f" * 40 else "e" * 40
    node.models = [dict(models[0], revision=other)]
    _run, files = report(node, tmp_path, "report-other-pin")
    node.models = models
    (state,) = json.loads(files["fleet.json"])["nodes"][0]["serving"]
    off = "it serves revision %s, but the inventory pins %s (engine_service_models)" % (commit[:12], other[:12])
    assert (state["revision"], state["wanted_revision"], state["off_wanted"]) == (commit, other, off)
    assert state["problems"] == [off]
    assert "| %s (wants %s) |" % (commit[:12], other[:12]) in files["fleet.md"] and off in files["fleet.md"]
    assert '<td class="build bad">%s (wants %s)</td>' % (commit[:12], other[:12]) in files["fleet.html"]
    assert off in files["fleet.html"]

    # the gate's /health, the scrape above and the completion: no access log line, no prompt
    journal = node.journal(unit)
    assert "Application startup complete" in journal
    assert "GET /health" not in journal and "/metrics" not in journal and "prompt:" not in journal, journal

    # a crash: systemd restarts the unit, and the report says so
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while node.show(unit, "NRestarts", "SubState") != {"NRestarts": "1", "SubState": "running"}:
        assert time.monotonic() < deadline, node.show(unit, "NRestarts", "SubState")
        time.sleep(0.2)
    _run, files = report(node, tmp_path, "report-after-crash")
    (state,) = json.loads(files["fleet.json"])["nodes"][0]["serving"]
    assert state["restarts"] == 1 and state["main_pid"] != pid
    assert state["problems"] == ["systemd restarted it 1 time since its last start (Restart=on-failure: it exited)"]
    assert "with problems" in files["fleet.md"] and "systemd restarted it 1 time" in files["fleet.html"]
