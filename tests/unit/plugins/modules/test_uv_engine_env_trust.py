"""uv_engine_env and the privilege line: what root installs from, runs or imports is refused, before
anything runs or is written, when another user can change it (the cache and what it holds, uv, the
Python given as a path, the managed Pythons, the environment's directory and all above them).

Cases owned by another user are made with os.chown to 65534 (nobody): those need root.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, FakeUv, module_runner
from tests.unit.plugins.modules.test_uv_engine_env import CUTOFF, run_module

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")


@pytest.fixture
def fake(monkeypatch):
    uv = FakeUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(uv))
    return uv


@pytest.fixture
def base(tmp_path):
    """The role's layout under tmp_path: <root>/uv, <root>/cache/uv, <root>/engines/vllm/<env>."""
    root = tmp_path / "root"
    (root / "uv").mkdir(parents=True)
    uv = root / "uv" / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    return {
        "path": str(root / "engines" / "vllm" / "0.11.0"),
        "engine": "vllm",
        "version": "0.11.0",
        "exclude_newer": CUTOFF,
        "index_url": INDEX,
        "python": "3.11",
        "python_preference": "only-system",
        "uv": str(uv),
        "cache_dir": str(root / "cache" / "uv"),
        "nvidia_smi": str(tmp_path / "no-driver" / "nvidia-smi"),
    }


def uv_cache(cache_dir):
    """A cache as uv leaves it (tag, a bucket with an unpacked wheel), all root's."""
    os.makedirs(os.path.join(cache_dir, "archive-v0", "abc", "vllm"))
    for name in ("CACHEDIR.TAG", os.path.join("archive-v0", "abc", "vllm", "__init__.py")):
        with open(os.path.join(cache_dir, name), "w") as handle:
            handle.write("Signature: 8a477f597d28d172789f06886806bc55\n")
    return cache_dir


def assert_refused(code, result, base, fake, option, place, component, *words):
    assert code == 1 and result["failed"] is True, result.get("msg")
    msg = result["msg"]
    assert msg.startswith("%s %s cannot be trusted: " % (option, place)), msg
    assert "%s (owner " % component in msg
    for word in words:
        assert word in msg, msg
    assert msg.endswith("Nothing was done.")
    assert result["untrusted"]["option"] == option and result["untrusted"]["component"] == component
    # nothing ran (not even uv --version) and nothing was made
    assert fake.kinds() == []
    assert not os.path.exists(base["path"]) and not os.path.exists(base["path"] + ".partial")
    assert not os.path.exists(base["path"] + ".lock")


def test_the_layout_builds(fake, base, capsys):
    """The role's layout (all root's, <root>/cache/uv 0700), with a cache uv left: built."""
    os.makedirs(os.path.dirname(base["cache_dir"]))
    os.chmod(uv_cache(base["cache_dir"]), 0o700)
    code, result = run_module(dict(base, keep_cache=True), capsys)
    assert code == 0 and result["changed"] is True, result.get("msg")


@as_root
def test_planted_file_in_the_cache(fake, base, capsys):
    uv_cache(base["cache_dir"])
    planted = os.path.join(base["cache_dir"], "archive-v0", "abc", "vllm", "planted.py")
    with open(planted, "w") as handle:
        handle.write("import os\n")
    os.chown(planted, NOBODY, -1)
    code, result = run_module(base, capsys)
    assert_refused(code, result, base, fake, "cache_dir", base["cache_dir"], planted,
                   "is owned by nobody", "without checking what it holds against the hashes",
                   "Remove the cache", "rm -rf %s" % base["cache_dir"])
    assert result["untrusted"]["owner"] == "nobody" and result["untrusted"]["mode"] == "0644"
    # refused in check mode too
    code, result = run_module(dict(base, _ansible_check_mode=True), capsys)
    assert code == 1 and "cannot be trusted" in result["msg"]
    assert os.path.exists(planted)


def test_world_writable_file_in_the_cache(fake, base, capsys):
    uv_cache(base["cache_dir"])
    loose = os.path.join(base["cache_dir"], "archive-v0", "abc", "vllm", "__init__.py")
    os.chmod(loose, 0o666)
    code, result = run_module(base, capsys)
    assert_refused(code, result, base, fake, "cache_dir", base["cache_dir"], loose, "is writable by others")


@as_root
def test_cache_parent_owned_by_the_service_user(fake, base, capsys):
    """The old layout: <root>/cache the service user's, root's uv cache in it."""
    cache_parent = os.path.dirname(base["cache_dir"])
    os.makedirs(cache_parent)
    os.chown(cache_parent, NOBODY, -1)
    code, result = run_module(base, capsys)
    assert_refused(code, result, base, fake, "cache_dir", base["cache_dir"], cache_parent,
                   "is owned by nobody, not by root", "chown root %s" % cache_parent, "chmod go-w",
                   "this run, as root, uses it as uv's cache, which uv installs from, and")


def test_cache_under_a_world_writable_directory(fake, base, capsys):
    open_dir = os.path.dirname(base["cache_dir"])
    os.makedirs(open_dir)
    os.chmod(open_dir, 0o777)
    code, result = run_module(base, capsys)
    assert_refused(code, result, base, fake, "cache_dir", base["cache_dir"], open_dir,
                   "is writable by others, who can replace", "chmod go-w %s" % open_dir)


def test_cache_in_a_sticky_directory(fake, base, capsys, tmp_path):
    """Like /tmp: a cache directory of the running user's in a sticky directory cannot be replaced."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "cache").mkdir()
    code, result = run_module(dict(base, cache_dir=str(sticky / "cache")), capsys)
    assert code == 0, result.get("msg")
    # but a name not there yet could be taken first by anyone
    fake.calls.clear()
    code, result = run_module(dict(base, cache_dir=str(sticky / "other"), force=True), capsys)
    assert code == 1 and "anyone can take that name first" in result["msg"]
    assert fake.kinds() == []


def assert_program_refused(code, result, base, fake, value, found, component, why):
    """The refusal of the one resolver of programs root runs (_trust.resolve_program)."""
    assert code == 1 and result["failed"] is True, result.get("msg")
    where = "" if "/" in value else " (found on PATH at %s)" % found
    assert result["msg"].startswith("uv %s%s is not run: %s (owner " % (value, where, component)), result["msg"]
    assert "It is the uv binary uv_engine_env runs as root: it must belong to root" in result["msg"]
    assert why in result["msg"], result["msg"]
    assert result["option"] == "uv" and result["value"] == value and result["program"] == found
    assert result["untrusted"]["option"] == "uv" and result["untrusted"]["component"] == component
    assert fake.kinds() == []
    assert not os.path.exists(base["path"]) and not os.path.exists(base["path"] + ".partial")


def test_writable_uv(fake, base, capsys):
    os.chmod(base["uv"], 0o775)
    code, result = run_module(base, capsys)
    assert_program_refused(code, result, base, fake, base["uv"], base["uv"], base["uv"], "is writable by its group")


@as_root
@pytest.mark.parametrize("given", [False, True], ids=["uv-not-given", "uv-given-as-a-name"])
@pytest.mark.parametrize("check_mode", [False, True])
def test_a_bare_uv_planted_in_a_world_writable_directory_on_path_never_runs(base, capsys, tmp_path, monkeypatch,
                                                                            check_mode, given):
    """Issue #44 (9) in uv_engine_env: uv not given, or given as the name uv (looked up on PATH),
    nobody's uv in a 0777 directory first on PATH. The real runner: a uv that ran leaves its marker."""
    shared = tmp_path / "shared-bin"
    shared.mkdir()
    shared.chmod(0o777)
    marker = str(tmp_path / "ran")
    planted = shared / "uv"
    planted.write_text("#!/bin/sh\ntouch %s\necho 'uv 0.13.8'\n" % marker)
    planted.chmod(0o755)
    os.chown(str(planted), NOBODY, -1)
    monkeypatch.setenv("PATH", "%s:%s" % (shared, os.environ["PATH"]))
    args = dict(base, _ansible_check_mode=check_mode)
    if given:
        args["uv"] = "uv"
    else:
        del args["uv"]
    code, result = run_module(args, capsys)
    assert not os.path.exists(marker), "the planted uv ran as root"

    class Nothing:  # the real runner ran: nothing recorded
        @staticmethod
        def kinds():
            return []
    assert_program_refused(code, result, base, Nothing, "uv", str(planted), str(shared),
                           "is writable by others, who can replace %s in it" % planted)


def test_a_bare_uv_on_path_runs_by_the_absolute_path_judged(fake, base, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "%s:%s" % (os.path.dirname(base["uv"]), os.environ["PATH"]))
    args = dict(base)
    del args["uv"]
    code, result = run_module(args, capsys)
    assert code == 0, result.get("msg")
    assert {call[1][0] for call in fake.calls if call[0] not in ("verify", "gpu")} == {base["uv"]}


def test_python_path_through_a_writable_link(fake, base, capsys, tmp_path):
    """python given as a path: a link in a closed directory to an interpreter in an open one."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (open_dir / "python3").symlink_to("/bin/sh")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(open_dir / "python3")
    python = str(tmp_path / "bin" / "python3")
    code, result = run_module(dict(base, python=python), capsys)
    assert_refused(code, result, base, fake, "python", python, str(open_dir), "the Python it makes the environment from")


def test_managed_pythons(fake, base, capsys, tmp_path):
    pythons = tmp_path / "python"
    pythons.mkdir()
    pythons.chmod(0o757)
    code, result = run_module(dict(base, python_preference="only-managed", python_install_dir=str(pythons)), capsys)
    assert_refused(code, result, base, fake, "python_install_dir", str(pythons), str(pythons), "writable by others")
    # not used with only-system: not read
    code, result = run_module(dict(base, python_install_dir=str(pythons)), capsys)
    assert code == 0, result.get("msg")


def test_environment_parent(fake, base, capsys):
    engines = os.path.dirname(os.path.dirname(base["path"]))
    os.makedirs(engines)
    os.chmod(engines, 0o770)
    code, result = run_module(base, capsys)
    assert_refused(code, result, base, fake, "path", base["path"], engines, "is writable by its group")


def test_absent_is_not_refused(fake, base, capsys):
    engines = os.path.dirname(os.path.dirname(base["path"]))
    os.makedirs(engines)
    os.chmod(engines, 0o777)
    code, result = run_module({"path": base["path"], "state": "absent"}, capsys)
    assert code == 0 and result["changed"] is False


# -- the programs root runs (issue 30, item 3): not only the paths, what is run ----------------------


def assert_not_run(code, result, option, program, component, *words):
    assert code == 1 and result["failed"] is True, result.get("msg")
    msg = result["msg"]
    assert msg.startswith("%s %s cannot be trusted: " % (option, program)), msg
    assert "%s (owner " % component in msg and "It is not run." in msg, msg
    for word in words:
        assert word in msg, msg
    assert result["untrusted"]["component"] == component


@as_root
def test_a_managed_interpreter_another_user_owns_is_not_run(fake, base, capsys, tmp_path):
    """<root>/python is root's and closed, but an interpreter inside it is nobody's: uv would run it
    (python find, venv) as root. Refused before uv runs at all."""
    pythons = tmp_path / "root" / "python"
    bindir = pythons / "cpython-3.11.13-linux-x86_64-gnu" / "bin"
    bindir.mkdir(parents=True)
    interpreter = bindir / "python3.11"
    interpreter.write_text("#!/bin/sh\ntouch %s\n" % (tmp_path / "ran"))
    interpreter.chmod(0o755)
    os.chown(interpreter, NOBODY, NOBODY)
    params = dict(base, python_preference="only-managed", python_install_dir=str(pythons))
    code, result = run_module(params, capsys)
    assert_refused(code, result, base, fake, "python_install_dir", str(pythons), str(interpreter),
                   "the directory of the managed Pythons it runs", "is owned by nobody")
    # root's again: built, from the interpreter uv found
    os.chown(interpreter, 0, 0)
    code, result = run_module(params, capsys)
    assert code == 0 and result["changed"] is True, result.get("msg")


@as_root
def test_a_python_on_path_another_user_owns_is_not_run(fake, base, capsys, tmp_path, monkeypatch):
    """A version request (3.11) with a system preference: uv runs the Pythons on root's PATH to
    find one. One of them is nobody's: refused before anything runs."""
    bindir = tmp_path / "pathbin"
    bindir.mkdir()
    planted = bindir / "python3.11"
    planted.write_text("#!/bin/sh\nexit 0\n")
    planted.chmod(0o755)
    os.chown(planted, NOBODY, NOBODY)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    code, result = run_module(base, capsys)
    assert_refused(code, result, base, fake, "python", str(planted), str(planted),
                   "a Python on PATH that uv runs to find one for 3.11", "is owned by nobody")
    os.chown(planted, 0, 0)
    code, result = run_module(base, capsys)
    assert code == 0 and result["changed"] is True, result.get("msg")


def test_the_interpreter_uv_finds_is_checked_before_uv_venv_runs_it(fake, base, capsys, tmp_path):
    """What `uv python find` answers (a link in a closed directory to a file in a 0777 one) is
    checked, path and real path, before uv venv is given it: venv never runs."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (open_dir / "python3.11").symlink_to("/bin/sh")
    (tmp_path / "bin").mkdir()
    found = tmp_path / "bin" / "python3.11"
    found.symlink_to(open_dir / "python3.11")
    fake.python_found = str(found)
    code, result = run_module(base, capsys)
    assert_not_run(code, result, "python", str(found), str(open_dir),
                   "the Python interpreter uv venv runs", "is writable by others")
    assert fake.kinds() == ["version", "find"]
    assert not os.path.exists(base["path"]) and not os.path.exists(base["path"] + ".partial")


def test_a_verify_command_in_an_open_directory_is_not_run(fake, base, capsys, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    check = open_dir / "check-engine"
    check.write_text("#!/bin/sh\nexit 0\n")
    check.chmod(0o755)
    code, result = run_module(dict(base, verify_command=[str(check), "--quick"]), capsys)
    assert_refused(code, result, base, fake, "verify_command", str(check), str(open_dir),
                   "the program verify_command runs", "is writable by others")


@as_root
def test_a_verify_command_found_on_path_is_checked(fake, base, capsys, tmp_path, monkeypatch):
    """A bare name is resolved through PATH as the command would be (the environment's bin/ first):
    nobody's file there is refused, before anything runs."""
    bindir = tmp_path / "pathbin"
    bindir.mkdir()
    check = bindir / "check-engine"
    check.write_text("#!/bin/sh\nexit 0\n")
    check.chmod(0o755)
    os.chown(check, NOBODY, NOBODY)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    code, result = run_module(dict(base, verify_command=["check-engine"]), capsys)
    assert_refused(code, result, base, fake, "verify_command", str(check), str(check), "is owned by nobody")
    os.chown(check, 0, 0)
    code, result = run_module(dict(base, verify_command=["check-engine"]), capsys)
    assert code == 0 and result["changed"] is True, result.get("msg")
    assert fake.calls[-1][1][0] == str(check)


def test_a_link_planted_at_the_uv_cache_lock_is_refused(fake, base, capsys, tmp_path):
    """<root>/cache/uv.lock as a link to a file elsewhere: root would create (or lock) that file.
    The lock is opened without following it; the run fails naming it, the target is not made."""
    os.makedirs(os.path.dirname(base["cache_dir"]))
    outside = tmp_path / "etc" / "nologin"
    outside.parent.mkdir()
    lock = base["cache_dir"] + ".lock"
    os.symlink(str(outside), lock)
    code, result = run_module(base, capsys)
    assert code == 1 and "the lock file %s is a symbolic link (to %s)" % (lock, outside) in result["msg"], result
    assert not os.path.lexists(outside)
    assert "venv" not in fake.kinds() and not os.path.exists(base["path"])
    # an existing file behind the link is not truncated either
    outside.write_text("keep\n")
    code, result = run_module(base, capsys)
    assert code == 1 and outside.read_text() == "keep\n"


def test_a_verify_command_known_only_once_built_is_checked_before_it_runs(fake, base, capsys, tmp_path):
    """A path relative to the new environment (its working directory) can only be judged once it is
    built: checked just before it would run, refused, and nothing is switched in."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    check = open_dir / "check-engine"
    check.write_text("#!/bin/sh\nexit 0\n")
    check.chmod(0o755)
    relative = os.path.relpath(str(check), base["path"] + ".partial")
    code, result = run_module(dict(base, verify_command=[relative]), capsys)
    program = os.path.join(base["path"] + ".partial", relative)
    assert_not_run(code, result, "verify_command", program, str(open_dir), "the program verify_command runs")
    assert fake.kinds() == ["version", "find", "venv", "compile", "install"]
    assert not os.path.exists(base["path"]) and not os.path.exists(base["path"] + ".partial")


@as_root
def test_an_nvidia_smi_another_user_owns_is_refused_before_anything_runs(fake, base, capsys, tmp_path):
    """Issue #44 (10): the GPU step's nvidia-smi runs as root after the build; it is judged before the
    build (and again where it runs, _gpu.gather_facts)."""
    (tmp_path / "drv").mkdir()
    smi = tmp_path / "drv" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    os.chown(str(smi), NOBODY, -1)
    code, result = run_module(dict(base, nvidia_smi=str(smi)), capsys)
    assert_refused(code, result, base, fake, "nvidia_smi", str(smi), str(smi), "the nvidia-smi the GPU check runs",
                   "is owned by nobody")
    # not asked for: a CPU build, or no GPU check
    for change in ({"gpu_check": False}, {"build": "cpu", "gpu_check": True}):
        code, result = run_module(dict(base, nvidia_smi=str(smi), **change), capsys)
        assert result.get("untrusted") is None, result.get("msg")
