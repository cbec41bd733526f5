"""The node's rollout lock (module_utils/serve/_rolloutlock.py, the rollout_lock module): taken with
mkdir, waited for, a stale one taken over under a second lock, and no link followed. The role tests
(test_engine_service_rollout.py) run it through engine_service against a held and a stale lock."""

from __future__ import annotations

import os
import pathlib
import stat
import time

import pytest
from ansible.module_utils.common import warnings as module_warnings

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _rolloutlock as rl
from ansible_collections.llmfleet.engines.plugins.modules import rollout_lock
from tests.unit.plugins.lookup_fakes import run_module, warnings_text


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


# -- issue 44, item 8: the lock is the run's (its token), kept fresh, and given back only by its run ----

def _take(lock, text, stale=3600, **kwargs):
    token = rl.new_token()
    return token, rl.acquire(str(lock), text, wait=0, stale=stale, token=token, **kwargs)


def test_the_holder_file_keeps_the_runs_token_and_messages_never_show_it(tmp_path):
    lock = tmp_path / "lock"
    token, taken = _take(lock, "run A since 10:00")
    assert taken is None and len(token) == 32
    assert (lock / "holder").read_text() == "run A since 10:00\ntoken: %s\n" % token
    assert rl.holder(str(lock)) == "run A since 10:00"
    with pytest.raises(rl.LockHeld) as caught:
        rl.acquire(str(lock), "run B", wait=0, stale=3600)
    assert token not in caught.value.msg and caught.value.details["holder"] == "run A since 10:00"


def test_a_long_step_taken_over_as_stale_does_not_remove_the_new_holders_lock(tmp_path):
    """The issue's case: run A stages for longer than stale; run B takes the lock over; A's give-back
    must leave B's lock, and A's heartbeat says it lost the lock."""
    lock = tmp_path / "lock"
    token_a, _holder = _take(lock, "run A")
    _age(lock / "holder", 7200)
    token_b, taken = _take(lock, "run B")
    assert taken is not None and token_b != token_a
    with pytest.raises(rl.LockLost) as lost:
        rl.refresh(str(lock), token_a)
    assert lost.value.msg == ("this run's rollout lock %s is held by another run now (run B): it was taken over while"
                              " this run held it" % lock)
    assert rl.release(str(lock), token_a) == ("held", "run B")
    assert rl.holder(str(lock)) == "run B", "run A removed the lock run B holds"
    assert rl.release(str(lock), token_b) == ("released", None)
    assert not lock.exists() and not (tmp_path / "lock.takeover").exists()
    assert rl.release(str(lock), token_b) == ("gone", None)


def test_a_lock_without_a_token_or_with_another_is_not_given_back(tmp_path):
    """A lock whose run died before writing its holder, or one written by hand, is not this run's."""
    lock = tmp_path / "lock"
    lock.mkdir(mode=0o700)
    assert rl.release(str(lock), rl.new_token()) == ("held", "holder unknown") and lock.is_dir()
    (lock / "holder").write_text("by hand\n")
    assert rl.release(str(lock), "") == ("held", "by hand") and lock.is_dir()


def test_the_heartbeat_keeps_a_long_run_from_being_taken_over(tmp_path):
    lock = tmp_path / "lock"
    token, _holder = _take(lock, "run A")
    _age(lock / "holder", 7200)  # a long step: older than stale ...
    rl.refresh(str(lock), token)  # ... and the heartbeat after it
    assert rl.age(str(lock), time.time()) < 60
    with pytest.raises(rl.LockHeld):
        rl.acquire(str(lock), "run B", wait=0, stale=3600)
    assert rl.holder(str(lock)) == "run A" and not (tmp_path / "lock.takeover").exists()


def test_refresh_and_release_wait_for_a_take_over_in_progress(tmp_path):
    """Under the take-over lock: while another run holds it, neither reads the token; a take-over lock
    held past the wait fails with a message, and nothing is removed."""
    lock = tmp_path / "lock"
    token, _holder = _take(lock, "run A")
    takeover = tmp_path / "lock.takeover"
    takeover.mkdir()
    clock = Clock()

    def sleep(seconds):
        clock.sleep(seconds)
        if len(clock.sleeps) == 3:
            takeover.rmdir()  # the other run's take-over ended (it found the lock fresh)

    assert rl.release(str(lock), token, now=clock, sleep=sleep) == ("released", None)
    assert len(clock.sleeps) == 3 and not lock.exists()
    token, _holder = _take(lock, "run A")
    takeover.mkdir()
    with pytest.raises(rl.LockError, match=r"the take-over lock .*lock\.takeover has been held for 30 s"):
        rl.refresh(str(lock), token, now=clock, sleep=clock.sleep)
    assert rl.holder(str(lock)) == "run A"


def test_a_take_over_reads_the_age_again_under_its_lock(tmp_path, monkeypatch):
    """Issue 44, item 28: runs A and B both find the lock stale; A takes it over first (a fresh lock of its
    own) just before B gets the take-over lock. B must read the age again there, find A's lock fresh, and
    wait, not remove it."""
    lock = tmp_path / "lock"
    lock.mkdir(mode=0o700)
    (lock / "holder").write_text("run that died\n")
    _age(lock / "holder", 7200)
    real_take_over = rl._take_over
    token_a = rl.new_token()

    def a_first(path, stale, now):
        if not os.path.lexists(os.path.join(path, "holder")) or rl.holder(path) == "run that died":
            assert real_take_over(path, stale, now) is not None  # run A's take-over
            rl.acquire(path, "run A", wait=0, stale=stale, token=token_a)
        return real_take_over(path, stale, now)  # run B's, with the age it read before A's

    monkeypatch.setattr(rl, "_take_over", a_first)
    with pytest.raises(rl.LockHeld) as caught:
        rl.acquire(str(lock), "run B", wait=0, stale=3600)
    assert caught.value.details["holder"] == "run A"
    assert (lock / "holder").read_text() == "run A\ntoken: %s\n" % token_a, "run B removed run A's fresh lock"


def test_the_module_returns_a_token_refreshes_and_gives_back_only_its_own(tmp_path, capsys):
    lock = tmp_path / "lock"
    code, a, _out = run_module(rollout_lock.main, {"path": str(lock), "holder": "run A", "wait": 0}, capsys)
    assert code == 0 and len(a["token"]) == 32 and a["taken_over"] is None, a
    code, beat, _out = run_module(rollout_lock.main, {"path": str(lock), "token": a["token"]}, capsys)
    assert code == 0 and beat["changed"] is False, beat
    _age(lock / "holder", 40000)  # above the default stale (28800): taken over by run B
    code, b, _out = run_module(rollout_lock.main, {"path": str(lock), "holder": "run B", "wait": 0}, capsys)
    assert code == 0 and b["taken_over"] >= 40000 and b["token"] != a["token"], b
    code, lost, _out = run_module(rollout_lock.main, {"path": str(lock), "token": a["token"]}, capsys)
    assert code == 1 and lost["lost"] is True and lost["holder"] == "run B", lost
    code, gave, _out = run_module(rollout_lock.main, {"path": str(lock), "state": "absent", "token": a["token"]},
                                  capsys)
    assert code == 0 and gave["released"] is False and gave["holder"] == "run B", gave
    assert any("another run's now (run B)" in w for w in warnings_text(gave)), gave
    assert rl.holder(str(lock)) == "run B"
    module_warnings._global_warnings.clear()  # pylint: disable=protected-access
    code, gave, _out = run_module(rollout_lock.main, {"path": str(lock), "state": "absent", "token": b["token"]},
                                  capsys)
    assert code == 0 and gave["released"] is True and not lock.exists(), gave
    assert warnings_text(gave) == [], gave
    code, gone, _out = run_module(rollout_lock.main, {"path": str(lock), "state": "absent", "token": b["token"]},
                                  capsys)
    assert code == 0 and gone["released"] is False, gone
    assert any("was gone when this run gave it back" in w for w in warnings_text(gone)), gone
    code, refused, _out = run_module(rollout_lock.main, {"path": str(lock), "state": "absent"}, capsys)
    assert code == 1 and "token" in refused["msg"], refused


def test_the_default_stale_age_is_well_above_the_roles_longest_timeouts():
    """Issue 44, item 8: the default stale age was the weights' timeout; it must stay well above the sum of
    the role's own timeouts (defaults), the module's default too."""
    import yaml

    root = pathlib.Path(__file__).resolve().parents[4]
    defaults = yaml.safe_load((root / "roles/engine_service/defaults/main.yml").read_text())
    spec = yaml.safe_load((root / "roles/engine_service/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    module_doc = yaml.safe_load(rollout_lock.DOCUMENTATION)
    total = sum(defaults[name] for name in ("engine_service_model_timeout", "engine_service_ready_timeout",
                                            "engine_service_gateway_drain_timeout", "engine_service_shutdown_timeout",
                                            "engine_service_steady_timeout", "engine_service_lock_wait"))
    total += defaults["engine_service_ready_timeout"]  # a rollback gates again
    stale = defaults["engine_service_lock_stale"]
    assert stale >= 1.5 * total, (stale, total)
    assert options["engine_service_lock_stale"]["default"] == stale
    assert module_doc["options"]["stale"]["default"] == stale
