"""_uvenv: the pure helpers (argv, spec, lock parsing, checks), the file operations, the lock,
and the flow with a scripted uv."""

from __future__ import annotations

import fcntl
import json
import os
import sys

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _errors
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvcmd
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvlock
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envdir
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _pathlock
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvenv
from tests.unit.plugins.module_utils.uvenv_fakes import (
    INDEX,
    LOCK_0110,
    LOCK_0200_CU129,
    LOCK_0200_FALLBACK,
    TORCH_INDEX,
    WHEEL_SHA,
    WHEEL_URL,
    FakeUv,
)

CUTOFF = "2025-10-03T20:10:00Z"


# --------------------------------------------------------------------------------------------
# pure helpers


@pytest.mark.parametrize("text, expected", [
    ("", ""),
    ("one\n", "one"),
    ("a\nb\n\nc\nd\ne\nf\ng\n", "b / c / d / e / f / g"),
    ("  x: needs y.  \n   because z.\n", "x: needs y. / because z"),
])
def test_tail_keeps_the_last_six_lines(text, expected):
    assert _proc.last_lines(text) == expected


@pytest.mark.parametrize("output, expected", [
    ("uv 0.13.8 (x86_64-unknown-linux-gnu)\n", "0.13.8"),
    ("uv 0.9.0\n", "0.9.0"),
    ("uv 0.13.8 (abc 2025-10-01)", "0.13.8"),
    ("pip 24.2\n", None),
    ("", None),
])
def test_parse_uv_version(output, expected):
    assert _uvcmd.parse_uv_version(output) == expected


@pytest.mark.parametrize("value, expected", [
    ("A" * 64, "a" * 64),
    ("sha256:" + "b" * 64, "b" * 64),
    (" SHA256:" + "C" * 64 + " ", "c" * 64),
])
def test_normalize_sha256(value, expected):
    assert _uvcmd.normalize_sha256(value) == expected


@pytest.mark.parametrize("value", ["", "a" * 63, "md5:" + "a" * 64, "g" * 64, None])
def test_normalize_sha256_refuses(value):
    with pytest.raises(_errors.OptionError, match="64 hex digits"):
        _uvcmd.normalize_sha256(value)


def test_exclude_newer_package_args():
    assert _uvcmd.exclude_newer_package_args({"torch": False, "a-b": "2025-01-01T00:00:00Z", "c": "false"}) == [
        "--exclude-newer-package", "a-b=2025-01-01T00:00:00Z",
        "--exclude-newer-package", "c=false",
        "--exclude-newer-package", "torch=false",
    ]
    assert _uvcmd.exclude_newer_package_args(None) == []
    with pytest.raises(_errors.OptionError, match=r"exclude_newer_package\[torch\]"):
        _uvcmd.exclude_newer_package_args({"torch": True})


def test_index_args():
    assert _uvcmd.index_args() == []
    assert _uvcmd.index_args(INDEX, [TORCH_INDEX, "http://x"], "unsafe-best-match") == [
        "--default-index", INDEX, "--index", TORCH_INDEX, "--index", "http://x",
        "--index-strategy", "unsafe-best-match"]


def test_requirement_lines():
    assert _uvcmd.requirement_lines("vllm", "0.11.0", [" flashinfer==1 ", ""]) == ["vllm==0.11.0", "flashinfer==1"]
    wheel = {"url": WHEEL_URL + "#sha256=" + "0" * 64, "sha256": "sha256:" + WHEEL_SHA.upper()}
    assert _uvcmd.requirement_lines("vllm", "0.20.0", None, wheel) == [
        "vllm @ %s#sha256=%s" % (WHEEL_URL, WHEEL_SHA)]


def test_argv_of_each_uv_command():
    idx = _uvcmd.index_args(INDEX, [TORCH_INDEX], "unsafe-best-match")
    assert _uvcmd.venv_argv("/uv", "3.12", "/e.partial") == [
        "/uv", "venv", "--relocatable", "--no-project", "--allow-existing", "--python", "3.12", "/e.partial"]
    assert _uvcmd.compile_argv("/uv", "/e.partial/bin/python", "/e.partial/lock", CUTOFF, {"torch": False}, idx,
                               "hdr") == [
        "/uv", "pip", "compile", "--generate-hashes", "--emit-index-annotation", "--no-build",
        "--exclude-newer", CUTOFF, "--exclude-newer-package", "torch=false",
        "--default-index", INDEX, "--index", TORCH_INDEX, "--index-strategy", "unsafe-best-match",
        "--custom-compile-command", "hdr",
        "--python", "/e.partial/bin/python", "--output-file", "/e.partial/lock", "-"]
    assert _uvcmd.install_argv("/uv", "/e.partial/bin/python", "/e.partial/lock", idx) == [
        "/uv", "pip", "install", "--python", "/e.partial/bin/python", "--require-hashes", "--no-deps", "--no-build",
        "-r", "/e.partial/lock", "--default-index", INDEX, "--index", TORCH_INDEX,
        "--index-strategy", "unsafe-best-match"]


def test_uv_environ_and_scrub():
    env = _uvcmd.uv_environ("/c", "/p", "only-system")
    assert env["UV_CACHE_DIR"] == "/c" and env["UV_PYTHON_INSTALL_DIR"] == "/p"
    assert env["UV_NO_CONFIG"] == "1" and env["UV_PYTHON_PREFERENCE"] == "only-system"
    assert "UV_PYTHON_INSTALL_MIRROR" not in env
    assert _uvcmd.uv_environ("/c", "/p", "only-managed", "file:///m")["UV_PYTHON_INSTALL_MIRROR"] == "file:///m"
    assert env["UV_LINK_MODE"] == "clone"
    environ = {"UV_INDEX_URL": "http://evil", "UV_NO_VERIFY_HASHES": "1", "UV_HTTP_TIMEOUT": "60", "PATH": "/bin",
               "UV_SKIP_WHEEL_FILENAME_CHECK": "1", "HTTPS_PROXY": "http://proxy:3128"}
    assert _uvcmd.scrub_environ(environ) == ["UV_INDEX_URL", "UV_NO_VERIFY_HASHES", "UV_SKIP_WHEEL_FILENAME_CHECK"]
    assert environ == {"UV_HTTP_TIMEOUT": "60", "PATH": "/bin", "HTTPS_PROXY": "http://proxy:3128"}


def test_resolve_command(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "vllm").write_text("")
    assert _uvcmd.resolve_command(["vllm", "--version"], str(tmp_path)) == [str(tmp_path / "bin" / "vllm"), "--version"]
    assert _uvcmd.resolve_command(["true"], str(tmp_path)) == ["true"]
    assert _uvcmd.resolve_command(["/bin/echo", "x"], str(tmp_path)) == ["/bin/echo", "x"]


@pytest.mark.parametrize("url, expected", [
    (WHEEL_URL, "0.20.0+cu129"),
    ("http://h/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl#sha256=00", "0.11.0"),
    ("http://h/vllm-0.20.0.tar.gz", "0.20.0"),
    ("http://h/some-thing-1.2.zip", "1.2"),
    ("http://h/not-a-wheel.txt", None),
])
def test_version_from_url(url, expected):
    assert _uvlock.version_from_url(url) == expected


@pytest.mark.parametrize("got, wanted, ok", [
    ("0.11.0", "0.11.0", True),
    ("0.20.0+cu129", "0.20.0", True),
    ("0.20.0+cu129", "0.20.0+cu129", True),
    ("0.20.0", "0.20.0+cu129", False),
    ("0.20.0+cu130", "0.20.0+cu129", False),
    ("0.20.1", "0.20.0", False),
    (None, "0.20.0", False),
    # compared as PEP 440 versions, not as text
    ("0.20.0", "0.20", True),
    ("0.20", "0.20.0", True),
    ("0.20.0+cu129", "0.20", True),
    ("0.20.0+CU129", "0.20+cu129", True),
    ("0.20.0+cu129", "0.20+cu130", False),
    ("0.20.0", "0.20.1", False),
    ("0.20.1", "0.20", False),
    ("0.20.0rc1", "0.20.0", False),
    ("0.20.0.post1", "0.20.0", False),
    ("0.20.0.dev3", "0.20.0", False),
    ("1.0-RC.1", "1.0rc1", True),
    ("1.0c1", "1.0rc1", True),
    ("1.0-1", "1.0.post1", True),
    ("1.0.dev3", "1.0.dev3", True),
    ("1!1.0", "1.0", False),
    ("v0.20.0", "0.20.0", True),
    ("not a version", "not a version", True),
    ("not a version", "0.20.0", False),
])
def test_versions_match(got, wanted, ok):
    assert _uvlock.versions_match(got, wanted) is ok


@pytest.mark.parametrize("got, wanted, ok", [
    ("2.11.0", "2.11", True),
    ("2.11.0+cu129", "2.11.0", False),
    ("2.11.0+cu129", "2.11+cu129", True),
])
def test_versions_match_with_the_local_label_exact(got, wanted, ok):
    assert _uvlock.versions_match(got, wanted, exact_local=True) is ok


def test_parse_lock_reads_versions_sources_via_and_hashes():
    packages = _uvlock.parse_lock(LOCK_0200_CU129 + "markered==1.0 ; sys_platform == 'linux' \\\n    --hash=sha256:77\n")
    assert _uvlock.lock_versions(packages) == {
        "llmfleet-fakedep": "1.1.0", "markered": "1.0", "torch": "2.11.0+cu129", "vllm": "0.20.0+cu129"}
    torch = packages["torch"]
    assert torch["index"] == TORCH_INDEX
    assert torch["via"] == ["vllm", "llmfleet-extra"]
    assert torch["hashes"] == ["sha256:" + "6" * 64]
    vllm = packages["vllm"]
    assert vllm["url"] == "%s#sha256=%s" % (WHEEL_URL, WHEEL_SHA)
    assert vllm["hashes"] == ["sha256:" + WHEEL_SHA] and vllm["via"] == []
    assert _uvlock.parse_lock(LOCK_0110)["vllm"]["hashes"] == ["sha256:" + "4" * 64, "sha256:" + "5" * 64]
    assert _uvlock.parse_lock("Some_Pkg[extra]==2\n")["some-pkg"]["name"] == "Some_Pkg"


EXPECT_CASES = [
    # (lock, expect, problems (regex each), id)
    (LOCK_0200_CU129, {"torch": "+cu129"}, [], "label ok"),
    (LOCK_0200_CU129, {"Torch": "2.11.0+cu129"}, [], "exact ok, name normalised"),
    (LOCK_0200_FALLBACK, {"torch": "+cu129"},
     [r"^resolved torch 2\.11\.0 from http://idx\.test/simple \(via vllm, llmfleet-extra\), but expect wants "
      r"the local label \+cu129$"], "fallback to PyPI's torch"),
    (LOCK_0200_CU129, {"torch": "+cu130"}, [r"torch 2\.11\.0\+cu129 from http://idx\.test/torch/cu129"], "other label"),
    (LOCK_0200_CU129, {"torch": "2.11.0"}, [r"expect wants version 2\.11\.0$"], "exact mismatch"),
    (LOCK_0200_CU129, {"torch": "2.11+cu129"}, [], "exact, as a version"),
    (LOCK_0110, {"torch": "2.8"}, [], "exact, shorter"),
    (LOCK_0110, {"torch": "2.8.1"}, [r"expect wants version 2\.8\.1$"], "exact, other patch"),
    (LOCK_0110, {"flashinfer-python": "+cu129"}, [r"^flashinfer-python is not in the lock at all"], "missing"),
]


@pytest.mark.parametrize("lock, expect, problems", [c[:3] for c in EXPECT_CASES], ids=[c[3] for c in EXPECT_CASES])
def test_check_expect(lock, expect, problems):
    found = _uvlock.check_expect(_uvlock.parse_lock(lock), expect)
    assert len(found) == len(problems), found
    for text, pattern in zip(found, problems):
        assert __import__("re").search(pattern, text), text


def test_check_engine():
    wheel = {"url": WHEEL_URL, "sha256": WHEEL_SHA}
    assert _uvlock.check_engine(_uvlock.parse_lock(LOCK_0110), "vllm", "0.11.0") == []
    assert _uvlock.check_engine(_uvlock.parse_lock(LOCK_0200_CU129), "vllm", "0.20.0", wheel) == []
    assert _uvlock.check_engine(_uvlock.parse_lock(LOCK_0110), "vllm", "0.11.1") == [
        "resolved vllm 0.11.0 from http://idx.test/simple, not 0.11.1"]
    assert "not the wheel" in _uvlock.check_engine(_uvlock.parse_lock(LOCK_0110), "vllm", "0.11.0", wheel)[0]
    other = dict(wheel, sha256="9" * 64)
    (problem,) = _uvlock.check_engine(_uvlock.parse_lock(LOCK_0200_CU129), "vllm", "0.20.0", other)
    assert "published sha256 is " + "9" * 64 in problem
    assert _uvlock.check_engine({}, "vllm", "1") == ["vllm is not in the lock"]


PARAMS = {
    "path": None, "state": "present", "engine": "vllm", "version": "0.11.0", "build": "cu128",
    "requirements": [], "wheel": None, "expect": None, "index_url": INDEX, "extra_index_url": [],
    "index_strategy": None, "exclude_newer": CUTOFF, "exclude_newer_package": None, "python": "3.12",
    "python_preference": "only-system", "python_install_dir": None, "python_install_mirror": None,
    "uv": None, "import_name": None, "verify_command": None, "env": None, "gpu_check": True,
    "nvidia_smi": None, "free_gb": 0.0, "timeout": 300, "lock_timeout": 5, "cache_dir": None,
    "keep_cache": False, "force": False,
}

SPEC_CHANGES = [
    # (option, new value, rebuilds)
    ("version", "0.11.1", True),
    ("build", "cu129", True),
    ("requirements", ["x==1"], True),
    ("wheel", {"url": WHEEL_URL, "sha256": WHEEL_SHA}, True),
    ("index_url", "http://other/simple", True),
    ("extra_index_url", [TORCH_INDEX], True),
    ("index_strategy", "unsafe-best-match", True),
    ("exclude_newer", "2025-10-04T00:00:00Z", True),
    ("exclude_newer_package", {"torch": False}, True),
    ("python", "3.11", True),
    ("python_preference", "managed", True),
    ("python_install_mirror", "file:///mirror", False),
    ("timeout", 10, False),
    ("free_gb", 50.0, False),
    ("keep_cache", True, False),
    ("share_files", False, False),
    ("gpu_check", False, False),
    ("cache_dir", "/elsewhere", False),
]


@pytest.mark.parametrize("option, value, rebuilds", SPEC_CHANGES, ids=[c[0] for c in SPEC_CHANGES])
def test_which_options_are_the_spec(option, value, rebuilds):
    before = _envdir.wanted_spec(PARAMS, "0.13.8")
    after = _envdir.wanted_spec(dict(PARAMS, **{option: value}), "0.13.8")
    assert (before != after) is rebuilds
    if rebuilds:
        assert _envdir.spec_differences(before, after)[0].startswith(option + ": ")


def test_a_new_uv_is_a_new_spec():
    assert _envdir.spec_differences(_envdir.wanted_spec(PARAMS, "0.13.8"), _envdir.wanted_spec(PARAMS, "0.13.9")) == [
        "uv: 0.13.8 -> 0.13.9"]


# --------------------------------------------------------------------------------------------
# the environment on disk


def make_env(path, lock=LOCK_0110, spec=None, python=True, marker_text=None):
    os.makedirs(os.path.join(path, "bin"))
    if python:
        os.symlink(sys.executable, os.path.join(path, "bin", "python"))
    with open(os.path.join(path, _envdir.LOCK_FILE_NAME), "w") as handle:
        handle.write(lock)
    marker = {"format": 1, "spec": spec or {"engine": "vllm"},
              "lock": {"file": _envdir.LOCK_FILE_NAME, "sha256": _envdir.file_sha256(os.path.join(path, _envdir.LOCK_FILE_NAME))}}
    with open(os.path.join(path, _envdir.MARKER_NAME), "w") as handle:
        handle.write(marker_text if marker_text is not None else json.dumps(marker))
    return marker


def test_inspect_env_intact(tmp_path):
    marker = make_env(str(tmp_path / "e"))
    state = _envdir.inspect_env(str(tmp_path / "e"))
    assert state["intact"] and state["marker"] == marker and state["reason"] is None


@pytest.mark.parametrize("damage, reason", [
    ("missing", r"no environment at"),
    ("marker-garbage", r"marker .* cannot be read"),
    ("marker-not-object", r"marker .* cannot be read"),
    ("no-python", r"bin/python is missing"),
    ("dangling-python", r"bin/python is missing or points nowhere"),
    ("no-lock", r"lock file .* cannot be read"),
    ("lock-edited", r"lock file's sha256 .* is not the marker's"),
])
def test_inspect_env_finds_damage(tmp_path, damage, reason):
    path = str(tmp_path / "e")
    if damage != "missing":
        make_env(path, python=damage not in ("no-python", "dangling-python"),
                 marker_text={"marker-garbage": "{not json", "marker-not-object": "[1]"}.get(damage))
    if damage == "dangling-python":
        os.symlink("/nonexistent/python3", os.path.join(path, "bin", "python"))
    if damage == "no-lock":
        os.unlink(os.path.join(path, _envdir.LOCK_FILE_NAME))
    if damage == "lock-edited":
        with open(os.path.join(path, _envdir.LOCK_FILE_NAME), "a") as handle:
            handle.write("evil==1\n")
    state = _envdir.inspect_env(path)
    assert not state["intact"]
    assert __import__("re").search(reason, state["reason"]), state["reason"]


def test_rebuild_reasons(tmp_path):
    spec = _envdir.wanted_spec(PARAMS, "0.13.8")
    make_env(str(tmp_path / "e"), spec=spec)
    state = _envdir.inspect_env(str(tmp_path / "e"))
    assert _envdir.rebuild_reasons(state, spec) == []
    assert _envdir.rebuild_reasons(state, spec, force=True) == ["force is set"]
    assert _envdir.rebuild_reasons(state, dict(spec, version="0.11.1")) == [
        "the spec changed: version: 0.11.0 -> 0.11.1"]


def test_switch_into_place_replaces_the_old_environment(tmp_path):
    path, partial = str(tmp_path / "e"), str(tmp_path / "e.partial")
    os.makedirs(path)
    (tmp_path / "e" / "old").write_text("")
    os.makedirs(partial)
    (tmp_path / "e.partial" / "new").write_text("")
    _envdir.switch_into_place(partial, path)
    assert os.listdir(path) == ["new"]
    assert sorted(os.listdir(str(tmp_path))) == ["e"]


def test_switch_into_place_puts_the_old_environment_back_when_the_rename_fails(tmp_path):
    path, partial = str(tmp_path / "e"), str(tmp_path / "e.partial")
    os.makedirs(path)
    (tmp_path / "e" / "old").write_text("")
    os.makedirs(partial)
    renames = []

    def rename(src, dst):
        renames.append((src, dst))
        if src == partial:
            raise OSError(18, "Invalid cross-device link")
        os.rename(src, dst)

    with pytest.raises(_errors.SwitchFailed, match="previous environment is back in place"):
        _envdir.switch_into_place(partial, path, rename=rename)
    assert os.listdir(path) == ["old"]
    assert renames == [(path, path + ".old"), (partial, path), (path + ".old", path)]


def test_debris_of_a_killed_run(tmp_path):
    path = str(tmp_path / "e")
    make_env(path + ".old")
    _envdir.start_partial(path + ".partial", path)
    assert _envdir.pending_debris(path) == [("restore", path + ".old"), ("remove", path + ".partial")]
    assert _envdir.foreign_debris(path) == []
    _envdir.clear_debris(path, _envdir.pending_debris(path))
    assert sorted(os.listdir(str(tmp_path))) == ["e"]
    make_env(path + ".old")
    assert _envdir.pending_debris(path) == [("remove", path + ".old")]


def test_leftovers_without_our_mark_are_not_debris(tmp_path):
    path = str(tmp_path / "e")
    os.makedirs(path + ".old")                     # someone's backup
    os.makedirs(os.path.join(path + ".partial", "bin"))  # a directory of that name, not ours
    assert _envdir.pending_debris(path) == []
    assert _envdir.foreign_debris(path) == [path + ".old", path + ".partial"]
    # a token for another path is not ours either
    os.rmdir(os.path.join(path + ".partial", "bin"))
    os.rmdir(path + ".partial")
    _envdir.start_partial(path + ".partial", str(tmp_path / "other"))
    assert _envdir.foreign_debris(path) == [path + ".old", path + ".partial"]


# --------------------------------------------------------------------------------------------
# the lock


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_lock_waits_at_most_lock_timeout(tmp_path):
    lock_path = str(tmp_path / "e.lock")
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    clock = FakeClock()
    lock = _pathlock.PathLock(lock_path, 30, sleep=clock.sleep, clock=clock)
    try:
        with pytest.raises(_errors.LockBusy) as exc:
            lock.acquire()
    finally:
        os.close(holder)
    assert 30 <= clock.now < 32
    # a holder that recorded nothing (a hand-made flock, an older release)
    assert str(exc.value) == ("another run holds %s; waited 30 s (lock_timeout). It recorded no pid: `fuser -v %s` "
                              "names the process holding it. Let it finish, or raise lock_timeout." % (lock_path, lock_path))
    assert lock.acquire() is True
    lock.release()


def test_lock_follows_a_replaced_lock_file(tmp_path):
    """A holder that removes the environment unlinks the lock file: the waiter must not keep
    a lock on the unlinked file."""
    lock_path = str(tmp_path / "e.lock")
    holder = _pathlock.PathLock(lock_path, 5)
    holder.acquire()
    waiter = _pathlock.PathLock(lock_path, 5)
    opened = []

    def sleep(_seconds):
        if not opened:
            opened.append(True)
            holder.release(unlink=True)

    waiter._sleep = sleep
    assert waiter.acquire() is True
    assert os.stat(lock_path).st_ino == os.fstat(waiter.fd).st_ino
    waiter.release()


def test_lock_in_check_mode_does_not_create_the_file(tmp_path):
    lock = _pathlock.PathLock(str(tmp_path / "e.lock"), 5, shared=True, create=False)
    assert lock.acquire() is False
    lock.release()
    assert os.listdir(str(tmp_path)) == []


# --------------------------------------------------------------------------------------------
# the flow, with the scripted uv


@pytest.fixture
def uv_bin(tmp_path):
    path = tmp_path / "bin" / "uv"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 3\n")
    path.chmod(0o755)
    return str(path)


def flow(tmp_path, uv_bin, fake, check_mode=False, gpu=None, **params):
    p = dict(PARAMS, path=str(tmp_path / "engines" / "vllm" / "0.11.0"), uv=uv_bin, **params)
    gpu = gpu or (lambda *a: {"skipped": True, "reason": "test"})
    return _uvenv.EngineEnv(p, lambda keep_fds=(), on_command=None: fake, uv_bin, check_mode=check_mode, gpu=gpu)


def test_build_runs_every_step_and_writes_the_marker(tmp_path, uv_bin):
    fake = FakeUv()
    seen = {}
    fake.on["install"] = lambda argv: seen.update(
        progress=json.loads((tmp_path / "engines" / "vllm" / "0.11.0.progress.json").read_text()),
        cache=os.listdir(str(tmp_path / "engines" / "vllm")))
    env = flow(tmp_path, uv_bin, fake)
    result = env.present()
    assert result["changed"] is True
    assert fake.kinds() == ["version", "find", "venv", "compile", "install", "verify"]
    # the request is resolved first and uv venv gets the very file that was checked
    assert fake.call("find")[1][-1] == env.p["python"]
    assert fake.call("venv")[1][-2] == fake.python_found
    assert [s["name"] for s in result["steps"]] == [
        "check", "prepare", "venv", "resolve", "install", "share", "verify", "gpu", "marker", "switch"]
    assert result["lock"]["packages"] == {"llmfleet-fakedep": "1.1.0", "torch": "2.8.0", "vllm": "0.11.0"}
    marker = json.loads((tmp_path / "engines" / "vllm" / "0.11.0" / _envdir.MARKER_NAME).read_text())
    assert marker == result["marker"]
    assert marker["spec"] == _envdir.wanted_spec(env.p, "0.13.8")
    assert marker["lock"]["sha256"] == _envdir.file_sha256(str(tmp_path / "engines/vllm/0.11.0" / _envdir.LOCK_FILE_NAME))
    assert marker["verified"] == {"import": "vllm", "version": "0.11.0"}
    # the progress file said what ran, and is gone at the end; the cache lock was beside the cache
    assert seen["progress"]["step"] == "install" and seen["progress"]["done"][-1] == "resolve"
    assert "0.11.0.progress.json" in seen["cache"] and ".uv-cache.lock" in seen["cache"]
    assert sorted(os.listdir(str(tmp_path / "engines" / "vllm"))) == ["0.11.0", "0.11.0.lock"]
    # the compile got the requirements on stdin and the same indexes as the install
    _kind, argv, data, env_vars, timeout = fake.call("compile")
    assert data == "vllm==0.11.0"
    assert argv[argv.index("--default-index") + 1] == INDEX
    assert env_vars["UV_CACHE_DIR"] == str(tmp_path / "engines" / "vllm" / ".uv-cache")
    assert env_vars["UV_PYTHON_INSTALL_DIR"] == str(tmp_path / "engines" / "vllm" / ".uv-python")
    assert 0 < timeout <= 300


def test_an_up_to_date_environment_runs_only_uv_version(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    fake = FakeUv()
    result = flow(tmp_path, uv_bin, fake).present(diff=True)
    assert result["changed"] is False
    assert fake.kinds() == ["version"]
    assert [s["name"] for s in result["steps"]] == ["check"]
    assert result["diff"]["before"] == result["diff"]["after"] != ""


def test_an_up_to_date_environment_still_has_to_meet_expect(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    with pytest.raises(_errors.LockMismatch, match=r"up to date with the spec, but its lock does not meet expect.*"
                                                   r"torch 2\.8\.0 from http://idx\.test/simple"):
        flow(tmp_path, uv_bin, FakeUv(), expect={"torch": "+cu129"}).present()


def test_check_mode_writes_nothing_and_shows_the_marker_to_be(tmp_path, uv_bin):
    fake = FakeUv()
    result = flow(tmp_path, uv_bin, fake, check_mode=True).present(diff=True)
    assert result["changed"] is True
    assert fake.kinds() == ["version"]
    assert not (tmp_path / "engines").exists()
    assert result["diff"]["before"] == ""
    assert json.loads(result["diff"]["after"])["spec"]["version"] == "0.11.0"


def test_check_mode_on_a_changed_spec(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    before = sorted(os.listdir(str(tmp_path / "engines" / "vllm" / "0.11.0")))
    mtime = os.stat(str(tmp_path / "engines" / "vllm" / "0.11.0" / _envdir.MARKER_NAME)).st_mtime_ns
    result = flow(tmp_path, uv_bin, FakeUv(), check_mode=True, requirements=["x==1"]).present(diff=True)
    assert result["changed"] is True
    assert result["reasons"] == ['the spec changed: requirements: [] -> ["x==1"]']
    assert json.loads(result["diff"]["before"])["spec"]["requirements"] == []
    assert json.loads(result["diff"]["after"])["spec"]["requirements"] == ["x==1"]
    assert sorted(os.listdir(str(tmp_path / "engines" / "vllm" / "0.11.0"))) == before
    assert os.stat(str(tmp_path / "engines" / "vllm" / "0.11.0" / _envdir.MARKER_NAME)).st_mtime_ns == mtime


UV_FAILURES = [
    # (kind, error class, step, message pieces)
    ("venv", _errors.VenvFailed, "venv", ["creating a Python 3.12 environment", "No interpreter found"]),
    ("compile", _errors.ResolveFailed, "resolve", ["resolving vllm==0.11.0 as of " + CUTOFF,
                                                   "line 3 / line 4 / line 5 / line 6 / line 7 / line 8"]),
    ("install", _errors.InstallFailed, "install", ["installing the lock of vllm 0.11.0 (cu128) (3 packages)",
                                                   "Hash mismatch"]),
    ("verify", _errors.VerifyFailed, "verify", ["'import vllm' fails there", "ImportError: boom"]),
]
OUTPUTS = {
    "venv": (2, "", "error: No interpreter found for Python 3.12 in managed installations\n"),
    "compile": (1, "", "".join("line %d\n" % i for i in range(1, 9))),
    "install": (1, "", "error: Failed to download\n  Hash mismatch for vllm\n"),
    "verify": (1, "", "Traceback (most recent call last):\nImportError: boom\n"),
}


@pytest.mark.parametrize("kind, error, step, pieces", UV_FAILURES, ids=[f[0] for f in UV_FAILURES])
def test_a_failed_step_leaves_the_old_environment_and_no_partial(tmp_path, uv_bin, kind, error, step, pieces):
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    marker = (root / "0.11.0" / _envdir.MARKER_NAME).read_text()
    fake = FakeUv(fail={kind: OUTPUTS[kind]})
    with pytest.raises(error) as exc:
        flow(tmp_path, uv_bin, fake, force=True, keep_cache=False).present()
    for piece in pieces:
        assert piece in exc.value.msg
    assert "line 2" not in exc.value.msg
    assert exc.value.details["failed_step"] == step
    assert (root / "0.11.0" / _envdir.MARKER_NAME).read_text() == marker
    # a failed verification drops uv's cache (and its lock file) too: what it installed is not trusted
    assert sorted(os.listdir(str(root))) == ([] if kind == "verify" else [".uv-cache.lock"]) + ["0.11.0", "0.11.0.lock"]


def test_expect_refuses_the_lock_before_installing(tmp_path, uv_bin):
    fake = FakeUv(lock=LOCK_0200_FALLBACK, version="0.20.0+cu129")
    env = flow(tmp_path, uv_bin, fake, version="0.20.0", wheel={"url": WHEEL_URL, "sha256": WHEEL_SHA},
               expect={"torch": "+cu129"})
    with pytest.raises(_errors.LockMismatch) as exc:
        env.present()
    assert "install" not in fake.kinds()
    assert "resolved torch 2.11.0 from http://idx.test/simple (via vllm, llmfleet-extra)" in exc.value.msg
    assert "exclude_newer_package" in exc.value.msg
    assert exc.value.details["packages"]["torch"] == "2.11.0"
    assert not (tmp_path / "engines" / "vllm" / "0.11.0.partial").exists()


def test_github_wheel_build(tmp_path, uv_bin):
    fake = FakeUv(lock=LOCK_0200_CU129, version="0.20.0+cu129")
    result = flow(tmp_path, uv_bin, fake, version="0.20.0", build="cu129", extra_index_url=[TORCH_INDEX],
                  index_strategy="unsafe-best-match", wheel={"url": WHEEL_URL, "sha256": "sha256:" + WHEEL_SHA},
                  expect={"torch": "+cu129"}).present()
    assert result["lock"]["packages"]["torch"] == "2.11.0+cu129"
    assert fake.call("compile")[2] == "vllm @ %s#sha256=%s" % (WHEEL_URL, WHEEL_SHA)
    install = fake.call("install")[1]
    assert install[install.index("--index") + 1] == TORCH_INDEX
    assert result["marker"]["spec"]["wheel"] == {"url": WHEEL_URL, "sha256": WHEEL_SHA}


def test_verify_rejects_the_wrong_version_and_a_shadowing_import(tmp_path, uv_bin):
    with pytest.raises(_errors.VerifyFailed, match=r"__version__ in the new environment is '0\.10\.0', not 0\.11\.0"):
        flow(tmp_path, uv_bin, FakeUv(version="0.10.0")).present()

    class Shadowed(FakeUv):
        def __call__(self, argv, **kw):
            result = super().__call__(argv, **kw)
            if self.calls[-1][0] == "verify":
                result.out = json.dumps({"version": "0.11.0", "file": "/usr/lib/python3/dist-packages/vllm/__init__.py"})
            return result

    with pytest.raises(_errors.VerifyFailed, match="outside it"):
        flow(tmp_path, uv_bin, Shadowed()).present()


def test_verify_command_runs_in_the_new_environment(tmp_path, uv_bin):
    fake = FakeUv()

    def make_script(python_bin):
        open(os.path.join(os.path.dirname(python_bin), "vllm"), "w").close()

    env = flow(tmp_path, uv_bin, fake, verify_command=["vllm", "--version"], env={"FAKE_TORCH_CUDA": "ok"})
    fake.on["install"] = lambda argv: make_script(argv[argv.index("--python") + 1])
    result = env.present()
    _kind, argv, _data, env_vars, _timeout = fake.calls[-1]
    assert argv == [str(tmp_path / "engines/vllm/0.11.0.partial/bin/vllm"), "--version"]
    assert env_vars["FAKE_TORCH_CUDA"] == "ok"
    assert env_vars["VIRTUAL_ENV"] == str(tmp_path / "engines/vllm/0.11.0.partial")
    assert result["marker"]["verified"]["command"] == ["vllm", "--version"]


def test_gpu_check_failure_is_not_switched_in(tmp_path, uv_bin):
    def gpu(run, python_bin, env, nvidia_smi, timeout, engine):
        assert python_bin.endswith("0.11.0.partial/bin/python") and engine == "vllm"
        raise _errors.GpuCheckFailed("no kernel image", classification="no_kernel_image")

    with pytest.raises(_errors.GpuCheckFailed) as exc:
        flow(tmp_path, uv_bin, FakeUv(), gpu=gpu).present()
    assert exc.value.msg.startswith("vllm 0.11.0 (cu128) is installed in ")
    assert "is not switched in: no kernel image" in exc.value.msg
    assert exc.value.details == {"classification": "no_kernel_image", "failed_step": "gpu"}
    assert not (tmp_path / "engines" / "vllm" / "0.11.0").exists()


def test_gpu_check_off_is_recorded(tmp_path, uv_bin):
    def gpu(*_args):
        raise AssertionError("the GPU check ran with gpu_check false")

    result = flow(tmp_path, uv_bin, FakeUv(), gpu=gpu, gpu_check=False).present()
    assert result["gpu"] == {"skipped": True, "reason": "gpu_check is false"}
    assert "gpu" not in [s["name"] for s in result["steps"]]


def test_timeout_stops_the_build(tmp_path, uv_bin):
    with pytest.raises(_errors.InstallTimeout, match=r"did not finish within timeout \(300 s\); stopped during step install"):
        flow(tmp_path, uv_bin, FakeUv(timeout_in="install")).present()
    assert not (tmp_path / "engines" / "vllm" / "0.11.0.partial").exists()


def test_not_enough_space(tmp_path, uv_bin, monkeypatch):
    monkeypatch.setattr(_uvenv, "available_gb", lambda directory: 12.34)
    fake = FakeUv()
    with pytest.raises(_errors.NotEnoughSpace) as exc:
        flow(tmp_path, uv_bin, fake, free_gb=20.0).present()
    assert exc.value.msg == ("installing vllm 0.11.0 (cu128) needs about 20 GB free under %s and there are 12.3 GB "
                             "available (for the environment and uv's cache); free space there, or lower free_gb"
                             % (tmp_path / "engines" / "vllm"))
    assert fake.kinds() == ["version"]


def test_cache_is_dropped_after_success_unless_kept(tmp_path, uv_bin):
    cache = tmp_path / "engines" / "vllm" / ".uv-cache"
    fake = FakeUv(on={"install": lambda argv: cache.mkdir(exist_ok=True)})
    flow(tmp_path, uv_bin, fake).present()
    assert not cache.exists()
    flow(tmp_path, uv_bin, fake, keep_cache=True, force=True).present()
    assert cache.exists()


def test_cache_in_use_by_another_install_is_kept(tmp_path, uv_bin):
    cache = tmp_path / "engines" / "vllm" / ".uv-cache"
    other = {}

    def other_install_starts(_argv):
        cache.mkdir(exist_ok=True)
        other["lock"] = _pathlock.PathLock(str(cache) + ".lock", 5, shared=True)
        other["lock"].acquire()

    flow(tmp_path, uv_bin, FakeUv(on={"install": other_install_starts})).present()
    assert cache.exists()
    other["lock"].release()


def test_a_killed_switch_is_repaired(tmp_path, uv_bin):
    """Killed between moving the old environment aside and renaming the new one in."""
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    os.rename(str(root / "0.11.0"), str(root / "0.11.0.old"))
    fake = FakeUv()
    result = flow(tmp_path, uv_bin, fake).present()
    assert result["changed"] is False
    assert fake.kinds() == ["version"]
    assert sorted(os.listdir(str(root))) == ["0.11.0", "0.11.0.lock"]


def test_absent(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    os.makedirs(str(root / "0.11.0.partial"))
    checked = flow(tmp_path, uv_bin, FakeUv(), check_mode=True).absent(diff=True)
    assert checked["changed"] is True and (root / "0.11.0").exists()
    assert json.loads(checked["diff"]["before"])["spec"]["version"] == "0.11.0" and checked["diff"]["after"] == ""
    removed = flow(tmp_path, uv_bin, FakeUv()).absent()
    assert removed["changed"] is True
    assert removed["removed"] == [str(root / "0.11.0"), str(root / "0.11.0.partial")]
    assert os.listdir(str(root)) == []
    assert flow(tmp_path, uv_bin, FakeUv()).absent()["changed"] is False
    assert flow(tmp_path / "nowhere", uv_bin, FakeUv()).absent()["changed"] is False


@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_directory_that_is_not_an_environment_is_never_replaced(tmp_path, uv_bin, state):
    path = tmp_path / "engines" / "vllm" / "0.11.0"
    path.mkdir(parents=True)
    (path / "precious.txt").write_text("data")
    env = flow(tmp_path, uv_bin, FakeUv(), force=True)
    with pytest.raises(_errors.NotAnEnvironment, match="is not a Python environment .* refusing to (replace|remove)"):
        env.present() if state == "present" else env.absent()
    assert (path / "precious.txt").read_text() == "data"


def test_check_mode_judges_the_environment_a_restore_brings_back(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    os.rename(str(root / "0.11.0"), str(root / "0.11.0.old"))
    result = flow(tmp_path, uv_bin, FakeUv(), check_mode=True).present()
    assert result["changed"] is True and "reasons" not in result
    assert result["debris"] == [str(root / "0.11.0.old")]
    assert sorted(os.listdir(str(root))) == ["0.11.0.lock", "0.11.0.old"]


# --------------------------------------------------------------------------------------------
# leftovers: only this module's own are touched (issue 11, defect 6)


def foreign_dir(path, venv=False):
    os.makedirs(path)
    with open(os.path.join(path, "precious.txt"), "w") as handle:
        handle.write("data")
    if venv:
        with open(os.path.join(path, "pyvenv.cfg"), "w") as handle:
            handle.write("home = /usr/bin\n")


def test_switch_into_place_never_removes_a_foreign_old(tmp_path):
    path, partial = str(tmp_path / "e"), str(tmp_path / "e.partial")
    os.makedirs(path)
    os.makedirs(partial)
    foreign_dir(path + ".old", venv=True)
    with pytest.raises(_errors.SwitchFailed, match=r"e\.old is in the way of the switch and is not a leftover"):
        _envdir.switch_into_place(partial, path)
    assert (tmp_path / "e.old" / "precious.txt").read_text() == "data"
    assert sorted(os.listdir(str(tmp_path))) == ["e", "e.old", "e.partial"]


def test_absent_leaves_a_foreign_old_alone_and_says_so(tmp_path, uv_bin):
    root = tmp_path / "engines" / "vllm"
    foreign_dir(str(root / "0.11.0.old"))
    env = flow(tmp_path, uv_bin, FakeUv())
    result = env.absent()
    assert result["changed"] is False and result["removed"] == []
    assert (root / "0.11.0.old" / "precious.txt").read_text() == "data"
    assert env.warnings == [_envdir.foreign_debris_warning(str(root / "0.11.0.old"))]
    assert "is not a leftover of this module" in env.warnings[0]


def test_absent_removes_only_its_own_leftovers(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    _envdir.start_partial(str(root / "0.11.0.partial"), str(root / "0.11.0"))
    foreign_dir(str(root / "0.11.0.old"))
    env = flow(tmp_path, uv_bin, FakeUv())
    result = env.absent()
    assert result["removed"] == [str(root / "0.11.0"), str(root / "0.11.0.partial")]
    assert sorted(os.listdir(str(root))) == ["0.11.0.old"]
    assert len(env.warnings) == 1 and "0.11.0.old" in env.warnings[0]


def test_present_does_not_put_a_foreign_old_in_place(tmp_path, uv_bin):
    root = tmp_path / "engines" / "vllm"
    foreign_dir(str(root / "0.11.0.old"))
    env = flow(tmp_path, uv_bin, FakeUv())
    result = env.present()
    assert result["changed"] is True and result["debris"] == []
    assert (root / "0.11.0" / _envdir.MARKER_NAME).is_file()
    assert (root / "0.11.0.old" / "precious.txt").read_text() == "data"
    assert any("0.11.0.old is not a leftover of this module" in w for w in env.warnings)


@pytest.mark.parametrize("name", ["0.11.0.partial", "0.11.0.old"])
def test_a_foreign_leftover_in_the_way_of_a_build_is_refused_before_it(tmp_path, uv_bin, name):
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    marker = (root / "0.11.0" / _envdir.MARKER_NAME).read_text()
    foreign_dir(str(root / name), venv=True)
    fake = FakeUv()
    with pytest.raises(_errors.NotAnEnvironment, match=r"%s is in the way: building vllm 0\.11\.0 \(cu128\) at .* "
                                                       r"is not a leftover of this module" % name.replace(".", r"\.")):
        flow(tmp_path, uv_bin, fake, force=True).present()
    assert fake.kinds() == ["version"]
    assert (root / name / "precious.txt").read_text() == "data"
    assert (root / "0.11.0" / _envdir.MARKER_NAME).read_text() == marker


def test_the_partial_is_marked_as_ours_before_uv_fills_it(tmp_path, uv_bin):
    root = tmp_path / "engines" / "vllm"
    seen = {}

    def venv(argv):
        assert "--allow-existing" in argv
        seen["token"] = json.loads((root / "0.11.0.partial" / _envdir.BUILD_TOKEN_NAME).read_text())

    flow(tmp_path, uv_bin, FakeUv(on={"venv": venv})).present()
    assert seen["token"]["path"] == str(root / "0.11.0") and seen["token"]["pid"] == os.getpid()


@pytest.mark.parametrize("killed", ["after the token", "before the token"])
def test_a_killed_builds_partial_is_cleared(tmp_path, uv_bin, killed):
    root = tmp_path / "engines" / "vllm"
    partial = str(root / "0.11.0.partial")
    root.mkdir(parents=True)
    if killed == "after the token":
        _envdir.start_partial(partial, str(root / "0.11.0"))
        os.makedirs(os.path.join(partial, "lib"))
    else:
        os.makedirs(partial)  # created, killed before the token was written: empty
    result = flow(tmp_path, uv_bin, FakeUv()).present()
    assert result["changed"] is True and result["debris"] == [partial]
    assert (root / "0.11.0" / _envdir.MARKER_NAME).is_file()


# --------------------------------------------------------------------------------------------
# uv's cache: only what uv made is removed (issue 11, defect 1)


def make_uv_cache(path, extra=()):
    os.makedirs(os.path.join(path, "wheels-v5", "pypi"), exist_ok=True)
    with open(os.path.join(path, "CACHEDIR.TAG"), "w") as handle:
        handle.write("Signature: 8a477f597d28d172789f06886806bc55")
    for name in (".gitignore", ".lock"):
        open(os.path.join(path, name), "w").close()
    os.makedirs(os.path.join(path, "sdists-v10"), exist_ok=True)
    for name in extra:
        with open(os.path.join(path, name), "w") as handle:
            handle.write("not uv's")


def test_cache_dir_problem(tmp_path):
    assert _envdir.cache_dir_problem(str(tmp_path / "missing")) is None
    (tmp_path / "empty").mkdir()
    assert _envdir.cache_dir_problem(str(tmp_path / "empty")) is None
    make_uv_cache(str(tmp_path / "uv"))
    assert _envdir.cache_dir_problem(str(tmp_path / "uv")) is None
    (tmp_path / "home-cache" / "huggingface" / "hub").mkdir(parents=True)
    assert _envdir.cache_dir_problem(str(tmp_path / "home-cache")) == (
        "it is not empty and not a uv cache (no CACHEDIR.TAG): it holds huggingface")
    make_uv_cache(str(tmp_path / "tagged"), extra=["model.safetensors"])
    assert _envdir.cache_dir_problem(str(tmp_path / "tagged")) == (
        "besides uv's cache it holds model.safetensors, which uv does not put there")
    # a virtual environment uv made carries a CACHEDIR.TAG too
    make_uv_cache(str(tmp_path / "venv"), extra=["pyvenv.cfg"])
    assert "pyvenv.cfg" in _envdir.cache_dir_problem(str(tmp_path / "venv"))
    (tmp_path / "file").write_text("")
    assert _envdir.cache_dir_problem(str(tmp_path / "file")) == "it is not a directory"


def test_a_cache_dir_that_is_not_uvs_is_refused_before_building(tmp_path, uv_bin):
    shared = tmp_path / "home" / ".cache"
    (shared / "huggingface" / "hub").mkdir(parents=True)
    (shared / "huggingface" / "hub" / "model.safetensors").write_text("weights")
    fake = FakeUv()
    with pytest.raises(_errors.OptionError) as exc:
        flow(tmp_path, uv_bin, fake, cache_dir=str(shared)).present()
    assert exc.value.msg.startswith("cache_dir %s cannot hold uv's cache here: it is not empty and not a uv cache "
                                    "(no CACHEDIR.TAG): it holds huggingface." % shared)
    assert "Point cache_dir at a directory of its own (for example %s/uv), or set keep_cache: true" % shared in exc.value.msg
    assert fake.kinds() == ["version"]
    assert (shared / "huggingface" / "hub" / "model.safetensors").read_text() == "weights"
    # with keep_cache nothing is removed, so any directory will do
    flow(tmp_path, uv_bin, FakeUv(), cache_dir=str(shared), keep_cache=True).present()
    assert (shared / "huggingface" / "hub" / "model.safetensors").read_text() == "weights"


def test_a_cache_dir_holding_the_environments_is_refused(tmp_path, uv_bin):
    with pytest.raises(_errors.OptionError, match=r"the environment .*0\.11\.0 would be inside it"):
        flow(tmp_path, uv_bin, FakeUv(), cache_dir=str(tmp_path / "engines")).present()


def test_only_what_uv_put_in_the_cache_is_removed(tmp_path, uv_bin):
    cache = tmp_path / "cache" / "uv"
    fake = FakeUv(on={"install": lambda argv: make_uv_cache(str(cache), extra=["notes.txt"])})
    env = flow(tmp_path, uv_bin, fake, cache_dir=str(cache))
    env.present()
    assert sorted(os.listdir(str(cache))) == [".gitignore", ".lock", "CACHEDIR.TAG", "notes.txt"]
    assert env.warnings == ["uv's cache was removed from %s, but what uv did not put there was left alone: "
                            "notes.txt" % cache]
    # uv's alone: all of it goes, the directory too
    fake = FakeUv(on={"install": lambda argv: make_uv_cache(str(tmp_path / "cache2"))})
    flow(tmp_path, uv_bin, fake, cache_dir=str(tmp_path / "cache2"), force=True).present()
    assert not (tmp_path / "cache2").exists()


def test_a_cache_that_cannot_be_removed_is_a_warning_after_the_switch(tmp_path, uv_bin, monkeypatch):
    cache = tmp_path / "engines" / "vllm" / ".uv-cache"
    fake = FakeUv(on={"install": lambda argv: make_uv_cache(str(cache))})
    real_rmtree = _envdir.shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if str(path).startswith(str(cache)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(_envdir.shutil, "rmtree", rmtree)
    env = flow(tmp_path, uv_bin, fake)
    result = env.present()
    assert result["changed"] is True
    assert (tmp_path / "engines" / "vllm" / "0.11.0" / _envdir.MARKER_NAME).is_file()
    assert len(env.warnings) == 1
    assert env.warnings[0].startswith("vllm 0.11.0 (cu128) is switched in at %s, but uv's cache %s could not be "
                                      "removed ([Errno 13] Permission denied" % (tmp_path / "engines/vllm/0.11.0", cache))


def test_remove_tree_never_changes_the_directory_above_it(tmp_path, monkeypatch):
    above = tmp_path / "above"
    tree = above / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f").write_text("")
    chmods = []
    real_chmod, real_rmdir = os.chmod, os.rmdir

    def chmod(path, mode, *args, **kwargs):
        chmods.append(str(path))
        return real_chmod(path, mode, *args, **kwargs)

    def rmdir(path, *args, **kwargs):
        if kwargs.get("dir_fd") is None and os.path.abspath(str(path)) == str(tree):
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    monkeypatch.setattr(os, "rmdir", rmdir)
    with pytest.raises(PermissionError):
        _envdir.remove_tree(str(tree))
    assert [p for p in chmods if not (p == str(tree) or p.startswith(str(tree) + os.sep))] == []


def test_remove_tree_retries_inside_the_tree(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f").write_text("")
    chmods, failed = [], []
    real_chmod, real_unlink = os.chmod, os.unlink

    def chmod(path, mode, *args, **kwargs):
        chmods.append(str(path))
        return real_chmod(path, mode, *args, **kwargs)

    def unlink(path, *args, **kwargs):
        if str(path).endswith("f") and not failed:
            failed.append(path)
            raise PermissionError(13, "Permission denied", str(path))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    monkeypatch.setattr(os, "unlink", unlink)
    assert _envdir.remove_tree(str(tree)) is True
    assert not tree.exists() and failed
    assert chmods == [str(tree / "sub")]


# --------------------------------------------------------------------------------------------
# gpu_check: required (issue 11, defect 7)


@pytest.mark.parametrize("value, mode", [
    (True, True), (False, False), (None, False), ("yes", True), ("false", False), ("required", "required"),
    (" Required ", "required"), (1, True),
])
def test_gpu_check_mode(value, mode):
    assert _uvenv.gpu_check_mode(value) == mode


def test_gpu_check_mode_refuses_other_values():
    with pytest.raises(_errors.OptionError, match=r"gpu_check must be true, false or required, not 'sometimes'"):
        _uvenv.gpu_check_mode("sometimes")


NOT_RESPONDING = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                  "latest NVIDIA driver is installed and running.")


def test_gpu_check_required_fails_where_the_driver_cannot_be_reached(tmp_path, uv_bin):
    flow(tmp_path, uv_bin, FakeUv()).present()
    root = tmp_path / "engines" / "vllm"
    marker = (root / "0.11.0" / _envdir.MARKER_NAME).read_text()

    skipped = {"skipped": True, "reason": "no NVIDIA driver on this node (%s)" % NOT_RESPONDING,
               "driver_error": NOT_RESPONDING}

    def gpu(*_args):
        return dict(skipped)

    with pytest.raises(_errors.GpuCheckFailed) as exc:
        flow(tmp_path, uv_bin, FakeUv(), gpu=gpu, gpu_check="required", force=True).present()
    assert exc.value.msg == (
        "vllm 0.11.0 (cu128) is installed in %s.partial but is not switched in: gpu_check is required (the node's "
        "NVIDIA driver was seen when this install was planned), and the GPU check cannot reach it now: %s. "
        "The environment at %s is unchanged." % (root / "0.11.0", NOT_RESPONDING, root / "0.11.0"))
    assert exc.value.details["failed_step"] == "gpu"
    assert exc.value.details["gpu"] == skipped
    assert (root / "0.11.0" / _envdir.MARKER_NAME).read_text() == marker
    assert not (root / "0.11.0.partial").exists()
    # true (not required): skipped and recorded, as before
    result = flow(tmp_path, uv_bin, FakeUv(), gpu=gpu, gpu_check=True, force=True).present()
    assert result["gpu"] == skipped


def test_gpu_check_required_passes_where_the_check_runs(tmp_path, uv_bin):
    def gpu(*_args):
        return {"ok": True, "driver_version": "580.65.06"}

    result = flow(tmp_path, uv_bin, FakeUv(), gpu=gpu, gpu_check="required").present()
    assert result["gpu"] == {"ok": True, "driver_version": "580.65.06"}


# --------------------------------------------------------------------------------------------
# free_gb on every filesystem the build writes to (issue 11, defect 8c)


def test_free_gb_is_needed_on_each_filesystem_written_to(tmp_path, uv_bin, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    measured = []

    def filesystem_of(directory):
        return "scratch" if directory.startswith(str(scratch)) else "root"

    def available_gb(directory):
        measured.append(directory)
        return 5.0 if directory.startswith(str(scratch)) else 500.0

    monkeypatch.setattr(_uvenv, "filesystem_of", filesystem_of)
    monkeypatch.setattr(_uvenv, "available_gb", available_gb)
    fake = FakeUv()
    with pytest.raises(_errors.NotEnoughSpace) as exc:
        flow(tmp_path, uv_bin, fake, free_gb=20.0, cache_dir=str(scratch / "uv-cache")).present()
    assert exc.value.msg == ("installing vllm 0.11.0 (cu128) needs about 20 GB free under %s and there are 5.0 GB "
                             "available (for uv's cache); free space there, or lower free_gb" % (scratch / "uv-cache"))
    assert fake.kinds() == ["version"]
    # each filesystem measured once, at the nearest directory that exists
    assert measured == [str(tmp_path / "engines" / "vllm"), str(scratch)]

    # the managed Pythons' filesystem too (python_preference other than only-system)
    measured.clear()
    with pytest.raises(_errors.NotEnoughSpace) as exc:
        flow(tmp_path, uv_bin, FakeUv(), free_gb=20.0, python_preference="only-managed",
             python_install_dir=str(scratch / "python")).present()
    assert "under %s and there are 5.0 GB available (for the managed Pythons)" % (scratch / "python") in exc.value.msg

    # enough everywhere: the build goes on
    result = flow(tmp_path, uv_bin, FakeUv(), free_gb=4.0, cache_dir=str(scratch / "uv-cache")).present()
    assert result["changed"] is True


# -- uv's cache: renamed to a trash name before it is deleted, dropped after a failed verification (issue 44, 19)

class Killed(BaseException):
    """What SIGKILL does to a run half way through deleting a tree, as far as the disk can tell."""


def bucket_files(cache):
    """Every file under each of uv's buckets in ``cache``, by bucket (trash names left out)."""
    found = {}
    for name in sorted(os.listdir(str(cache))):
        if _envdir._UV_CACHE_BUCKET.match(name):
            top = os.path.join(str(cache), name)
            found[name] = sorted(os.path.relpath(os.path.join(d, f), top) for d, _s, fs in os.walk(top) for f in fs)
    return found


def fill_uv_cache(cache):
    make_uv_cache(str(cache))
    for bucket, files in (("archive-v0", ["abc/vllm/__init__.py", "abc/vllm/_C.so", "abc/torch/lib.so"]),
                          ("wheels-v5", ["pypi/vllm/vllm-0.11.0.http", "pypi/torch/torch-2.8.0.http"])):
        for rel in files:
            path = cache / bucket / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("uv's " + rel)


@pytest.mark.parametrize("after", [1, 2, 4])
def test_a_drop_killed_half_way_leaves_no_half_bucket_under_its_name(tmp_path, monkeypatch, after):
    cache = tmp_path / "cache"
    fill_uv_cache(cache)
    whole = bucket_files(cache)
    real_unlink = os.unlink
    done = []

    def unlink(path, *args, **kwargs):
        if len(done) == after:
            raise Killed()
        done.append(path)
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(Killed):
        _envdir.clear_uv_cache(str(cache))
    monkeypatch.setattr(os, "unlink", real_unlink)
    left = bucket_files(cache)
    assert done  # the kill came in the middle of deleting files
    for bucket, files in left.items():
        assert files == whole[bucket], "%s is half deleted under its own name: uv would install from it" % bucket
    # the archives go last: no bucket is left pointing into archives that are gone
    assert "archive-v0" in left or left == {}
    # what was renamed away is uv's, for the next check; the next drop (or build) finishes it
    assert _envdir.cache_dir_problem(str(cache)) is None


def test_what_a_killed_drop_left_is_removed_before_the_next_build(tmp_path, uv_bin):
    cache = tmp_path / "engines" / "vllm" / ".uv-cache"
    fill_uv_cache(cache)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    os.rename(str(cache / "archive-v0"), str(cache / (".archive-v0.trash-%d" % pid)))
    seen = {}
    fake = FakeUv(on={"install": lambda argv: seen.setdefault("names", sorted(os.listdir(str(cache))))})
    flow(tmp_path, uv_bin, fake, keep_cache=True).present()
    assert ".archive-v0.trash-%d" % pid not in seen["names"]
    assert "wheels-v5" in seen["names"]  # kept: keep_cache, and nothing of it was half gone


def test_a_failed_verification_drops_the_cache(tmp_path, uv_bin):
    cache = tmp_path / "engines" / "vllm" / ".uv-cache"
    fake = FakeUv(fail={"verify": (1, "", "ImportError: vllm/_C.so: invalid ELF header\n")},
                  on={"install": lambda argv: fill_uv_cache(cache)})
    with pytest.raises(_errors.VerifyFailed) as exc:
        flow(tmp_path, uv_bin, fake).present()
    assert not cache.exists()
    assert exc.value.msg.endswith("uv's cache %s is removed (unless another install is using it): what was installed "
                                  "from it is not trusted, and the next run downloads everything again, checked "
                                  "against the lock" % cache)


def test_a_failed_verification_keeps_the_cache_with_keep_cache_and_says_so(tmp_path, uv_bin):
    cache = tmp_path / "engines" / "vllm" / ".uv-cache"
    fake = FakeUv(fail={"verify": (1, "", "ImportError: boom\n")}, on={"install": lambda argv: fill_uv_cache(cache)})
    with pytest.raises(_errors.VerifyFailed) as exc:
        flow(tmp_path, uv_bin, fake, keep_cache=True).present()
    assert bucket_files(cache)["archive-v0"]
    assert "uv's cache %s is kept (keep_cache): if it is damaged" % cache in exc.value.msg
