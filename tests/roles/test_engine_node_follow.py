"""engine_node_follow (the engine_node role's wait for its background build): a real ansible-playbook run
against this machine, a real background job (async, poll 0) that writes its steps into a progress file as
uv_engine_env does, followed in one task. It prints the step every interval, returns the job's result,
fails with a job that failed, and gives up after its timeout instead of waiting for ever."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from tests.roles.conftest import ANSIBLE_PLAYBOOK, COLLECTIONS

STEPS = {"venv": "creating the Python environment", "install": "downloading and installing packages"}

# steps into the progress file (atomically, as uv_engine_env writes it), then the file removed and a last
# pause ("finishing"), then the job's own result; argv[3] is the length of a step in seconds, the last
# pause 0.8 of it
JOB = r"""
import json, os, sys, time
progress, step_s = sys.argv[1], float(sys.argv[3])
for step in ("venv", "install"):
    with open(progress + ".tmp", "w") as handle:
        json.dump({"step": step}, handle)
    os.rename(progress + ".tmp", progress)
    time.sleep(step_s)
os.remove(progress)
time.sleep(step_s * 0.8)
print(json.dumps({"built": "yes"}))
sys.exit(int(sys.argv[2]))
"""


def play(tmp_path, exit_code=0, timeout=60, step_s=5):
    """Run the job (``step_s``: seconds a step lasts) in the background and follow it every second."""
    (tmp_path / "job.py").write_text(JOB)
    progress = tmp_path / "env.progress.json"
    tasks = [
        {"name": "Start the build", "ansible.builtin.command": {"argv": [sys.executable, str(tmp_path / "job.py"),
                                                                         str(progress), str(exit_code), str(step_s)]},
         "async": 120, "poll": 0, "register": "launch"},
        {"name": "Follow", "block": [
            {"name": "Follow the build until it ends", "llmfleet.engines.engine_node_follow": {
                "jid": "{{ launch.ansible_job_id }}", "progress": str(progress), "interval": 1, "timeout": timeout,
                "what": "vllm 0.20.0 cu13", "steps": STEPS}, "register": "build"},
            {"name": "Keep the result", "ansible.builtin.copy": {
                "content": "{{ build | to_json }}", "dest": str(tmp_path / "result.json"), "mode": "0644"}}],
         "rescue": [{"name": "Keep what failed", "ansible.builtin.copy": {
             "content": "{{ ansible_failed_result | to_json }}", "dest": str(tmp_path / "failed.json"), "mode": "0644"}}]},
    ]
    (tmp_path / "play.json").write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "remote"),
               ANSIBLE_ASYNC_DIR=str(tmp_path / "async"), ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    began = time.monotonic()
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(tmp_path / "play.json")],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    return proc, time.monotonic() - began


def lines(out):
    return re.findall(r"^vllm 0\.20\.0 cu13 on localhost: (.*), (\d+) s \(building for (\d+) s\)$", out, re.M)


def test_each_step_is_shown_while_the_build_runs_and_its_result_is_the_task_s(tmp_path):
    proc, _took = play(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = lines(proc.stdout)
    words = [w for w, _s, _b in shown]
    # each step in words, in order, then the last one without a progress file ("starting" before the first)
    changes = [w for i, w in enumerate(words) if i == 0 or words[i - 1] != w]
    assert changes[-3:] == [STEPS["venv"], STEPS["install"], "finishing"] and changes[:-3] in ([], ["starting"]), \
        proc.stdout
    building = [int(b) for _w, _s, b in shown]
    assert building == sorted(building) and building[-1] >= 10, shown
    # the time in a step starts again with each step, and counts up while it lasts
    first = words.index(STEPS["install"])
    assert int(shown[first][1]) < 5 and shown[first + 1][0] != STEPS["install"] or \
        int(shown[first + 1][1]) > int(shown[first][1]), shown
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["finished"] is True and result["rc"] == 0 and json.loads(result["stdout"]) == {"built": "yes"}
    assert not (tmp_path / "failed.json").exists()


def test_a_failed_build_fails_the_task_with_the_job_s_result(tmp_path):
    # only the end matters here: a short build (each second of it is a poll, two modules run on the node)
    proc, _took = play(tmp_path, exit_code=3, step_s=0.5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed["failed"] is True and failed["rc"] == 3 and failed["finished"] is True
    assert not (tmp_path / "result.json").exists()


def test_a_build_that_does_not_end_is_given_up_after_the_timeout(tmp_path):
    proc, took = play(tmp_path, timeout=2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed["failed"] is True and failed["finished"] is False
    assert failed["msg"].startswith("localhost: vllm 0.20.0 cu13 did not end within 2 s (the job "), failed
    assert took < 30
