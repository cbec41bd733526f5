"""share_files: a new environment's files identical to those of a kept environment beside it
become hard links to them (the flow with a scripted uv that installs files; and main())."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envdir
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envshare
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvenv
from tests.unit.plugins.module_utils.test_uvenv import PARAMS
from tests.unit.plugins.module_utils.test_uvenv import uv_bin  # noqa: F401  pylint: disable=unused-import
from tests.unit.plugins.module_utils.uvenv_fakes import FakeUv

SITE = os.path.join("lib", "python3.11", "site-packages")

# What the scripted install puts into an environment: relative path -> (bytes, mode)
FILES = {
    os.path.join(SITE, "torch", "lib.so"): (b"T" * 5000, 0o755),
    os.path.join(SITE, "torch", "__init__.py"): (b"import torch._C\n", 0o644),
    os.path.join(SITE, "fakedep", "__init__.py"): (b"VERSION = '1.1.0'\n", 0o644),
    os.path.join(SITE, "vllm", "__init__.py"): (b"__version__ = '0.11.0'\n", 0o644),
    os.path.join("bin", "vllm"): (b"#!/bin/sh\nexec python -m vllm\n", 0o755),
}


def installer(files):
    """A FakeUv ``on["install"]`` that writes ``files`` into the environment being built."""

    def install(argv):
        env_dir = os.path.dirname(os.path.dirname(argv[argv.index("--python") + 1]))
        for rel, (data, mode) in files.items():
            target = os.path.join(env_dir, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(data)
            os.chmod(target, mode)

    return install


def build(root, uv_bin, name, files=None, **params):  # pylint: disable=redefined-outer-name
    fake = FakeUv()
    fake.on["install"] = installer(FILES if files is None else files)
    p = dict(PARAMS, path=str(root / name), uv=uv_bin, **params)
    env = _uvenv.EngineEnv(p, lambda keep_fds=(), on_command=None: fake, uv_bin,
                           gpu=lambda *a: {"skipped": True, "reason": "test"})
    return env, env.present(), fake


def ino(path):
    return os.stat(str(path)).st_ino


def nlink(path):
    return os.stat(str(path)).st_nlink


def test_a_new_environment_links_what_it_has_in_common_with_a_kept_one(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    newer = dict(FILES)
    newer[os.path.join(SITE, "vllm", "__init__.py")] = (b"__version__ = '0.11.1'\n", 0o644)  # same size
    newer[os.path.join(SITE, "torch", "lib.so")] = (b"T" * 4999 + b"U", 0o755)  # differs in the last byte
    newer[os.path.join(SITE, "fakedep", "__init__.py")] = (b"VERSION = '1.1.0' \n", 0o644)  # other size
    newer[os.path.join(SITE, "only_new.py")] = (b"x = 1\n", 0o644)
    _env, result, _fake = build(root, uv_bin, "0.11.0", newer)
    assert result["changed"] is True
    old, new = root / "0.10.0", root / "0.11.0"
    shared = [os.path.join(SITE, "torch", "__init__.py"), os.path.join("bin", "vllm")]
    for rel in shared:
        assert ino(new / rel) == ino(old / rel) and nlink(new / rel) == 2, rel
    for rel in (os.path.join(SITE, "vllm", "__init__.py"), os.path.join(SITE, "torch", "lib.so"),
                os.path.join(SITE, "fakedep", "__init__.py"), os.path.join(SITE, "only_new.py")):
        assert nlink(new / rel) == 1, rel
        assert (new / rel).read_bytes() == newer[rel][0]
    # the module's own files are never shared (the marker differs anyway; the lock is the same text)
    assert nlink(new / _envdir.LOCK_FILE_NAME) == 1 and nlink(new / _envdir.MARKER_NAME) == 1
    assert result["shared"] == {"files": 2, "bytes": sum(len(FILES[rel][0]) for rel in shared), "from": ["0.10.0"],
                                "failed": 0, "errors": {}, "stopped": False}
    names = [s["name"] for s in result["steps"]]
    assert names.index("install") < names.index("share") < names.index("verify")
    assert not [n for n in os.listdir(str(new / SITE / "torch")) if "llmfleet-link" in n]


def test_what_is_verified_is_already_linked(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    rel = os.path.join(SITE, "torch", "__init__.py")
    fake = FakeUv()
    fake.on["install"] = installer(FILES)
    seen = {}
    fake.on["verify"] = lambda argv: seen.update(ino=ino(root / "0.11.0.partial" / rel))
    p = dict(PARAMS, path=str(root / "0.11.0"), uv=uv_bin)
    _uvenv.EngineEnv(p, lambda keep_fds=(), on_command=None: fake, uv_bin,
                     gpu=lambda *a: {"skipped": True, "reason": "test"}).present()
    assert seen["ino"] == ino(root / "0.10.0" / rel)


def foreign_env(path, files):
    """A directory with the same files but not built by this module (a venv without our marker)."""
    os.makedirs(str(path))
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    installer(files)(["uv", "pip", "install", "--python", str(path / "bin" / "python")])


def test_only_environments_this_module_built_are_linked_from(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    foreign_env(root / "0.9.0", FILES)                       # no marker
    build(tmp_path / "elsewhere", uv_bin, "0.8.0")           # ours, but outside the parent ...
    os.symlink(str(tmp_path / "elsewhere" / "0.8.0"), str(root / "current"))  # ... reached by a link
    build(tmp_path / "leftovers", uv_bin, "0.7.0")           # ours, but named like a leftover
    os.rename(str(tmp_path / "leftovers" / "0.7.0"), str(root / "0.7.0.old"))
    build(tmp_path / "leftovers", uv_bin, "0.6.0")
    os.rename(str(tmp_path / "leftovers" / "0.6.0"), str(root / "0.6.0.partial"))
    _env, result, _fake = build(root, uv_bin, "0.11.0")
    assert result["shared"]["files"] == 0 and result["shared"]["from"] == []
    for rel in FILES:
        assert nlink(root / "0.11.0" / rel) == 1, rel
    assert _envshare.sibling_environments(str(root / "0.11.0")) == []


def test_the_environment_being_replaced_is_not_linked_from(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.11.0")
    _env, result, _fake = build(root, uv_bin, "0.11.0", force=True)
    assert result["shared"]["files"] == 0
    assert all(nlink(root / "0.11.0" / rel) == 1 for rel in FILES)


RENAMED = os.path.join(SITE, "torch", "__init__.py")


def _other_mode(old):
    os.chmod(str(old / RENAMED), 0o600)


def _other_content(old):
    (old / RENAMED).write_bytes(b"import torch._X\n")


def _a_symlink(old):
    (old / "same.py").write_bytes(FILES[RENAMED][0])
    os.chmod(str(old / "same.py"), 0o644)
    os.unlink(str(old / RENAMED))
    os.symlink(str(old / "same.py"), str(old / RENAMED))


def _under_a_linked_dir(old):
    os.rename(str(old / SITE / "torch"), str(old / "torch-elsewhere"))
    os.symlink(str(old / "torch-elsewhere"), str(old / SITE / "torch"))


def _other_owner(old):
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(str(old / RENAMED), os.geteuid() + 4242, -1)


@pytest.mark.parametrize("change", [_other_mode, _other_content, _a_symlink, _under_a_linked_dir, _other_owner],
                         ids=["mode", "content", "symlink", "linked-directory", "owner"])
def test_a_file_that_is_not_the_same_is_not_linked(tmp_path, uv_bin, change):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    change(root / "0.10.0")
    _env, result, _fake = build(root, uv_bin, "0.11.0")
    assert nlink(root / "0.11.0" / RENAMED) == 1
    assert (root / "0.11.0" / RENAMED).read_bytes() == FILES[RENAMED][0]
    assert oct(os.stat(str(root / "0.11.0" / RENAMED)).st_mode & 0o777) == oct(FILES[RENAMED][1])
    # the others are linked
    assert result["shared"]["files"] == len(FILES) - 1 - (change is _under_a_linked_dir)


def test_a_symlink_is_not_linked_even_when_its_size_mode_and_target_match(tmp_path, uv_bin):  # noqa: F811
    """A symlink's own size (its target's length) and mode (0777) can equal the new file's, and
    reading it gives the target's bytes: only its type tells it apart."""
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0", files={})
    old = root / "0.10.0"
    target = str(old / "target")
    data = b"a" * len(target)
    (old / "target").write_bytes(data)
    os.symlink(target, str(old / "script"))
    assert os.lstat(str(old / "script")).st_size == len(data)
    _env, result, _fake = build(root, uv_bin, "0.11.0", files={"script": (data, 0o777)})
    assert result["shared"]["files"] == 0 and nlink(root / "0.11.0" / "script") == 1


def test_only_files_of_the_same_size_are_read(tmp_path, uv_bin, monkeypatch):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    newer = dict(FILES)
    grown = os.path.join(SITE, "torch", "lib.so")
    newer[grown] = (b"T" * 6000, 0o755)
    read = []
    real = _envshare.same_bytes
    # compared through descriptors: which file each is, its inode tells
    monkeypatch.setattr(_envshare, "same_bytes",
                        lambda one, other, size: read.append(os.fstat(one).st_ino) or real(one, other, size))
    _env, result, _fake = build(root, uv_bin, "0.11.0", newer)
    assert result["shared"]["files"] == len(FILES) - 1
    assert len(read) == len(FILES) - 1 and ino(root / "0.11.0" / grown) not in read


def test_share_files_false_links_nothing(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    _env, result, _fake = build(root, uv_bin, "0.11.0", share_files=False)
    assert "shared" not in result and "share" not in [s["name"] for s in result["steps"]]
    assert all(nlink(root / "0.11.0" / rel) == 1 for rel in FILES)


def test_check_mode_links_nothing(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    fake = FakeUv()
    p = dict(PARAMS, path=str(root / "0.11.0"), uv=uv_bin)
    result = _uvenv.EngineEnv(p, lambda keep_fds=(), on_command=None: fake, uv_bin, check_mode=True).present()
    assert result["changed"] is True and "shared" not in result
    assert not (root / "0.11.0").exists()
    assert all(nlink(root / "0.10.0" / rel) == 1 for rel in FILES)


@pytest.mark.parametrize("code", [errno.EMLINK, errno.EXDEV, errno.EACCES])
def test_a_link_that_fails_leaves_the_copy_and_the_build_succeeds(tmp_path, uv_bin, monkeypatch, code):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")

    def no_link(src, dst, **kw):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", no_link)
    env, result, _fake = build(root, uv_bin, "0.11.0")
    assert result["changed"] is True
    assert json.loads((root / "0.11.0" / _envdir.MARKER_NAME).read_text())["spec"]["version"] == "0.11.0"
    for rel, (data, _mode) in FILES.items():
        assert nlink(root / "0.11.0" / rel) == 1 and (root / "0.11.0" / rel).read_bytes() == data
    name = errno.errorcode[code]
    # a failure that concerns the whole environment (EXDEV) is not tried on each of its files
    assert result["shared"]["failed"] == (1 if code == errno.EXDEV else len(FILES))
    assert result["shared"]["files"] == 0 and result["shared"]["errors"] == {name: result["shared"]["failed"]}
    assert any("could not be hard-linked" in w and name in w for w in env.warnings)
    assert not [n for n in os.listdir(str(root / "0.11.0" / SITE / "torch")) if "llmfleet-link" in n]


def test_a_rename_that_fails_leaves_no_temporary_link(tmp_path, monkeypatch):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"x")

    def no_replace(src, dst):
        raise OSError(errno.EACCES, "no")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(OSError):
        _envshare._replace_by_link(str(tmp_path / "a"), str(tmp_path / "b"))  # pylint: disable=protected-access
    assert sorted(os.listdir(str(tmp_path))) == ["a", "b"]


def test_a_link_that_is_not_the_file_compared_is_removed_and_the_copy_stays(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"x")
    before = os.lstat(str(tmp_path / "b"))
    other = os.lstat(str(tmp_path / "b"))  # any inode but a's
    with pytest.raises(OSError) as raised:
        _envshare._replace_by_link(str(tmp_path / "a"), str(tmp_path / "b"),  # pylint: disable=protected-access
                                   expect=(other.st_dev, other.st_ino))
    assert raised.value.errno == errno.ESTALE
    assert sorted(os.listdir(str(tmp_path))) == ["a", "b"] and ino(tmp_path / "b") == before.st_ino
    assert nlink(tmp_path / "a") == 1


def swap_before_link(sibling, rel, data, as_symlink=False):
    """An ``os.link`` that first puts another file at ``sibling/rel`` (renamed over it, as anyone
    allowed to write that directory could): after the compare, before the link."""
    real_link = os.link
    swapped = {}

    def link(src, dst, **kw):
        mine = os.path.dirname(dst).endswith(os.sep + os.path.dirname(rel))
        if mine and os.path.basename(dst).startswith(".%s.llmfleet-link." % os.path.basename(rel)) and not swapped:
            path = os.path.join(str(sibling), rel)
            tmp = path + ".swap"
            if as_symlink:
                other = os.path.join(str(sibling), "elsewhere")
                with open(other, "wb") as handle:
                    handle.write(data)
                os.chmod(other, os.stat(path).st_mode & 0o7777)
                os.symlink(other, tmp)
            else:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            os.rename(tmp, path)
            swapped.update(ino=os.stat(path).st_ino, lino=os.lstat(path).st_ino)
        return real_link(src, dst, **kw)

    return link, swapped


@pytest.mark.parametrize("data", [b"import torcx._C\n", FILES[RENAMED][0]], ids=["other-bytes", "same-bytes"])
@pytest.mark.parametrize("as_symlink", [False, True], ids=["file", "symlink"])
def test_a_file_swapped_in_after_the_compare_is_not_linked(tmp_path, uv_bin, monkeypatch, data, as_symlink):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    build(root, uv_bin, "0.11.0", share_files=False)
    old, new = root / "0.10.0", root / "0.11.0"
    assert len(data) == len(FILES[RENAMED][0])
    mine = ino(new / RENAMED)
    link, swapped = swap_before_link(old, RENAMED, data, as_symlink)
    monkeypatch.setattr(os, "link", link)
    shared = _envshare.share_identical_files(str(new), [str(old)])
    assert swapped, "the swap did not run"
    # the new environment keeps its own copy: not the file swapped in, not a link to anything
    assert ino(new / RENAMED) == mine and nlink(new / RENAMED) == 1 and not os.path.islink(str(new / RENAMED))
    assert (new / RENAMED).read_bytes() == FILES[RENAMED][0]
    assert swapped["ino"] != mine and swapped["lino"] != mine
    assert shared["files"] == len(FILES) - 1 and shared["failed"] == 1 and shared["errors"] == {"ESTALE": 1}
    assert shared["bytes"] == sum(len(d) for rel, (d, _m) in FILES.items() if rel != RENAMED)
    assert shared["from"] == ["0.10.0"] and shared["stopped"] is False
    assert not [n for n in os.listdir(str(new / SITE / "torch")) if "llmfleet-link" in n]
    # the others are the sibling's files
    for rel in FILES:
        if rel != RENAMED:
            assert ino(new / rel) == ino(old / rel), rel


def test_removing_the_older_environment_leaves_the_newer_intact(tmp_path, uv_bin):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    _env, result, _fake = build(root, uv_bin, "0.11.0")
    assert result["shared"]["files"] == len(FILES)
    p = dict(PARAMS, path=str(root / "0.10.0"), uv=uv_bin, state="absent")
    removed = _uvenv.EngineEnv(p, lambda keep_fds=(), on_command=None: FakeUv(), uv_bin).absent()
    assert removed["changed"] is True and not (root / "0.10.0").exists()
    for rel, (data, mode) in FILES.items():
        assert (root / "0.11.0" / rel).read_bytes() == data, rel
        assert os.stat(str(root / "0.11.0" / rel)).st_mode & 0o777 == mode and nlink(root / "0.11.0" / rel) == 1
    assert _envdir.inspect_env(str(root / "0.11.0"))["intact"] is True


def test_a_deadline_stops_sharing_and_keeps_copies(tmp_path, uv_bin, monkeypatch):  # noqa: F811
    root = tmp_path / "engines" / "vllm"
    build(root, uv_bin, "0.10.0")
    build(root, uv_bin, "0.11.0", share_files=False)
    links = []
    real_link = os.link
    monkeypatch.setattr(os, "link", lambda src, dst, **kw: links.append(dst) or real_link(src, dst, **kw))
    # the clock counts the links made: time runs out after two
    shared = _envshare.share_identical_files(str(root / "0.11.0"), [str(root / "0.10.0")], deadline=1.5,
                                             clock=lambda: len(links))
    assert shared["stopped"] is True and shared["files"] == 2
    assert sum(nlink(root / "0.11.0" / rel) == 2 for rel in FILES) == 2


def test_same_bytes(tmp_path):
    one, two = tmp_path / "1", tmp_path / "2"
    one.write_bytes(b"a" * (_envshare.CHUNK + 5))
    two.write_bytes(b"a" * (_envshare.CHUNK + 5))
    assert _envshare.same_bytes(str(one), str(two), _envshare.CHUNK + 5)
    two.write_bytes(b"a" * (_envshare.CHUNK + 4) + b"b")
    assert not _envshare.same_bytes(str(one), str(two), _envshare.CHUNK + 5)


def test_through_the_module(tmp_path, monkeypatch, capsys):
    from tests.unit.plugins.modules.test_uv_engine_env import run_module  # pylint: disable=import-outside-toplevel
    from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, module_runner  # pylint: disable=import-outside-toplevel
    fake = FakeUv()
    fake.on["install"] = installer(FILES)
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(fake))
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    root = tmp_path / "engines" / "vllm"
    args = {"engine": "vllm", "version": "0.11.0", "exclude_newer": "2025-10-03T20:10:00Z", "index_url": INDEX,
            "python": "3.11", "python_preference": "only-system", "uv": str(uv), "gpu_check": False}
    code, first = run_module(dict(args, path=str(root / "a")), capsys)
    assert code == 0, first.get("msg")
    assert first["shared"]["files"] == 0
    code, second = run_module(dict(args, path=str(root / "b")), capsys)
    assert code == 0 and second["shared"]["files"] == len(FILES) and second["shared"]["from"] == ["a"]
    code, third = run_module(dict(args, path=str(root / "c"), share_files=False), capsys)
    assert code == 0 and "shared" not in third
    assert nlink(root / "c" / os.path.join("bin", "vllm")) == 1 and nlink(root / "b" / os.path.join("bin", "vllm")) == 2
