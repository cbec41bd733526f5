"""The node's rollout lock (module_utils/serve/_rolloutlock.py, the rollout_lock module): taken with
mkdir, waited for, a stale one taken over under a second lock, and no link followed. The role tests
(test_engine_service_rollout.py) run it through engine_service against a held and a stale lock."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _rolloutlock as rl
from ansible_collections.llmfleet.engines.plugins.modules import rollout_lock
from tests.unit.plugins.lookup_fakes import run_module


class Clock:
    def __init__(self, start=1_000_000.0):
        self.t = start
        self.sleeps = []

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.t += seconds


def _age(path, seconds):
    when = os.stat(path).st_mtime - seconds
    os.utime(path, (when, when), follow_symlinks=False)


def test_a_free_lock_is_taken_with_its_holder_and_a_held_one_names_it(tmp_path):
    lock = tmp_path / "lock"
    assert rl.acquire(str(lock), "run A since 10:00", wait=0, stale=3600) is None
    assert stat.S_IMODE(lock.stat().st_mode) == 0o700
    assert (lock / "holder").read_text() == "run A since 10:00\n"
    assert stat.S_IMODE((lock / "holder").stat().st_mode) == 0o600
    clock = Clock()
    with pytest.raises(rl.LockHeld) as caught:
        rl.acquire(str(lock), "run B", wait=12, stale=3600, now=clock, sleep=clock.sleep)
    assert caught.value.msg == "another run is rolling out on this node (run A since 10:00); waited 12 s for %s" % lock
    assert caught.value.details == {"busy": True, "holder": "run A since 10:00", "waited": 12}
    assert clock.sleeps == [5.0, 5.0, 2]
    assert (lock / "holder").read_text() == "run A since 10:00\n", "the waiting run touched the holder's lock"


def test_a_run_that_waits_takes_the_lock_once_it_is_given_back(tmp_path):
    lock = tmp_path / "lock"
    rl.acquire(str(lock), "run A", wait=0, stale=3600)
    clock = Clock()

    def sleep(seconds):
        clock.sleep(seconds)
        if len(clock.sleeps) == 2:  # run A is done
            (lock / "holder").unlink()
            lock.rmdir()

    assert rl.acquire(str(lock), "run B", wait=600, stale=3600, now=clock, sleep=sleep) is None
    assert (lock / "holder").read_text() == "run B\n" and clock.sleeps == [5.0, 5.0]


@pytest.mark.parametrize("holder", [True, False], ids=["holder-file", "died-before-the-holder"])
def test_a_stale_lock_is_taken_over_under_the_take_over_lock(tmp_path, holder):
    lock = tmp_path / "lock"
    lock.mkdir(mode=0o700)
    if holder:
        (lock / "holder").write_text("run that died\n")
        _age(lock / "holder", 7200)
    else:
        _age(lock, 7200)
    taken = rl.acquire(str(lock), "run B", wait=0, stale=3600)
    assert 7190 < taken < 7300
    assert (lock / "holder").read_text() == "run B\n"
    assert not (tmp_path / "lock.takeover").exists()


def test_a_lock_another_run_is_taking_over_is_waited_for_and_a_dead_take_over_is_dropped(tmp_path):
    lock = tmp_path / "lock"
    lock.mkdir(mode=0o700)
    (lock / "holder").write_text("run that died\n")
    _age(lock / "holder", 7200)
    takeover = tmp_path / "lock.takeover"
    takeover.mkdir(mode=0o700)
    # another run is taking it over right now: not removed under it
    with pytest.raises(rl.LockHeld):
        rl.acquire(str(lock), "run B", wait=0, stale=3600)
    assert (lock / "holder").read_text() == "run that died\n" and takeover.is_dir()
    # that run died while taking over, long ago: its take-over lock is dropped first
    _age(takeover, 7200)
    assert rl.acquire(str(lock), "run B", wait=0, stale=3600) is not None
    assert (lock / "holder").read_text() == "run B\n" and not takeover.exists()


def test_no_link_is_followed(tmp_path):
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "holder").write_text("root's secret\n")
    lock = tmp_path / "lock"
    lock.symlink_to(secret)
    with pytest.raises(rl.LockError, match="is a symbolic link: refused"):
        rl.acquire(str(lock), "run B", wait=0, stale=1)
    assert (secret / "holder").read_text() == "root's secret\n" and secret.is_dir()
    # a holder that is a link is not read through (nor is its text put in a message)
    other = tmp_path / "other"
    other.mkdir()
    (other / "holder").symlink_to(secret / "holder")
    assert rl.holder(str(other)) == ""
    planted = tmp_path / "lock2.takeover"
    planted.symlink_to(secret)
    lock2 = tmp_path / "lock2"
    lock2.mkdir()
    _age(lock2, 7200)
    with pytest.raises(rl.LockError, match="take-over lock .* is a symbolic link"):
        rl.acquire(str(lock2), "run B", wait=0, stale=3600)
    assert secret.is_dir()


def test_the_module_takes_the_lock_and_fails_busy_naming_the_holder(tmp_path, capsys):
    lock = tmp_path / "lock"
    code, ok, _out = run_module(rollout_lock.main, {"path": str(lock), "holder": "run A", "wait": 0}, capsys)
    assert code == 0 and ok["changed"] is False and ok["taken_over"] is None, ok
    code, busy, _out = run_module(rollout_lock.main, {"path": str(lock), "holder": "run B", "wait": 0}, capsys)
    assert code == 1 and busy["failed"] and busy["busy"] and busy["holder"] == "run A", busy
    code, check, _out = run_module(rollout_lock.main, {"path": str(tmp_path / "other"), "holder": "run C",
                                                       "_ansible_check_mode": True}, capsys)
    assert code == 0 and not (tmp_path / "other").exists(), check
