"""uv_fleet_lock: main() with patched arguments and a scripted uv behind the runner; JSON checked."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _fleetlock
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvlock
from ansible_collections.llmfleet.engines.plugins.modules import uv_fleet_lock
from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, LOCK_0110, LOCK_0200_FALLBACK, FakeUv, module_runner

CUTOFF = "2025-10-03T20:10:00Z"
PYLOCK = 'lock-version = "1.0"\ncreated-by = "uv"\n'


class FleetUv(FakeUv):
    """FakeUv whose compile also writes a pylock.toml when asked for that format."""

    def __call__(self, argv, data=None, env=None, cwd=None, timeout=None):
        argv = [str(a) for a in argv]
        if argv[1:3] == ["pip", "compile"] and "--format" in argv:
            self.calls.append(("pylock", argv, data, dict(env or {}), timeout))
            with open(argv[argv.index("--output-file") + 1], "w") as handle:
                handle.write(PYLOCK)
            return _proc.CommandResult(0, "", "")
        return super().__call__(argv, data=data, env=env, cwd=cwd, timeout=timeout)


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            uv_fleet_lock.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def fake(monkeypatch):
    uv = FleetUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(uv))
    monkeypatch.setenv("UV_INDEX_URL", "http://not-this-one/simple")
    return uv


@pytest.fixture
def base(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    return {
        "dest": str(tmp_path / "locks" / "vllm-0.11.0-x86_64.txt"),
        "engine": "vllm",
        "version": "0.11.0",
        "exclude_newer": CUTOFF,
        "index_url": INDEX,
        "python_version": "3.12",
        "python_platform": "aarch64-manylinux_2_28",
        "uv": str(uv),
    }


def test_compile_then_up_to_date(fake, base, capsys, tmp_path):
    code, result = run_module(base, capsys)
    assert code == 0, result.get("msg")
    assert result["changed"] is True
    assert fake.kinds() == ["version", "compile", "pylock"]
    _kind, argv, data, env, _timeout = fake.call("compile")
    assert data == "vllm==0.11.0"
    assert argv[1:3] == ["pip", "compile"]
    for flag in ("--generate-hashes", "--no-build", "--emit-index-annotation"):
        assert flag in argv
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert argv[argv.index("--python-platform") + 1] == "aarch64-manylinux_2_28"
    assert argv[argv.index("--exclude-newer") + 1] == CUTOFF
    assert argv[argv.index("--default-index") + 1] == INDEX
    assert "--python" not in argv and "--python" not in fake.call("pylock")[1]
    assert argv[-1] == "-"
    assert env["UV_PYTHON_DOWNLOADS"] == "never" and env["UV_NO_CONFIG"] == "1" and "UV_INDEX_URL" not in env
    pylock_argv = fake.call("pylock")[1]
    assert pylock_argv[pylock_argv.index("--format") + 1] == "pylock.toml"
    assert os.path.basename(pylock_argv[pylock_argv.index("--output-file") + 1]) == "pylock.toml"
    assert pylock_argv[-1] == argv[argv.index("--output-file") + 1]  # from the checked lock: the same pins
    dest = tmp_path / "locks" / "vllm-0.11.0-x86_64.txt"
    assert dest.read_text() == LOCK_0110
    assert result["path"] == str(dest)
    assert result["lock_sha256"] == _uvlock.text_sha256(LOCK_0110)
    assert result["packages"] == {"llmfleet-fakedep": "1.1.0", "torch": "2.8.0", "vllm": "0.11.0"}
    assert result["pylock_path"] == str(tmp_path / "locks" / "pylock.vllm-0_11_0-x86_64.toml")
    assert (tmp_path / "locks" / "pylock.vllm-0_11_0-x86_64.toml").read_text() == PYLOCK
    assert result["cmd"][:3] == [base["uv"], "pip", "compile"]
    assert sorted(os.listdir(str(tmp_path / "locks"))) == [
        "pylock.vllm-0_11_0-x86_64.toml", "vllm-0.11.0-x86_64.txt", "vllm-0.11.0-x86_64.txt.json"]
    state = json.loads((tmp_path / "locks" / "vllm-0.11.0-x86_64.txt.json").read_text())
    assert state["lock_sha256"] == result["lock_sha256"] and state["inputs"]["python_platform"] == "aarch64-manylinux_2_28"

    fake.calls.clear()
    code, again = run_module(base, capsys)
    assert code == 0 and again["changed"] is False
    assert fake.kinds() == ["version"]
    assert again["lock_sha256"] == result["lock_sha256"] and again["packages"] == result["packages"]
    assert again["cmd"] is None


def test_check_mode_compiles_nothing(fake, base, capsys, tmp_path):
    code, result = run_module(dict(base, _ansible_check_mode=True), capsys)
    assert code == 0 and result["changed"] is True
    assert result["reasons"] == ["no lock at %s" % base["dest"]]
    assert fake.kinds() == ["version"]
    assert not (tmp_path / "locks").exists()
    run_module(base, capsys)
    fake.calls.clear()
    code, result = run_module(dict(base, _ansible_check_mode=True), capsys)
    assert code == 0 and result["changed"] is False and fake.kinds() == ["version"]
    code, result = run_module(dict(base, python_platform="x86_64-manylinux_2_28", _ansible_check_mode=True), capsys)
    assert code == 0 and result["changed"] is True
    assert result["reasons"] == ["the inputs changed: python_platform"]
    assert "compile" not in fake.kinds()


@pytest.mark.parametrize("change, reason", [
    ({"python_version": "3.11"}, "the inputs changed: python_version"),
    ({"exclude_newer": "2025-10-04T00:00:00Z"}, "the inputs changed: exclude_newer"),
    ({"requirements": ["x==1"]}, "the inputs changed: requirements"),
    ({"force": True}, "force is set"),
])
def test_a_changed_input_compiles_again(fake, base, capsys, change, reason):
    run_module(base, capsys)
    fake.calls.clear()
    code, result = run_module(dict(base, **change), capsys)
    assert code == 0 and result["changed"] is True and result["reasons"] == [reason]
    assert "compile" in fake.kinds()


def test_an_edited_lock_or_a_lost_pylock_compiles_again(fake, base, capsys, tmp_path):
    run_module(base, capsys)
    with open(base["dest"], "a") as handle:
        handle.write("evil==1 --hash=sha256:" + "e" * 64 + "\n")
    code, result = run_module(base, capsys)
    assert result["reasons"] == ["%s was changed since it was compiled" % base["dest"]]
    assert open(base["dest"]).read() == LOCK_0110
    os.unlink(result["pylock_path"])
    code, result = run_module(base, capsys)
    assert result["changed"] is True and "is missing or was changed" in result["reasons"][0]


def test_without_pylock(fake, base, capsys, tmp_path):
    code, result = run_module(dict(base, pylock=False), capsys)
    assert code == 0 and result["pylock_path"] is None
    assert fake.kinds() == ["version", "compile"]
    assert sorted(os.listdir(str(tmp_path / "locks"))) == ["vllm-0.11.0-x86_64.txt", "vllm-0.11.0-x86_64.txt.json"]


FAILURES = [
    # (id, args change, lock compiled, message piece)
    ("expect", {"expect": {"torch": "+cu129"}}, LOCK_0110,
     "the lock compiled for vllm 0.11.0 for aarch64-manylinux_2_28, Python 3.12 is not what was asked: resolved "
     "torch 2.8.0 from http://idx.test/simple (via vllm), but expect wants the local label +cu129. Nothing was "
     "written to "),
    ("version", {"version": "0.11.1"}, LOCK_0110, "resolved vllm 0.11.0 from http://idx.test/simple, not 0.11.1"),
    ("unhashed", {}, "vllm==0.11.0\n", "line 1: vllm==0.11.0: no --hash=sha256:"),
    ("python_version", {"python_version": "py312"}, LOCK_0110,
     "python_version must be the nodes' Python as X.Y (for example 3.12), got 'py312'"),
    ("python_platform", {"python_platform": "x86_64 linux"}, LOCK_0110, "python_platform must be one of uv's"),
]


@pytest.mark.parametrize("change, lock, piece", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failures_write_nothing(monkeypatch, base, capsys, tmp_path, change, lock, piece):
    uv = FleetUv(lock=lock)
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(uv))
    code, result = run_module(dict(base, **change), capsys)
    assert code == 1 and result["failed"] is True
    assert piece in result["msg"]
    assert "pylock" not in uv.kinds()
    assert not (tmp_path / "locks").exists() or os.listdir(str(tmp_path / "locks")) == []


def test_no_wheel_for_the_platform(monkeypatch, base, capsys):
    err = ("  x No solution found when resolving dependencies:\n  `-> Because vllm==0.11.0 has no wheels with a "
           "matching platform tag (e.g., `manylinux_2_28_aarch64`) and you require vllm==0.11.0, we can conclude "
           "that your requirements are unsatisfiable.\n")
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(FleetUv(fail={"compile": (1, "", err)})))
    code, result = run_module(base, capsys)
    assert code == 1
    assert "vllm==0.11.0 has no wheel for aarch64-manylinux_2_28 (Python 3.12), and nothing is built from source" \
        in result["msg"]
    assert result["cmd"][1:3] == ["pip", "compile"]


def test_credentials_never_in_files_or_results(fake, base, capsys, tmp_path):
    index = "http://alice:s3cret-Token@idx.test/simple"
    code, result = run_module(dict(base, index_url=index, allow_plain_http_password=True), capsys)
    assert code == 0, result.get("msg")
    _kind, argv, _data, env, _timeout = fake.call("compile")
    assert "s3cret-Token" not in " ".join(argv)
    assert "llmfleet-default=http://idx.test/simple" in argv
    assert env["UV_INDEX_LLMFLEET_DEFAULT_PASSWORD"] == "s3cret-Token"
    assert "s3cret-Token" not in json.dumps(result)
    for name in os.listdir(str(tmp_path / "locks")):
        assert "s3cret-Token" not in (tmp_path / "locks" / name).read_text()


def test_pylock_path():
    assert _fleetlock.pylock_path("/l/vllm-0.20.0-cu129-aarch64-py312.txt") == \
        "/l/pylock.vllm-0_20_0-cu129-aarch64-py312.toml"
    assert _fleetlock.pylock_path("/l/fleet") == "/l/pylock.fleet.toml"


def test_the_fallback_torch_is_refused(monkeypatch, base, capsys):
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(FleetUv(lock=LOCK_0200_FALLBACK)))
    wheel = {"url": "http://gh.test/download/v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl",
             "sha256": "3" * 64}
    code, result = run_module(dict(base, version="0.20.0", wheel=wheel, expect={"torch": "+cu129"}), capsys)
    assert code == 1 and result["packages"]["torch"] == "2.11.0"
