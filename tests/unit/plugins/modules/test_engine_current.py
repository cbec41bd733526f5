"""engine_current: `current` is replaced by a rename (never missing), the previous environment is kept
first when pruning, then the newest; check mode changes nothing; bad input is refused naming it."""

from __future__ import annotations

import json
import os

from ansible_collections.llmfleet.engines.plugins.modules import engine_current
from tests.unit.plugins.lookup_fakes import run_module


def env(root, name, mtime):
    (root / name / "bin").mkdir(parents=True)
    (root / name / "pyvenv.cfg").write_text("home = /usr/bin\n")
    marker = root / name / ".llmfleet-engine.json"
    marker.write_text(json.dumps({"engine": "vllm", "version": name.split("-")[0]}))
    os.utime(marker, (mtime, mtime))


def current(capsys, root, **kw):
    return run_module(engine_current.main, dict({"path": str(root)}, **kw), capsys)[:2]


def test_switch_keeps_the_previous_first_then_the_newest(capsys, tmp_path):
    root = tmp_path / "vllm"
    for i, name in enumerate(["0.18.0-cu129", "0.19.0-cu129", "0.19.1-cu129", "0.20.0-cu129"]):
        env(root, name, 1000 + i)
    os.symlink("0.18.0-cu129", root / "current")
    env(root, "0.21.0-cu129.partial", 900)  # a build in progress, its marker written: never pruned

    code, check = current(capsys, root, target="0.20.0-cu129", keep=2, _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and check["changed"] is True, check
    assert check["diff"] == {"before": "current -> 0.18.0-cu129\n", "after": "current -> 0.20.0-cu129\n"}
    assert check["removed"] == [str(root / "0.19.0-cu129")]
    assert os.readlink(root / "current") == "0.18.0-cu129" and (root / "0.19.0-cu129").is_dir()

    code, result = current(capsys, root, target="0.20.0-cu129", keep=2)
    assert code == 0 and result["changed"] is True and result["previous"] == "0.18.0-cu129", result
    assert os.readlink(root / "current") == "0.20.0-cu129"
    assert sorted(os.listdir(root)) == ["0.18.0-cu129", "0.19.1-cu129", "0.20.0-cu129", "0.21.0-cu129.partial",
                                        "current"]

    code, again = current(capsys, root, target="0.20.0-cu129", previous="0.18.0-cu129", keep=2)
    assert code == 0 and again["changed"] is False and again["removed"] == [], again

    code, zero = current(capsys, root, target="0.20.0-cu129", previous="0.18.0-cu129", keep=0)
    assert code == 0 and zero["changed"] is True and sorted(os.listdir(root)) == [
        "0.20.0-cu129", "0.21.0-cu129.partial", "current"], zero


def test_absent_removes_the_link_only(capsys, tmp_path):
    root = tmp_path / "vllm"
    env(root, "0.20.0-cu129", 1000)
    os.symlink("0.20.0-cu129", root / "current")
    code, result = current(capsys, root, state="absent")
    assert code == 0 and result["changed"] is True and result["current"] == ""
    assert not os.path.lexists(root / "current") and (root / "0.20.0-cu129").is_dir()
    code, again = current(capsys, root, state="absent")
    assert code == 0 and again["changed"] is False


def test_refuses_a_missing_target_a_bad_name_and_a_current_that_is_no_link(capsys, tmp_path):
    root = tmp_path / "vllm"
    env(root, "0.20.0-cu129", 1000)
    code, missing = current(capsys, root, target="0.19.0-cu129")
    assert code == 1 and "0.19.0-cu129" in missing["msg"] and "0.20.0-cu129" in missing["msg"], missing
    (tmp_path / "etc").mkdir()
    code, bad = current(capsys, root, target="../etc")
    assert code == 1 and "parameter target is '../etc', allowed: the name of an environment" in bad["msg"], bad
    assert not os.path.lexists(root / "current")
    (root / "current").mkdir()
    code, nolink = current(capsys, root, target="0.20.0-cu129")
    assert code == 1 and "is not a link" in nolink["msg"] and (root / "current").is_dir(), nolink
