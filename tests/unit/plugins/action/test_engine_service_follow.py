"""engine_service_follow (the engine_service role's wait for its background downloads): the action run with the real
modules it calls on the node, in-process (async_status reading the job files, slurp reading the progress files,
rollout_lock on a real lock directory), against downloads that run in threads as model_snapshot does under
async_wrapper: the job file says started, model_snapshot's own DownloadProgress rewrites the progress file as bytes
arrive and removes it at the end, then the module's result lands in the job file.

It prints each download still going every interval and ends when the last one has; it keeps the run's rollout lock
fresh at every interval and fails when another run took the lock over; a failed download does not fail it (the role's
collect step does); downloads that do not end are given up after the timeout."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from unittest import mock

import pytest

from ansible.module_utils import _internal

from tests.unit.plugins.lookup_fakes import run_module

# importing the controller's code sets is_controller for the whole process (see test_engine_service_look.py)
_before = _internal.is_controller
try:
    from ansible.errors import AnsibleActionFail, AnsibleActionSkip
    from ansible.modules import async_status, slurp
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task
    from ansible.template import Templar

    from ansible_collections.llmfleet.engines.plugins.action import engine_service_follow
    from ansible_collections.llmfleet.engines.plugins.module_utils.hub._snapshot import DownloadProgress
    from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _rolloutlock
    from ansible_collections.llmfleet.engines.plugins.modules import rollout_lock
finally:
    _internal.is_controller = _before

MODULES = {"ansible.legacy.async_status": async_status.main, "ansible.legacy.slurp": slurp.main,
           "llmfleet.engines.rollout_lock": rollout_lock.main}
MIB = 1048576
LINE = re.compile(r"^n1 (?P<name>\S+): (?:(?P<files>.+), (?P<done>\d+\.\d) of (?P<total>\d+\.\d) MiB at "
                  r"(?P<rate>\d+\.\d) MiB/s, file (?P<n>\d+) of (?P<m>\d+)|(?P<word>starting|finishing)) "
                  r"\((?P<s>\d+) s\)$")


class Download(threading.Thread):
    """One model's download in the background: ``steps`` of (seconds, file, MiB) as they arrive, then
    ``tail`` seconds without a progress file, then ``result`` (None: it never ends) in the job file."""

    def __init__(self, folder, jid, steps, result, tail=0.3, files_total=2, also=None):
        super().__init__(daemon=True)
        self.job = folder / "async" / jid
        self.progress = folder / ("%s.json.progress" % jid)
        self.steps, self.result, self.tail, self.files_total = steps, result, tail, files_total
        self.also = also or {}  # seconds from the start -> what else happens then (another run, time passing)
        self.job.parent.mkdir(exist_ok=True)
        # what async_wrapper writes before the module runs
        self.job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": jid}))

    def run(self):
        began = time.monotonic()
        pending = sorted(self.also.items())
        progress = DownloadProgress(str(self.progress), sum(mib for _s, _f, mib in self.steps) * MIB,
                                    self.files_total, interval=0)

        def until(at):
            while True:
                while pending and pending[0][0] <= time.monotonic() - began:
                    pending.pop(0)[1]()
                left = at - (time.monotonic() - began)
                if left <= 0:
                    return
                time.sleep(min(left, 0.05))

        done, at = {}, 0.0
        for seconds, name, mib in self.steps:
            if name not in done:  # one file after another here
                if done:
                    progress.file_finished(list(done)[-1])
                progress.file_started(name)
            at += seconds
            until(at)
            done[name] = done.get(name, 0) + mib * MIB
            progress.file_bytes(name, done[name])
        progress.file_finished(self.steps[-1][1])
        progress.remove()
        if self.result is None:
            until(3600)
        until(at + self.tail)
        # the module's own result, as async_wrapper leaves it
        self.job.write_text(json.dumps(self.result))


class Recorder:
    def __init__(self):
        self.lines = []

    def display(self, msg, *args, **kwargs):
        del args, kwargs
        self.lines.append((time.monotonic(), msg))


def follow(folder, capsys, monkeypatch, args, check_mode=False):
    """The action's result, its printed lines and the modules it ran, with the real modules run in-process."""
    task = Task()
    task.args = args
    task.action = "llmfleet.engines.engine_service_follow"
    task.check_mode = check_mode
    context = PlayContext()
    context.check_mode = check_mode
    connection = mock.Mock()
    connection._shell.get_option.return_value = str(folder / "async")  # the shell's async_dir
    action = engine_service_follow.ActionModule(task, connection, context, DataLoader(), Templar(loader=DataLoader()),
                                                None)
    ran = []

    def execute(module_name, module_args, task_vars):
        del task_vars
        ran.append((time.monotonic(), module_name))
        return run_module(MODULES[module_name], module_args, capsys)[1]

    action._execute_module = execute
    shown = Recorder()
    monkeypatch.setattr(engine_service_follow, "display", shown)
    return action.run(task_vars={"inventory_hostname": "n1"}), shown.lines, ran


def job(download, name):
    return {"jid": download.job.name, "name": name, "progress": str(download.progress)}


def take_lock(capsys, path, holder="this run"):
    code, result, _out = run_module(rollout_lock.main, {"path": str(path), "holder": holder, "wait": 0}, capsys)
    assert code == 0, result
    return result["token"]


def test_each_download_still_going_is_shown_every_interval_and_the_follow_ends_with_the_last(
        tmp_path, capsys, monkeypatch):
    chat = Download(tmp_path, "1.1", [(0.6, "model-00001-of-00002.safetensors", 3),
                                      (0.7, "model-00002-of-00002.safetensors", 2)],
                    {"changed": True, "msg": "staged org/chat"})
    code = Download(tmp_path, "1.2", [(1.0, "model.safetensors", 4), (1.0, "model.safetensors", 4),
                                      (0.8, "model.safetensors", 2)],
                    {"failed": True, "msg": "model.safetensors: sha256 differs from the lock"}, tail=1.2, files_total=1)
    began = time.monotonic()
    for download in (chat, code):
        download.start()
    result, lines, _ran = follow(tmp_path, capsys, monkeypatch, {
        "jobs": [job(chat, "org/chat@main"), job(code, "org/code@v1")], "interval": 1, "timeout": 60})
    took = time.monotonic() - began
    assert result.get("failed") is not True, result
    assert result["finished"] is True
    # a failed download does not fail the follow: the role's collect step fails it, with the module's message
    assert result["jobs"] == [{"jid": "1.1", "name": "org/chat@main", "finished": True, "failed": False},
                              {"jid": "1.2", "name": "org/code@v1", "finished": True, "failed": True}]
    # it ended with the last download (4 s, then the next question), not waits of an interval each later
    assert 4.0 <= took < 7.0, took
    parsed = [(at - began, LINE.match(text)) for at, text in lines]
    assert parsed and all(m for _at, m in parsed), "no progress shown, or not in its form: %r" % lines
    # the first lines after one interval, one per download still going, then so every interval
    assert parsed[0][0] >= 0.9 and [m["name"] for _at, m in parsed[:2]] == ["org/chat@main", "org/code@v1"], lines
    chat_lines = [m for _at, m in parsed if m["name"] == "org/chat@main"]
    code_lines = [m for _at, m in parsed if m["name"] == "org/code@v1"]
    assert len(chat_lines) in (1, 2) and len(code_lines) >= 3, lines
    # the second file of two, after the first one's 3 MiB
    assert chat_lines[0]["files"] == "model-00002-of-00002.safetensors" and chat_lines[0]["n"] == "2", lines
    assert chat_lines[0]["total"] == "5.0" and float(chat_lines[0]["done"]) >= 3.0, lines
    # the files, MiB done of the total, the rate, which file of how many and the seconds since the start
    moving = [m for m in code_lines if m["files"]]
    assert moving and all(m["files"] == "model.safetensors" and m["total"] == "10.0" and m["m"] == "1"
                          for m in moving), lines
    assert [float(m["done"]) for m in moving] == sorted(float(m["done"]) for m in moving)
    # the latest line counts the MiB already written (a loaded machine may show the first line before the first
    # chunk lands: 0.0 then, which the order check above allows)
    assert float(moving[-1]["done"]) >= 4.0 and float(moving[-1]["rate"]) > 0, lines
    assert [int(m["s"]) for m in code_lines] == sorted(int(m["s"]) for m in code_lines)
    # once the module removed its progress file, the download is finishing, not starting again
    assert code_lines[-1]["word"] == "finishing", lines


def test_the_lock_is_refreshed_at_every_interval_while_the_downloads_go_on(tmp_path, capsys, monkeypatch):
    lock = tmp_path / ".engine_service.lock"
    token = take_lock(capsys, lock)
    holder = lock / "holder"

    def age_the_lock():  # as if hours had passed since the last heartbeat
        os.utime(holder, (time.time() - 7200, time.time() - 7200))

    age_the_lock()
    download = Download(tmp_path, "2.1", [(1.0, "model.safetensors", 1), (1.0, "model.safetensors", 1)],
                        {"changed": True}, tail=0.7, also={1.4: age_the_lock}, files_total=1)
    download.start()
    result, _lines, ran = follow(tmp_path, capsys, monkeypatch, {
        "jobs": [job(download, "org/chat@main")], "interval": 1, "timeout": 60, "lock": str(lock), "lock_token": token})
    assert result.get("failed") is not True and result["finished"] is True, result
    # refreshed after the download aged it at 1.4 s: a heartbeat at every interval, not only at the start
    assert time.time() - holder.stat().st_mtime < 2.5, "the rollout lock was not kept fresh"
    refreshes = [at for at, name in ran if name == "llmfleet.engines.rollout_lock"]
    assert len(refreshes) >= 3 and all(b - a < 1.5 for a, b in zip(refreshes, refreshes[1:])), refreshes
    assert _rolloutlock.holder(str(lock)) == "this run"


def test_a_lock_another_run_took_over_fails_the_follow_and_is_left_to_that_run(tmp_path, capsys, monkeypatch):
    lock = tmp_path / ".engine_service.lock"
    token = take_lock(capsys, lock)

    def another_run_takes_it_over():  # as rollout_lock does with a lock it found stale
        (lock / "holder").unlink()
        lock.rmdir()
        _rolloutlock.acquire(str(lock), "a run from elsewhere since now", 0, 28800, token="f" * 32)

    download = Download(tmp_path, "3.1", [(3.0, "model.safetensors", 1)], {"changed": True},
                        also={1.3: another_run_takes_it_over}, files_total=1)
    download.start()
    began = time.monotonic()
    result, _lines, _ran = follow(tmp_path, capsys, monkeypatch, {
        "jobs": [job(download, "org/chat@main")], "interval": 1, "timeout": 60, "lock": str(lock), "lock_token": token})
    assert result["failed"] is True and result["lost"] is True and result["finished"] is False, result
    assert result["msg"].startswith("n1: keeping the rollout lock %s failed" % lock), result["msg"]
    assert "held by another run now (a run from elsewhere since now)" in result["msg"], result["msg"]
    # at the first interval after the take-over, not when the download ended
    assert time.monotonic() - began < 2.8
    assert _rolloutlock.holder(str(lock)) == "a run from elsewhere since now"
    assert "f" * 32 not in json.dumps(result) and token not in json.dumps(result)


def test_downloads_that_do_not_end_are_given_up_after_the_timeout(tmp_path, capsys, monkeypatch):
    download = Download(tmp_path, "4.1", [(0.2, "model.safetensors", 1)], None, files_total=1)
    download.start()
    began = time.monotonic()
    result, _lines, _ran = follow(tmp_path, capsys, monkeypatch, {
        "jobs": [job(download, "org/chat@main")], "interval": 1, "timeout": 2})
    assert result["failed"] is True and result["finished"] is False
    assert result["msg"] == ("n1: the downloads of org/chat@main did not end within 2 s (their jobs may still run on "
                             "the node)")
    assert time.monotonic() - began < 4


@pytest.mark.parametrize("args, words", [
    ({"interval": 0, "timeout": 60}, "n1: engine_service_follow: interval is 0, allowed: a whole number of seconds, 1"),
    ({"interval": 1, "timeout": -5}, "n1: engine_service_follow: timeout is -5, allowed: a whole number of seconds, 1"),
    ({"interval": 1, "timeout": 60, "lock": "/x/.engine_service.lock"}, "lock, lock_token"),
])
def test_bad_arguments_are_refused_naming_the_host_option_and_value(tmp_path, capsys, monkeypatch, args, words):
    with pytest.raises(AnsibleActionFail) as failed:
        follow(tmp_path, capsys, monkeypatch, dict(args, jobs=[{"jid": "9.9"}]))
    assert words in str(failed.value)


def test_check_mode_is_skipped(tmp_path, capsys, monkeypatch):
    with pytest.raises(AnsibleActionSkip):
        follow(tmp_path, capsys, monkeypatch, {"jobs": [{"jid": "9.9"}], "timeout": 60}, check_mode=True)
