"""github_digest: main() with patched arguments, HTTP scripted at open_url, JSON result checked."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import github_digest
from tests.unit.plugins.lookup_fakes import Reply, install, run_module

API = "https://gh.test/api"
DL = "https://gh.test/dl"
TOKEN = "ghp_TOPSECRET0123456789"
X86 = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl"
ARM = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_aarch64.whl"
REL = API + "/repos/vllm-project/vllm/releases/tags/v0.15.1"
SUMS_URL = DL + "/vllm-project/vllm/releases/download/v0.15.1/sha256sum.txt"
SUMS = "%s  %s\n%s  %s\n" % ("1" * 64, X86, "2" * 64, ARM)


def release(digests=True, checksum=False):
    assets = [{"name": n, "size": s, "digest": ("sha256:" + h) if digests else None}
              for n, s, h in ((X86, 111, "1" * 64), (ARM, 222, "2" * 64))]
    if checksum:
        assets.append({"name": "sha256sum.txt", "size": len(SUMS), "digest": None})
    return {"tag_name": "v0.15.1", "assets": assets}


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    return install(monkeypatch)


def args(**kw):
    out = {"repo": "vllm-project/vllm", "tag": "v0.15.1", "api_url": API, "download_url": DL, "backoff": 0.01}
    out.update(kw)
    return out


@pytest.mark.parametrize("check_mode", [False, True])
def test_digest_in_check_and_normal_mode(fake, capsys, check_mode):
    server, _sleeps = fake
    server.add(REL, Reply(200, release()))
    code, result, _out = run_module(github_digest.main, args(asset=X86, _ansible_check_mode=check_mode), capsys)
    assert code == 0 and result["changed"] is False and "failed" not in result
    assert result["asset"] == X86
    assert result["sha256"] == "1" * 64
    assert result["size"] == 111
    assert result["digest_source"] == "digest"
    assert result["url"] == DL + "/vllm-project/vllm/releases/download/v0.15.1/" + X86.replace("+", "%2B")
    assert [a["name"] for a in result["assets"]] == [X86]


def test_no_digest_uses_the_checksum_asset(fake, capsys):
    server, _sleeps = fake
    server.add(REL, Reply(200, release(digests=False, checksum=True)))
    server.add(SUMS_URL, Reply(200, body=SUMS.encode()))
    code, result, _out = run_module(github_digest.main, args(pattern="aarch64"), capsys)
    assert code == 0
    assert (result["asset"], result["sha256"], result["digest_source"]) == (ARM, "2" * 64, "sha256sum.txt")


def test_multiple_returns_every_match(fake, capsys):
    server, _sleeps = fake
    server.add(REL, Reply(200, release()))
    code, result, _out = run_module(github_digest.main, args(pattern=r"\.whl$", multiple=True), capsys)
    assert code == 0
    assert [(a["name"], a["sha256"]) for a in result["assets"]] == [(ARM, "2" * 64), (X86, "1" * 64)]
    assert result["asset"] == ARM


FAILURES = [
    # (id, release answer, checksum answer, args, words in msg)
    ("no-digest-no-checksum", Reply(200, release(digests=False)), None, {"asset": X86},
     ["refusing an unpinned file", X86]),
    ("missing-asset", Reply(200, release()), None,
     {"asset": "vllm-0.15.1+cu129-cp38-abi3-manylinux_2_31_x86_64.whl"}, ["closest names", X86]),
    ("ambiguous", Reply(200, release()), None, {"pattern": "cu130"}, ["matches 2 assets", X86, ARM, "multiple"]),
    ("no-release", Reply(404, {"message": "Not Found"}), None, {"asset": X86}, ["no release tagged 'v0.15.1'"]),
    ("rate-limit", Reply(403, {"message": "API rate limit exceeded"}, headers={
        "X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4102444800"}), None,
     {"asset": X86}, ["rate limit", "2100-01-01T00:00:00Z", "GITHUB_TOKEN", "token"]),
    ("unreachable", Reply(503), None, {"asset": X86, "retries": 1}, ["2 attempts", "503", REL]),
    ("checksum-download-fails", Reply(200, release(digests=False, checksum=True)), Reply(404), {"asset": X86},
     [SUMS_URL, "404"]),
    ("invalid-json", Reply(200, body=b"oops"), None, {"asset": X86}, ["not valid JSON"]),
    ("bad-pattern", None, None, {"pattern": "(["}, ["not a valid Python regular expression"]),
    ("multiple-with-asset", None, None, {"asset": X86, "multiple": True}, ["multiple applies to pattern only"]),
    ("both", None, None, {"asset": X86, "pattern": "x"}, ["mutually exclusive"]),
    ("neither", None, None, {}, ["one of the following is required"]),
    ("bad-repo", None, None, {"asset": X86, "repo": "vllm"}, ["owner/name"]),
]


@pytest.mark.parametrize("rel, sums, extra, words", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failures(fake, capsys, rel, sums, extra, words):
    server, _sleeps = fake
    if rel is not None:
        server.add(REL, rel)
    if sums is not None:
        server.add(SUMS_URL, sums)
    code, result, _out = run_module(github_digest.main, args(**extra), capsys)
    assert code == 1 and result["failed"] is True
    for word in words:
        assert word in result["msg"]
    assert "sha256" not in result


def test_token_from_the_environment_goes_to_githubs_own_api_and_is_never_shown(fake, capsys, monkeypatch):
    server, _sleeps = fake
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    server.add("https://api.github.com/repos/vllm-project/vllm/releases/tags/v0.15.1", Reply(200, release()))
    code, result, out = run_module(github_digest.main, args(asset=X86, api_url="https://api.github.com/"), capsys)
    assert code == 0
    assert server.calls[0]["headers"]["Authorization"] == "Bearer " + TOKEN
    assert TOKEN not in out


def test_token_from_the_environment_does_not_go_to_another_api(fake, capsys, monkeypatch):
    server, _sleeps = fake
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    server.add(REL, Reply(200, release()))
    code, result, out = run_module(github_digest.main, args(asset=X86), capsys)
    assert code == 0
    assert "Authorization" not in server.calls[0]["headers"]
    assert TOKEN not in out


@pytest.mark.parametrize("answer", [
    Reply(401, {"message": "Bad credentials for token %s" % TOKEN}),
    Reply(403, {"message": "rate limit for %s" % TOKEN}, headers={"X-RateLimit-Remaining": "0"}),
    Reply(200, release(digests=False)),
])
def test_token_never_in_the_output_even_when_the_server_echoes_it(fake, capsys, answer):
    server, _sleeps = fake
    server.add(REL, answer)
    code, result, out = run_module(github_digest.main, args(asset=X86, token=TOKEN), capsys)
    assert code == 1
    assert server.calls[0]["headers"]["Authorization"] == "Bearer " + TOKEN
    assert TOKEN not in out
    assert result["msg"]


def test_rate_limit_with_a_token_does_not_ask_for_a_token(fake, capsys):
    server, _sleeps = fake
    server.add(REL, Reply(403, {"message": "API rate limit exceeded"}, headers={
        "X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4102444800"}))
    code, result, out = run_module(github_digest.main, args(asset=X86, token=TOKEN), capsys)
    assert code == 1
    assert "5000 requests" in result["msg"] and "another token" in result["msg"]
    assert TOKEN not in out
