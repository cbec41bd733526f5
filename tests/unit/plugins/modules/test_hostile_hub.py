"""A hostile hub and upstream against the modules: the fake upstream's ``redirect`` fault and
``ForeignOrigin`` servers (tests/upstream/server.py) answer with redirects to ``file://``, to other
origins (another port of 127.0.0.1, the loopback alias 127.0.0.2), from https to http (a
ForeignOrigin with a certificate made here), and in an endless loop.

Every module that fetches refuses the bad redirect and names it; a ``file://`` redirect never
copies a local file (a root-only file with known content is planted: it shows up in no cache file,
and no output tells its size or hash); and the planted credentials (hub token, GitHub token,
devpi session, API key) reach their own origin only: every ForeignOrigin logs headers and bodies
unmasked, and each test greps those logs for them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import stat
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _fetch, _snapshot
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.modules import (
    devpi_index,
    devpi_warm,
    devpi_wheel,
    engine_ready,
    github_digest,
    hf_revision,
    hf_warm,
    model_snapshot,
)
from tests.unit.plugins.lookup_fakes import run_module
from tests.unit.plugins.modules.test_model_snapshot import hub_lock
from tests.upstream.hub import GATED_TINY, HUB_TOKEN, TINY_CHAT, info_path, resolve_path
from tests.upstream.server import ForeignOrigin

PLANTED_HF = "hf_PLANTEDhostileHubToken00000000"  # a valid user of the fake hub, public repos only
PLANTED_GH = "ghp_PLANTEDhostileGithubToken0000"
PLANTED_KEY = "sk-PLANTEDhostileApiKey00000000"
DEVPI_PASSWORD = "PLANTED-devpi-password"
DEVPI_SESSION = "PLANTEDdevpiSessionToken"
DEVPI_AUTH = base64.b64encode(("root:%s" % DEVPI_SESSION).encode()).decode()


# -- fixtures ---------------------------------------------------------------------------------

class Secret(object):
    """A root-only (0600) file with known content, and what would betray it."""

    def __init__(self, path):
        self.path = str(path)
        # an odd size, so that a message that tells it is caught
        self.content = b"LLMFLEET_ROOT_ONLY_SECRET=" + hashlib.sha256(b"planted").hexdigest().encode() * 3 + b"\n"
        with open(self.path, "wb") as handle:
            handle.write(self.content)
        os.chmod(self.path, 0o600)
        self.size = len(self.content)
        self.sha256 = hashlib.sha256(self.content).hexdigest()
        self.git_oid = hashlib.sha1(b"blob %d\0" % self.size + self.content).hexdigest()
        self.url = "file://" + self.path

    def betrayals(self):
        """What no output may hold: the content, its hashes."""
        return [self.content.decode().strip(), self.sha256, self.git_oid]

    def assert_not_copied_under(self, top):
        for here, _dirs, files in os.walk(str(top)):
            for name in files:
                path = os.path.join(here, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as handle:
                        assert self.content.strip() not in handle.read(), "%s holds the planted secret" % path


@pytest.fixture
def secret(tmp_path):
    return Secret(tmp_path / "secret.env")


def _can_bind(host):
    try:
        sock = socket.socket()
        sock.bind((host, 0))
        sock.close()
        return True
    except OSError:
        return False


@pytest.fixture(params=["127.0.0.1", "127.0.0.2"])
def trap(request):
    """Another origin: 127.0.0.1 on a port of its own, or the loopback alias 127.0.0.2."""
    if not _can_bind(request.param):
        pytest.skip("cannot bind %s here" % request.param)
    with ForeignOrigin(request.param) as server:
        yield server


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setattr(_http, "_sleep", lambda _s: None)
    for name in ("HF_TOKEN", "GITHUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def assert_nowhere(secrets, *servers):
    """None of ``secrets`` in any request any of ``servers`` received (headers, bodies, paths)."""
    for server in servers:
        text = server.text()
        for value in secrets:
            assert value not in text, "%s reached %s" % (value, server.url)
        for entry in server.log():
            names = set(k.lower() for k in entry["headers"])
            assert not names & {"authorization", "x-devpi-auth", "proxy-authorization", "cookie"}, (server.url, entry)


def cdn_requests(upstream):
    return [r for r in upstream.log() if r["path"].startswith("/hub-cdn/")]


def assert_no_token_at_the_cdn(upstream):
    """The hub's CDN (another origin) never got an Authorization header (the upstream's log masks
    hub tokens, so it is the header's presence that is checked there)."""
    for entry in cdn_requests(upstream):
        assert "authorization" not in set(k.lower() for k in entry["headers"]), entry


def fetch_json(url):
    with urllib.request.build_opener().open(url, timeout=10) as resp:
        return resp.read()


# -- model_snapshot -----------------------------------------------------------------------------

def snapshot_run(capsys, upstream, lock, cache_dir, **kw):
    args = {"lock": lock, "cache_dir": str(cache_dir), "endpoint": upstream.hub_url, "retries": 1}
    args.update(kw)
    return run_module(model_snapshot.main, args, capsys)


def _with_config(lock, entry):
    files = [entry if f["path"] == "config.json" else f for f in lock["files"]]
    return dict(lock, files=files, size=sum(f["size"] for f in files))


@pytest.mark.parametrize("worst", [False, True], ids=["lock-of-the-hub", "lock-naming-the-secret"])
def test_model_snapshot_never_copies_a_local_file_a_redirect_points_at(upstream, tmp_path, capsys, secret, worst):
    lock = hub_lock(upstream, TINY_CHAT)
    if worst:  # the hub's model info gave the secret's size and blob id as config.json's
        lock = _with_config(lock, {"path": "config.json", "size": secret.size, "git_oid": secret.git_oid})
    upstream.fault("redirect", path=resolve_path(TINY_CHAT, lock["commit"], "config.json"), location=secret.url,
                   count=100)
    code, result, out = snapshot_run(capsys, upstream, lock, tmp_path / "hub", token=PLANTED_HF)
    assert code == 1 and result["failed"], result
    assert "redirected to a file:// URL" in result["msg"] and "(%s)" % upstream.url in result["msg"]
    assert "only http and https redirects are followed" in result["msg"]
    secret.assert_not_copied_under(tmp_path / "hub")
    for value in secret.betrayals()[: 3 if not worst else 2]:  # the worst lock names the blob id itself
        assert value not in out
    assert "got_size" not in result and "got_hash" not in result
    if not worst:
        assert "%d bytes" % secret.size not in result["msg"]
    snap = tmp_path / "hub" / "models--llmfleet-test--tiny-chat" / "snapshots" / lock["commit"]
    assert not (snap / "config.json").exists()
    for here, _dirs, files in os.walk(str(tmp_path / "hub")):
        for name in files:
            if name.endswith(".incomplete"):  # what stays for the next run is private
                assert stat.S_IMODE(os.stat(os.path.join(here, name)).st_mode) == 0o600
    with open(secret.path, "rb") as handle:
        assert handle.read() == secret.content


def test_model_snapshot_sends_the_token_to_the_hub_only(upstream, tmp_path, capsys, trap):
    lock = hub_lock(upstream, TINY_CHAT)
    config = dict((e["path"], e) for e in lock["files"])["config.json"]
    data = fetch_json(upstream.hub_url + "/%s/resolve/%s/config.json" % (TINY_CHAT, lock["commit"]))
    assert len(data) == config["size"]
    trap.route("/elsewhere/config.json", body=data)
    upstream.fault("redirect", path=resolve_path(TINY_CHAT, lock["commit"], "config.json"),
                   location=trap.url + "/elsewhere/config.json", count=100)
    upstream.clear_log()
    code, result, out = snapshot_run(capsys, upstream, lock, tmp_path / "hub", token=PLANTED_HF)
    assert code == 0, result
    assert [e["path"] for e in trap.log()] == ["/elsewhere/config.json"]  # followed, without the token
    assert_nowhere([PLANTED_HF], trap)
    assert_no_token_at_the_cdn(upstream)
    assert cdn_requests(upstream)  # the LFS files came from the CDN
    hub_sent = [r for r in upstream.log() if r["path"].startswith("/hub/") and "Authorization" in r["headers"]]
    assert hub_sent  # and the token did go to its own origin
    assert PLANTED_HF not in out


def test_model_snapshot_stops_an_endless_redirect_loop(upstream, tmp_path, capsys):
    lock = hub_lock(upstream, TINY_CHAT)
    path = resolve_path(TINY_CHAT, lock["commit"], "config.json")
    upstream.fault("redirect", path=path, location="{path}", count=1000)
    code, result, _out = snapshot_run(capsys, upstream, lock, tmp_path / "hub", token=PLANTED_HF)
    assert code == 1 and "redirected more than 10 times" in result["msg"], result
    assert len([r for r in upstream.log() if r["path"] == path]) == 11  # refused, not tried again


def _config_lock(data):
    oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    entry = {"path": "config.json", "size": len(data), "git_oid": oid}
    return {"format": 1, "repo": "org/model", "revision": "c" * 40, "commit": "c" * 40, "files": [entry],
            "size": len(data)}


@pytest.mark.parametrize("token", [PLANTED_HF, None])
def test_model_snapshot_refuses_a_downgrade_to_http_with_the_token(tmp_path, capsys, tls_origin, other, token):
    data = b'{"model_type": "llama"}\n'
    lock = _config_lock(data)
    tls_origin.redirect("/org/model/resolve/%s/config.json" % lock["commit"], other.url + "/plain/config.json")
    other.route("/plain/config.json", body=data)
    args = {"lock": lock, "cache_dir": str(tmp_path / "hub"), "endpoint": tls_origin.url, "validate_certs": False,
            "retries": 0}
    if token:
        args["token"] = token
    code, result, out = run_module(model_snapshot.main, args, capsys)
    if token:
        assert code == 1 and "redirected from https to plain http" in result["msg"], result
        assert "(%s)" % tls_origin.url in result["msg"]
        assert other.log() == []  # refused: nothing went in the clear
    else:
        assert code == 0, result  # without a credential the downgrade is followed (the bytes are checked)
        assert [e["path"] for e in other.log()] == ["/plain/config.json"]
    assert_nowhere([PLANTED_HF], other)
    assert PLANTED_HF not in out
    assert [e["headers"].get("Authorization") for e in tls_origin.log()] == ["Bearer %s" % token if token else None]


def test_model_snapshot_refuses_a_token_over_plain_http_to_another_host(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(_http, "open_url", lambda url, **kw: calls.append(url))
    lock = _config_lock(b"{}\n")
    for check_mode in (True, False):
        code, result, out = run_module(model_snapshot.main, {
            "lock": lock, "cache_dir": str(tmp_path / "hub"), "endpoint": "http://hub-mirror.example:8090",
            "token": PLANTED_HF, "_ansible_check_mode": check_mode}, capsys)
        assert code == 1
        assert result["msg"].startswith("refusing to send the hub token to hub-mirror.example over plain HTTP")
        assert "allow_plain_http_token=true" in result["msg"] and PLANTED_HF not in out
    assert calls == [] and not (tmp_path / "hub").exists()


def test_an_incomplete_download_is_private_until_checked(tmp_path):
    data = bytes(range(256)) * 8192  # 2 MiB: more than one chunk
    entry = {"path": "model.safetensors", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    lock = {"format": 1, "repo": "org/model", "revision": "c" * 40, "commit": "c" * 40, "files": [entry],
            "size": len(data)}
    snapshot = _snapshot.Snapshot(lock, str(tmp_path / "hub"))
    snapshot.prepare()
    item = snapshot.work(snapshot.survey())["fetch"][0]
    partial = snapshot.blob_path(item["blob"]) + ".incomplete"
    with open(partial, "wb") as handle:  # an earlier run's, world-readable
        handle.write(data[:1000])
    os.chmod(partial, 0o644)
    seen = []

    class Fetcher(object):
        def fetch(self, url, sink, offset=0, limit=None, progress=None, cancel=None):
            seen.append(stat.S_IMODE(os.stat(partial).st_mode))
            for start in range(offset, len(data), 1 << 20):
                sink.write(data[start:start + (1 << 20)])
                seen.append(stat.S_IMODE(os.stat(partial).st_mode))
            return _fetch.FetchResult(url, 206, {}, len(data) - offset, len(data), None)

    old = os.umask(0)  # whatever the umask: 0600
    try:
        snapshot.download(item, entry, Fetcher(), "http://127.0.0.1:9/x")
    finally:
        os.umask(old)
    assert seen and set(seen) == {0o600}
    assert stat.S_IMODE(os.stat(snapshot.blob_path(item["blob"])).st_mode) == 0o644  # checked: readable
    assert not os.path.exists(partial)


def test_an_incomplete_download_never_goes_through_a_link(tmp_path, secret):
    lock = _config_lock(b"{}\n")
    snapshot = _snapshot.Snapshot(lock, str(tmp_path / "hub"))
    snapshot.prepare()
    item = snapshot.work(snapshot.survey())["fetch"][0]
    os.symlink(secret.path, snapshot.blob_path(item["blob"]) + ".incomplete")
    with pytest.raises(OSError):
        _snapshot.FileSink(snapshot.blob_path(item["blob"]) + ".incomplete", lock["files"][0])
    with open(secret.path, "rb") as handle:
        assert handle.read() == secret.content


# -- hf_warm ------------------------------------------------------------------------------------

def test_hf_warm_refuses_a_file_redirect_and_tells_nothing_of_the_file(upstream, capsys, secret):
    lock = hub_lock(upstream, TINY_CHAT)
    upstream.fault("redirect", path=resolve_path(TINY_CHAT, lock["commit"], "config.json"), location=secret.url)
    code, result, out = run_module(hf_warm.main, {"lock": lock, "endpoint": upstream.hub_url, "retries": 0}, capsys)
    assert code == 1 and "redirected to a file:// URL" in result["msg"], result
    for value in secret.betrayals():
        assert value not in out
    assert "%d bytes" % secret.size not in result["msg"] and "got_hash" not in result


def test_hf_warm_sends_the_token_to_the_mirror_only(upstream, capsys, trap):
    lock = hub_lock(upstream, TINY_CHAT)
    for entry in lock["files"]:
        if "git_oid" in entry:
            path = resolve_path(TINY_CHAT, lock["commit"], entry["path"])
            trap.route("/x" + path, body=fetch_json(upstream.url + path))
            upstream.fault("redirect", path=path, location=trap.url + "/x" + path)
    code, result, out = run_module(hf_warm.main, {"lock": lock, "endpoint": upstream.hub_url, "token": PLANTED_HF},
                                   capsys)
    assert code == 0, result
    assert len(trap.log()) == len([e for e in lock["files"] if "git_oid" in e])
    assert_nowhere([PLANTED_HF], trap)
    assert_no_token_at_the_cdn(upstream)
    assert PLANTED_HF not in out


# -- hf_revision --------------------------------------------------------------------------------

def revision_run(capsys, upstream, **kw):
    args = {"repo": TINY_CHAT, "endpoint": upstream.hub_url, "backoff": 0.01, "retries": 1}
    args.update(kw)
    return run_module(hf_revision.main, args, capsys)


def test_hf_revision_refuses_a_file_redirect_of_the_model_info(upstream, capsys, secret):
    upstream.fault("redirect", path=info_path(TINY_CHAT), location=secret.url, count=10)
    code, result, out = revision_run(capsys, upstream, token=PLANTED_HF)
    assert code == 1 and "redirected to a file:// URL" in result["msg"], result
    assert "(%s)" % upstream.url in result["msg"]
    for value in secret.betrayals():
        assert value not in out
    assert len([r for r in upstream.log() if r["path"] == info_path(TINY_CHAT)]) == 1  # not tried again


def test_hf_revision_refuses_a_file_redirect_of_the_gated_file_it_reads(upstream, capsys, secret):
    info = json.loads(fetch_json(upstream.url + info_path(GATED_TINY) + "?blobs=true"))
    upstream.fault("redirect", path=resolve_path(GATED_TINY, info["sha"], "config.json"), location=secret.url)
    code, result, out = revision_run(capsys, upstream, repo=GATED_TINY, token=HUB_TOKEN)
    assert code == 1 and "redirected to a file:// URL" in result["msg"], result
    for value in secret.betrayals() + [HUB_TOKEN]:
        assert value not in out


@pytest.mark.parametrize("repo, token", [(TINY_CHAT, PLANTED_HF), (GATED_TINY, HUB_TOKEN)])
def test_hf_revision_sends_the_token_to_the_hub_only(upstream, capsys, trap, repo, token):
    """The model info (and, for the gated repo, config.json) redirected to another origin: followed,
    without the token."""
    info_raw = fetch_json(upstream.url + info_path(repo) + "?blobs=true")
    info = json.loads(info_raw)
    trap.route("/moved" + info_path(repo) + "?blobs=true", body=info_raw, content_type="application/json")
    upstream.fault("redirect", path=info_path(repo), location=trap.url + "/moved{path}")
    if repo == GATED_TINY:
        path = resolve_path(repo, info["sha"], "config.json")
        upstream.hub_switch(resolve_cache=False)
        trap.route("/moved" + path, body=_gated_config(upstream, path))
        upstream.fault("redirect", path=path, location=trap.url + "/moved{path}")
    code, result, out = revision_run(capsys, upstream, repo=repo, token=token)
    assert code == 0, result
    assert len(trap.log()) == (2 if repo == GATED_TINY else 1)
    assert_nowhere([token, PLANTED_HF, HUB_TOKEN], trap)
    assert token not in out


def _gated_config(upstream, path):
    request = urllib.request.Request(upstream.url + path, headers={"Authorization": "Bearer " + HUB_TOKEN})
    with urllib.request.build_opener().open(request, timeout=10) as resp:
        return resp.read()


def test_hf_revision_keeps_the_token_on_the_hubs_own_redirects(upstream, capsys):
    """A renamed repo (the hub's relative 307, same origin) and the gated repo's config.json (307 to
    /api/resolve-cache): the token goes along, and the lock is made."""
    code, result, _out = revision_run(capsys, upstream, repo="llmfleet-test/tiny-chat-old", token=PLANTED_HF)
    assert code == 0, result
    code, result, _out = revision_run(capsys, upstream, repo=GATED_TINY, token=HUB_TOKEN)
    assert code == 0, result
    cached = [r for r in upstream.log() if "/api/resolve-cache/" in r["path"]]
    assert cached and all("Authorization" in r["headers"] for r in cached)


def test_hf_revision_stops_an_endless_redirect_loop(upstream, capsys):
    upstream.fault("redirect", path=info_path(TINY_CHAT), location="{path}", count=1000)
    code, result, _out = revision_run(capsys, upstream, token=PLANTED_HF)
    assert code == 1 and "redirected more than 10 times" in result["msg"], result
    assert len([r for r in upstream.log() if r["path"] == info_path(TINY_CHAT)]) == 11


def test_hf_revision_refuses_a_downgrade_to_http_with_the_token(capsys, tls_origin, other):
    info_url = "/api/models/org/model/revision/main?blobs=true"
    tls_origin.redirect(info_url, other.url + info_url)
    code, result, out = run_module(hf_revision.main, {
        "repo": "org/model", "endpoint": tls_origin.url, "token": PLANTED_HF, "validate_certs": False,
        "retries": 0}, capsys)
    assert code == 1 and "redirected from https to plain http" in result["msg"], result
    assert other.log() == [] and PLANTED_HF not in out
    assert [e["path"] for e in tls_origin.log()] == [info_url]


def test_hf_revision_refuses_a_token_over_plain_http_to_another_host(capsys, monkeypatch):
    calls = []

    def open_url(url, **_kw):
        calls.append(url)
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(_http, "open_url", open_url)
    args = {"repo": TINY_CHAT, "endpoint": "http://192.0.2.10:8090/hub", "token": PLANTED_HF, "retries": 0}
    for check_mode in (True, False):
        code, result, out = run_module(hf_revision.main, dict(args, _ansible_check_mode=check_mode), capsys)
        assert code == 1 and result["msg"].startswith(
            "refusing to send the Hugging Face token to 192.0.2.10 over plain HTTP"), result
        assert "allow_plain_http_token=true" in result["msg"] and PLANTED_HF not in out
    assert calls == []
    code, result, out = run_module(hf_revision.main, dict(args, allow_plain_http_token=True), capsys)
    assert code == 1 and "no route to host" in result["msg"] and PLANTED_HF not in out  # allowed: it tried
    assert calls == ["http://192.0.2.10:8090/hub/api/models/%s/revision/main?blobs=true" % TINY_CHAT]


# -- github_digest ------------------------------------------------------------------------------

def digest_run(capsys, upstream, **kw):
    args = {"repo": "vllm-project/vllm", "tag": "v0.15.1", "pattern": "x86_64", "api_url": upstream.url + "/github/api",
            "download_url": upstream.url + "/github/download", "backoff": 0.01, "retries": 0}
    args.update(kw)
    return run_module(github_digest.main, args, capsys)


def test_github_digest_sends_the_token_to_the_api_only(upstream, capsys, trap):
    upstream.fault("redirect", path="/github/api/", location=trap.url + "{path}")
    code, result, out = digest_run(capsys, upstream, token=PLANTED_GH)
    assert code == 1 and "has no release tagged" in result["msg"], result  # the trap answered 404
    assert [e["path"] for e in trap.log()] == ["/github/api/repos/vllm-project/vllm/releases/tags/v0.15.1"]
    assert_nowhere([PLANTED_GH], trap)
    api = [r for r in upstream.log() if r["path"].startswith("/github/api/")]
    assert [r["headers"].get("Authorization") for r in api] == ["Bearer " + PLANTED_GH]  # its origin got it
    assert PLANTED_GH not in out


def test_github_digest_never_sends_the_token_with_the_checksum_file(upstream, capsys):
    code, result, out = digest_run(capsys, upstream, token=PLANTED_GH)
    assert code == 0 and result["digest_source"] == "sha256sum.txt", result
    downloads = [r for r in upstream.log() if r["path"].startswith(("/github/download/", "/github-objects/"))]
    assert len(downloads) == 2  # the release download and its redirect to the signed object URL
    assert all("Authorization" not in r["headers"] for r in downloads)
    assert PLANTED_GH not in json.dumps(downloads) and PLANTED_GH not in out


@pytest.mark.parametrize("location, words", [
    ("file:///etc/hostname", "redirected to a file:// URL"),
    ("ftp://127.0.0.1/pub/release.json", "redirected to a ftp:// URL"),
    ("data:application/json,{}", "redirected to a data: URL"),
    ("{path}", "redirected more than 10 times"),
])
def test_github_digest_refuses_a_bad_redirect_naming_it(upstream, capsys, location, words):
    upstream.fault("redirect", path="/github/api/", location=location, count=1000)
    code, result, out = digest_run(capsys, upstream, token=PLANTED_GH)
    assert code == 1 and words in result["msg"], result
    assert PLANTED_GH not in out


def test_github_digest_refuses_a_downgrade_and_plain_http_with_the_token(capsys, tls_origin, other, monkeypatch):
    tag = "/repos/vllm-project/vllm/releases/tags/v0.15.1"
    tls_origin.redirect("/api" + tag, other.url + "/api" + tag)
    args = {"repo": "vllm-project/vllm", "tag": "v0.15.1", "asset": "x.whl", "api_url": tls_origin.url + "/api",
            "token": PLANTED_GH, "validate_certs": False, "retries": 0}
    code, result, out = run_module(github_digest.main, args, capsys)
    assert code == 1 and "redirected from https to plain http" in result["msg"], result
    assert other.log() == [] and PLANTED_GH not in out
    calls = []
    monkeypatch.setattr(_http, "open_url", lambda url, **kw: calls.append(url))
    code, result, out = run_module(github_digest.main, dict(args, api_url="http://ghe.example/api/v3"), capsys)
    assert code == 1 and result["msg"].startswith("refusing to send the GitHub token to ghe.example over plain HTTP")
    assert calls == [] and PLANTED_GH not in out


# -- devpi --------------------------------------------------------------------------------------

INDEXES = [{"name": "root/pypi", "type": "mirror", "mirror_url": "https://pypi.org/simple/"},
           {"name": "root/github", "type": "stage", "bases": ["root/pypi"]}]


@pytest.fixture
def devpi():
    """A scripted devpi-server on 127.0.0.1 that logs in root with DEVPI_PASSWORD."""
    with ForeignOrigin() as server:
        server.route("/+login", body={"result": {"password": DEVPI_SESSION}}, method="POST")
        server.route("/root/pypi", status=404, body={"message": "no such index"}, method="GET")
        server.route("/root/pypi", body={"result": {"type": "mirror"}}, method="PUT")
        server.route("/root/github", body={"result": {"type": "stage"}}, method="PUT")
        yield server


def devpi_secrets():
    return [DEVPI_PASSWORD, DEVPI_SESSION, DEVPI_AUTH]


def test_devpi_session_token_never_follows_a_redirect_to_another_origin(devpi, trap, capsys):
    # after the login, reading root/github (with X-Devpi-Auth) is sent to another origin
    devpi.redirect("/root/github", trap.url + "/root/github", method="GET")
    code, result, out = run_module(devpi_index.main, {"url": devpi.url, "password": DEVPI_PASSWORD,
                                                      "indexes": INDEXES}, capsys)
    assert code == 0, result
    assert result["created"] == ["root/pypi", "root/github"]
    assert [e["path"] for e in trap.log()] == ["/root/github"]
    assert_nowhere(devpi_secrets(), trap)
    sent = dict((e["method"] + " " + e["path"], e["headers"].get("X-Devpi-Auth")) for e in devpi.log())
    assert sent["GET /root/github"] == DEVPI_AUTH and sent["PUT /root/github"] == DEVPI_AUTH  # its origin got it
    for value in devpi_secrets():
        assert value not in out


@pytest.mark.parametrize("method, path, words", [
    ("POST", "/+login", "logging in to"),
    ("PUT", "/root/pypi", "creating of index root/pypi"),
])
def test_devpi_authenticated_writes_are_never_redirected(devpi, trap, capsys, method, path, words):
    devpi.redirect(path, trap.url + path, status=307, method=method)
    code, result, out = run_module(devpi_index.main, {"url": devpi.url, "password": DEVPI_PASSWORD,
                                                      "indexes": INDEXES[:1]}, capsys)
    assert code == 1 and words in result["msg"], result
    assert "a redirect to %s%s, not followed" % (trap.url, path) in result["msg"]
    assert trap.log() == []  # neither the password nor the session went anywhere
    for value in devpi_secrets():
        assert value not in out


def test_devpi_reads_refuse_a_file_redirect(devpi, capsys, secret):
    devpi.redirect("/root/github", secret.url, method="GET")
    code, result, out = run_module(devpi_index.main, {"url": devpi.url, "password": DEVPI_PASSWORD,
                                                      "indexes": INDEXES}, capsys)
    assert code == 1 and "redirected to a file:// URL" in result["msg"], result
    for value in secret.betrayals() + devpi_secrets():
        assert value not in out


WHEEL = "llmfleet_fakedep-1.1.0-py3-none-any.whl"
WARM_LOCK_SHA = hashlib.sha256(b"the wheel").hexdigest()


@pytest.mark.parametrize("how", ["listed", "redirected"])
def test_devpi_warm_is_no_hash_oracle_for_local_files(devpi, capsys, secret, how):
    url = secret.url if how == "listed" else devpi.url + "/root/pypi/+f/abc/" + WHEEL
    if how == "redirected":
        devpi.redirect("/root/pypi/+f/abc/" + WHEEL, secret.url)
    devpi.route("/root/pypi/+simple/llmfleet-fakedep/",
                body={"files": [{"filename": WHEEL, "url": url, "hashes": {"sha256": WARM_LOCK_SHA}}]})
    lock = "llmfleet-fakedep==1.1.0 \\\n    --hash=sha256:%s\n" % WARM_LOCK_SHA
    code, result, out = run_module(devpi_warm.main, {"url": devpi.url, "lock": lock, "python_version": "3.11",
                                                     "python_platform": "x86_64-manylinux_2_36"}, capsys)
    assert code == 1 and "file://" in result["msg"], result
    assert ("lists %s of llmfleet-fakedep at a file:// URL" % WHEEL if how == "listed"
            else "redirected to a file:// URL") in result["msg"]
    for value in secret.betrayals():
        assert value not in out


def test_devpi_upload_is_never_redirected(devpi, trap, capsys, tmp_path):
    wheel = "vllm-0.11.2+cu129-cp38-abi3-manylinux_2_31_x86_64.whl"
    data = b"a wheel, as the publisher made it"
    devpi.route("/dl/" + wheel, body=data)
    devpi.redirect("/root/github/", trap.url + "/root/github/", status=307, method="POST")
    code, result, out = run_module(devpi_wheel.main, {
        "url": devpi.url, "password": DEVPI_PASSWORD, "src": devpi.url + "/dl/" + wheel,
        "sha256": hashlib.sha256(data).hexdigest(), "tmp_dir": str(tmp_path)}, capsys)
    assert code == 1 and "uploading %s" % wheel in result["msg"], result
    assert "a redirect to %s/root/github/, not followed for an upload" % trap.url in result["msg"]
    assert trap.log() == []
    upload = [e for e in devpi.log() if e["method"] == "POST" and e["path"] == "/root/github/"]
    assert upload and upload[0]["headers"]["X-Devpi-Auth"] == DEVPI_AUTH  # its origin got it
    for value in devpi_secrets():
        assert value not in out


# -- engine_ready -------------------------------------------------------------------------------

def test_engine_ready_sends_the_api_key_to_the_engine_only(capsys, trap, other, secret):
    trap.route("/health", body=b"")
    with ForeignOrigin() as engine:
        engine.redirect("/health", trap.url + "/health")
        engine.redirect("/v1/models", secret.url)
        code, result, out = run_module(engine_ready.main, {"url": engine.url, "model": "m", "api_key": PLANTED_KEY,
                                                           "deadline": 5, "wait": 0}, capsys)
        assert code == 1 and "redirected to a file:// URL" in result["msg"], result
        assert [e["path"] for e in engine.log()] == ["/health", "/v1/models"]
        # the key goes only with the request vLLM checks it on (/v1/models), not with /health
        assert [e["headers"].get("Authorization") for e in engine.log()] == [None, "Bearer " + PLANTED_KEY]
    assert [e["path"] for e in trap.log()] == ["/health"]
    assert_nowhere([PLANTED_KEY], trap, other)
    for value in [PLANTED_KEY] + secret.betrayals():
        assert value not in out
