"""uv_engine_env lock=...: main() with patched arguments and a scripted uv; JSON checked."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvlock
from tests.unit.plugins.module_utils.uvenv_fakes import LOCK_0110, FakeUv, module_runner
from tests.unit.plugins.modules.test_uv_engine_env import base, fake, run_module  # noqa: F401  # pylint: disable=unused-import


def test_lock_without_exclude_newer(fake, base, capsys):  # noqa: F811
    args = dict(base, lock=LOCK_0110)
    del args["exclude_newer"]
    code, result = run_module(args, capsys)
    assert code == 0, result.get("msg")
    assert result["changed"] is True
    assert "compile" not in fake.kinds()
    install = fake.call("install")[1]
    assert {"--require-hashes", "--no-deps", "--no-build"} <= set(install)
    assert result["lock_sha256"] == _uvlock.text_sha256(LOCK_0110) == result["marker"]["spec"]["lock_sha256"]
    fake.calls.clear()
    code, again = run_module(args, capsys)
    assert code == 0 and again["changed"] is False and fake.kinds() == ["version"]
    assert again["lock_sha256"] == result["lock_sha256"]


def test_without_a_lock_exclude_newer_is_still_required(fake, base, capsys):  # noqa: F811
    args = dict(base)
    del args["exclude_newer"]
    code, result = run_module(args, capsys)
    assert code == 1
    assert result["msg"] == ("state is present but all of the following are missing: exclude_newer "
                             "(it is needed unless lock is given)")
    assert fake.kinds() == []


def test_lock_sha256_without_the_option_is_the_compiled_locks(fake, base, capsys):  # noqa: F811
    code, result = run_module(base, capsys)
    assert code == 0
    assert result["lock_sha256"] == result["lock"]["sha256"] == result["marker"]["lock"]["sha256"]
    assert len(result["lock_sha256"]) == 64


def test_a_bad_lock_fails_the_task(monkeypatch, base, capsys):  # noqa: F811
    uv = FakeUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(uv))
    code, result = run_module(dict(base, lock=LOCK_0110 + "numpy\n"), capsys)
    assert code == 1 and result["failed"] is True
    assert "line 15: numpy: not pinned to one version with ==" in result["msg"]
    assert result["problems"] == ["line 15: numpy: not pinned to one version with =="]
    assert uv.kinds() == []


@pytest.mark.parametrize("state", ["absent"])
def test_absent_has_lock_sha256_null(fake, base, capsys, state):  # noqa: F811
    code, result = run_module({"path": base["path"], "state": state}, capsys)
    assert code == 0 and result["lock_sha256"] is None
