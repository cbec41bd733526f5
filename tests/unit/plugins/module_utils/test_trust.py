"""_trust: the walk that finds where another user could change a path root uses (the privilege line).

Every case is built under tmp_path (root's, 0700, inside the sticky /tmp: trusted itself). A case
owned by another user is made with os.chown to uid 65534 (nobody), so those need root.
"""

from __future__ import annotations

import errno
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _trust

NOBODY = 65534
ME = os.geteuid()
UIDS = _trust.trusted_uids()
as_root = pytest.mark.skipif(ME != 0, reason="making a file another user's needs root")


def mkdir(path, mode=0o755, uid=None):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, -1)
    return path


def touch(path, mode=0o644, uid=None):
    with open(path, "w") as handle:
        handle.write("x")
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, -1)
    return path


# Each case: (id, build(tmp) -> (path to walk, the component expected or None), words in `why`, root only)
def _plain(t):
    mkdir(t / "a" / "b")
    return t / "a" / "b", None


def _missing_below_closed(t):
    mkdir(t / "a")
    return t / "a" / "b" / "c", None


def _target_world_writable(t):
    mkdir(t / "cache", 0o777)
    return t / "cache", t / "cache"


def _target_group_writable(t):
    mkdir(t / "cache", 0o775)
    return t / "cache", t / "cache"


def _target_sticky(t):
    # a sticky cache still lets anyone add entries to it
    mkdir(t / "cache", 0o1777)
    return t / "cache", t / "cache"


def _parent_world_writable(t):
    mkdir(t / "open", 0o777)
    mkdir(t / "open" / "cache")
    return t / "open" / "cache", t / "open"


def _missing_below_world_writable(t):
    mkdir(t / "open", 0o777)
    return t / "open" / "cache" / "uv", t / "open"


def _sticky_root_child(t):
    mkdir(t / "tmp", 0o1777)
    mkdir(t / "tmp" / "mine")
    return t / "tmp" / "mine" / "cache", None


def _sticky_missing_child(t):
    mkdir(t / "tmp", 0o1777)
    return t / "tmp" / "cache", t / "tmp"


def _sticky_foreign_child(t):
    mkdir(t / "tmp", 0o1777)
    mkdir(t / "tmp" / "theirs", uid=NOBODY)
    return t / "tmp" / "theirs" / "cache", t / "tmp"


def _parent_foreign(t):
    mkdir(t / "root" / "cache" / "uv")
    os.chown(t / "root" / "cache", NOBODY, -1)
    return t / "root" / "cache" / "uv", t / "root" / "cache"


def _target_foreign(t):
    mkdir(t / "root" / "cache", uid=NOBODY)
    return t / "root" / "cache", t / "root" / "cache"


def _file_world_writable(t):
    mkdir(t / "bin")
    return touch(t / "bin" / "uv", 0o757), t / "bin" / "uv"


def _file_foreign(t):
    mkdir(t / "bin")
    return touch(t / "bin" / "uv", 0o755, uid=NOBODY), t / "bin" / "uv"


def _link_to_writable(t):
    # the link is root's in a closed directory; its target is not
    mkdir(t / "open", 0o777)
    mkdir(t / "open" / "cache")
    mkdir(t / "root")
    os.symlink("../open/cache", t / "root" / "cache")
    return t / "root" / "cache" / "uv", t / "open"


def _link_absolute_to_safe(t):
    mkdir(t / "data" / "cache")
    mkdir(t / "root")
    os.symlink(str(t / "data" / "cache"), t / "root" / "cache")
    return t / "root" / "cache", None


def _link_dotdot_is_the_targets_parent(t):
    # root/link/../uv is open/uv to the kernel (normpath would say root/uv, which is safe)
    mkdir(t / "open", 0o777)
    mkdir(t / "open" / "sub")
    touch(t / "open" / "uv")
    mkdir(t / "root")
    touch(t / "root" / "uv")
    os.symlink(str(t / "open" / "sub"), t / "root" / "link")
    return t / "root" / "link" / ".." / "uv", t / "open"


def _link_foreign_in_sticky(t):
    mkdir(t / "tmp", 0o1777)
    mkdir(t / "data")
    os.symlink(str(t / "data"), t / "tmp" / "link")
    os.lchown(t / "tmp" / "link", NOBODY, -1)
    return t / "tmp" / "link", t / "tmp"


CASES = [
    ("plain", _plain, "", False),
    ("missing-below-closed", _missing_below_closed, "", False),
    ("target-0777", _target_world_writable, "writable by others", False),
    ("target-0775", _target_group_writable, "writable by its group", False),
    ("target-sticky", _target_sticky, "writable by others", False),
    ("parent-0777", _parent_world_writable, "writable by others, who can replace", False),
    ("missing-below-0777", _missing_below_world_writable, "writable by others", False),
    ("sticky-root-child", _sticky_root_child, "", False),
    ("sticky-missing-child", _sticky_missing_child, "anyone can take that name first", False),
    ("sticky-foreign-child", _sticky_foreign_child, "sticky, but its entry", True),
    ("parent-foreign", _parent_foreign, "is owned by nobody", True),
    ("target-foreign", _target_foreign, "is owned by nobody", True),
    ("file-0757", _file_world_writable, "writable by others", False),
    ("file-foreign", _file_foreign, "is owned by nobody", True),
    ("link-to-writable", _link_to_writable, "writable by others", False),
    ("link-absolute-to-safe", _link_absolute_to_safe, "", False),
    ("link-dotdot", _link_dotdot_is_the_targets_parent, "writable by others", False),
    ("link-foreign-in-sticky", _link_foreign_in_sticky, "sticky, but its entry", True),
]


@pytest.mark.parametrize("build, words, root_only", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_untrusted_component(tmp_path, build, words, root_only):
    if root_only and ME != 0:
        pytest.skip("making a file another user's needs root")
    path, expected = build(tmp_path)
    found = _trust.untrusted_component(str(path), UIDS)
    if expected is None:
        assert found is None, found.describe()
        return
    assert found is not None
    assert found.component == str(expected)
    assert words in found.why
    assert found.describe().startswith("%s (owner %s, mode " % (expected, found.owner))


def test_tmp_path_itself_is_trusted(tmp_path):
    # /tmp is sticky and root's, pytest's directories in it are the running user's and 0700
    assert _trust.untrusted_component(str(tmp_path / "not-yet"), UIDS) is None


def test_relative_path(tmp_path, monkeypatch):
    mkdir(tmp_path / "open", 0o777)
    monkeypatch.chdir(tmp_path)
    assert _trust.untrusted_component("open/cache", UIDS).component == str(tmp_path / "open")


def test_fix_says_what_to_do(tmp_path):
    mkdir(tmp_path / "open", 0o777)
    found = _trust.untrusted_component(str(tmp_path / "open" / "x"), UIDS)
    assert found.fix == "chmod go-w %s" % (tmp_path / "open")
    assert found.as_dict() == {"component": str(tmp_path / "open"), "owner": found.owner, "uid": ME,
                               "mode": "0777", "why": found.why, "fix": found.fix}


@as_root
def test_owner_fix_and_the_running_user(tmp_path):
    mkdir(tmp_path / "theirs", uid=NOBODY)
    path = str(tmp_path / "theirs" / "cache")
    found = _trust.untrusted_component(path, _trust.trusted_uids(0))
    assert found.fix == "chown root {0}; chmod go-w {0}".format(tmp_path / "theirs")
    assert found.uid == NOBODY and "not by root" in found.why
    # a module run by that user trusts what it owns (and root)
    assert _trust.untrusted_component(path, _trust.trusted_uids(NOBODY)) is None


def test_trusted_uids():
    assert _trust.trusted_uids(0) == {0}
    assert _trust.trusted_uids(1000) == {0, 1000}


def test_link_loop(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(OSError) as exc:
        _trust.untrusted_component(str(tmp_path / "a" / "x"), UIDS)
    assert exc.value.errno == errno.ELOOP


def test_not_a_directory_on_the_way(tmp_path):
    touch(tmp_path / "file")
    assert _trust.untrusted_component(str(tmp_path / "file" / "x"), UIDS) is None


# --- what a directory holds (uv's cache) ------------------------------------------------------


def _cache(t):
    top = mkdir(t / "cache" / "uv", 0o700)
    mkdir(top / "archive-v0" / "abc" / "vllm")
    touch(top / "archive-v0" / "abc" / "vllm" / "__init__.py")
    touch(top / "CACHEDIR.TAG")
    os.symlink("../archive-v0/abc", top / "wheels-link")
    return top


def test_content_trusted(tmp_path):
    assert _trust.untrusted_content(str(_cache(tmp_path)), UIDS) is None
    assert _trust.untrusted_content(str(tmp_path / "missing"), UIDS) is None


@as_root
def test_content_planted_file(tmp_path):
    top = _cache(tmp_path)
    planted = touch(top / "archive-v0" / "abc" / "vllm" / "planted.py", uid=NOBODY)
    found = _trust.untrusted_content(str(top), UIDS)
    assert found.component == str(planted) and "owned by nobody" in found.why
    assert found.fix == "rm -rf %s" % top


@as_root
def test_content_planted_link(tmp_path):
    top = _cache(tmp_path)
    os.lchown(top / "wheels-link", NOBODY, -1)
    assert _trust.untrusted_content(str(top), UIDS).component == str(top / "wheels-link")


@pytest.mark.parametrize("mode, words", [(0o666, "writable by others"), (0o664, "writable by its group")])
def test_content_writable_file(tmp_path, mode, words):
    top = _cache(tmp_path)
    os.chmod(top / "archive-v0" / "abc" / "vllm" / "__init__.py", mode)
    found = _trust.untrusted_content(str(top), UIDS)
    assert found.component == str(top / "archive-v0" / "abc" / "vllm" / "__init__.py") and words in found.why


def test_content_uv_lock_files(tmp_path):
    """uv makes its lock files 0666: empty ones pass, one with something in it does not."""
    top = _cache(tmp_path)
    touch(top / ".lock", 0o666).write_text("")
    (top / "wheels-v7" / "torch").mkdir(parents=True)
    lock = top / "wheels-v7" / "torch" / "2.11.0-py3-none-any.lock"
    touch(lock, 0o666).write_text("")
    assert _trust.untrusted_content(str(top), UIDS) is None
    lock.write_text("import os")
    assert _trust.untrusted_content(str(top), UIDS).component == str(lock)
    # only lock files
    lock.write_text("")
    os.chmod(top / "CACHEDIR.TAG", 0o666)
    (top / "CACHEDIR.TAG").write_text("")
    assert _trust.untrusted_content(str(top), UIDS).component == str(top / "CACHEDIR.TAG")


def test_content_writable_dir(tmp_path):
    top = _cache(tmp_path)
    os.chmod(top / "archive-v0", 0o777)
    assert _trust.untrusted_content(str(top), UIDS).component == str(top / "archive-v0")


# -- resolve_program: a program named by an option, found once, judged, run by that path ---------


def _planted(directory, name="uv", uid=None):
    """A program that leaves a marker when it runs: the proof that it did (or did not)."""
    marker = str(directory) + ".ran"
    path = str(directory / name)
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\ntouch %s\necho 'uv 9.9.9'\n" % marker)
    os.chmod(path, 0o755)
    if uid is not None:
        os.chown(path, uid, -1)
    return path, marker


def test_a_bare_name_is_found_on_path_and_returned_as_that_absolute_path(tmp_path):
    good = mkdir(tmp_path / "good")
    program, _marker = _planted(good)
    search = os.pathsep.join([str(tmp_path / "missing"), "relative/bin", "", str(good)])
    assert _trust.resolve_program("uv", "uv", "the uv binary", search_path=search) == program


def test_a_relative_or_empty_path_entry_is_not_searched(tmp_path, monkeypatch):
    """The working directory (an empty or relative PATH entry) is not where root finds programs."""
    monkeypatch.chdir(str(mkdir(tmp_path / "cwd")))
    _planted(tmp_path / "cwd")
    with pytest.raises(_trust.ProgramRefused) as exc:
        _trust.resolve_program("uv", "uv", "the uv binary", search_path=os.pathsep.join(["", ".", "cwd"]))
    assert exc.value.msg.startswith("uv uv is not run: it is on none of the directories of PATH (")


@as_root
def test_a_planted_program_in_a_world_writable_path_directory_is_refused_and_never_runs(tmp_path):
    """The attack of issue #44 (9): nobody's uv in a 0777 directory early on PATH."""
    shared = mkdir(tmp_path / "shared", 0o777)
    good = mkdir(tmp_path / "good")
    planted, marker = _planted(shared, uid=NOBODY)
    _planted(good)
    with pytest.raises(_trust.ProgramRefused) as exc:
        _trust.resolve_program("uv", "uv", "the uv binary", search_path="%s:%s" % (shared, good))
    msg = exc.value.msg
    assert msg.startswith("uv uv (found on PATH at %s) is not run: %s (owner root, mode 0777) is writable by others"
                          % (planted, shared)), msg
    assert "It is the uv binary: it must belong to root" in msg, msg
    assert "is writable by others" in msg or "owned by nobody" in msg, msg
    assert exc.value.details["untrusted"]["path"] == planted
    assert exc.value.details["program"] == planted
    assert not os.path.exists(marker)


@as_root
def test_a_program_of_another_user_in_a_closed_directory_is_refused(tmp_path):
    closed = mkdir(tmp_path / "bin")
    planted, _marker = _planted(closed, uid=NOBODY)
    with pytest.raises(_trust.ProgramRefused) as exc:
        _trust.resolve_program("nvidia_smi", planted, "nvidia-smi")
    assert exc.value.details["untrusted"]["component"] == planted
    assert exc.value.details["untrusted"]["owner"] == "nobody"


def test_a_link_to_a_program_in_a_directory_others_can_write_is_refused(tmp_path):
    """The path found is judged, and so is its real path: here the link's target's directory."""
    shared = mkdir(tmp_path / "shared", 0o777)
    program, _marker = _planted(shared)
    closed = mkdir(tmp_path / "bin")
    os.symlink(program, str(closed / "uv"))
    with pytest.raises(_trust.ProgramRefused) as exc:
        _trust.resolve_program("uv", "uv", "the uv binary", search_path=str(closed))
    assert exc.value.details["untrusted"]["component"] == str(shared)


def test_the_real_path_is_judged_too(tmp_path, monkeypatch):
    """program_problem judges realpath(path) as well as the path: a walk that missed a step of the
    links would still be caught there."""
    judged = []
    real = _trust.untrusted_component
    monkeypatch.setattr(_trust, "untrusted_component", lambda place, uids=None: judged.append(place) or real(place, uids))
    target = mkdir(tmp_path / "real")
    program, _marker = _planted(target)
    os.symlink(program, str(tmp_path / "link"))
    assert _trust.program_problem(str(tmp_path / "link")) is None
    assert judged == [str(tmp_path / "link"), program]


def test_a_missing_path_or_a_directory_is_refused(tmp_path):
    with pytest.raises(_trust.ProgramRefused, match="does not exist"):
        _trust.resolve_program("python", str(tmp_path / "nope"), "the Python")
    with pytest.raises(_trust.ProgramRefused, match="is not an executable file"):
        _trust.resolve_program("python", str(mkdir(tmp_path / "dir")), "the Python")
