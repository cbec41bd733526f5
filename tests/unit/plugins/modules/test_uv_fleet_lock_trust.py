"""uv_fleet_lock and the privilege line (security review, install side, finding 2).

Whoever can write the fleet-lock directory decides what root installs on every node: with the directory
0777, ``nobody`` replaced the lock with its own wheel and rewrote ``lock_sha256`` in the ``.json``; the
next run said "up to date" and the nodes took it. So the lock's directory, the lock, its record, the
pylock and the uv binary must be changeable by no user but root and the one running the module
(``_trust``); and the files are written through ``mkstemp`` names, so a link planted under the old
predictable names (``<dest>.tmp.<pid>``, ``<dest>.json.tmp.<pid>``) is never followed.

Run as root (the unit tests are); ``nobody`` is the other user."""

from __future__ import annotations

import os
import pwd

import pytest

from tests.unit.plugins.modules.test_uv_fleet_lock import base, fake, run_module  # noqa: F401  # pylint: disable=unused-import

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")


def nobody():
    return pwd.getpwnam("nobody").pw_uid


def assert_refused(result, option, path, owner, mode, why):
    assert result.get("failed") is True, result
    assert result["msg"].startswith("%s %s cannot be trusted: uv_fleet_lock, as root, uses it as " % (option, path)), \
        result["msg"]
    assert "(owner %s, mode %s) %s" % (owner, mode, why) in result["msg"], result["msg"]
    assert result["untrusted"]["component"] == path and result["untrusted"]["owner"] == owner
    assert result["untrusted"]["mode"] == mode and result["untrusted"]["option"] == option
    assert "Nothing was done." in result["msg"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_lock_directory_others_can_write_is_refused(fake, base, capsys, check_mode):  # noqa: F811
    locks = os.path.dirname(base["dest"])
    os.makedirs(locks)
    os.chmod(locks, 0o777)
    code, result = run_module(dict(base, _ansible_check_mode=check_mode), capsys)
    assert code == 1
    assert_refused(result, "dest", locks, "root", "0777", "is writable by others")
    assert fake.kinds() == []  # not even uv --version
    assert os.listdir(locks) == []


def test_a_lock_directory_of_another_user_is_refused(fake, base, capsys):  # noqa: F811
    locks = os.path.dirname(base["dest"])
    os.makedirs(locks, mode=0o755)
    os.chown(locks, nobody(), -1)
    code, result = run_module(base, capsys)
    assert code == 1
    assert_refused(result, "dest", locks, "nobody", "0755", "is owned by nobody, not by root")
    assert fake.kinds() == []


@pytest.mark.parametrize("which", ["lock", "record", "pylock"])
def test_a_lock_or_its_record_of_another_user_is_not_up_to_date_but_refused(fake, base, capsys, which):  # noqa: F811
    """The attack as found: the lock replaced, its sha256 rewritten in the record, by another user."""
    code, first = run_module(base, capsys)
    assert code == 0, first.get("msg")
    path = {"lock": base["dest"], "record": base["dest"] + ".json", "pylock": first["pylock_path"]}[which]
    os.chown(path, nobody(), -1)
    fake.calls.clear()
    code, result = run_module(base, capsys)
    assert code == 1
    assert_refused(result, "pylock" if which == "pylock" else "dest", path, "nobody", "0644",
                   "is owned by nobody, not by root")
    assert fake.kinds() == []


def test_a_lock_others_can_write_is_refused(fake, base, capsys):  # noqa: F811
    run_module(base, capsys)
    os.chmod(base["dest"], 0o666)
    code, result = run_module(base, capsys)
    assert code == 1
    assert_refused(result, "dest", base["dest"], "root", "0666", "is writable by others")


def assert_program_refused(result, value, found, component, owner, mode, why):
    """The resolver's refusal (_trust.resolve_program): the option, the value, the path found, why."""
    assert result.get("failed") is True, result
    where = "" if "/" in value else " (found on PATH at %s)" % found
    assert result["msg"].startswith("uv %s%s is not run: " % (value, where)), result["msg"]
    assert "It is the uv binary uv_fleet_lock runs as root: it must belong to root" in result["msg"]
    assert "%s (owner %s, mode %s) %s" % (component, owner, mode, why) in result["msg"], result["msg"]
    assert result["option"] == "uv" and result["value"] == value and result["program"] == found
    assert result["untrusted"]["component"] == component and result["untrusted"]["owner"] == owner
    assert result["untrusted"]["mode"] == mode and result["untrusted"]["option"] == "uv"


def test_a_uv_of_another_user_is_refused(fake, base, capsys):  # noqa: F811
    os.chown(base["uv"], nobody(), -1)
    code, result = run_module(base, capsys)
    assert code == 1
    assert_program_refused(result, base["uv"], base["uv"], base["uv"], "nobody", "0755",
                           "is owned by nobody, not by root")
    assert fake.kinds() == []


def _planted_uv(directory):
    """nobody's uv: a script that leaves a marker when it runs (as root), then answers like uv."""
    marker = str(directory) + ".ran"
    uv = directory / "uv"
    uv.write_text("#!/bin/sh\ntouch %s\necho 'uv 0.13.8'\n" % marker)
    uv.chmod(0o755)
    os.chown(str(uv), nobody(), -1)
    return str(uv), marker


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_uv_planted_in_a_world_writable_directory_on_path_never_runs(base, capsys, tmp_path, monkeypatch,
                                                                         check_mode):  # noqa: F811
    """Issue #44 (9), the attack as found: uv a bare name (the role's default), a 0777 directory on
    the controller's PATH holding nobody's uv. The real runner: a uv that ran leaves its marker."""
    shared = tmp_path / "shared-bin"
    shared.mkdir()
    shared.chmod(0o777)
    planted, marker = _planted_uv(shared)
    monkeypatch.setenv("PATH", "%s:%s" % (shared, os.environ["PATH"]))
    code, result = run_module(dict(base, uv="uv", _ansible_check_mode=check_mode), capsys)
    assert code == 1
    assert not os.path.exists(marker), "the planted uv ran as root"
    assert_program_refused(result, "uv", planted, str(shared), "root", "0777",
                           "is writable by others, who can replace %s in it" % planted)
    assert not os.path.exists(os.path.dirname(base["dest"]))


def test_a_bare_uv_found_on_path_runs_by_the_absolute_path_judged(fake, base, capsys, tmp_path, monkeypatch):  # noqa: F811
    """Not the name: Popen would look it up again, and the working directory's uv is not PATH's."""
    closed = tmp_path / "bin"
    closed.mkdir()
    os.rename(base["uv"], str(closed / "uv"))
    monkeypatch.setenv("PATH", "%s:%s" % (closed, os.environ["PATH"]))
    monkeypatch.chdir(str(tmp_path))
    code, result = run_module(dict(base, uv="uv"), capsys)
    assert code == 0, result.get("msg")
    assert {call[1][0] for call in fake.calls} == {str(closed / "uv")}
    assert result["cmd"][0] == str(closed / "uv")


def test_without_cache_dir_uv_uses_no_cache_never_the_default_one(fake, base, capsys, tmp_path, monkeypatch):  # noqa: F811
    """Issue #44 (11): uv's default cache (XDG_CACHE_HOME, here a 0777 directory) is judged by nobody;
    without cache_dir every uv command runs with UV_NO_CACHE and no UV_CACHE_DIR."""
    shared = tmp_path / "xdg"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    monkeypatch.setenv("UV_CACHE_DIR", str(shared / "uv"))
    code, result = run_module(base, capsys)
    assert code == 0, result.get("msg")
    assert fake.kinds() == ["version", "compile", "pylock"]
    for _kind, _argv, _data, env, _timeout in fake.calls:
        assert env.get("UV_NO_CACHE") == "1" and "UV_CACHE_DIR" not in env


def test_a_cache_dir_holding_a_file_of_another_user_is_refused(fake, base, capsys, tmp_path):  # noqa: F811
    """The cache given is read whole, as uv_engine_env reads its own: uv takes what it finds there."""
    cache = tmp_path / "uv-cache"
    (cache / "simple-v16" / "pypi").mkdir(parents=True)
    entry = cache / "simple-v16" / "pypi" / "vllm.rkyv"
    entry.write_text("not uv's")
    os.chown(str(entry), nobody(), -1)
    code, result = run_module(dict(base, cache_dir=str(cache)), capsys)
    assert code == 1
    assert result["msg"].startswith("cache_dir %s cannot be trusted" % cache), result["msg"]
    assert result["untrusted"]["component"] == str(entry) and result["untrusted"]["owner"] == "nobody"
    assert fake.kinds() == []
    cache_ok = tmp_path / "uv-cache-ok"
    (cache_ok / "simple-v16").mkdir(parents=True)
    code, result = run_module(dict(base, cache_dir=str(cache_ok)), capsys)
    assert code == 0, result.get("msg")
    assert all(env.get("UV_CACHE_DIR") == str(cache_ok) and "UV_NO_CACHE" not in env for _k, _a, _d, env, _t in fake.calls)


def test_the_lock_directory_is_judged_again_once_made(fake, base, capsys, tmp_path):  # noqa: F811
    """Issue #44 (22): the directories os.makedirs makes take the umask (002: group-writable), or are
    made first by another run; they are judged after they are made, before uv writes there."""
    dest = tmp_path / "new" / "locks" / "vllm.txt"
    old = os.umask(0o002)
    try:
        code, result = run_module(dict(base, dest=str(dest)), capsys)
    finally:
        os.umask(old)
    assert code == 1
    assert result["untrusted"]["component"] == str(tmp_path / "new"), result["msg"]
    assert result["untrusted"]["mode"] == "0775"
    assert "pip" not in [call[1][1] for call in fake.calls if len(call[1]) > 1]
    assert os.listdir(str(dest.parent)) == []


def test_a_uv_linked_from_a_directory_others_can_write_is_refused(fake, base, capsys, tmp_path):  # noqa: F811
    """As the module finds uv on PATH: the link is followed, each step judged."""
    shared = tmp_path / "shared-bin"
    shared.mkdir()
    shared.chmod(0o777)
    os.symlink(base["uv"], str(shared / "uv"))
    code, result = run_module(dict(base, uv=str(shared / "uv")), capsys)
    assert code == 1
    assert result["untrusted"]["component"] == str(shared) and result["untrusted"]["mode"] == "0777"
    assert fake.kinds() == []


def test_a_cache_dir_of_another_user_is_refused(fake, base, capsys, tmp_path):  # noqa: F811
    cache = tmp_path / "uv-cache"
    cache.mkdir()
    os.chown(str(cache), nobody(), -1)
    code, result = run_module(dict(base, cache_dir=str(cache)), capsys)
    assert code == 1
    assert_refused(result, "cache_dir", str(cache), "nobody", "0755", "is owned by nobody, not by root")


def test_links_planted_under_the_old_temporary_names_are_not_followed(fake, base, capsys, tmp_path):  # noqa: F811
    locks = os.path.dirname(base["dest"])
    os.makedirs(locks, mode=0o755)
    victims = []
    for name in (base["dest"] + ".tmp.%d" % os.getpid(), base["dest"] + ".json.tmp.%d" % os.getpid(),
                 base["dest"] + ".tmp"):
        victim = tmp_path / ("victim-%d" % len(victims))
        victim.write_text("root's own\n")
        victim.chmod(0o600)
        os.symlink(str(victim), name)
        victims.append(victim)
    code, result = run_module(base, capsys)
    assert code == 0, result.get("msg")
    for victim in victims:
        assert victim.read_text() == "root's own\n"
        assert oct(victim.stat().st_mode & 0o7777) == "0o600"
    assert open(base["dest"]).read() and not os.path.islink(base["dest"])
    assert not os.path.islink(base["dest"] + ".json")
    # nothing of this run's own left behind: only the planted links, the lock, its record, the pylock
    left = sorted(os.listdir(locks))
    assert left == sorted([os.path.basename(base["dest"]) + suffix for suffix in (
        "", ".json", ".tmp", ".tmp.%d" % os.getpid(), ".json.tmp.%d" % os.getpid())]
        + [os.path.basename(result["pylock_path"])]), left


def test_the_files_are_written_through_mkstemp_names(fake, base, capsys, monkeypatch):  # noqa: F811
    from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _fleetlock
    made = []
    real = _fleetlock.tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        made.append(name)
        return fd, name

    monkeypatch.setattr(_fleetlock.tempfile, "mkstemp", mkstemp)
    code, result = run_module(base, capsys)
    assert code == 0, result.get("msg")
    assert [os.path.dirname(name) for name in made] == [os.path.dirname(base["dest"])] * 3
    assert all(not os.path.exists(name) for name in made)
    for path in (base["dest"], base["dest"] + ".json", result["pylock_path"]):
        assert oct(os.stat(path).st_mode & 0o777) == "0o644"
