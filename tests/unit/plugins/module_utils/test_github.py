"""_github: asset choice, digests, checksum files, and every failure kind."""

from __future__ import annotations

import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.index import _github
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from tests.unit.plugins.lookup_fakes import Reply, install

API = "https://gh.test/api"
DL = "https://gh.test/download"
REPO = "vllm-project/vllm"

X86 = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl"
ARM = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_aarch64.whl"
HEX = {X86: "1" * 64, ARM: "2" * 64, "sdist": "3" * 64}


def release_url(tag):
    return "%s/repos/%s/releases/tags/%s" % (API, REPO, tag)


def download(tag, name):
    return "%s/%s/releases/download/%s/%s" % (DL, REPO, tag, name.replace("+", "%2B"))


def asset(name, digest=None, size=100):
    return {"name": name, "size": size, "digest": digest, "browser_download_url": "http://elsewhere.test/" + name,
            "state": "uploaded", "content_type": "application/octet-stream"}


def release(tag, assets):
    return {"tag_name": tag, "name": tag, "assets": assets}


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch)


def lookup(token=None, retries=1, **kw):
    kw.setdefault("tag", "v0.15.1")
    client = _http.HttpClient(retries=retries, backoff=0.1, secrets=[token] if token else None)
    return _github.Lookup(client, REPO, api_url=API, download_url=DL, token=token, **kw).run()


# -- digests -------------------------------------------------------------------------------------
def test_exact_asset_with_a_digest(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86, "sha256:" + HEX[X86].upper(), 1234), asset(ARM, "sha256:" + HEX[ARM])])))
    result = lookup(asset=X86)
    assert result["asset"] == X86
    assert result["sha256"] == HEX[X86]
    assert result["size"] == 1234
    assert result["digest_source"] == "digest"
    assert result["url"] == download("v0.15.1", X86)
    assert "%2Bcu130" in result["url"] and "+" not in result["url"]
    assert result["assets"] == [{"name": X86, "url": download("v0.15.1", X86), "sha256": HEX[X86],
                                 "size": 1234, "digest_source": "digest"}]
    call = server.calls[0]
    assert call["headers"]["Accept"] == "application/vnd.github+json"
    assert "Authorization" not in call["headers"]
    assert len(server.calls) == 1  # no checksum file fetched


def test_pattern_picks_the_one_match(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86, "sha256:" + HEX[X86]), asset(ARM, "sha256:" + HEX[ARM])])))
    result = lookup(pattern=r"\+cu130-.*aarch64\.whl$")
    assert (result["asset"], result["sha256"]) == (ARM, HEX[ARM])


def test_token_is_sent_as_bearer(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86, "sha256:" + HEX[X86])])))
    lookup(asset=X86, token="ghp_abc")
    assert server.calls[0]["headers"]["Authorization"] == "Bearer ghp_abc"


# -- checksum files ----------------------------------------------------------------------------------
def test_no_digest_falls_back_to_the_checksum_file(fake):
    server, _sleeps = fake
    sums = "%s  %s\n%s *%s\n" % (HEX[X86], X86, HEX[ARM], ARM)
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86), asset(ARM), asset("sha256sum.txt", size=len(sums))])))
    server.add(download("v0.15.1", "sha256sum.txt"), Reply(200, body=sums.encode()))
    result = lookup(asset=ARM, token="ghp_secret")
    assert (result["sha256"], result["digest_source"]) == (HEX[ARM], "sha256sum.txt")
    # The checksum file comes from download_url, and the token is not sent there.
    assert server.calls[1]["url"] == download("v0.15.1", "sha256sum.txt")
    assert "Authorization" not in server.calls[1]["headers"]


def test_multiple_matches_read_the_checksum_file_once(fake):
    server, _sleeps = fake
    sums = "%s  %s\n%s  %s\n" % (HEX[X86], X86, HEX[ARM], ARM)
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86, size=10), asset(ARM, size=20), asset("SHA256SUMS")])))
    server.add(download("v0.15.1", "SHA256SUMS"), Reply(200, body=sums.encode()))
    result = lookup(pattern=r"\.whl$", multiple=True)
    assert [(a["name"], a["sha256"], a["digest_source"]) for a in result["assets"]] == [
        (ARM, HEX[ARM], "SHA256SUMS"), (X86, HEX[X86], "SHA256SUMS")]
    assert (result["asset"], result["size"]) == (ARM, 20)
    assert server.count(download("v0.15.1", "SHA256SUMS")) == 1


def test_per_asset_checksum_file_with_a_bare_hex_is_preferred(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86), asset("sha256sum.txt"), asset(X86 + ".sha256")])))
    server.add(download("v0.15.1", X86 + ".sha256"), Reply(200, body=(HEX[X86] + "\n").encode()))
    result = lookup(asset=X86)
    assert (result["sha256"], result["digest_source"]) == (HEX[X86], X86 + ".sha256")
    assert server.count(download("v0.15.1", "sha256sum.txt")) == 0


def test_digest_of_another_algorithm_needs_a_checksum_file(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86, "sha512:" + "f" * 128)])))
    with pytest.raises(_github.UnpinnedAssetError):
        lookup(asset=X86)


@pytest.mark.parametrize("digest", [
    "md5:" + "a" * 64,  # 64 hex digits, but not named sha256
    "sha512:" + "a" * 64,
    "a" * 64,  # no algorithm at all
    "sha256:" + "a" * 63,
    "sha256:" + "g" * 64,
    "sha256:",
    "",
    None,
])
def test_digest_sha256_refuses_what_is_not_a_sha256_digest(digest):
    assert _github.digest_sha256(digest) is None


@pytest.mark.parametrize("digest, expected", [
    ("sha256:" + "a" * 64, "a" * 64),
    ("SHA256:" + "AB" * 32, "ab" * 32),
])
def test_digest_sha256_takes_a_sha256_digest(digest, expected):
    assert _github.digest_sha256(digest) == expected


def test_digest_named_md5_with_64_hex_digits_is_refused(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86, "md5:" + HEX[X86])])))
    with pytest.raises(_github.UnpinnedAssetError) as exc:
        lookup(asset=X86)
    assert "refusing an unpinned file" in exc.value.msg


def test_digest_named_md5_gives_way_to_the_checksum_file(fake):
    server, _sleeps = fake
    other = "e" * 64
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86, "md5:" + other), asset("sha256sum.txt")])))
    server.add(download("v0.15.1", "sha256sum.txt"), Reply(200, body=("%s  %s\n" % (HEX[X86], X86)).encode()))
    result = lookup(asset=X86)
    assert (result["sha256"], result["digest_source"]) == (HEX[X86], "sha256sum.txt")


def test_no_digest_and_no_checksum_file_refuses(fake):
    server, _sleeps = fake
    server.add(release_url("v0.11.2"), Reply(200, release("v0.11.2", [asset(X86), asset(ARM)])))
    with pytest.raises(_github.UnpinnedAssetError) as exc:
        lookup(tag="v0.11.2", asset=X86)
    assert "refusing an unpinned file" in exc.value.msg
    assert "no checksum file" in exc.value.msg
    assert exc.value.details["asset"] == X86


def test_checksum_file_without_the_asset_refuses(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86), asset("sha256sum.txt")])))
    server.add(download("v0.15.1", "sha256sum.txt"), Reply(200, body=("%s  other.whl\n" % HEX[ARM]).encode()))
    with pytest.raises(_github.UnpinnedAssetError) as exc:
        lookup(asset=X86)
    assert "sha256sum.txt" in exc.value.msg and "refusing an unpinned file" in exc.value.msg


def test_custom_checksum_asset_pattern(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86), asset("HASHES.md")])))
    server.add(download("v0.15.1", "HASHES.md"), Reply(200, body=("SHA256 (%s) = %s\n" % (X86, HEX[X86])).encode()))
    with pytest.raises(_github.UnpinnedAssetError):
        lookup(asset=X86)
    result = lookup(asset=X86, checksum_asset_pattern=r"^HASHES\.md$")
    assert (result["sha256"], result["digest_source"]) == (HEX[X86], "HASHES.md")


def test_oversized_checksum_file_is_not_downloaded(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86), asset("sha256sum.txt", size=_github.MAX_CHECKSUM_BYTES + 1)])))
    with pytest.raises(_github.UnpinnedAssetError):
        lookup(asset=X86)
    assert server.count(download("v0.15.1", "sha256sum.txt")) == 0


@pytest.mark.parametrize(
    "text, name, expected",
    [
        ("%s  a.whl\n%s *b.whl\n" % ("a" * 64, "b" * 64), "sha256sum.txt", {"a.whl": "a" * 64, "b.whl": "b" * 64}),
        ("%s  ./dist/a.whl\n" % ("A" * 64), "SHA256SUMS", {"a.whl": "a" * 64}),
        ("SHA256 (a.whl) = %s\n" % ("c" * 64), "checksums.txt", {"a.whl": "c" * 64}),
        ("%s\n" % ("d" * 64), "a.whl.sha256", {"a.whl": "d" * 64}),
        ("%s\n" % ("d" * 64), "sha256sum.txt", {}),
        ("# comment\n\nnot a line\n%s  short.whl\n" % ("e" * 63), "sha256sum.txt", {}),
    ],
)
def test_parse_checksums(text, name, expected):
    assert _github.parse_checksums(text, name) == expected


@pytest.mark.parametrize(
    "name, matches",
    [("sha256sum.txt", True), ("SHA256SUMS", True), ("sha256sums.txt", True), ("x.whl.sha256", True),
     ("vllm_0.1_checksums.txt", True), ("x.whl.sha256sum", True), ("x.whl", False), ("sha512sum.txt", False),
     ("notes.txt", False)],
)
def test_default_checksum_pattern(name, matches):
    import re
    assert bool(re.search(_github.DEFAULT_CHECKSUM_PATTERN, name)) is matches


# -- failures ------------------------------------------------------------------------------------------
def test_missing_asset_lists_the_closest_names(fake):
    server, _sleeps = fake
    names = [X86, ARM, "vllm-0.15.1.tar.gz", "README.md", "notes.txt"]
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(n, "sha256:" + "0" * 64) for n in names])))
    wanted = "vllm-0.15.1+cu129-cp38-abi3-manylinux_2_31_x86_64.whl"
    with pytest.raises(_github.AssetNotFoundError) as exc:
        lookup(asset=wanted)
    closest = exc.value.details["closest"]
    assert closest[0] == X86
    assert "README.md" not in closest
    assert X86 in exc.value.msg and wanted in exc.value.msg


def test_pattern_matching_nothing_lists_the_assets(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [asset(X86), asset(ARM)])))
    with pytest.raises(_github.AssetNotFoundError) as exc:
        lookup(pattern="cu129")
    assert X86 in exc.value.msg and ARM in exc.value.msg
    assert exc.value.details["available"] == sorted([X86, ARM])


def test_pattern_matching_several_fails_unless_multiple(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, release("v0.15.1", [
        asset(X86, "sha256:" + HEX[X86]), asset(ARM, "sha256:" + HEX[ARM])])))
    with pytest.raises(_github.AmbiguousAssetError) as exc:
        lookup(pattern=r"cu130")
    assert exc.value.details["matches"] == sorted([X86, ARM])
    assert "multiple: true" in exc.value.msg


def test_unknown_tag_or_repo(fake):
    server, _sleeps = fake
    server.add(release_url("v9.9.9"), Reply(404, {"message": "Not Found"}))
    with pytest.raises(_github.ReleaseNotFoundError) as exc:
        lookup(tag="v9.9.9", asset=X86)
    assert release_url("v9.9.9") in exc.value.msg and "'v9.9.9'" in exc.value.msg
    assert server.count(release_url("v9.9.9")) == 1


@pytest.mark.parametrize("token", [None, "ghp_tok"])
def test_rate_limit_says_when_it_resets_and_how_to_get_more(fake, token):
    server, sleeps = fake
    reset = int(time.time()) + 600
    server.add(release_url("v0.15.1"), Reply(403, {"message": "API rate limit exceeded for 127.0.0.1."}, headers={
        "X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset),
        "X-RateLimit-Resource": "core"}))
    with pytest.raises(_github.GithubRateLimitError) as exc:
        lookup(asset=X86, token=token, retries=3)
    msg = exc.value.msg
    assert server.count(release_url("v0.15.1")) == 1 and sleeps == []
    assert time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset)) in msg
    assert exc.value.details["rate_limit_reset"] == reset
    if token:
        assert "another token" in msg
    else:
        assert "token" in msg and "GITHUB_TOKEN" in msg and "5,000" in msg


@pytest.mark.parametrize("status, words", [(401, "token was refused"), (403, "access was refused")])
def test_refused_access(fake, status, words):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(status, {"message": "Bad credentials"}))
    with pytest.raises(_github.GithubAccessError) as exc:
        lookup(asset=X86, token="ghp_x")
    assert words in exc.value.msg and "Bad credentials" in exc.value.msg


def test_5xx_then_success(fake):
    server, sleeps = fake
    server.add(release_url("v0.15.1"), Reply(502), Reply(200, release("v0.15.1", [asset(X86, "sha256:" + HEX[X86])])))
    assert lookup(asset=X86, retries=2)["sha256"] == HEX[X86]
    assert sleeps == [0.1]


def test_not_a_release_json(fake):
    server, _sleeps = fake
    server.add(release_url("v0.15.1"), Reply(200, {"message": "hello"}))
    with pytest.raises(_github.GithubAccessError) as exc:
        lookup(asset=X86)
    assert "'assets'" in exc.value.msg


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"asset": X86, "pattern": "x"}, "exactly one of asset and pattern"),
        ({}, "exactly one of asset and pattern"),
        ({"pattern": "("}, "not a valid Python regular expression"),
        ({"asset": X86, "checksum_asset_pattern": "[z"}, "checksum_asset_pattern"),
        ({"asset": X86, "tag": ""}, "tag must not be empty"),
    ],
)
def test_invalid_arguments(fake, kw, words):
    with pytest.raises(_github.InvalidArgumentError) as exc:
        lookup(**kw)
    assert words in exc.value.msg


def test_invalid_repo():
    client = _http.HttpClient()
    with pytest.raises(_github.InvalidArgumentError) as exc:
        _github.Lookup(client, "just-a-name", "v1", asset="x")
    assert "owner/name" in exc.value.msg


def test_default_urls():
    lk = _github.Lookup(_http.HttpClient(), REPO, "v0.11.0", asset="a+b.whl")
    assert lk.release_url() == _github.DEFAULT_API_URL + "/repos/vllm-project/vllm/releases/tags/v0.11.0"
    assert lk.asset_url("a+b.whl") == _github.DEFAULT_DOWNLOAD_URL + "/vllm-project/vllm/releases/download/v0.11.0/a%2Bb.whl"
