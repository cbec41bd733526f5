"""Pinned models (engine_service_models[].revision) through the engine_service role, against the fake
hub of tests/upstream and the fake systemd: the revision resolved on the controller, the weights
staged under <root>/models and checked, the unit served offline at the commit (the fake `vllm
serve` has no network: it starts only from a complete snapshot with HF_HUB_OFFLINE=1), a new
revision rolled out, a tampered file refused before anything stops, a failed revision rolled back
to the previous one, whose snapshot is still on disk."""

from __future__ import annotations

import json

import pytest

from tests.roles.conftest import http_json

ENV = "0.11.2-cu129"
REPO = "llmfleet-test/tiny-chat"
STOPPING = ("stop", "restart", "try-restart", "reload-or-restart", "kill")


@pytest.fixture
def hub(upstream):
    return upstream


def commit_of(hub, revision):
    status_body = json.loads(_get(hub.url + "/hub/api/models/%s/revision/%s" % (REPO, revision)))
    return status_body["sha"]


def _get(url):
    import urllib.request  # pylint: disable=import-outside-toplevel
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the fake hub on 127.0.0.1
        return resp.read()


def pinned(node, revision, **extra):
    return [node.model(model=REPO, revision=revision, **extra)]


def hub_vars(hub, tmp_path):
    return {"engine_service_hf_endpoint": hub.url + "/hub",
            "engine_service_model_lock_dir": str(tmp_path / "locks")}


def snapshot_dir(node, commit):
    return node.root / "models" / ("models--" + REPO.replace("/", "--")) / "snapshots" / commit


def exec_start(node, unit):
    return next(line for line in (node.unit_dir / unit).read_text().splitlines() if line.startswith("ExecStart="))


def downloads(hub):
    """The files fetched (GET) from the fake hub and its CDN."""
    return [r["path"] for r in hub.log() if r["method"] == "GET" and ("/resolve/" in r["path"] or "/hub-cdn/" in r["path"])]


def test_a_pinned_model_is_staged_checked_and_served_offline_at_its_commit(node, hub, tmp_path):
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = pinned(node, "v1")
    unit = node.unit(models[0])
    v1 = commit_of(hub, "v1")
    hub.clear_log()

    run = node.play(models, extra_vars=hub_vars(hub, tmp_path))
    assert run.rc == 0, run.explain()
    assert "--revision %s --tokenizer-revision %s" % (v1, v1) in exec_start(node, unit)
    text = (node.unit_dir / unit).read_text()
    assert 'Environment="HF_HUB_OFFLINE=1"' in text and 'Environment="HF_HUB_CACHE=%s/models"' % node.root in text
    assert "Using model weights from the local snapshot %s" % snapshot_dir(node, v1) in run.journals[unit]
    status, body = http_json(models[0]["port"], "/v1/models")
    assert status == 200 and body["data"][0]["id"] == models[0]["name"]
    lock = json.loads((tmp_path / "locks" / "llmfleet-test--tiny-chat@v1.json").read_text())
    assert lock["commit"] == v1 and {f["path"] for f in lock["files"]} >= {"config.json", "model.safetensors"}
    assert "pytorch_model.bin" not in {f["path"] for f in lock["files"]}
    fetched = downloads(hub)
    assert len(fetched) == len(set(fetched)), "a file was fetched twice: %s" % fetched
    assert (snapshot_dir(node, v1) / "model.safetensors").resolve().stat().st_uid == 0  # root's, not the service's

    hub.clear_log()
    again = node.play(models, extra_vars=hub_vars(hub, tmp_path))
    assert again.rc == 0, again.explain()
    assert again.changed == {"node": 0}, again.changed_tasks()
    assert downloads(hub) == [], "a complete snapshot still asked the hub for files"


def test_a_new_revision_rolls_and_a_tampered_one_is_refused_before_anything_stops(node, hub, tmp_path):
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    v1, main = commit_of(hub, "v1"), commit_of(hub, "main")
    assert v1 != main
    first = pinned(node, "v1")
    unit = node.unit(first[0])
    assert node.play(first, extra_vars=hub_vars(hub, tmp_path)).rc == 0
    pid = node.main_pid(unit)

    moved = [dict(first[0], revision="main")]
    unit_text = (node.unit_dir / unit).read_text()
    hub.clear_log()
    check = node.play(moved, extra_vars=hub_vars(hub, tmp_path), check=True)
    assert check.rc == 0, check.explain()
    assert "would download" in check.output.lower() or "to fetch" in check.output.lower(), check.output
    assert downloads(hub) == [] and not snapshot_dir(node, main).exists(), "check mode fetched weights"
    assert (node.unit_dir / unit).read_text() == unit_text and node.main_pid(unit) == pid

    # main's weights differ from v1's; the hub serves them tampered: refused at staging
    hub.fault("tamper", filename="model.safetensors")
    bad = node.play(moved, extra_vars=hub_vars(hub, tmp_path))
    assert bad.rc != 0
    assert "model.safetensors" in bad.output and "sha256" in bad.output.lower(), bad.explain()
    assert bad.verbs(*STOPPING, unit=unit) == [], "the node stopped for weights that do not match their hash"
    assert node.main_pid(unit) == pid
    assert not (snapshot_dir(node, main) / "model.safetensors").exists()

    hub.reset()
    good = node.play(moved, extra_vars=hub_vars(hub, tmp_path))
    assert good.rc == 0, good.explain()
    assert "--revision %s" % main in exec_start(node, unit)
    assert node.main_pid(unit) != pid
    assert "Using model weights from the local snapshot %s" % snapshot_dir(node, main) in good.journals[unit]
    # the previous revision stays for a rollback (engine_service_model_keep: 2)
    assert (snapshot_dir(node, v1) / "model.safetensors").is_file()


def test_a_revision_that_does_not_serve_rolls_back_to_the_previous_one(node, hub, tmp_path):
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    v1, main = commit_of(hub, "v1"), commit_of(hub, "main")
    first = pinned(node, "v1")
    unit = node.unit(first[0])
    # keep 1: staging main must still keep v1, which the unit serves and a rollback returns to
    keep_one = dict(hub_vars(hub, tmp_path), engine_service_model_keep=1)
    assert node.play(first, extra_vars=keep_one).rc == 0

    failing = [dict(first[0], revision="main", environment={"FAKE_VLLM_SERVE_FAIL": "start"})]
    run = node.play(failing, extra_vars=keep_one)
    assert run.rc != 0
    assert run.result["rolled_back"], run.result
    assert (snapshot_dir(node, v1) / "model.safetensors").is_file(), "staging pruned the snapshot the unit served"
    assert "--revision %s" % v1 in exec_start(node, unit), "the previous revision's unit was not put back"
    assert node.show(unit, "ActiveState")["ActiveState"] == "active"
    journal = node.journal(unit)
    assert journal.rindex(str(snapshot_dir(node, v1))) > journal.rindex(str(snapshot_dir(node, main)))
    status, _body = http_json(first[0]["port"], "/health")
    assert status == 200
