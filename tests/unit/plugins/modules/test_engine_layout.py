"""engine_layout: the directories above an engine root judged by _trust's rule and worded as the
engine_node role words them; the old layout's <root>/cache to take back and <root>/cache/uv to drop;
nothing is changed, in check mode or not; bad input is refused naming it. Run as root (the suite's
role tests need root too): another user's directories are made with chown."""

from __future__ import annotations

import os

from ansible_collections.llmfleet.engines.plugins.modules import engine_layout
from tests.unit.plugins.lookup_fakes import run_module

NOBODY = 65534


def layout(capsys, path, **kw):
    return run_module(engine_layout.main, dict({"path": str(path)}, **kw), capsys)[:2]


def tree(path):
    """Every entry below ``path`` with its owner and mode: what must not change."""
    seen = {}
    for where, dirs, files in os.walk(path):
        for name in [""] + dirs + files:
            st = os.lstat(os.path.join(where, name))
            seen[os.path.join(where, name)] = (st.st_uid, st.st_mode)
    return seen


def test_a_closed_path_has_no_problem_and_the_root_itself_is_not_judged(capsys, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o777)  # the role makes it root's 0755 itself
    os.chown(root, NOBODY, -1)
    code, result = layout(capsys, str(root) + "/")
    assert code == 0 and result["changed"] is False, result
    assert result["problems"] == [] and result["path"] == str(root), result
    assert (result["euid"], result["root"]) == (0, True)
    assert (result["take_back"], result["drop_uv_cache"], result["cache_owner"]) == (False, False, "")


def test_each_kind_of_parent_is_named_with_its_owner_mode_and_what_others_can_do(capsys, tmp_path):
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    (tmp_path / "group" / "root").mkdir(parents=True)
    (tmp_path / "group").chmod(0o775)
    (tmp_path / "sticky" / "root").mkdir(parents=True)
    (tmp_path / "sticky").chmod(0o1777)
    os.chown(tmp_path / "sticky" / "root", NOBODY, -1)
    (tmp_path / "theirs" / "root").mkdir(parents=True)
    os.chown(tmp_path / "theirs", NOBODY, -1)
    (tmp_path / "kept" / "root").mkdir(parents=True)
    (tmp_path / "kept").chmod(0o1777)  # sticky, and the root in it is root's: closed
    expected = {
        "open": f"{tmp_path}/open (owner root, mode 0777) is writable by others, who can make {tmp_path}/open/root first",
        "group": f"{tmp_path}/group (owner root, mode 0775) is writable by others, who can replace {tmp_path}/group/root",
        "sticky": f"{tmp_path}/sticky (owner root, mode 1777) is writable by others, who can replace {tmp_path}/sticky/root",
        "theirs": f"{tmp_path}/theirs (owner nobody, mode 0755) is owned by nobody, who can replace {tmp_path}/theirs/root",
    }
    for name, words in expected.items():
        code, result = layout(capsys, tmp_path / name / "root")
        assert code == 0 and result["problems"] == [words], (name, result)
    code, result = layout(capsys, tmp_path / "kept" / "root")
    assert code == 0 and result["problems"] == [], result
    assert not (tmp_path / "open" / "root").exists()


def test_every_problem_from_the_top_down_and_links_followed(capsys, tmp_path):
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    os.chown(tmp_path / "a", NOBODY, -1)
    (tmp_path / "a" / "b").chmod(0o777)
    code, result = layout(capsys, tmp_path / "a" / "b" / "c" / "root")
    assert code == 0 and result["problems"] == [
        f"{tmp_path}/a (owner nobody, mode 0755) is owned by nobody, who can replace {tmp_path}/a/b",
        f"{tmp_path}/a/b (owner root, mode 0777) is writable by others, who can replace {tmp_path}/a/b/c",
    ], result
    # a closed link on the way to an open directory: the target's directories are judged
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    os.symlink(tmp_path / "open", tmp_path / "link")
    code, result = layout(capsys, tmp_path / "link" / "root")
    assert code == 0 and result["problems"] == [
        f"{tmp_path}/open (owner root, mode 0777) is writable by others, who can make {tmp_path}/open/root first"], result


def test_the_old_layout_s_cache_is_taken_back_and_uv_s_dropped_nothing_changed(capsys, tmp_path):
    old = tmp_path / "old"
    (old / "cache" / "uv" / "archive-v0").mkdir(parents=True)
    (old / "cache" / "huggingface").mkdir()
    for path in (old / "cache", old / "cache" / "uv", old / "cache" / "huggingface"):
        os.chown(path, NOBODY, -1)
    before = tree(tmp_path)
    for check in (True, False):
        code, result = layout(capsys, old, _ansible_check_mode=check)
        assert code == 0 and result["changed"] is False, result
        assert (result["take_back"], result["cache_owner"], result["drop_uv_cache"]) == (True, "nobody", True)
        assert result["problems"] == []
    assert tree(tmp_path) == before
    # uv's cache in a taken-back <root>/cache is dropped even when it is root's and closed
    os.chown(old / "cache" / "uv", 0, -1)
    (old / "cache" / "uv").chmod(0o700)
    assert layout(capsys, old)[1]["drop_uv_cache"] is True
    # run by another user, the cache cannot be taken back: a problem, naming the uid
    judged = engine_layout.judge(str(old), euid=1000)
    assert judged["root"] is False and judged["take_back"] is True, judged
    assert judged["problems"] == [f"{old}/cache is owned by nobody, and the role, run as uid 1000, cannot take it back "
                                  "(run it as root)"], judged


def test_uv_s_cache_is_dropped_when_not_closed_to_others_or_not_a_directory(capsys, tmp_path):
    root = tmp_path / "root"
    (root / "cache" / "uv").mkdir(parents=True)
    code, result = layout(capsys, root)
    assert code == 0 and (result["take_back"], result["drop_uv_cache"], result["cache_owner"]) == (False, False, "root")
    (root / "cache" / "uv").chmod(0o770)
    assert layout(capsys, root)[1]["drop_uv_cache"] is True
    (root / "cache" / "uv").chmod(0o700)
    os.chown(root / "cache" / "uv", NOBODY, -1)
    assert layout(capsys, root)[1]["drop_uv_cache"] is True
    (root / "cache" / "uv").rmdir()
    os.symlink(tmp_path, root / "cache" / "uv")
    assert layout(capsys, root)[1]["drop_uv_cache"] is True


def test_a_relative_path_is_refused_naming_it(capsys):
    code, result = layout(capsys, "opt/llmfleet")
    assert code == 1 and result["failed"] is True
    assert result["msg"] == "parameter path is 'opt/llmfleet', allowed: an absolute path (the engine root)", result


# -- trees and programs: what is already under a root before root runs it (the cache host, issue #44, 12) --


def _cache_host(tmp_path):
    """The engine_cache role's layout, all root's: <root>/uv/<v>/uv, <root>/venv-<lock>/bin/..."""
    root = tmp_path / "cache-root"
    (root / "uv" / "0.13.8").mkdir(parents=True)
    uv = root / "uv" / "0.13.8" / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    (root / "venv-abc" / "bin").mkdir(parents=True)
    (root / "venv-abc" / "lib" / "site-packages" / "devpi_server").mkdir(parents=True)
    (root / "venv-abc" / "lib" / "site-packages" / "devpi_server" / "__init__.py").write_text("")
    os.symlink("/usr/bin/python3", str(root / "venv-abc" / "bin" / "python"))
    (root / "venv-abc" / "bin" / "devpi-server").write_text("#!/bin/sh\n")
    (root / "venv-abc" / "bin" / "devpi-server").chmod(0o755)
    return root, uv


def _judge(capsys, root, **kw):
    return layout(capsys, root, trees=[str(root / "uv"), str(root / "venv-abc"), str(root / "venv-missing")], **kw)


def test_root_s_own_trees_and_programs_have_no_problem(capsys, tmp_path):
    root, uv = _cache_host(tmp_path)
    code, result = _judge(capsys, root, programs=["/usr/bin/python3", "sh", str(root / "missing-python")])
    assert code == 0 and result["problems"] == [], result


def test_a_uv_another_user_owns_under_the_root_is_a_problem(capsys, tmp_path):
    root, uv = _cache_host(tmp_path)
    os.chown(str(uv), NOBODY, -1)
    code, result = _judge(capsys, root)
    assert code == 0
    assert result["problems"] == ["%s, which root runs or imports from: %s (owner nobody, mode 0755) is owned by "
                                  "nobody, not by root: it was not put there by the installs" % (root / "uv", uv)], result


def test_a_file_of_the_venv_others_can_write_or_a_venv_of_another_user_is_a_problem(capsys, tmp_path):
    root, _uv = _cache_host(tmp_path)
    module = root / "venv-abc" / "lib" / "site-packages" / "devpi_server" / "__init__.py"
    module.chmod(0o666)
    code, result = _judge(capsys, root)
    assert len(result["problems"]) == 1 and "%s (owner root, mode 0666) is writable by others" % module \
        in result["problems"][0], result
    module.chmod(0o644)
    os.chown(str(root / "venv-abc"), NOBODY, -1)
    code, result = _judge(capsys, root)
    assert result["problems"] == ["%s, which root runs or imports from: %s (owner nobody, mode 0755) is owned by "
                                  "nobody, not by root: its owner can change it and what it holds"
                                  % (root / "venv-abc", root / "venv-abc")], result


def test_a_program_another_user_can_change_is_a_problem_found_as_it_runs(capsys, tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "python3").write_text("#!/bin/sh\n")
    (shared / "python3").chmod(0o755)
    shared.chmod(0o777)
    monkeypatch.setenv("PATH", "%s:%s" % (shared, os.environ["PATH"]))
    code, result = layout(capsys, tmp_path / "root", programs=["python3", str(shared / "python3")])
    assert result["problems"] == [
        "the program python3 (%s), which root runs: %s (owner root, mode 0777) is writable by others, who can "
        "replace %s in it" % (shared / "python3", shared, shared / "python3"),
        "the program %s, which root runs: %s (owner root, mode 0777) is writable by others, who can replace %s in it"
        % (shared / "python3", shared, shared / "python3")], result
