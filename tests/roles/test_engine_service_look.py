"""site.yml's look at a serving node (engine_service's look step, the engine_service_look action and the
engine_service_survey module): a settled node is found in one task and summed up there, with its steady
gate, and takes no further step of the role; every way a node can be other than settled makes the run take
the role's full way, which puts it right. Each case below is an adversary of the look: were it to say
"settled" for that node, the full way would not run and the assertion that follows would fail.

The playbook is site.yml's own: its engine play's tasks less engine_node's install step (the node's engine is
laid out by tests/roles/engines.py, at the version and build the inventory asks for), engine_node's plan
included (it takes what the first look read, and decides), and its rollout play as it is. The weights come
from the fake hub, systemd is the role tests' fake; the node has no nvidia-smi, and its build is asked for by
name."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import tempfile
import time

import yaml

from tests.fake_haproxy import FakeHaproxy
from tests.roles.conftest import REPO
from tests.roles.test_engine_service_models import commit_of, hub_vars, pinned, snapshot_dir
from tests.roles.test_engine_service_placement import CASES, EIGHT, nvidia_smi, unit_env, uuids

ENV = "0.11.2-cu129"
ROLE = "llmfleet.engines.engine_service"
LOOK = "Look whether this node's models are settled"
# a task of the role's full way (main.yml, in the rollout play)
FULL_WAY = "Find the units this role owns on the node"
# the staging step's pinning (stage_pin.yml's hf_revision), which the look leaves out
PIN = "Pin the revisions of the play's models to their commits"
# look_node.yml's pinning, once for the batch, of the pins the controller does not keep (no lock directory, a refresh)
HUB_PIN = "Pin by the hub the revisions the controller does not keep"
PLAN = "Check, read and decide what this node runs"
# the engine the node runs (tests/roles/engines.py lays it out), asked for by name: the node has no nvidia-smi
NODE = dict(zip(("engine_node_version", "engine_node_build"), ENV.rsplit("-", 1)))


def _role_step(task):
    """The include_role or import_role of a task of site.yml (empty for any other task)."""
    return task.get("ansible.builtin.include_role") or task.get("ansible.builtin.import_role") or {}


def site(tmp_path, node):
    """site.yml's engine play (engine_service's steps, after what engine_node leaves on an unchanged
    node) and its rollout play, as a playbook file."""
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    engine = next(p for p in plays if p["name"] == "Converge the vLLM engines of the fleet")
    rollout = next(p for p in plays if p["name"] == "Roll the served vLLM models onto the new engines")
    # the play's own ends too: a settled node leaves the play by its end_host, not by each step's condition
    # the gateways' read too (once per gateway, run_once): the looks take what it found
    steps = [t for t in engine["tasks"]
             if _role_step(t).get("name") == ROLE or _role_step(t).get("tasks_from") == "plan"
             or "ansible.builtin.group_by" in t or "ansible.builtin.meta" in t or "llmfleet.engines.haproxy_info" in t]
    assert [_role_step(t).get("tasks_from") or t.get("ansible.builtin.meta")
            or ("haproxy_info" if "llmfleet.engines.haproxy_info" in t else "group_by") for t in steps] == [
        "haproxy_info", "look_node", "end_host", "plan", "systemd", "stage", "group_by"], steps
    assert steps[0]["run_once"] is True, steps[0]
    # the look is imported, its defaults the role's own (public: false), the other steps included
    assert steps[1]["ansible.builtin.import_role"]["public"] is False, steps[1]
    assert "when" not in steps[1], steps[1]
    # engine_node's private facts, which the full way's prune reads (the plan below sets engine_node_result)
    facts = node._engine_node_facts(False, None, ENV)  # pylint: disable=protected-access
    engine_play = {"name": "engine play", "hosts": "node", "gather_facts": False, "vars": engine["vars"],
                   "tasks": [{"name": "Leave what engine_node leaves on a node it does not change",
                              "ansible.builtin.set_fact": facts}] + steps}
    path = pathlib.Path(tmp_path) / "site.yml"
    path.write_text(json.dumps([engine_play, rollout], indent=1))
    return str(path)


def looks(run):
    """The looks that ran on the node: one, before the plan (nothing is deferred)."""
    return [t["result"] for t in run.task(LOOK) if t["host"] == "node" and t["status"] != "skipped"]


def looked(run):
    """The look's result on the node (the registered engine_service_result): the last look."""
    return looks(run)[-1]


def pinned_by_the_hub(run):
    """The pinning steps that ran: the staging step's (the full way), look_node.yml's (before the looks)."""
    return (len([t for t in run.task(PIN) if t["status"] != "skipped"]),
            len([t for t in run.task(HUB_PIN) if t["status"] != "skipped"]))


def full_way(run):
    return len([t for t in run.task(FULL_WAY) if t["host"] == "node" and t["status"] != "skipped"])


def settled_run(node, playbook, models, extra):
    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == 0, run.explain()
    look = looked(run)
    assert look["settled"] is True, (look.get("reasons"), run.explain())
    assert full_way(run) == 0, run.explain()
    # the lock kept on the controller (engine_service_model_lock_dir) pins the model: one look, no pinning step
    assert len(looks(run)) == 1 and look["pins_needed"] is False and pinned_by_the_hub(run) == (0, 0), run.explain()
    assert look["deferred"] is False, look
    # the look read the node for the plan and made the plan's decision on that read: the settled node ended before
    # the plan task, the look's summary of it standing for the plan's (its result and the play's stats)
    assert look["probe"]["read_with"] == {"link": str(node.root / "engines" / "vllm" / "current"),
                                          "nvidia_smi": None}, look["probe"]
    assert [t for t in run.task(PLAN) if t["host"] == "node"] == [], run.explain()
    assert (look["engine_node"]["action"], look["engine_node"]["current"]) == ("unchanged", ENV), look
    assert run.record["custom_stats"]["engine_node"]["node"]["current"] == ENV, run.record.get("custom_stats")
    return run, look


def unsettled_run(node, playbook, models, extra, reason, rc=0):
    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == rc, run.explain()
    look = looked(run)
    assert look["settled"] is False, look
    assert any(reason in r for r in look["reasons"]), (reason, look["reasons"])
    return run


def test_a_settled_node_is_summed_up_in_one_look_and_anything_else_takes_the_full_way(node, upstream, tmp_path):
    hub = upstream
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = pinned(node, "v1", api_key="key-of-the-look-test")
    unit, commit = node.unit(models[0]), commit_of(hub, "v1")
    extra = dict(hub_vars(hub, tmp_path), engine_service_steady_timeout=3, engine_service_lock_wait=0, **NODE)
    playbook = site(tmp_path, node)

    # a fresh node: no lock is kept yet, so the look sends the node the full way without asking it (the plan reads
    # it); the full way pins the model (and keeps its lock) and serves it
    why = "no lock of %s@v1 is kept in %s yet" % (models[0]["model"], tmp_path / "locks")
    run = unsettled_run(node, playbook, models, extra, why)
    assert full_way(run) == 1 and run.result["settled"] is False and run.result["units"] == [unit], run.explain()
    (early,) = looks(run)
    assert early["reasons"] == [why] and early["asked_node"] is False and "probe" not in early, early
    assert early["deferred"] is False and pinned_by_the_hub(run) == (1, 0), run.explain()
    pid = node.main_pid(unit)
    record = node.root / "engines" / "vllm" / (unit + ".gate.json")
    first_record = json.loads(record.read_text())

    # settled: summed up by the look, the steady gate asked and recorded, nothing started or stopped
    time.sleep(1.1)
    run, look = settled_run(node, playbook, models, extra)
    assert (look["mode"], look["current"], look["units"], look["error"]) == ("steady", ENV, [unit], None)
    (gate,) = look["gates"]
    assert (gate["unit"], gate["stage"], gate["ready"], gate["environment"]) == (unit, "steady", True, ENV)
    # what the play's stats record is what the look returned (its warnings are Ansible's to show)
    assert {k: v for k, v in run.result.items() if k != "warnings"} == \
        {k: look[k] for k in run.result if k != "warnings"}, (run.result, look)
    assert run.result["warnings"] == []
    assert run.result["settled"] is True
    assert run.verbs("start", "stop", "restart", "daemon-reload") == [], run.calls
    assert node.main_pid(unit) == pid
    now_record = json.loads(record.read_text())
    assert now_record["stage"] == "steady" and now_record["at"] != first_record["at"], (first_record, now_record)
    assert "key-of-the-look-test" not in json.dumps(look) and "key-of-the-look-test" not in run.output
    assert stat_mode(record) == (0, 0o644)
    assert run.changed.get("node", 0) == 0, run.changed

    # the unit file edited by hand: the full way writes it back and restarts the unit
    text = (node.unit_dir / unit).read_text()
    (node.unit_dir / unit).write_text(text + "# edited by hand\n")
    run = unsettled_run(node, playbook, models, extra, "%s differs from what the role renders" % unit)
    assert full_way(run) == 1 and (node.unit_dir / unit).read_text() == text, run.explain()

    # (each case below starts from the node the full way left: what it put back is checked where it is, and the
    # next run is settled where the way back is not plain: the link, the orphan, the engine that stopped answering)
    # the unit file replaced by a link to a file of the same text: systemd reads the same unit, and
    # the full way (slurp) would find nothing to change either: settled
    copy = node.base / "elsewhere.service"
    copy.write_text(text)
    (node.unit_dir / unit).unlink()
    (node.unit_dir / unit).symlink_to(copy)
    settled_run(node, playbook, models, extra)
    # the file it links to edited: the full way writes the unit again (through the link, as copy does)
    copy.write_text(text + "# edited by hand\n")
    run = unsettled_run(node, playbook, models, extra, "%s differs from what the role renders" % unit)
    assert (node.unit_dir / unit).read_text() == text, run.explain()
    settled_run(node, playbook, models, extra)

    # the secret file changed: the full way writes it back
    secret = node.secrets_dir / (unit + ".env")
    kept = secret.read_text()
    secret.write_text(kept.replace("key-of-the-look-test", "another-key"))
    run = unsettled_run(node, playbook, models, extra, "the secret file of %s differs" % unit)
    assert secret.read_text() == kept, run.explain()

    # the unit stopped: the full way starts it
    node.systemctl("stop", unit)
    run = unsettled_run(node, playbook, models, extra, "the unit is inactive")
    assert node.show(unit, "ActiveState")["ActiveState"] == "active" and run.verbs("start", unit=unit), run.explain()

    # a unit of the role that no model lists: the full way removes it
    orphan = "llmfleet-vllm-gone%s.service" % node.tag
    (node.unit_dir / orphan).write_text(text)
    run = unsettled_run(node, playbook, models, extra, "units no model lists any more: %s" % orphan)
    assert not (node.unit_dir / orphan).exists(), run.explain()
    settled_run(node, playbook, models, extra)

    # a weights file gone from the snapshot: the full way fetches it again
    weights = snapshot_dir(node, commit) / "config.json"
    weights.unlink()
    run = unsettled_run(node, playbook, models, extra, "is not complete in")
    assert weights.exists(), run.explain()

    # a rollout holds the node's lock: the full way waits for it (here not at all: the staging step
    # fails the node, naming the lock) and stops nothing
    lock = node.root / "engines" / "vllm" / ".engine_service.lock"
    pid = node.main_pid(unit)
    lock.mkdir()
    try:
        run = unsettled_run(node, playbook, models, extra, "a rollout holds this node's lock", rc=2)
        assert "another run is rolling out on this node" in run.output, run.explain()
        assert run.verbs("stop", "restart") == [] and node.main_pid(unit) == pid, run.explain()
    finally:
        lock.rmdir()

    # the engine stops answering (its process stopped): the gate fails, the full way gates again and
    # fails the node, and nothing is recorded as ready
    pid = node.main_pid(unit)
    os.kill(pid, signal.SIGSTOP)
    try:
        run = unsettled_run(node, playbook, models, extra, "not ready", rc=2)
        assert full_way(run) == 1, run.explain()
    finally:
        os.kill(pid, signal.SIGCONT)
    settled_run(node, playbook, models, extra)


def test_check_mode_looks_without_a_gate_or_a_record(node, upstream, tmp_path):
    hub = upstream
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = pinned(node, "v1")
    unit = node.unit(models[0])
    extra = dict(hub_vars(hub, tmp_path), **NODE)
    playbook = site(tmp_path, node)
    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == 0, run.explain()
    record = node.root / "engines" / "vllm" / (unit + ".gate.json")
    before = record.read_text()

    run = node.play(models, extra_vars=extra, playbook=playbook, check=True)
    assert run.rc == 0, run.explain()
    look = looked(run)
    assert look["settled"] is True and look["gates"] == [], look
    # the lock the first run kept is read back on the controller: one look, the hub not asked
    assert len(looks(run)) == 1 and pinned_by_the_hub(run) == (0, 0), run.explain()
    assert record.read_text() == before
    assert full_way(run) == 0, run.explain()


def test_without_kept_locks_the_hub_pins_each_run_and_the_look_goes_on_and_a_bad_variable_stops_it(
        node, upstream, tmp_path):
    hub = upstream
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = pinned(node, "v1")
    extra = dict({"engine_service_hf_endpoint": hub.url + "/hub", "engine_service_steady_timeout": 3}, **NODE)
    playbook = site(tmp_path, node)
    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == 0 and full_way(run) == 1, run.explain()
    # pinned once, before the looks: the staging step (the full way) takes those locks and asks the hub nothing
    assert pinned_by_the_hub(run) == (0, 1), run.explain()

    # no lock kept on the controller: each run pins by the hub, once for the play before the looks, and the one
    # look finds the node settled
    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == 0, run.explain()
    (look,) = looks(run)
    assert look["settled"] is True and look["asked_node"] is True and look["deferred"] is False, look
    assert pinned_by_the_hub(run) == (0, 1) and full_way(run) == 0, run.explain()

    # the role's look entry point (public: a playbook of one's own runs it after engine_node): with no kept lock,
    # the models are pinned first (look_pinned.yml), then the one look of the node finds it settled
    own = pathlib.Path(tmp_path) / "own-look.yml"
    own.write_text(json.dumps([{"hosts": "node", "gather_facts": False, "tasks": [
        {"ansible.builtin.set_fact": {"engine_node_result": {"action": "unchanged", "current": ENV, "pending": ""}}},
        {"ansible.builtin.include_role": {"name": ROLE, "tasks_from": "look"}}]}]))
    run = node.play(models, extra_vars=extra, playbook=str(own))
    assert run.rc == 0, run.explain()
    first, second = looks(run)
    assert first["pins_needed"] is True and first["asked_node"] is False, first
    assert second["settled"] is True and second["current"] == ENV and pinned_by_the_hub(run) == (1, 0), run.explain()

    # a bad variable fails the host in the look, in validate.yml's words, before the node is read (the hub's pin,
    # once for the play on the controller, comes before the looks)
    run = node.play(models, extra_vars=dict(extra, engine_service_model_keep=0), playbook=playbook)
    assert run.rc == 2, run.explain()
    (look,) = [t for t in run.task(LOOK) if t["host"] == "node"]
    assert look["status"] == "failed" and look["result"]["msg"] == (
        "host node: variable engine_service_model_keep is 0, allowed: a whole number of snapshots, 1 or more. Fix it"
        " in the inventory (host_vars/node.yml or its group's variables)."), look
    assert look["result"]["asked_node"] is False and full_way(run) == 0, run.explain()
    assert not [t for t in run.task(PLAN) if t["host"] == "node"], run.explain()


def stat_mode(path):
    st = path.stat()
    return st.st_uid, st.st_mode & 0o777


def test_a_server_a_rollout_left_drained_on_the_gateway_unsettles_the_node_until_it_is_made_ready(node, tmp_path):
    """The hourly look reads each gateway once (run_once, whatever the number of nodes) and finds a node whose
    server a rollout drained and never made ready (an interrupted rollout) not settled; its full way makes the
    server ready after the steady gate. A drain made by hand, of another server, is left alone."""
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = node.models
    extra = dict(engine_service_steady_timeout=3, engine_service_lock_wait=0, **NODE)
    playbook = site(tmp_path, node)
    folder = tempfile.mkdtemp(prefix="gw")  # a Unix socket's path is at most 107 bytes
    backend = "llmfleet_" + models[0]["name"]
    fake = FakeHaproxy(folder + "/admin.sock", {backend: {"node": "127.0.0.1:%d" % models[0]["port"],
                                                          "other": "127.0.0.1:1"}})
    gateways = {"gw": {"engine_gateway_models": [{"name": models[0]["name"], "port": 1}],
                       "engine_gateway_socket": folder + "/admin.sock",
                       "engine_gateway_state_file": folder + "/servers.state"}}
    mark = pathlib.Path(folder) / "rollout-drained.json"
    try:
        first = node.play(models, extra_vars=extra, playbook=playbook, gateways=gateways)
        assert first.rc == 0 and fake.admin(backend + "/node") == "ready", first.explain()
        run = node.play(models, extra_vars=extra, playbook=playbook, gateways=gateways)
        assert run.rc == 0 and looked(run)["settled"] is True and full_way(run) == 0, run.explain()
        reads = [t for t in run.task("Read which servers a rollout left drained") if t["status"] != "skipped"]
        assert len(reads) == 1, reads

        fake.answer("set server %s/node state drain" % backend)
        mark.write_text(json.dumps([backend + "/node"]))
        fake.answer("set server %s/other state drain" % backend)
        run = node.play(models, extra_vars=extra, playbook=playbook, gateways=gateways)
        assert run.rc == 0 and looked(run)["settled"] is False, run.explain()
        assert any("holds %s/node drained since a rollout" % backend in r for r in looked(run)["reasons"]), looked(run)
        assert full_way(run) == 1 and run.verbs("start", "stop", "restart") == [], run.explain()
        assert fake.admin(backend + "/node") == "ready" and json.loads(mark.read_text()) == []
        assert fake.admin(backend + "/other") == "drain"
        run = node.play(models, extra_vars=extra, playbook=playbook, gateways=gateways)
        assert run.rc == 0 and looked(run)["settled"] is True, run.explain()
    finally:
        fake.stop()
        shutil.rmtree(folder)


def test_a_model_on_gpus_is_looked_at_once_with_the_gpus_that_look_read(node, tmp_path):
    """Its unit names the node's GPUs by UUID: the look's one module call reads them (for the plan too) and returns
    the unit file's digest, and the controller renders the unit with those GPUs and compares: one look, nothing
    deferred. A unit naming other GPUs takes the full way, which writes it back."""
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    smi = nvidia_smi(node, CASES / "8xh100-580")
    models = [node.model("g", gpus=[1])]
    unit = node.unit(models[0])
    # the plan and the role read the GPUs with the same nvidia-smi (engine_service_nvidia_smi's default)
    extra = dict(NODE, engine_node_nvidia_smi=smi, engine_service_environment=EIGHT, engine_service_shm_min_mib=1,
                 engine_service_steady_timeout=3, engine_service_lock_wait=0)
    playbook = site(tmp_path, node)
    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == 0 and full_way(run) == 1, run.explain()
    assert unit_env(node, models[0], "CUDA_VISIBLE_DEVICES") == uuids()[1]

    run = node.play(models, extra_vars=extra, playbook=playbook)
    assert run.rc == 0, run.explain()
    (look,) = looks(run)
    assert look["settled"] is True and look["deferred"] is False and full_way(run) == 0, (look, run.explain())
    assert look["probe"]["read_with"]["nvidia_smi"] == smi and len(look["probe"]["gpus"]) == 8, look["probe"]
    assert look["engine_node"]["action"] == "unchanged" and run.task(PLAN) == [], (look, run.explain())

    # the unit as it would be on another GPU: its file differs only in the GPUs it names
    text = (node.unit_dir / unit).read_text()
    (node.unit_dir / unit).write_text(text.replace(uuids()[1], uuids()[2]))
    run = unsettled_run(node, playbook, models, extra, "%s differs from what the role renders" % unit)
    assert len(looks(run)) == 1 and full_way(run) == 1 and (node.unit_dir / unit).read_text() == text, run.explain()
