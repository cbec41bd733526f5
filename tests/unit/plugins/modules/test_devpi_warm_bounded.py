"""devpi_warm and devpi_wheel against a hostile cache on 127.0.0.1 (issue 44, finding 16): only files on
the cache's own origin are fetched (a listing or a redirect that names another origin is refused before
anything is asked there: a second server on another port stands for it), no message tells what a fetched
body hashes to, and each download is bounded, in bytes (the listed size, else _devpi.MAX_FILE_BYTES) and in
time (4 x timeout, plus a second a MiB of the listed size)."""

from __future__ import annotations

import hashlib
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.index import _devpi
from ansible_collections.llmfleet.engines.plugins.modules import devpi_warm
from tests.unit.plugins.body_server import BodyServer
from tests.unit.plugins.lookup_fakes import run_module

pytestmark = pytest.mark.timeout(60)  # an unbounded read would hang here: fail instead

WHEEL = "llmfleet_fakedep-1.1.0-py3-none-any.whl"
GOOD = b"the wheel the lock pins"
SHA = hashlib.sha256(GOOD).hexdigest()
LOCK = "llmfleet-fakedep==1.1.0 \\\n    --hash=sha256:%s\n" % SHA
PAGE = "/root/pypi/+simple/llmfleet-fakedep/"
FILE = "/root/pypi/+f/abc/" + WHEEL
SECRET = b"what only this host may read: a service on its loopback"


@pytest.fixture
def cache():
    with BodyServer() as server:
        yield server


@pytest.fixture
def elsewhere():
    """Another origin (127.0.0.1, a port of its own): what a hostile listing points at."""
    with BodyServer() as server:
        server.route(FILE, body=SECRET)
        yield server


def listing(url, size=None):
    entry = {"filename": WHEEL, "url": url, "hashes": {"sha256": SHA}}
    if size is not None:
        entry["size"] = size
    return {"files": [entry]}


def warm(cache, capsys, **kw):
    args = {"url": cache.url, "lock": LOCK, "python_version": "3.11", "python_platform": "x86_64-manylinux_2_36"}
    args.update(kw)
    return run_module(devpi_warm.main, args, capsys)


def test_a_file_on_the_caches_origin_is_fetched(cache, capsys):
    cache.route(PAGE, body=listing("../../+f/abc/" + WHEEL, size=len(GOOD))).route(FILE, body=GOOD)
    code, result, _out = warm(cache, capsys)
    assert code == 0, result
    assert result["files"] == [{"name": "llmfleet-fakedep", "url": cache.url + FILE, "sha256": SHA, "bytes": len(GOOD)}]


def test_a_listing_that_names_another_origin_is_refused_before_it_is_asked(cache, elsewhere, capsys):
    cache.route(PAGE, body=listing(elsewhere.url + FILE))
    code, result, out = warm(cache, capsys)
    assert code == 1, result
    assert result["msg"] == (
        "%s/root/pypi lists %s of llmfleet-fakedep on another origin (%s) than the cache's own (%s): refused, only "
        "files the cache serves itself are fetched; the index (or what answers in its place) is broken or hostile"
        % (cache.url, WHEEL, elsewhere.url, cache.url))
    assert elsewhere.log() == []
    assert hashlib.sha256(SECRET).hexdigest() not in out


def test_a_redirect_of_the_caches_file_to_another_origin_is_refused(cache, elsewhere, capsys):
    cache.route(PAGE, body=listing("../../+f/abc/" + WHEEL))
    cache.route(FILE, status=302, headers={"Location": elsewhere.url + FILE})
    code, result, out = warm(cache, capsys)
    assert code == 1, result
    assert "redirected to %s%s, another origin: refused" % (elsewhere.url, FILE) in result["msg"]
    assert elsewhere.log() == []
    assert hashlib.sha256(SECRET).hexdigest() not in out


def test_a_file_that_is_not_the_locks_is_named_without_its_digest(cache, capsys):
    cache.route(PAGE, body=listing("../../+f/abc/" + WHEEL)).route(FILE, body=SECRET)
    code, result, out = warm(cache, capsys)
    assert code == 1
    assert result["msg"] == "%s/root/pypi serves %s with another sha256 than the lock's %s" % (cache.url, WHEEL, SHA)
    # nor its size (read in the words around the URL and the lock's digest: a port may hold the same digits)
    words = result["msg"].replace(cache.url, "").replace(SHA, "")
    assert hashlib.sha256(SECRET).hexdigest() not in out and str(len(SECRET)) not in words


def test_an_endless_file_stops_at_its_listed_size(cache, capsys):
    cache.route(PAGE, body=listing("../../+f/abc/" + WHEEL, size=len(GOOD))).endless(FILE)
    started = time.monotonic()
    code, result, _out = warm(cache, capsys, timeout=5)
    assert time.monotonic() - started < 10
    assert code == 1, result
    assert result["msg"].startswith("fetching %s%s failed: %s%s sent more than %d bytes, more than the %d bytes this "
                                    "request reads: refused, not read further; the listing says it has %d bytes"
                                    % (cache.url, FILE, cache.url, FILE, len(GOOD), len(GOOD), len(GOOD))), result["msg"]


def test_an_endless_file_without_a_listed_size_stops_at_the_most_a_file_may_have(cache, capsys, monkeypatch):
    # the real limit is 16 GiB: a smaller one here, for the same code path in a second
    monkeypatch.setattr(_devpi, "MAX_FILE_BYTES", 8 * 1024 * 1024)
    cache.route(PAGE, body=listing("../../+f/abc/" + WHEEL)).endless(FILE)
    code, result, _out = warm(cache, capsys, timeout=5)
    assert code == 1, result
    assert "sent more than 8388608 bytes (8 MiB), more than the 8388608 bytes (8 MiB) this request reads" in result["msg"]
    assert "the listing says nothing of its size, and no wheel is this large" in result["msg"]


def test_a_file_sent_a_byte_at_a_time_ends_at_the_deadline(cache, capsys):
    cache.route(PAGE, body=listing("../../+f/abc/" + WHEEL)).drip(FILE, every=0.05)
    started = time.monotonic()
    code, result, _out = warm(cache, capsys, timeout=1)
    took = time.monotonic() - started
    assert 4.0 <= took < 8.0, took  # 4 x timeout, each wait of the socket far below the time-out
    assert code == 1, result
    assert "of its answer, which had not ended 4 s later: given up" in result["msg"], result["msg"]


def test_download_checked_tells_no_digest_and_keeps_nothing(cache, tmp_path):
    cache.route("/dl/" + WHEEL, body=SECRET)
    with pytest.raises(_devpi.DevpiError) as err:
        _devpi.download_checked(cache.url + "/dl/" + WHEEL, SHA, str(tmp_path), timeout=5)
    assert err.value.msg == ("%s/dl/%s does not have the publisher's sha256 %s: what it served was removed, nothing "
                             "was uploaded" % (cache.url, WHEEL, SHA))
    assert hashlib.sha256(SECRET).hexdigest() not in err.value.msg
    assert list(tmp_path.iterdir()) == []


def test_download_checked_stops_an_endless_body(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(_devpi, "MAX_FILE_BYTES", 4 * 1024 * 1024)
    cache.endless("/dl/" + WHEEL)
    with pytest.raises(_devpi.DevpiError, match="sent more than 4194304 bytes"):
        _devpi.download_checked(cache.url + "/dl/" + WHEEL, SHA, str(tmp_path), timeout=5)
    assert list(tmp_path.iterdir()) == []
