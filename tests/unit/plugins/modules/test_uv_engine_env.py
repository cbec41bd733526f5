"""uv_engine_env: main() with patched arguments and a scripted uv behind run_command; JSON checked."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _pathlock
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.modules import uv_engine_env
from tests.unit.plugins.lookup_fakes import warnings_text
from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, FakeUv, module_runner

CUTOFF = "2025-10-03T20:10:00Z"


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            uv_engine_env.main()
    out = capsys.readouterr().out
    return exc.value.code, json.loads(out)


@pytest.fixture
def fake(monkeypatch):
    uv = FakeUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(uv))
    monkeypatch.setenv("UV_INDEX_URL", "http://not-this-one/simple")
    return uv


@pytest.fixture
def base(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    return {
        "path": str(tmp_path / "engines" / "vllm" / "0.11.0"),
        "engine": "vllm",
        "version": "0.11.0",
        "exclude_newer": CUTOFF,
        "index_url": INDEX,
        "python": "3.11",
        "python_preference": "only-system",
        "uv": str(uv),
        "nvidia_smi": str(tmp_path / "no-driver" / "nvidia-smi"),
    }


def test_install_then_rerun(fake, base, capsys):
    code, first = run_module(base, capsys)
    assert code == 0, first.get("msg")
    assert first["changed"] is True
    assert set(first) >= {"path", "marker", "lock", "steps", "gpu", "changed"}
    assert first["path"] == base["path"]
    assert first["lock"]["path"] == os.path.join(base["path"], "llmfleet-requirements.txt")
    assert first["lock"]["packages"] == {"llmfleet-fakedep": "1.1.0", "torch": "2.8.0", "vllm": "0.11.0"}
    assert first["gpu"]["skipped"] is True and "does not exist" in first["gpu"]["reason"]
    assert first["marker"]["spec"]["python_preference"] == "only-system"
    # the node's UV_INDEX_URL did not reach uv
    assert all("UV_INDEX_URL" not in env for _k, _a, _d, env, _t in fake.calls)
    assert fake.call("compile")[3]["UV_NO_CONFIG"] == "1"

    fake.calls.clear()
    code, second = run_module(base, capsys)
    assert code == 0 and second["changed"] is False
    assert fake.kinds() == ["version"]
    assert second["marker"] == first["marker"] and second["lock"] == first["lock"]
    assert second["gpu"] == first["gpu"]
    assert "diff" not in second


def test_check_mode_and_diff(fake, base, capsys, tmp_path):
    code, result = run_module(dict(base, _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert code == 0 and result["changed"] is True
    assert not (tmp_path / "engines").exists()
    assert result["diff"]["before"] == ""
    assert json.loads(result["diff"]["after"])["spec"]["exclude_newer"] == CUTOFF
    assert fake.kinds() == ["version"]


def test_absent(fake, base, capsys):
    run_module(base, capsys)
    absent = {"path": base["path"], "state": "absent"}
    code, result = run_module(absent, capsys)
    assert code == 0 and result["changed"] is True and result["removed"] == [base["path"]]
    code, result = run_module(absent, capsys)
    assert code == 0 and result["changed"] is False


FAILURES = [
    # (id, args change, scripted uv change, message pieces, failed_step)
    ("no-exclude-newer", {"exclude_newer": None}, {}, ["state is present but all of the following are missing: "
                                                       "exclude_newer"], None),
    ("bad-wheel-sha", {"wheel": {"url": "http://h/vllm-0.11.0-py3-none-any.whl", "sha256": "abc"}}, {},
     ["wheel.sha256 must be 64 hex digits"], None),
    ("bad-index-strategy", {"index_strategy": "fastest"}, {}, ["value of index_strategy must be one of"], None),
    ("uv-missing", {"uv": "/nonexistent/uv"}, {},
     ["uv /nonexistent/uv is not run: /nonexistent/uv does not exist. It is the uv binary uv_engine_env runs as"], None),
    ("not-uv", {}, {"uv_version": "pip 24.2"}, ["--version did not answer like uv"], None),
    ("unresolvable", {"version": "9.9.9"},
     {"fail": {"compile": (1, "", "  x No solution found when resolving dependencies:\n"
                                  "  `-> Because there is no version of vllm==9.9.9 and you require vllm==9.9.9, "
                                  "we can conclude that your requirements are unsatisfiable.\n")}},
     ["resolving vllm==9.9.9 as of " + CUTOFF + " failed (uv exit 1)",
      "No solution found when resolving dependencies: / `-> Because there is no version of vllm==9.9.9"],
     "resolve"),
]


@pytest.mark.parametrize("change, uv_change, pieces, step", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failures(monkeypatch, base, capsys, tmp_path, change, uv_change, pieces, step):
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(FakeUv(**uv_change)))
    args = dict(base, **change)
    args = {k: v for k, v in args.items() if v is not None}
    code, result = run_module(args, capsys)
    assert code == 1 and result["failed"] is True
    for piece in pieces:
        assert piece in result["msg"]
    assert result.get("failed_step") == step
    assert not os.path.exists(base["path"] + ".partial")
    assert not os.path.exists(base["path"])


def test_failure_returns_uv_output_and_steps(monkeypatch, base, capsys):
    stderr = "".join("line %d\n" % i for i in range(1, 10))
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(FakeUv(fail={"install": (1, "", stderr)})))
    code, result = run_module(base, capsys)
    assert code == 1
    assert result["uv_output"] == "line 4 / line 5 / line 6 / line 7 / line 8 / line 9"
    assert [s["name"] for s in result["steps"]] == ["check", "prepare", "venv", "resolve", "install"]
    assert result["cmd"][1:3] == ["pip", "install"]


def test_lock_timeout(fake, base, capsys):
    os.makedirs(os.path.dirname(base["path"]))
    holder = _pathlock.PathLock(base["path"] + ".lock", 1, about="uv_engine_env state=present, vllm 0.11.0")
    holder.acquire()
    with open(base["path"] + ".progress.json", "w") as handle:
        json.dump({"pid": os.getpid(), "engine": "vllm", "version": "0.11.0", "step": "install",
                   "step_started": "2026-01-01T00:00:00Z"}, handle)
    started = holder.record["started"]
    try:
        code, result = run_module(dict(base, lock_timeout=1), capsys)
    finally:
        holder.release()
    assert code == 1
    assert result["msg"] == (
        "another run holds %s.lock: pid %d (uv_engine_env state=present, vllm 0.11.0, since %s; step install "
        "since 2026-01-01T00:00:00Z); waited 1 s (lock_timeout). Let it finish, or raise lock_timeout."
        % (base["path"], os.getpid(), started))
    assert (result["holder"]["pid"], result["holder"]["alive"], result["holder"]["step"]) == (os.getpid(), True, "install")
    assert fake.kinds() == ["version"]


@pytest.fixture
def fresh_warnings(monkeypatch):
    """module.warn() collects into a process-wide dict: this test's own, module-side."""
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings

    monkeypatch.setattr(warnings, "_global_warnings", {})
    monkeypatch.setattr(_internal, "is_controller", False)


def test_check_mode_does_not_wait_for_a_running_build(fake, base, capsys, fresh_warnings):
    """A build holds the lock: check mode answers at once from the disk, names the build, warns."""
    os.makedirs(base["path"] + ".partial")  # the running build's, not debris
    holder = _pathlock.PathLock(base["path"] + ".lock", 1, about="uv_engine_env state=present, vllm 0.11.0")
    holder.acquire()
    with open(base["path"] + ".progress.json", "w") as handle:
        json.dump({"pid": os.getpid(), "step": "install", "step_started": "2026-01-01T00:00:00Z"}, handle)
    try:
        code, result = run_module(dict(base, lock_timeout=3600, _ansible_check_mode=True), capsys)
    finally:
        holder.release()
    assert code == 0 and "failed" not in result
    assert result["changed"] is True and result["reasons"] == ["no environment at %s" % base["path"]]
    assert result["debris"] == []
    assert result["steps"][0]["seconds"] < 30
    assert (result["holder"]["pid"], result["holder"]["step"]) == (os.getpid(), "install")
    assert result["msg"].startswith("would build vllm 0.11.0 at %s: no environment at %s. Judged from what is on "
                                    "disk now, without waiting: another run holds %s.lock: pid %d ("
                                    % (base["path"], base["path"], base["path"], os.getpid()))
    assert warnings_text(result) == [result["msg"]]
    assert os.path.isdir(base["path"] + ".partial") and not os.path.exists(base["path"])


def test_gpu_check_required_fails_where_no_driver_answers(fake, base, capsys):
    code, result = run_module(dict(base, gpu_check="required"), capsys)
    assert code == 1 and result["failed"] is True
    assert "is not switched in: gpu_check is required" in result["msg"]
    assert "%s does not exist" % base["nvidia_smi"] in result["msg"]
    assert result["failed_step"] == "gpu" and result["gpu"]["skipped"] is True
    assert not os.path.exists(base["path"]) and not os.path.exists(base["path"] + ".partial")


@pytest.mark.parametrize("value, ok", [(True, True), ("yes", True), (False, True), ("sometimes", False)])
def test_gpu_check_takes_a_boolean_or_required(fake, base, capsys, value, ok):
    code, result = run_module(dict(base, gpu_check=value), capsys)
    assert (code == 0) is ok, result
    if not ok:
        assert result["msg"] == "gpu_check must be true, false or required, not 'sometimes'"


def test_a_leftover_that_is_not_ours_is_a_warning(fake, base, capsys):
    os.makedirs(base["path"] + ".old")
    open(os.path.join(base["path"] + ".old", "precious.txt"), "w").close()
    code, result = run_module({"path": base["path"], "state": "absent"}, capsys)
    assert code == 0 and result["changed"] is False
    assert "0.11.0.old is not a leftover of this module" in json.dumps(result["warnings"])
    assert os.path.exists(os.path.join(base["path"] + ".old", "precious.txt"))


def test_a_file_error_is_a_failure_naming_the_path(fake, base, capsys, monkeypatch):
    from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvenv

    def start_partial(partial, path):
        raise PermissionError(13, "Permission denied", partial)

    monkeypatch.setattr(_uvenv, "start_partial", start_partial)
    code, result = run_module(base, capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"] == "uv_engine_env at %s: [Errno 13] Permission denied: '%s.partial'" % (base["path"], base["path"])
