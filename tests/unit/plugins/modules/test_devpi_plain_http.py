"""devpi_index and devpi_wheel: a password goes over plain http:// only to the loopback, unless
allow_plain_http_password says so. main() with patched arguments; every request recorded."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.index import _devpi
from ansible_collections.llmfleet.engines.plugins.modules import devpi_index, devpi_wheel
from tests.unit.plugins.lookup_fakes import Reply, install, run_module

PASSWORD = "s3cret-root-password"
SHA = "a" * 64
WHEEL = "vllm-0.11.2+cu129-cp38-abi3-manylinux_2_31_x86_64.whl"
INDEXES = [{"name": "root/pypi", "type": "mirror", "mirror_url": "https://pypi.org/simple/"}]


@pytest.fixture
def server(monkeypatch):
    """Every URL answers 404 unless scripted; uploads and downloads (_devpi.open_url) recorded."""
    fake, _sleeps = install(monkeypatch)
    direct = []

    def open_url(url, **_kwargs):
        direct.append(url)
        raise AssertionError("unexpected download or upload of %s" % url)

    monkeypatch.setattr(_devpi, "open_url", open_url)
    return fake, direct


def index_args(url, **kw):
    out = {"url": url, "password": PASSWORD, "indexes": INDEXES}
    out.update(kw)
    return out


def wheel_args(url, **kw):
    out = {"url": url, "password": PASSWORD, "src": "https://github.example/dl/" + WHEEL, "sha256": SHA}
    out.update(kw)
    return out


REFUSED = ["http://cache.example:3141", "http://10.0.0.5:3141", "http://[fd00::5]:3141"]


@pytest.mark.parametrize("url", REFUSED)
@pytest.mark.parametrize("check_mode", [False, True])
def test_devpi_index_refuses_before_anything_is_sent(server, capsys, url, check_mode):
    fake, direct = server
    code, result, out = run_module(devpi_index.main, index_args(url, _ansible_check_mode=check_mode), capsys)
    assert code == 1 and result["failed"] is True
    host = url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")
    assert result["msg"].startswith("refusing to send the password of devpi user root to %s over plain HTTP" % host)
    assert "allow_plain_http_password=true" in result["msg"] and "nginx or caddy" in result["msg"]
    assert fake.calls == [] and direct == []
    assert PASSWORD not in out


@pytest.mark.parametrize("url, allow", [("http://127.0.0.1:3141", False), ("http://localhost:3141", False),
                                        ("http://[::1]:3141", False), ("https://cache.example", False),
                                        ("http://cache.example:3141", True)])
def test_devpi_index_logs_in_to_the_loopback_over_https_or_when_allowed(server, capsys, url, allow):
    fake, _direct = server
    fake.add(url + "/+login", Reply(200, {"result": {"password": "token"}}))
    # absent at first (404), then created (the PUT)
    fake.add(url + "/root/pypi", Reply(404, {"message": "no such index"}),
             Reply(200, {"result": {"type": "mirror", "mirror_url": "https://pypi.org/simple/"}}))
    code, result, _out = run_module(devpi_index.main, index_args(url, allow_plain_http_password=allow), capsys)
    assert code == 0 and "failed" not in result, result
    assert result["created"] == ["root/pypi"]
    assert [c["url"] for c in fake.calls] == [url + "/root/pypi", url + "/+login", url + "/root/pypi"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_devpi_wheel_refuses_before_anything_is_downloaded_or_sent(server, capsys, check_mode):
    fake, direct = server
    code, result, out = run_module(devpi_wheel.main, wheel_args("http://cache.example:3141",
                                                                _ansible_check_mode=check_mode), capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("refusing to send the password of devpi user root to cache.example over plain HTTP")
    assert result["changed"] is False and result["uploaded"] is False
    assert fake.calls == [] and direct == []
    assert PASSWORD not in out


def test_devpi_wheel_without_a_password_reads_over_plain_http(server, capsys):
    fake, _direct = server
    url = "http://cache.example:3141"
    fake.add(url + "/root/github/+simple/vllm/",
             Reply(200, {"files": [{"filename": WHEEL, "url": "../../+f/x/" + WHEEL, "hashes": {"sha256": SHA}}]}))
    code, result, _out = run_module(devpi_wheel.main, wheel_args(url, password=""), capsys)
    assert code == 0 and "failed" not in result, result
    assert result["url"] == url + "/root/github/+f/x/" + WHEEL and result["uploaded"] is False


@pytest.mark.parametrize("url, allow", [("http://127.0.0.1:3141", False), ("http://cache.example:3141", True)])
def test_devpi_wheel_goes_on_to_the_download_on_the_loopback_or_when_allowed(server, capsys, url, allow):
    _fake, direct = server
    code, result, _out = run_module(devpi_wheel.main, wheel_args(url, allow_plain_http_password=allow), capsys)
    # the scripted download is refused by the fake: the module got past the password check to it
    assert code == 1 and "unexpected download or upload of https://github.example/dl/" in result["msg"]
    assert direct == ["https://github.example/dl/" + WHEEL]
