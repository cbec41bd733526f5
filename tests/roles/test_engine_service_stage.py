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


# -- pins are data, the disk, the clean-up and the lock (issue 25: 4, 9, 12) ---------------------------------

STAGE_ONCE = [{"name": "engine play", "hosts": "all", "gather_facts": False,
               "tasks": [{"name": "Stage", "ansible.builtin.include_role": {"name": "llmfleet.engines.engine_service",
                                                                            "tasks_from": "stage"}}]}]
CHAT, SHARDED = "llmfleet-test/tiny-chat", "llmfleet-test/tiny-sharded"


def _stage(upstream, tmp_path, root, models, extra=None, tag="run"):
    """Stage ``models`` on one local node whose root is ``root`` (its units in root/units); rc, output."""
    folder = tmp_path / tag
    folder.mkdir()
    host = {"ansible_connection": "local", "ansible_python_interpreter": PYTHON, "engine_node_root": str(root),
            "engine_service_unit_dir": str(root / "units"), "engine_service_lock_wait": 0}
    group = {"engine_service_hf_endpoint": upstream.url + "/hub", "engine_service_models": models}
    group.update(extra or {})
    (folder / "inventory.json").write_text(json.dumps({"all": {"hosts": {"n1": host}, "vars": group}}))
    (folder / "site.yml").write_text(json.dumps(STAGE_ONCE))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(folder / "tmp"), ANSIBLE_RETRY_FILES_ENABLED="0",
               no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(folder / "inventory.json"), str(folder / "site.yml")],
                          env=env, cwd=str(folder), capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _new_root(tmp_path, name):
    root = roots() / ("stage-%s-%s" % (tmp_path.name, name))
    (root / "units").mkdir(parents=True, mode=0o755)
    root.chmod(0o755)
    return root


def _repo(root, repo):
    return root / "models" / ("models--" + repo.replace("/", "--"))


def _snapshots(root, repo):
    folder = _repo(root, repo) / "snapshots"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _hub_asked(upstream):
    return [r["path"] for r in upstream.log() if r["path"].startswith(("/hub/", "/hub-cdn/"))]


def _fetched(upstream):
    return [r["path"] for r in upstream.log() if "/resolve/" in r["path"] or r["path"].startswith("/hub-cdn/")]


def test_a_kept_lock_is_read_back_and_a_branch_moves_only_when_asked(upstream, tmp_path):
    root = _new_root(tmp_path, "pins")
    locks = tmp_path / "locks"
    models = [{"name": "chat", "model": CHAT, "revision": "main", "port": 18000}]
    lock_file = locks / "llmfleet-test--tiny-chat@main.json"
    try:
        rc, out = _stage(upstream, tmp_path, root, models, {"engine_service_model_lock_dir": str(locks)}, "first")
        assert rc == 0, out
        pinned = json.loads(lock_file.read_text())["commit"]
        assert _snapshots(root, CHAT) == [pinned]

        # converged, with the hub down: nothing is asked, nothing fails
        upstream.clear_log()
        upstream.fault("status", status=503, count=1000, path="/hub")
        rc, out = _stage(upstream, tmp_path, root, models, {"engine_service_model_lock_dir": str(locks)}, "outage")
        assert rc == 0, out
        assert _hub_asked(upstream) == [], "a converged run asked the hub: %s" % _hub_asked(upstream)

        # the branch moves at the hub: the fleet stays on its pin until asked
        upstream.reset()
        moved = upstream.hub_commit(CHAT, {"model.safetensors": {"seed": 77, "size": 46000}})
        rc, out = _stage(upstream, tmp_path, root, models, {"engine_service_model_lock_dir": str(locks)}, "moved")
        assert rc == 0, out
        assert json.loads(lock_file.read_text())["commit"] == pinned and _snapshots(root, CHAT) == [pinned]
        assert _hub_asked(upstream) == []

        rc, out = _stage(upstream, tmp_path, root, models, {"engine_service_model_lock_dir": str(locks),
                                                            "engine_service_model_refresh": True}, "refresh")
        assert rc == 0, out
        assert json.loads(lock_file.read_text())["commit"] == moved and moved in _snapshots(root, CHAT)

        # a lock file another user could change is not read: the run fails naming it
        locks.chmod(0o777)
        upstream.clear_log()
        rc, out = _stage(upstream, tmp_path, root, models, {"engine_service_model_lock_dir": str(locks)}, "open")
        assert rc != 0 and "lock_file %s cannot be trusted" % lock_file in out, out
        assert _hub_asked(upstream) == []
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _selected_size(upstream, repo, revision):
    """The bytes of the files hf_revision pins by default (no README, .gitattributes, *.bin beside
    safetensors, original/), from the fake hub's catalogue."""
    entry = upstream.hub_catalog()["repos"][repo]
    commit = entry["branches"].get(revision) or entry["tags"][revision]
    files = next(c for c in entry["commits"] if c["commit"] == commit)["files"]
    return sum(f["size"] for f in files if f["path"] not in ("README.md", ".gitattributes")
               and not f["path"].endswith(".bin") and not f["path"].startswith("original/"))


def test_models_staged_at_once_that_fit_alone_but_not_together_fail_before_any_download(upstream, tmp_path):
    root = _new_root(tmp_path, "disk")
    chat, sharded = _selected_size(upstream, CHAT, "v1"), _selected_size(upstream, SHARDED, "main")
    # a small disk: the margin (1024 MiB) and room for the bigger model and half the other
    room = max(chat, sharded) + min(chat, sharded) // 2
    models_dir = root / "models"
    models_dir.mkdir(mode=0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0755,uid=0,gid=0" % (1024 * 1024 * 1024 + room),
                    "llmfleet-test-disk", str(models_dir)], check=True)
    try:
        models = [{"name": "chat", "model": CHAT, "revision": "v1", "port": 18000},
                  {"name": "sharded", "model": SHARDED, "revision": "main", "port": 18001}]
        upstream.clear_log()
        rc, out = _stage(upstream, tmp_path, root, models)
        assert rc != 0, out
        assert "the 2 pinned models staged together need" in out and str(models_dir) in out, out
        assert _fetched(upstream) == [], "files were fetched before the disk was found too small: %s" % _fetched(upstream)
        # each alone fits: the first one staged, the second too
        rc, out = _stage(upstream, tmp_path, root, models[:1], tag="alone")
        assert rc == 0, out
    finally:
        subprocess.run(["umount", str(models_dir)], check=False)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_staging_waits_for_the_rollout_lock_and_cleans_up_what_is_no_longer_listed(upstream, tmp_path):
    root = _new_root(tmp_path, "prune")
    models = [{"name": "chat", "model": CHAT, "revision": "v1", "port": 18000},
              {"name": "chat-next", "model": CHAT, "revision": "main", "port": 18001},
              {"name": "sharded", "model": SHARDED, "revision": "main", "port": 18002}]
    lock = root / "engines" / "vllm" / ".engine_service.lock"
    try:
        # another run rolls out on this node: staging does not touch the weights under it
        lock.mkdir(parents=True)
        (lock / "holder").write_text("a run from elsewhere since now\n")
        upstream.clear_log()
        rc, out = _stage(upstream, tmp_path, root, models, tag="locked")
        assert rc != 0 and "another run is rolling out on this node (a run from elsewhere" in out, out
        assert _fetched(upstream) == [] and not (root / "models").exists()
        subprocess.run(["rm", "-rf", str(lock)], check=True)

        rc, out = _stage(upstream, tmp_path, root, models, tag="both")
        assert rc == 0, out
        assert not lock.exists(), "staging left the rollout lock behind"
        v1 = upstream.hub_catalog()["repos"][CHAT]["tags"]["v1"]
        assert v1 in _snapshots(root, CHAT) and len(_snapshots(root, CHAT)) == 2
        assert len(_snapshots(root, SHARDED)) == 1

        # tiny-chat is no longer listed; a unit still serves its v1 (as a rollout wrote it)
        (root / "units" / "llmfleet-vllm-chat.service").write_text(
            "[Service]\nExecStart=/x/bin/vllm serve %s --revision %s --tokenizer-revision %s\n" % (CHAT, v1, v1))
        # and a download of another revision of tiny-sharded, cut by a failed run, is left in its blobs
        stray = _repo(root, SHARDED) / "blobs" / ("ab" * 32 + ".incomplete")
        stray.write_bytes(b"half a file")
        rc, out = _stage(upstream, tmp_path, root, models[2:], tag="unlisted")
        assert rc == 0, out
        assert _snapshots(root, CHAT) == [v1], "the served snapshot went, or the unlisted one stayed"
        served = _repo(root, CHAT) / "snapshots" / v1 / "model.safetensors"
        assert served.resolve().is_file()
        assert not stray.exists(), "a leftover .incomplete stayed"
        assert len(_snapshots(root, SHARDED)) == 1

        # no unit serves it any more: the model's directory goes
        (root / "units" / "llmfleet-vllm-chat.service").unlink()
        rc, out = _stage(upstream, tmp_path, root, models[2:], tag="gone")
        assert rc == 0, out
        assert not _repo(root, CHAT).exists() and len(_snapshots(root, SHARDED)) == 1
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_a_failed_download_fails_the_node_with_the_module_s_message(upstream, tmp_path):
    root = _new_root(tmp_path, "tampered")
    lock = root / "engines" / "vllm" / ".engine_service.lock"
    # the weights come with a byte flipped: model_snapshot refuses them in the background job
    upstream.fault("tamper", filename="model.safetensors")
    try:
        rc, out = _stage(upstream, tmp_path, root, [{"name": "chat", "model": CHAT, "revision": "v1", "port": 18000}],
                         {"engine_service_model_progress_interval": 1})
        assert rc != 0, out
        # the follow ended with the job; the collect step failed the node with the module's own message
        collect = out[out.index("TASK [llmfleet.engines.engine_service : Collect the staging results]"):].split("TASK [")[1]
        assert "failed: [n1] (item=llmfleet-test/tiny-chat@v1)" in collect, out
        assert re.search(r"Module failed: model\.safetensors of llmfleet-test/tiny-chat@[0-9a-f]{40} from \S+ is not the "
                         r"lock's file: got 40000 bytes with sha256 ", collect), out
        assert "Follow the downloads until they end" in out and not lock.exists(), out
        assert not any((root / "models").glob("models--*/snapshots/*/model.safetensors")), "tampered weights staged"
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
