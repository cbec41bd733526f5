"""The hostile service user of the molecule serve scenario (tests/fixtures/hostile_user.py): it
really plants what it says, puts everything back, and its judge sees what a followed link does."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "hostile_user.py"


def _load():
    spec = importlib.util.spec_from_file_location("hostile_user", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plant_swaps_links_files_and_the_directory_and_restore_puts_it_back(tmp_path):
    work = tmp_path / "serve" / "tiny"
    work.mkdir(parents=True)
    (work / "kept").write_text("the service's own file\n")
    target = tmp_path / "root-only"
    target.mkdir()
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "plant", "--state", str(state), "--seconds", "30",
                             "--path", str(work), "--target", str(target)])
    seen = set()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not {"link", "file", "dir"} <= seen:
            try:
                kind = "link" if os.path.islink(work) else "file" if os.path.isfile(work) else \
                    "dir" if os.path.isdir(work) else "absent"
            except OSError:
                continue
            seen.add(kind)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    assert {"link", "file", "dir"} <= seen, seen
    record = json.loads((state / "plant.json").read_text())
    assert record["planted"] > 0 and record["rounds"] > 0
    out = subprocess.run([sys.executable, str(SCRIPT), "restore", "--state", str(state), "--path", str(work)],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out)["planted"] == record["planted"]
    assert work.is_dir() and not work.is_symlink()
    assert (work / "kept").read_text() == "the service's own file\n"
    assert sorted(p.name for p in work.parent.iterdir()) == ["tiny"]
    assert list(target.iterdir()) == []


def test_the_judge_sees_a_handed_over_directory_a_new_link_a_writable_file_and_the_sentinel(tmp_path):
    hostile = _load()
    top = tmp_path / "etc"
    (top / "units").mkdir(parents=True)
    (top / "units" / "a.service").write_text("[Unit]\n")
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("root only\n")
    os.chmod(sentinel, 0o600)
    before = hostile.inventory([str(top)], str(sentinel), [str(tmp_path)])
    uid = os.getuid()
    assert hostile.compare(before, hostile.inventory([str(top)], str(sentinel), [str(tmp_path)]), uid + 1) == []

    os.chmod(top / "units", 0o777)
    (top / "units" / "planted").symlink_to("/etc")
    (top / "units" / "b.service").write_text("[Unit]\n")
    os.chmod(top / "units" / "b.service", 0o666)
    sentinel.write_text("read by someone\n")
    problems = hostile.compare(before, hostile.inventory([str(top)], str(sentinel), [str(tmp_path)]), uid + 1)
    text = "\n".join(problems)
    assert "%s was" % (top / "units") in text
    assert "new link %s -> /etc" % (top / "units" / "planted") in text
    assert "new %s" % (top / "units" / "b.service") in text and "mode 0666" in text
    assert "sentinel changed" in text


def test_a_removed_entry_and_a_repointed_link_are_what_root_may_do(tmp_path):
    hostile = _load()
    top = tmp_path / "engines"
    (top / "old").mkdir(parents=True)
    (top / "new").mkdir()
    (top / "current").symlink_to("old")
    before = hostile.inventory([str(top)])
    (top / "old").rmdir()
    (top / "current").unlink()
    (top / "current").symlink_to("new")
    assert hostile.compare(before, hostile.inventory([str(top)]), os.getuid() + 1) == []
