"""uv_engine_env share_files with the real uv against the fake upstream: vLLM 0.20.0 (cu13), then
0.15.1 (cu129, on PyPI) beside it. The second environment's files identical to the first's are
hard links to them (``du`` of both together counts them once), and removing the first leaves the
second whole."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from tests.system.test_uv_engine_env_credentials import module_args, run_module

pytestmark = pytest.mark.integration


def du(*paths):
    out = subprocess.run(["du", "-s", "-B1", "-c"] + [str(p) for p in paths], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def regular_files(root):
    for directory, _dirs, names in os.walk(str(root)):
        for name in names:
            st = os.lstat(os.path.join(directory, name))
            if stat.S_ISREG(st.st_mode):
                yield os.path.relpath(os.path.join(directory, name), str(root)), st


def build(tmp_path, upstream, path, version, cutoff, **extra):
    result, _out = run_module(tmp_path, module_args(path, version=version, exclude_newer=cutoff,
                                                    index_url=upstream.url + "/simple", **extra))
    assert result.get("failed") is not True and result["changed"] is True, result.get("msg")
    return result


def test_a_second_version_links_what_it_shares_and_outlives_the_first(upstream, tmp_path):
    root = tmp_path / "engines" / "vllm"
    first, second = root / "0.20.0-cu13", root / "0.15.1-cu129"
    build(tmp_path, upstream, first, "0.20.0", "2026-06-11T12:00:00Z", build="cu13")
    result = build(tmp_path, upstream, second, "0.15.1", "2026-02-11T12:00:00Z", build="cu129")
    shared = result["shared"]
    assert shared["from"] == ["0.20.0-cu13"] and shared["failed"] == 0 and shared["files"] > 0
    names = [s["name"] for s in result["steps"]]
    assert names.index("install") < names.index("share") < names.index("verify")
    inodes = {st.st_ino: rel for rel, st in regular_files(first)}
    linked = [(rel, st) for rel, st in regular_files(second) if st.st_nlink == 2]
    assert len(linked) == shared["files"] and sum(st.st_size for _rel, st in linked) == shared["bytes"]
    assert all(inodes.get(st.st_ino) == rel for rel, st in linked)
    assert du(first, second) < du(first) + du(second)

    # the first one removed: the second's files are all there, and it still imports its engine
    before = {rel: (second / rel).read_bytes() for rel, _st in linked}
    result, _out = run_module(tmp_path, {"path": str(first), "state": "absent"})
    assert result["changed"] is True and not first.exists()
    assert {rel: (second / rel).read_bytes() for rel in before} == before
    assert all(os.stat(str(second / rel)).st_nlink == 1 for rel in before)
    imported = subprocess.run([str(second / "bin" / "python"), "-I", "-c", "import vllm; print(vllm.__version__)"],
                              capture_output=True, text=True, check=False)
    assert imported.returncode == 0 and imported.stdout.strip() == "0.15.1", imported.stderr

    # share_files false: a third environment beside the second links nothing
    third = root / "0.15.1-cu129-copy"
    result = build(tmp_path, upstream, third, "0.15.1", "2026-02-11T12:00:00Z", build="cu129", share_files=False)
    assert "shared" not in result
    assert all(st.st_nlink == 1 for _rel, st in regular_files(third))
