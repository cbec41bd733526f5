"""The programs engine_ready and engine_service_survey run as root (systemctl, journalctl) are looked up
once, judged (``_trust.resolve_program``) and run by their absolute path: a ``systemctl`` or
``journalctl`` that another user could have put first on PATH is never run, and the refusal names the
program, the path found and why (issue #44, F)."""

from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import engine_ready, engine_service_survey
from tests.unit.plugins.lookup_fakes import run_module
from tests.unit.plugins.vllm_fakes import FakeUnit, FakeVllm

PLANTED = "#!/bin/sh\necho planted >> '%s'\necho ActiveState=active\nexit 0\n"


def plant(tmp_path, monkeypatch, names, path_after=""):
    """``names`` as scripts that would write a marker, in a directory anyone may write (0777, not sticky),
    put first on PATH; returns (the directory, the marker)."""
    hostile = tmp_path / "hostile-bin"
    hostile.mkdir()
    marker = tmp_path / "ran"
    for name in names:
        script = hostile / name
        script.write_text(PLANTED % marker)
        script.chmod(0o755)
    hostile.chmod(0o777)
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in (str(hostile), path_after, os.environ["PATH"]) if p))
    return hostile, marker


@pytest.mark.parametrize("planted", [("systemctl", "journalctl"), ("journalctl",)])
def test_engine_ready_never_runs_a_planted_program(tmp_path, monkeypatch, capsys, planted):
    unit = FakeUnit(tmp_path)  # a trusted systemctl and journalctl, after the planted ones
    unit.set(active="failed", sub="failed", result="exit-code")  # the gate would read the journal
    hostile, marker = plant(tmp_path, monkeypatch, planted, path_after=str(unit.bin))
    code, result, _out = run_module(engine_ready.main, dict(
        url=FakeVllm().url, model="m", unit="vllm.service", wait=0), capsys)
    assert not marker.exists(), "the planted program ran"
    assert code == 1 and result["failed"] is True
    name = planted[0]
    assert result["msg"].startswith("%s %s (found on PATH at %s/%s) is not run: %s " % (
        name, name, hostile, name, hostile)), result["msg"]
    assert "is writable by others, who can replace %s/%s in it" % (hostile, name) in result["msg"]
    assert result["untrusted"]["component"] == str(hostile) and result["untrusted"]["option"] == name
    assert unit.calls() == []  # nothing ran once one program was refused


def test_engine_service_survey_never_runs_a_planted_systemctl(tmp_path, monkeypatch, capsys):
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / "llmfleet-vllm-a.service").write_text("[Unit]\n")
    hostile, marker = plant(tmp_path, monkeypatch, ["systemctl"])
    # check mode: the look reaches systemctl show once the files match
    code, result, _out = run_module(engine_service_survey.main, dict(
        units=[dict(unit="llmfleet-vllm-a.service", name="a", text="[Unit]\n", url="http://127.0.0.1:9/",
                    environment_file=str(tmp_path / "missing.env"), secret_sha256=hashlib.sha256(b"").hexdigest())],
        unit_dir=str(unit_dir), lock=str(tmp_path / "lock"), record_dir=str(tmp_path / "records"),
        environment="e", _ansible_check_mode=True), capsys)
    assert not marker.exists(), "the planted systemctl ran"
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("systemctl systemctl (found on PATH at %s/systemctl) is not run: " % hostile)
    assert "is writable by others" in result["msg"]
    assert result["untrusted"]["path"] == "%s/systemctl" % hostile


def test_survey_runs_the_judged_path(tmp_path, monkeypatch, capsys):
    """A trusted systemctl found on PATH is run by its absolute path (the file judged is the file run)."""
    unit = FakeUnit(tmp_path).on_path(monkeypatch)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / "llmfleet-vllm-a.service").write_text("[Unit]\n")
    seen = []
    real_look = engine_service_survey.Look

    def look(params, run, systemctl, *args, **kw):
        seen.append((systemctl, kw.get("journalctl")))
        return real_look(params, run, systemctl, *args, **kw)

    monkeypatch.setattr(engine_service_survey, "Look", look)
    code, result, _out = run_module(engine_service_survey.main, dict(
        units=[dict(unit="llmfleet-vllm-a.service", name="a", text="[Unit]\n", url="http://127.0.0.1:9/",
                    environment_file=str(tmp_path / "missing.env"), secret_sha256=hashlib.sha256(b"").hexdigest())],
        unit_dir=str(unit_dir), lock=str(tmp_path / "lock"), record_dir=str(tmp_path / "records"),
        environment="e", _ansible_check_mode=True), capsys)
    assert code == 0, result
    assert seen == [(str(unit.bin / "systemctl"), str(unit.bin / "journalctl"))]
    assert unit.calls()[0].startswith("systemctl show ")
