"""engine_service's stage step (tasks/stage.yml) as site.yml runs it: included on every host of the
engine play, then again by the role in the rollout play (serial), against the fake hub. Each
revision is resolved once per run for the whole fleet, each node fetches each file once, and the
later play neither resolves again nor fetches anything."""

from __future__ import annotations

import json
import os
import re
import subprocess

from tests.roles.conftest import ANSIBLE_PLAYBOOK, COLLECTIONS, PYTHON, roots

PLAYS = [
    {"name": "engine play", "hosts": "all", "gather_facts": False,
     "tasks": [{"name": "Stage", "ansible.builtin.include_role": {"name": "llmfleet.engines.engine_service",
                                                                  "tasks_from": "stage"}}]},
    {"name": "rollout play", "hosts": "all", "gather_facts": False, "serial": 1,
     "tasks": [{"name": "Stage again", "ansible.builtin.include_role": {"name": "llmfleet.engines.engine_service",
                                                                        "tasks_from": "stage"}},
               {"name": "Show the commit", "ansible.builtin.debug": {
                   "msg": "commit={{ __engine_service_model_locks['llmfleet-test/tiny-chat@v1'].commit }}"}}]},
]


def _run(upstream, tmp_path, hosts, extra=None):
    group = {"engine_service_hf_endpoint": upstream.url + "/hub",
             "engine_service_models": [{"name": "tiny", "model": "llmfleet-test/tiny-chat", "revision": "v1",
                                        "port": 18000}]}
    group.update(extra or {})
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts, "vars": group}}))
    (tmp_path / "site.yml").write_text(json.dumps(PLAYS))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_RETRY_FILES_ENABLED="0",
               no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.json"), str(tmp_path / "site.yml")],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_slow_download_shows_its_progress(upstream, tmp_path):
    root = roots() / ("stage-%s-slow" % tmp_path.name)
    # long enough for a poll to see it on a loaded machine (each poll is a few ansible tasks)
    upstream.fault("slow", path="/hub-cdn/", delay=8, count=1)
    try:
        rc, out = _run(upstream, tmp_path, {"n1": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                                                   "engine_node_root": str(root)}},
                       {"engine_service_model_progress_interval": 1})
        assert rc == 0, out
        # while the CDN holds the weights back, the play says which file, how far, how fast
        assert re.search(r"n1 llmfleet-test/tiny-chat@v1: model.safetensors, [0-9.]+ of [0-9.]+ MiB at [0-9.]+ MiB/s,"
                         r" file [0-9]+ of [0-9]+ \([0-9]+ s\)", out), out
        assert any(r["path"].startswith("/hub-cdn/") and r.get("fault") == "slow" for r in upstream.log())
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_two_plays_resolve_once_and_fetch_each_file_once_per_node(upstream, tmp_path):
    hosts = {}
    for name in ("n1", "n2"):
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                       "engine_node_root": str(roots() / ("stage-%s-%s" % (tmp_path.name, name)))}
    group = {"engine_service_hf_endpoint": upstream.url + "/hub",
             "engine_service_models": [{"name": "tiny", "model": "llmfleet-test/tiny-chat", "revision": "v1",
                                        "port": 18000}]}
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts, "vars": group}}))
    (tmp_path / "site.yml").write_text(json.dumps(PLAYS))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_RETRY_FILES_ENABLED="0",
               no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
    try:
        proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "inventory.json"), str(tmp_path / "site.yml")],
                              env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        log = [r for r in upstream.log() if r["method"] == "GET"]
        infos = [r for r in log if r["path"].startswith("/hub/api/models/llmfleet-test/tiny-chat")]
        assert len(infos) == 1, "the revision was resolved %d times: %s" % (len(infos), [r["path"] for r in infos])
        files = [r["path"] for r in log if "/resolve/" in r["path"]]
        per_file = {p: files.count(p) for p in set(files)}
        assert per_file and set(per_file.values()) == {2}, "each node should fetch each file once: %s" % per_file
        for name in hosts:
            snapshots = roots() / ("stage-%s-%s" % (tmp_path.name, name)) / "models" / "models--llmfleet-test--tiny-chat" / "snapshots"
            assert len(list(snapshots.iterdir())) == 1
            assert "commit=%s" % next(snapshots.iterdir()).name in out
    finally:
        for name in hosts:
            subprocess.run(["rm", "-rf", hosts[name]["engine_node_root"]], check=False)
