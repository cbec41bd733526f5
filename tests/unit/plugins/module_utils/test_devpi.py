"""The pure parts of _devpi: which wheels fit a node, a wheel's project, index names, credentials,
and where a password may be sent."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpi import (
    Devpi,
    DevpiError,
    PlainHttpPasswordError,
    check_index_name,
    plain_http_password_problem,
    strip_userinfo,
    wheel_fits,
    wheel_project,
)


@pytest.mark.parametrize("filename, version, platform, fits", [
    ("torch-2.8.0-py3-none-any.whl", "3.12", "x86_64-manylinux_2_35", True),
    ("vllm-0.11.2-cp38-abi3-manylinux_2_31_x86_64.whl", "3.12", "x86_64-manylinux_2_35", True),
    # glibc above the node's
    ("vllm-0.11.2-cp38-abi3-manylinux_2_31_x86_64.whl", "3.12", "x86_64-manylinux_2_28", False),
    # another architecture
    ("vllm-0.11.2-cp38-abi3-manylinux_2_31_aarch64.whl", "3.12", "x86_64-manylinux_2_35", False),
    # CPython of another minor version, not abi3
    ("numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.12", "x86_64-manylinux_2_35", False),
    ("numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.12", "x86_64-manylinux_2_35", True),
    # abi3 from a later Python than the node's
    ("x-1.0-cp313-abi3-manylinux_2_17_x86_64.whl", "3.12", "x86_64-manylinux_2_35", False),
    ("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "3.11", "x86_64-manylinux_2_17", True),
    ("x-1.0-cp312-cp312-manylinux2014_x86_64.whl", "3.12", "x86_64-manylinux_2_12", False),
    ("x-1.0-cp312-cp312-musllinux_1_2_x86_64.whl", "3.12", "x86_64-manylinux_2_35", False),
    ("x-1.0.tar.gz", "3.12", "x86_64-manylinux_2_35", False),
])
def test_wheel_fits(filename, version, platform, fits):
    assert wheel_fits(filename, version, platform) is fits


def test_wheel_project():
    assert wheel_project("vllm-0.11.2+cu129-cp38-abi3-manylinux_2_31_x86_64.whl") == ("vllm", "0.11.2+cu129")
    assert wheel_project("Llmfleet_Fakedep-1.1.0-py3-none-any.whl") == ("llmfleet-fakedep", "1.1.0")
    with pytest.raises(DevpiError, match="is not a wheel's file name"):
        wheel_project("vllm-0.11.2.tar.gz")


@pytest.mark.parametrize("name, ok", [("root/pypi", True), ("root/torch-cu129", True), ("pypi", False),
                                      ("root/", False), ("a/b/c", False), ("root/../x", False)])
def test_index_names(name, ok):
    assert (check_index_name(name) is None) is ok


def test_credentials_are_left_out_of_urls_shown():
    assert strip_userinfo("http://root:s3cret@cache:3141/root/pypi") == "http://cache:3141/root/pypi"
    assert strip_userinfo("http://cache:3141/x") == "http://cache:3141/x"


# -- a password goes only over https or to the loopback (issue 17) ---------------------------------
@pytest.mark.parametrize("url, allowed, refused", [
    ("http://127.0.0.1:3141", False, False),
    ("http://127.9.9.9:3141", False, False),
    ("http://[::1]:3141/", False, False),
    ("http://localhost:3141", False, False),
    ("http://LocalHost.:3141", False, False),
    ("https://cache.example", False, False),
    ("HTTPS://cache.example:8443/devpi", False, False),
    ("http://cache.example:3141", False, True),
    ("http://10.0.0.5:3141", False, True),
    ("http://127.0.0.1.nip.io:3141", False, True),
    ("http://[::ffff:10.0.0.5]:3141", False, True),
    ("http://root:s3cret@cache.example:3141", False, True),
    ("http://[::1", False, True),
    # the option lets it go in the clear
    ("http://cache.example:3141", True, False),
    ("http://10.0.0.5:3141", True, False),
])
def test_plain_http_password_problem(url, allowed, refused):
    problem = plain_http_password_problem(url, "root", allowed)
    assert (problem is not None) is refused, problem
    if refused:
        assert "allow_plain_http_password=true" in problem
        assert "engine_cache_allow_plain_http_password" in problem
        assert "nginx or caddy" in problem and "https://" in problem
        assert "s3cret" not in problem


def test_the_refusal_names_the_host_and_the_user():
    problem = plain_http_password_problem("http://cache.example:3141", "uploader")
    assert problem.startswith("refusing to send the password of devpi user uploader to cache.example over plain"
                              " HTTP (http://cache.example:3141)")


@pytest.fixture
def no_http(monkeypatch):
    """Every request recorded, none answered: a refusal must come before any of them."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.index import _devpi
    from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http

    calls = []

    def record(url, **kwargs):
        calls.append((url, kwargs.get("data")))
        raise AssertionError("a request was made to %s" % url)

    monkeypatch.setattr(_http, "open_url", record)
    monkeypatch.setattr(_devpi, "open_url", record)
    return calls


@pytest.mark.parametrize("url, password", [
    ("http://cache.example:3141", "s3cret"),
    ("http://root:s3cret@cache.example:3141", ""),
])
def test_login_over_plain_http_to_another_host_sends_nothing(no_http, url, password):
    devpi = Devpi(url, "root", password)
    with pytest.raises(PlainHttpPasswordError, match="to cache.example over plain HTTP"):
        devpi.login()
    with pytest.raises(PlainHttpPasswordError):
        devpi.upload("root/github", "/nonexistent.whl", "x-1.0-py3-none-any.whl", "x", "1.0")
    assert no_http == []


def test_login_over_plain_http_is_sent_when_allowed_or_local(no_http):
    for devpi in (Devpi("http://cache.example:3141", "root", "s3cret", retries=1, allow_plain_http_password=True),
                  Devpi("http://127.0.0.1:3141", "root", "s3cret", retries=1),
                  Devpi("https://cache.example", "root", "s3cret", retries=1)):
        devpi.check_password_transport()
        with pytest.raises(AssertionError, match="a request was made to .*/\\+login"):
            devpi.login()
    assert len(no_http) == 3


def test_no_password_nothing_to_refuse(no_http):
    Devpi("http://cache.example:3141").check_password_transport()
    Devpi("http://root@cache.example:3141").check_password_transport()
