"""uv_fleet_lock and uv_engine_env with engine_file (issue 44, finding 15): a node that no on-time file
fits gets the engine's cut-off lifted for one late file, and its lock pins that file alone. uv pins
every file of the version it sees (here the scripted uv's lock lists two hashes for vllm, as uv's does
when a second file of the version is visible); the lock written, and the one installed from, keep only
engine_file's, and the task warns, naming the file."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvlock
from ansible_collections.llmfleet.engines.plugins.modules import uv_engine_env, uv_fleet_lock
from tests.unit.plugins.lookup_fakes import warnings_text
from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, LOCK_0110, FakeUv, module_runner
from tests.unit.plugins.modules.test_uv_fleet_lock import FleetUv

ON_TIME, LATE = "4" * 64, "5" * 64
LATE_FILE = {"filename": "vllm-0.11.0-1-cp38-abi3-manylinux_2_28_aarch64.whl", "sha256": LATE}


def run(main, args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def engine_hashes(text):
    return _uvlock.parse_lock(text)["vllm"]["hashes"]


@pytest.fixture
def uv_path(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    return str(uv)


def fleet_args(tmp_path, uv_path, **kw):
    out = {"dest": str(tmp_path / "locks" / "vllm-0.11.0-aarch64.txt"), "engine": "vllm", "version": "0.11.0",
           "exclude_newer": "2025-10-03T20:10:00Z", "exclude_newer_package": {"vllm": "2026-09-02T12:00:00Z"},
           "index_url": INDEX, "python_version": "3.12", "python_platform": "aarch64-manylinux_2_28", "uv": uv_path}
    out.update(kw)
    return out


def env_args(tmp_path, uv_path, **kw):
    out = {"path": str(tmp_path / "engines" / "vllm" / "0.11.0"), "engine": "vllm", "version": "0.11.0",
           "exclude_newer": "2025-10-03T20:10:00Z", "exclude_newer_package": {"vllm": "2026-09-02T12:00:00Z"},
           "index_url": INDEX, "python": "3.11", "python_preference": "only-system", "uv": uv_path,
           "gpu_check": False}
    out.update(kw)
    return out


class SourceSeeingUv(FleetUv):
    """FleetUv that keeps the text of the lock each pylock compile reads (its last argument)."""

    def __init__(self):
        super().__init__()
        self.pylock_sources = []

    def __call__(self, argv, data=None, env=None, cwd=None, timeout=None):
        argv = [str(a) for a in argv]
        if argv[1:3] == ["pip", "compile"] and "--format" in argv:
            with open(argv[-1], encoding="utf-8") as handle:
                self.pylock_sources.append(handle.read())
        return super().__call__(argv, data=data, env=env, cwd=cwd, timeout=timeout)


def test_the_fleet_lock_pins_the_late_file_alone_and_warns(monkeypatch, tmp_path, uv_path, capsys):
    fake = SourceSeeingUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(fake))
    # without engine_file: both files of the version uv saw are pinned (what the finding saw)
    code, bare = run(uv_fleet_lock.main, fleet_args(tmp_path, uv_path, dest=str(tmp_path / "bare.txt")), capsys)
    assert code == 0, bare.get("msg")
    assert engine_hashes((tmp_path / "bare.txt").read_text()) == ["sha256:" + ON_TIME, "sha256:" + LATE]

    code, result = run(uv_fleet_lock.main, fleet_args(tmp_path, uv_path, engine_file=LATE_FILE), capsys)
    assert code == 0, result.get("msg")
    text = (tmp_path / "locks" / "vllm-0.11.0-aarch64.txt").read_text()
    assert engine_hashes(text) == ["sha256:" + LATE]
    assert _uvlock.lock_text_problems(text) == []
    # the pylock is compiled from the pinned lock
    assert engine_hashes(fake.pylock_sources[-1]) == ["sha256:" + LATE]
    [warning] = warnings_text(result)
    assert LATE_FILE["filename"] in warning and LATE in warning
    # up to date on the next run, still pinned and still said
    code, again = run(uv_fleet_lock.main, fleet_args(tmp_path, uv_path, engine_file=LATE_FILE), capsys)
    assert code == 0 and again["changed"] is False, again.get("msg")
    assert LATE_FILE["filename"] in warnings_text(again)[0]


def test_a_lock_without_the_files_hash_fails_naming_both(monkeypatch, tmp_path, uv_path, capsys):
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(FleetUv()))
    other = dict(LATE_FILE, sha256="6" * 64)
    code, result = run(uv_fleet_lock.main, fleet_args(tmp_path, uv_path, engine_file=other), capsys)
    assert code == 1 and result["failed"] is True
    assert LATE_FILE["filename"] in result["msg"] and "6" * 64 in result["msg"] and ON_TIME in result["msg"]
    assert not os.path.exists(tmp_path / "locks" / "vllm-0.11.0-aarch64.txt")


def test_engine_file_and_wheel_go_apart(monkeypatch, tmp_path, uv_path, capsys):
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(FleetUv()))
    wheel = {"url": "https://gh.test/vllm-0.11.0-py3-none-any.whl", "sha256": "3" * 64}
    code, result = run(uv_fleet_lock.main, fleet_args(tmp_path, uv_path, engine_file=LATE_FILE, wheel=wheel), capsys)
    assert code == 1 and "engine_file and wheel go apart" in result["msg"]


def test_the_node_installs_the_late_file_alone(monkeypatch, tmp_path, uv_path, capsys):
    fake = FakeUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(fake))
    code, result = run(uv_engine_env.main, env_args(tmp_path, uv_path, engine_file=LATE_FILE), capsys)
    assert code == 0, result.get("msg")
    installed = open(os.path.join(result["path"], "llmfleet-requirements.txt"), encoding="utf-8").read()
    assert engine_hashes(installed) == ["sha256:" + LATE]
    assert any(LATE_FILE["filename"] in w for w in warnings_text(result))


def test_a_given_lock_that_pins_more_fails(monkeypatch, tmp_path, uv_path, capsys):
    fake = FakeUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(fake))
    code, result = run(uv_engine_env.main, env_args(tmp_path, uv_path, engine_file=LATE_FILE, lock=LOCK_0110), capsys)
    assert code == 1 and result["failed"] is True
    assert "engine_file allows %s" % LATE_FILE["filename"] in result["msg"], result["msg"]
    assert fake.kinds() == []
    pinned = _uvlock.pin_engine_file(LOCK_0110, "vllm", LATE_FILE)
    code, result = run(uv_engine_env.main, env_args(tmp_path, uv_path, engine_file=LATE_FILE, lock=pinned), capsys)
    assert code == 0, result.get("msg")
