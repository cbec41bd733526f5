"""devpi_warm: main() with patched arguments; the index page scripted at _http.open_url, the files
it serves at _devpi.open_url. A file whose bytes are not the lock's sha256 fails the task, named."""

from __future__ import annotations

import hashlib
import io

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.index import _devpi
from ansible_collections.llmfleet.engines.plugins.modules import devpi_warm
from tests.unit.plugins.lookup_fakes import Reply, install, run_module

URL = "http://127.0.0.1:3141"
WHEEL = "llmfleet_fakedep-1.1.0-py3-none-any.whl"
GOOD = b"the wheel the lock pins"
SHA = hashlib.sha256(GOOD).hexdigest()
FILE_URL = URL + "/root/pypi/+f/abc/" + WHEEL
LOCK = "llmfleet-fakedep==1.1.0 \\\n    --hash=sha256:%s\n" % SHA


class _Stream(io.BytesIO):
    def getcode(self):
        return 200


@pytest.fixture
def cache(monkeypatch):
    """The index lists the wheel with the lock's sha256; ``served`` is what its URL answers."""
    fake, _sleeps = install(monkeypatch)
    fake.add(URL + "/root/pypi/+simple/llmfleet-fakedep/",
             Reply(200, {"files": [{"filename": WHEEL, "url": "../../+f/abc/" + WHEEL, "hashes": {"sha256": SHA}}]}))
    served = {FILE_URL: GOOD}
    fetched = []

    def open_url(url, **_kwargs):
        fetched.append(url)
        return _Stream(served[url])

    monkeypatch.setattr(_devpi, "open_url", open_url)
    return served, fetched, fake


def args(**kw):
    out = {"url": URL, "lock": LOCK, "python_version": "3.11", "python_platform": "x86_64-manylinux_2_36"}
    out.update(kw)
    return out


def test_a_file_with_the_locks_sha256_is_fetched_once(cache, capsys):
    _served, fetched, _fake = cache
    code, result, _out = run_module(devpi_warm.main, args(), capsys)
    assert code == 0 and "failed" not in result, result
    assert result["files"] == [{"name": "llmfleet-fakedep", "url": FILE_URL, "sha256": SHA, "bytes": len(GOOD)}]
    assert fetched == [FILE_URL]


def test_a_served_file_that_is_not_the_locks_fails_naming_it(cache, capsys):
    served, fetched, _fake = cache
    served[FILE_URL] = b"other bytes under the listed digest"
    code, result, _out = run_module(devpi_warm.main, args(), capsys)
    assert code == 1 and result["failed"] is True
    got = hashlib.sha256(served[FILE_URL]).hexdigest()
    assert result["msg"] == "%s/root/pypi serves %s with another sha256 than the lock's %s" % (URL, WHEEL, SHA)
    assert got not in _out  # no message tells what a URL's bytes hash to (issue 44, 16)
    assert result["files"] == []
    assert fetched == [FILE_URL]


def test_a_password_in_the_url_is_not_sent_over_plain_http_to_another_host(cache, capsys):
    _served, fetched, fake = cache
    code, result, _out = run_module(devpi_warm.main, args(url="http://root:s3cret@cache.example:3141",
                                                          _ansible_check_mode=True), capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("refusing to send the password of devpi user root to cache.example over plain HTTP")
    assert "s3cret" not in result["msg"]
    assert fetched == [] and fake.calls == []
