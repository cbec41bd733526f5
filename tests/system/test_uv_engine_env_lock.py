"""uv_engine_env lock=... with the real uv against the fake upstream (issue 12): a lock compiled
once is installed elsewhere with nothing resolved. The fake upstream logs every request: the
second build asks for files only, never for an index page."""

from __future__ import annotations

import pytest

from tests.system.test_uv_engine_env_credentials import module_args, run_module

pytestmark = pytest.mark.integration


def test_a_second_environment_from_the_first_ones_lock_resolves_nothing(upstream, tmp_path):
    index = upstream.url + "/simple"
    first = tmp_path / "node-a" / "vllm" / "0.11.0"
    result, _out = run_module(tmp_path, module_args(first, index_url=index))
    assert result.get("failed") is not True, result.get("msg")
    lock_text = (first / "llmfleet-requirements.txt").read_text()
    assert result["lock_sha256"] == result["marker"]["lock"]["sha256"]

    first_log = upstream.log()
    upstream.clear_log()
    second = tmp_path / "node-b" / "vllm" / "0.11.0"
    args = module_args(second, index_url=index, lock=lock_text)
    del args["exclude_newer"]
    result, _out = run_module(tmp_path, args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True
    assert [s["name"] for s in result["steps"]][:5] == ["check", "prepare", "venv", "lock", "install"]
    log = upstream.log()
    paths = [e["path"] for e in log]
    # no resolution: uv ran `pip install` only (its User-Agent names the subcommand) and read no
    # dependency metadata (.metadata files, which the compile above fetched). A requirements-format
    # lock names versions, not URLs: uv reads the index page of each locked package, once, to find
    # that version's file, and downloads the three files; nothing else.
    assert all('"subcommand":["pip","install"]' in e["headers"]["User-Agent"] for e in log), log
    assert [p for p in paths if p.endswith(".metadata")] == []
    assert sorted(p for p in paths if p.startswith("/simple/")) == [
        "/simple/llmfleet-fakedep/", "/simple/torch/", "/simple/vllm/"]
    assert sorted(p for p in paths if p.startswith("/files/")) == [
        "/files/llmfleet_fakedep-1.1.0-py3-none-any.whl", "/files/torch-2.8.0-py3-none-any.whl",
        "/files/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl"]
    assert len(paths) == 6
    # the compile above did read dependency metadata: what the assertions above tell apart
    assert [e for e in first_log if e["path"].endswith(".metadata")]
    assert (second / "llmfleet-requirements.txt").read_text() == lock_text
    assert result["lock_sha256"] == result["marker"]["spec"]["lock_sha256"]
    assert result["marker"]["verified"] == {"import": "vllm", "version": "0.11.0"}

    # the same lock again: up to date, no request at all
    upstream.clear_log()
    result, _out = run_module(tmp_path, args)
    assert result.get("failed") is not True and result["changed"] is False
    assert upstream.log() == []


def test_a_tampered_lock_is_refused_by_its_hashes(upstream, tmp_path):
    """A lock whose hash for vllm is not the file's: uv refuses the download (--require-hashes)."""
    index = upstream.url + "/simple"
    first = tmp_path / "node-a" / "vllm" / "0.11.0"
    result, _out = run_module(tmp_path, module_args(first, index_url=index))
    assert result.get("failed") is not True, result.get("msg")
    lock_text = (first / "llmfleet-requirements.txt").read_text()
    # every hash of vllm's files (one per file the index has: which one uv picks is not this test's to
    # guess; the hashes are sorted, so the last line is not always the file it installs)
    lines = lock_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("vllm=="))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" "):
            break
        block.append(line)
    vllm_hashes = [part[:64] for part in " ".join(block).split("--hash=sha256:")[1:]]
    assert vllm_hashes, lock_text
    tampered = lock_text
    for digest in vllm_hashes:
        tampered = tampered.replace(digest, "0" * 64)
    second = tmp_path / "node-b" / "vllm" / "0.11.0"
    args = module_args(second, index_url=index, lock=tampered)
    del args["exclude_newer"]
    result, _out = run_module(tmp_path, args)
    assert result["failed"] is True and result["failed_step"] == "install", result["msg"]
    assert "Hash mismatch" in result["msg"] or "hash" in result["uv_output"].lower()
    assert not second.exists()


def test_an_unhashed_lock_never_reaches_uv(upstream, tmp_path):
    second = tmp_path / "node-b" / "vllm" / "0.11.0"
    args = module_args(second, index_url=upstream.url + "/simple",
                       lock="vllm==0.11.0\ntorch==2.8.0\nllmfleet-fakedep==1.1.0\n")
    del args["exclude_newer"]
    result, _out = run_module(tmp_path, args)
    assert result["failed"] is True
    assert "line 1: vllm==0.11.0: no --hash=sha256:" in result["msg"]
    assert upstream.log() == []
    assert not (tmp_path / "node-b").exists()
