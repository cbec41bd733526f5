"""A file added to an old release does not move the cut-off (issue 30, finding 6), with the real uv
against the fake PyPI whose index says vLLM 0.20.0's aarch64 wheel was uploaded months after the
x86_64 one (the fault ``late_upload``): the release is dated by its first upload, the task names
the late file, and the aarch64 lock still resolves the engine's own wheel (``--exclude-newer-package
vllm=<its date>``) while its dependencies resolve as of the first upload, as the x86_64 lock's do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.system.test_uv_fleet_lock import fleet_args, pylock_wheels, run_fleet_lock
from tests.unit.plugins.filter._plugins import filter_plugin

pytestmark = pytest.mark.integration

LATE = "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl"
LATE_TIME = "2026-09-01T12:00:00Z"  # after llmfleet-fakedep 2.0.0 (2026-07-01), which vllm>=1.0 would take
FIRST_CUTOFF = "2026-06-11T12:00:00Z"  # the x86_64 wheel's upload (2026-06-10T12:00:00Z) + 24 h
LIFT = filter_plugin("engine_node_lock").FilterModule().filters()["engine_node_exclude_newer_package"]
ENGINE_FILE = filter_plugin("engine_node_lock").FilterModule().filters()["engine_node_engine_file"]


def published(tmp_path, upstream):
    args_file = tmp_path / "pypi-args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"project": "vllm", "version": "0.20.0",
                                                             "index_url": upstream.url}}))
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    proc = subprocess.run([sys.executable, str(REPO / "plugins" / "modules" / "pypi_published.py"), str(args_file)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def warnings_of(result):
    return [w if isinstance(w, str) else (w.get("event") or {}).get("msg") or w.get("msg") or str(w)
            for w in result.get("warnings") or []]


def test_a_late_aarch64_wheel_keeps_the_cut_off_and_still_installs(upstream, tmp_path):
    before = published(tmp_path, upstream)
    assert (before["published"], before["exclude_newer"], before["late_files"]) == (
        "2026-06-10T12:00:00Z", FIRST_CUTOFF, []), before
    assert warnings_of(before) == []

    upstream.fault("late_upload", filename=LATE, upload_time=LATE_TIME)
    release = published(tmp_path, upstream)
    assert release.get("failed") is not True, release.get("msg")
    # the cut-off has not moved; the late file is listed and named
    assert (release["published"], release["exclude_newer"], release["last_upload"]) == (
        "2026-06-10T12:00:00Z", FIRST_CUTOFF, LATE_TIME)
    late_sha = [f["sha256"] for f in release["files"] if f["filename"] == LATE][0]
    assert release["late_files"] == [{"filename": LATE, "upload_time": LATE_TIME, "exclude_newer": "2026-09-02T12:00:00Z",
                                      "sha256": late_sha}]
    [warning] = warnings_of(release)
    assert "%s (%s)" % (LATE, LATE_TIME) in warning and "after the cut-off " + FIRST_CUTOFF in warning, warning

    job = {"version": "0.20.0", "build": "cu13", "source": {"origin": "pypi"}}
    arm_lift, x86_lift = LIFT(dict(job, arch="aarch64"), release), LIFT(dict(job, arch="x86_64"), release)
    assert (arm_lift, x86_lift) == ({"vllm": "2026-09-02T12:00:00Z"}, {})
    # the aarch64 node has no on-time file: its lock pins the late one alone (issue 44, finding 15)
    arm_file = ENGINE_FILE(dict(job, arch="aarch64"), release)
    assert arm_file == {"filename": LATE, "sha256": late_sha}
    assert ENGINE_FILE(dict(job, arch="x86_64"), release) == {}

    # the aarch64 node's lock: its own wheel, and the dependencies as of the first upload
    arm = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "aarch64-manylinux_2_28", exclude_newer=release["exclude_newer"],
                                              exclude_newer_package=arm_lift, engine_file=arm_file))
    assert arm.get("failed") is not True, arm.get("msg")
    assert arm["packages"] == {"llmfleet-fakedep": "1.1.0", "torch": "2.11.0", "vllm": "0.20.0"}
    assert pylock_wheels(arm["pylock_path"]) == {LATE: late_sha}
    lock_text = open(arm["path"]).read()
    engine_block = lock_text[lock_text.index("vllm==0.20.0"):]
    assert engine_block.count("--hash=") == 1 and "--hash=sha256:" + late_sha in engine_block
    assert any(LATE in w for w in warnings_of(arm)), warnings_of(arm)
    assert arm["cmd"][arm["cmd"].index("--exclude-newer-package") + 1] == "vllm=2026-09-02T12:00:00Z"
    # the x86_64 node's: the same dependencies, nothing lifted
    x86 = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", exclude_newer=release["exclude_newer"]))
    assert x86.get("failed") is not True, x86.get("msg")
    assert x86["packages"] == arm["packages"]
    assert list(pylock_wheels(x86["pylock_path"])) == ["vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl"]

    # what the lift is for: at the release's cut-off alone uv does not see the late wheel
    bare = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "aarch64-manylinux_2_28", dest=str(tmp_path / "bare.txt"),
                                               exclude_newer=release["exclude_newer"]))
    assert bare.get("failed") is True and "vllm" in bare["msg"], bare
    assert not (tmp_path / "bare.txt").exists()
    # and what dating by the last upload did: the late wheel moved every dependency's cut-off
    moved = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "aarch64-manylinux_2_28", dest=str(tmp_path / "moved.txt"),
                                                exclude_newer="2026-09-02T12:00:00Z"))
    assert moved.get("failed") is not True, moved.get("msg")
    assert moved["packages"]["llmfleet-fakedep"] == "2.0.0"
