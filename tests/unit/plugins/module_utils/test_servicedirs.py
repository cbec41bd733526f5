"""_servicedirs: the one way root makes the service user's directories, against a hostile service user.

Run as root with ``nobody`` as the service user: it can plant links and files in the directories
it owns, as a real service user can; a process running as ``nobody`` also races the walk.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _servicedirs as sd

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="handing directories to another user needs root")
NOBODY = pwd.getpwnam("nobody")
HOSTILE_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
UID, GID = NOBODY.pw_uid, NOBODY.pw_gid


def snapshot(*paths):
    """(type, owner, group, mode) of each path and of everything below it (links not followed)."""
    out = {}
    for top in paths:
        for folder, dirs, files in os.walk(str(top)):
            for name in [""] + dirs + files:
                path = os.path.join(folder, name) if name else folder
                st = os.lstat(path)
                out[path] = (stat.S_IFMT(st.st_mode), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def crossable():
    """A fresh directory the service user can cross (pytest's tmp_path is below a 0700 directory)."""
    made = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-servicedirs-", dir="/var/tmp"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(str(made), ignore_errors=True)


@pytest.fixture
def tree(crossable):
    """<tmp>/root (root's, 0755) with cache (root's) and serve (nobody's), and a root-only target."""
    tmp_path = crossable
    root = tmp_path / "root"
    (root / "cache").mkdir(parents=True)
    for folder in (root, root / "cache"):
        folder.chmod(0o755)
    target = tmp_path / "precious"  # stands for the unit directory, the secrets directory, /etc
    target.mkdir(mode=0o700)
    (target / "secret.env").write_text("TOKEN=x\n")
    (target / "secret.env").chmod(0o600)
    made = sd.ensure(str(root), str(root / "serve"), UID, GID, 0o750)
    assert made["created"] and made["after"] == "nobody:%s 0750" % sd._group_name(GID)
    return root, target


def as_nobody(*argv):
    return subprocess.run(["setpriv", "--reuid", str(UID), "--regid", str(GID), "--clear-groups"] + list(argv),
                          check=True, capture_output=True, timeout=30)


def test_makes_the_directories_and_the_ones_on_the_way_then_changes_nothing(tree):
    root = tree[0]
    path = root / "cache" / "vllm" / "0.20.0-cu13"
    first = sd.ensure(str(root), str(path), UID, GID, 0o750)
    assert first["changed"] and first["created"] and first["before"] == "absent"
    for made in (root / "cache" / "vllm", path):
        st = made.lstat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (UID, GID, 0o750), made
    assert (root / "cache").stat().st_uid == 0  # the root-owned directory on the way is left as it is
    again = sd.ensure(str(root), str(path), UID, GID, 0o750)
    assert not again["changed"] and again["before"] == again["after"]
    # the service user's own directory with another mode: its mode is set, nothing else
    path.chmod(0o755)
    fixed = sd.ensure(str(root), str(path), UID, GID, 0o750)
    assert fixed["changed"] and stat.S_IMODE(path.stat().st_mode) == 0o750


def test_check_mode_reports_and_makes_nothing(tree):
    root = tree[0]
    path = root / "serve" / "chat"
    result = sd.ensure(str(root), str(path), UID, GID, 0o750, check_mode=True)
    assert result["changed"] and result["before"] == "absent" and not path.exists()


@pytest.mark.parametrize("where", ["final", "on-the-way"])
def test_a_planted_link_is_refused_and_its_target_untouched(tree, where):
    root, target = tree
    before = snapshot(target)
    link = root / "serve" / "chat"
    as_nobody("ln", "-s", str(target), str(link))
    path = link if where == "final" else link / "sub"
    with pytest.raises(sd.ServiceDirError) as err:
        sd.ensure(str(root), str(path), UID, GID, 0o750)
    assert err.value.path == str(link) and "is a symbolic link" in err.value.msg
    assert snapshot(target) == before


def test_a_planted_file_and_a_directory_of_root_or_of_another_user_are_refused(tree):
    root, target = tree
    as_nobody("touch", str(root / "serve" / "file"))
    with pytest.raises(sd.ServiceDirError, match="is a regular file, not a directory"):
        sd.ensure(str(root), str(root / "serve" / "file"), UID, GID, 0o750)
    # a path value that names one of root's directories: never handed over
    before = snapshot(root / "cache")
    with pytest.raises(sd.ServiceDirError, match=r"cache is a directory of root .* not of the service user nobody"):
        sd.ensure(str(root), str(root / "cache"), UID, GID, 0o750)
    assert snapshot(root / "cache") == before
    other = root / "cache" / "theirs"
    other.mkdir()
    os.chown(str(other), UID + 1, UID + 1)
    with pytest.raises(sd.ServiceDirError, match="theirs is owned by .*neither root's nor the service user's"):
        sd.ensure(str(root), str(other / "x"), UID, GID, 0o750)


@pytest.mark.parametrize("path", ["/etc/llmfleet-nope", "{root}/../precious", "{root}", "{root}/serve/./x", "relative"])
def test_a_path_outside_the_root_is_refused(tree, path):
    root, target = tree
    before = snapshot(target)
    with pytest.raises(sd.ServiceDirError):
        sd.ensure(str(root), path.format(root=root), UID, GID, 0o750)
    assert snapshot(target) == before
    assert not os.path.exists("/etc/llmfleet-nope")


def test_a_root_another_user_can_write_is_refused(tmp_path):
    tmp_path.chmod(0o755)
    root = tmp_path / "open"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(sd.ServiceDirError, match="cannot hold the service user's directories: .* writable by others"):
        sd.ensure(str(root), str(root / "serve"), UID, GID, 0o750)
    assert not (root / "serve").exists()


def test_a_racing_service_user_never_gets_roots_directory(tree):
    """While root makes the same directories again and again, a process running as the service user
    keeps swapping each of them for a link to a root-only directory (and back). Whatever the
    interleaving, each call either succeeds on a real directory or refuses, naming the link, and the
    root-only directory is never changed."""
    root, target = tree
    names = ["m%d" % i for i in range(4)]
    before = snapshot(target)
    script = (
        "import os, sys, time\n"
        "serve, target, names = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
        "end = time.time() + 4\n"
        "planted = 0\n"
        "while time.time() < end:\n"
        "    for n in names:\n"
        "        p = os.path.join(serve, n)\n"
        "        try:\n"
        "            os.rename(p, p + '.away')\n"
        "        except OSError:\n"
        "            pass\n"
        "        try:\n"
        "            os.symlink(target, p)\n"
        "            planted += 1\n"
        "        except OSError:\n"
        "            pass\n"
        "        try:\n"
        "            os.unlink(p)\n"
        "        except OSError:\n"
        "            pass\n"
        "        try:\n"
        "            os.rename(p + '.away', p)\n"
        "        except OSError:\n"
        "            pass\n"
        "print(planted)\n")
    # the system's Python: the service user may not be able to reach the tool venv's interpreter
    # (a pyenv Python under root's 0700 home)
    hostile = subprocess.Popen(["setpriv", "--reuid", str(UID), "--regid", str(GID), "--clear-groups",
                                HOSTILE_PYTHON, "-c", script, str(root / "serve"), str(target)] + names,
                               stdout=subprocess.PIPE, text=True)
    refused = made = 0
    try:
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            for name in names:
                try:
                    sd.ensure(str(root), str(root / "serve" / name), UID, GID, 0o750)
                    made += 1
                except sd.ServiceDirError as exc:
                    assert exc.path.startswith(str(root / "serve")), exc.msg
                    refused += 1
    finally:
        out, _err = hostile.communicate(timeout=30)
    assert hostile.returncode == 0 and int(out.strip() or 0) > 0, "the hostile process did not run: %r" % out
    assert snapshot(target) == before
    assert made and refused, (made, refused)  # both outcomes were seen: the race really ran
    for path, (kind, uid, _gid, _mode) in snapshot(root / "serve").items():
        if kind == stat.S_IFDIR:
            assert uid == UID, path


def test_the_module_refuses_a_writable_mode_and_an_unknown_user():
    with pytest.raises(sd.ServiceDirError, match="does not exist"):
        sd.resolve_owner("llmfleet-no-such-user")
    with pytest.raises(sd.ServiceDirError, match="must not be root"):
        sd.resolve_owner("root")
    assert sd.resolve_owner("nobody") == (UID, GID)
    shutil.rmtree("/nonexistent-llmfleet", ignore_errors=True)


@pytest.mark.parametrize("swap", ["link", "file"])
def test_an_entry_swapped_between_the_look_and_the_open_is_refused(tree, monkeypatch, swap):
    """The worst interleaving, made certain: right after the walk has looked at serve/chat (a real
    directory of the service user's), the service user replaces it with a link to a root-only
    directory (or a file). The open that follows must not follow it, and nothing is changed."""
    root, target = tree
    chat = root / "serve" / "chat"
    as_nobody("mkdir", "-m", "0755", str(chat))
    before = snapshot(target)
    looked = sd._lstat_at

    def look_then_swap(name, dir_fd):
        st = looked(name, dir_fd)
        if name == "chat":
            as_nobody("mv", str(chat), str(chat) + ".away")
            as_nobody("ln", "-s", str(target), str(chat)) if swap == "link" else as_nobody("touch", str(chat))
        return st

    monkeypatch.setattr(sd, "_lstat_at", look_then_swap)
    with pytest.raises(sd.ServiceDirError) as err:
        sd.ensure(str(root), str(chat), UID, GID, 0o700)
    assert err.value.path == str(chat) and "replaced by a symbolic link or a file" in err.value.msg
    assert snapshot(target) == before


def test_an_entry_planted_between_the_look_and_the_mkdir_is_refused_by_name(tree, monkeypatch):
    """The interleaving the serve scenario's hostile user hit in CI: the walk found no serve/triton, and
    before its mkdir the service user planted a link there. The mkdir fails (EEXIST); the error says the
    path was refused, naming it (as every refusal does, so that a run can be judged by its message), and
    the link's target is untouched."""
    root, target = tree
    planted = root / "serve" / "triton"
    before = snapshot(target)
    looked = sd._lstat_at

    def look_then_plant(name, dir_fd):
        try:
            return looked(name, dir_fd)
        finally:
            if name == "triton" and not os.path.lexists(str(planted)):
                as_nobody("ln", "-s", str(target), str(planted))

    monkeypatch.setattr(sd, "_lstat_at", look_then_plant)
    with pytest.raises(sd.ServiceDirError) as err:
        sd.ensure(str(root), str(planted), UID, GID, 0o700)
    assert err.value.path == str(planted), err.value.msg
    assert err.value.msg.startswith("%s appeared (a symbolic link) while root made it: refused" % planted), err.value.msg
    assert snapshot(target) == before
    assert os.path.islink(str(planted))
