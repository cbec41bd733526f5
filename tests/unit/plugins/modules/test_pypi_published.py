"""pypi_published: main() with patched arguments, HTTP scripted at open_url, JSON result checked."""

from __future__ import annotations

import socket

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import pypi_published
from tests.unit.plugins.lookup_fakes import Reply, install, run_module, warnings_text

BASE = "http://index.test"
RELEASE = BASE + "/pypi/vllm/0.11.0/json"
PROJECT = BASE + "/pypi/vllm/json"
SIMPLE = BASE + "/simple/vllm/"


def pypi_file(filename, when, sha, yanked=False, reason=None):
    return {"filename": filename, "url": BASE + "/files/" + filename, "size": 10,
            "packagetype": "sdist" if filename.endswith(".tar.gz") else "bdist_wheel",
            "upload_time_iso_8601": when, "digests": {"sha256": sha}, "yanked": yanked, "yanked_reason": reason}


FILES = [pypi_file("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "2025-10-02T20:00:00Z", "a" * 64),
         pypi_file("vllm-0.11.0.tar.gz", "2025-10-02T20:10:00Z", "b" * 64)]


def release(yanked=False, reason=None, files=None):
    files = FILES if files is None else files
    return {"info": {"name": "vllm", "version": "0.11.0", "yanked": yanked, "yanked_reason": reason},
            "urls": [dict(f, yanked=yanked, yanked_reason=reason) for f in files]}


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch)


def args(**kw):
    out = {"project": "vllm", "version": "0.11.0", "index_url": BASE, "backoff": 0.01}
    out.update(kw)
    return out


@pytest.mark.parametrize("check_mode", [False, True])
def test_success_reports_published_and_changes_nothing(fake, capsys, check_mode):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release()))
    code, result, _out = run_module(pypi_published.main, args(_ansible_check_mode=check_mode, margin=12), capsys)
    assert code == 0
    assert result["changed"] is False
    assert "failed" not in result
    assert result["published"] == "2025-10-02T20:00:00Z"  # the first upload
    assert result["last_upload"] == "2025-10-02T20:10:00Z"
    assert result["exclude_newer"] == "2025-10-03T08:00:00Z"
    assert result["late_files"] == []
    assert result["source"] == "release_json"
    assert [(f["filename"], f["sha256"]) for f in result["files"]] == [
        ("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "a" * 64), ("vllm-0.11.0.tar.gz", "b" * 64)]
    assert result["yanked"] is False
    assert warnings_text(result) == []


def test_falls_back_when_release_json_is_404(fake, capsys):
    server, _sleeps = fake
    server.add(PROJECT, Reply(200, {"info": {}, "releases": {"0.11.0": FILES}}))
    code, result, _out = run_module(pypi_published.main, args(), capsys)
    assert code == 0
    assert result["source"] == "project_json" and result["published"] == "2025-10-02T20:00:00Z"


def test_yanked_release_fails_by_default(fake, capsys):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release(yanked=True, reason="broken wheels")))
    code, result, _out = run_module(pypi_published.main, args(), capsys)
    assert code == 1 and result["failed"] is True
    assert "is yanked" in result["msg"] and "broken wheels" in result["msg"]
    assert "allow_yanked" in result["msg"]
    assert result["yanked"] is True


def test_yanked_release_allowed_warns(fake, capsys):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release(yanked=True, reason="broken wheels")))
    code, result, _out = run_module(pypi_published.main, args(allow_yanked=True), capsys)
    assert code == 0 and "failed" not in result
    assert result["yanked"] is True and result["yanked_reason"] == "broken wheels"
    assert any("yanked" in w and "broken wheels" in w for w in warnings_text(result))


FAILURES = [
    # (id, routes, extra args, words in msg, extra keys in result)
    ("no-such-project", {}, {"project": "nope"}, ["no project 'nope'", BASE + "/simple/nope/"], ["tried"]),
    ("no-such-version", {PROJECT: [Reply(200, {"info": {}, "releases": {"0.10.0": FILES, "0.12.0": []}})]},
     {"version": "0.11.1"}, ["no version 0.11.1", "0.10.0, 0.12.0"], ["nearest_versions"]),
    ("no-files", {RELEASE: [Reply(200, release(files=[]))]}, {}, ["lists no files"], []),
    ("invalid-json", {RELEASE: [Reply(200, body=b"<html>", content_type="text/html")]}, {},
     ["not valid JSON", RELEASE], ["url"]),
    ("unreachable-5xx", {RELEASE: [Reply(503)]}, {"retries": 2}, ["3 attempts", "503", RELEASE], ["url"]),
    ("timeout", {RELEASE: [socket.timeout("timed out")]}, {"retries": 1, "timeout": 3},
     ["2 attempts", "timed out after 3 s"], ["url"]),
    ("negative-margin", {}, {"margin": -1}, ["margin must not be negative"], []),
    ("zero-timeout", {}, {"timeout": 0}, ["timeout must be more than 0"], []),
]


@pytest.mark.parametrize("routes, extra, words, keys", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failures(fake, capsys, routes, extra, words, keys):
    server, _sleeps = fake
    for url, answers in routes.items():
        server.add(url, *answers)
    code, result, _out = run_module(pypi_published.main, args(**extra), capsys)
    assert code == 1 and result["failed"] is True
    for word in words:
        assert word in result["msg"]
    for key in keys:
        assert key in result
    assert "published" not in result


def test_5xx_then_success(fake, capsys):
    server, sleeps = fake
    server.add(RELEASE, Reply(503), Reply(500), Reply(200, release()))
    code, result, _out = run_module(pypi_published.main, args(backoff=0.5), capsys)
    assert code == 0 and result["published"] == "2025-10-02T20:00:00Z"
    assert sleeps == [0.5, 1.0]


# --- a mirror's password (security review, install side, finding 4) ---------------------------
# The role copies the module's msg into the node's failure and the play's stats (AWX's artifacts):
# a password in index_url is ``****`` in every URL and message the module returns.

PASSWORD = "planted-mirror-pw-8c21"
TLS = "https://index.test"  # credentials go over https only (or to loopback)
SECRET_INDEX = TLS.replace("https://", "https://alice:%s@" % PASSWORD)


def _no_password(result, out):
    import json

    assert PASSWORD not in out and PASSWORD not in json.dumps(result)
    assert "planted-mirror-pw" not in out


@pytest.mark.parametrize("routes, extra, key", [
    ({RELEASE: [Reply(200, release())]}, {}, "source_url"),
    ({}, {"project": "nope"}, "tried"),
    ({RELEASE: [Reply(503)]}, {"retries": 0}, "url"),
    ({RELEASE: [Reply(200, release(yanked=True, reason="broken"))]}, {}, "source_url"),
    ({RELEASE: [Reply(200, body=b"<html>", content_type="text/html")]}, {}, "url"),
], ids=["success", "no-such-project", "5xx", "yanked", "invalid-json"])
def test_a_mirror_password_is_nowhere_in_the_result(fake, capsys, routes, extra, key):
    server, _sleeps = fake
    for url, answers in routes.items():
        server.add(url.replace(BASE, SECRET_INDEX), *answers)  # open_url takes the userinfo as Basic auth
    code, result, out = run_module(pypi_published.main, args(index_url=SECRET_INDEX, **extra), capsys)
    _no_password(result, out)
    assert key in result, result
    shown = result[key] if isinstance(result[key], str) else " ".join(result[key])
    assert "https://alice:****@index.test/" in shown or "https://index.test/" in shown, shown
    if code:
        assert "alice:****@index.test" in result["msg"] or "https://index.test" in result["msg"], result["msg"]
    if key == "source_url":
        assert result[key].startswith("https://alice:****@index.test/pypi/vllm/0.11.0/json"), result[key]
    if key == "tried":
        assert all(u.startswith("https://alice:****@index.test/") for u in result["tried"]), result["tried"]


def test_redact_passwords_keeps_the_user_and_masks_a_token_user():
    from ansible_collections.llmfleet.engines.plugins.module_utils.index._pypi import redact_passwords, url_secrets

    text = "asked https://bob:pa%24ss@m.example/simple and https://TOKEN123@m.example/x, then http://m.example/"
    secrets = url_secrets("https://bob:pa%24ss@m.example/simple")
    assert secrets == {"pa%24ss", "pa$ss"}
    assert redact_passwords({"a": [text + " pa$ss"]}, secrets) == {"a": [
        "asked https://bob:****@m.example/simple and https://****@m.example/x, then http://m.example/ ****"]}


# --- a file added to an old release (issue 30, finding 6) ------------------------------------
# The cut-off is the first upload plus the margin: an aarch64 wheel uploaded nine months later
# does not move it (it used to: the latest upload dated the release), and the task names it.
LATE_ARM = pypi_file("vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl", "2026-07-01T09:30:00Z", "c" * 64)


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_file_added_later_does_not_move_the_cut_off_and_is_named(fake, capsys, check_mode):
    server, _sleeps = fake
    server.add(RELEASE, Reply(200, release(files=FILES + [LATE_ARM])))
    code, result, _out = run_module(pypi_published.main, args(_ansible_check_mode=check_mode), capsys)
    assert code == 0 and result["changed"] is False
    assert (result["published"], result["exclude_newer"]) == ("2025-10-02T20:00:00Z", "2025-10-03T20:00:00Z")
    assert result["last_upload"] == "2026-07-01T09:30:00Z"
    assert result["late_files"] == [{"filename": LATE_ARM["filename"], "upload_time": "2026-07-01T09:30:00Z",
                                     "exclude_newer": "2026-07-02T09:30:00Z", "sha256": "c" * 64}]
    warnings = warnings_text(result)
    assert len(warnings) == 1, warnings
    for word in ("vllm 0.11.0", "1 of its 3 files", "after the cut-off 2025-10-03T20:00:00Z",
                 "vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl (2026-07-01T09:30:00Z)",
                 "--exclude-newer-package vllm="):
        assert word in warnings[0], warnings[0]
    # the file within the margin (the sdist, 10 minutes after the first) is not named
    assert "tar.gz" not in warnings[0]


def test_files_within_the_margin_give_no_warning_however_many(fake, capsys):
    server, _sleeps = fake
    within = pypi_file("vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl", "2025-10-03T19:59:59Z", "c" * 64)
    server.add(RELEASE, Reply(200, release(files=FILES + [within])))
    code, result, _out = run_module(pypi_published.main, args(), capsys)
    assert code == 0 and result["late_files"] == [] and warnings_text(result) == []
    assert result["exclude_newer"] == "2025-10-03T20:00:00Z"
