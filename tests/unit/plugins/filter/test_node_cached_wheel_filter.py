"""engine_node_cached_wheel: the fleet cache's wheel URL becomes the engine's requirement line, so the role
takes it only on the cache's origin and without a ${NAME} (security review, install side, finding 1); and
what the role reports of a failure carries no URL's password (finding 4)."""

from __future__ import annotations

import pytest

from tests.unit.plugins.filter._plugins import filter_plugin

FILTERS = dict(filter_plugin("engine_node").FilterModule().filters(),
               **filter_plugin("engine_node_wheels").FilterModule().filters())
CACHE = "http://cache.example:3141"
ASSET = {"url": "https://github.com/vllm-project/vllm/releases/download/v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-"
                "manylinux_2_28_x86_64.whl", "sha256": "3" * 64}
LISTED = CACHE + "/root/github/+f/333/3333/vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl"


def cached_wheel(*args, **kw):
    return FILTERS["engine_node_cached_wheel"](*args, **kw)


@pytest.mark.parametrize("listed", [LISTED, LISTED.replace("http://cache.example:3141", "HTTP://Cache.Example:3141")])
def test_the_cache_s_url_on_its_origin_is_taken(listed):
    assert cached_wheel(ASSET, {"url": listed, "uploaded": True}, CACHE) == dict(
        ASSET, url=listed, upstream_url=ASSET["url"])
    assert cached_wheel(ASSET, {"url": "https://cache.example/root/github/x.whl"}, "https://cache.example:443/")["url"] \
        == "https://cache.example/root/github/x.whl"


@pytest.mark.parametrize("listed, piece", [
    ("http://127.0.0.2:8080/${GITHUB_TOKEN}/vllm.whl", "it holds a '$'"),
    (CACHE + "/${UV_INDEX_LLMFLEET_DEFAULT_PASSWORD}/vllm.whl", "it holds a '$'"),
    (CACHE + "/%24%7BGITHUB_TOKEN%7D/vllm.whl", "decodes to '$'"),
    (CACHE + "/x\n/vllm.whl", "white space or a control character"),
    ("http://127.0.0.2:3141/root/github/vllm.whl", "not on the fleet cache's origin http://cache.example:3141"),
    ("https://cache.example:3141/root/github/vllm.whl", "not on the fleet cache's origin"),
    ("http://cache.example:3142/root/github/vllm.whl", "not on the fleet cache's origin"),
    ("http://cache.example.evil:3141/root/github/vllm.whl", "not on the fleet cache's origin"),
])
def test_another_origin_or_a_variable_is_refused_and_stops_the_node(listed, piece):
    out = cached_wheel(ASSET, {"url": listed}, CACHE)
    assert out["url"] == ASSET["url"] and "upstream_url" not in out
    assert out["cache_error"].startswith("the fleet cache http://cache.example:3141 listed the wheel at ")
    assert piece in out["cache_error"], out["cache_error"]
    errors = FILTERS["engine_node_fleet_errors"]({"name": "g"}, {"lock_sha256": "ab" * 32}, out, [])
    assert errors and errors[0].startswith("putting the GitHub wheel https://github.com/")


def test_check_mode_and_failures_as_before():
    assert cached_wheel(ASSET, {"uploaded": True, "changed": True}, CACHE, True) == ASSET
    assert cached_wheel(ASSET, {"failed": True, "msg": "HTTP Error 401"}, CACHE) == dict(ASSET, cache_error="HTTP Error 401")
    assert cached_wheel(ASSET, {}, CACHE) == dict(ASSET, cache_error="no answer")
    assert cached_wheel(ASSET, None, CACHE, True) == dict(ASSET, cache_error="no answer")


PASSWORD = "planted-mirror-pw-5be1"


def test_reported_failures_carry_no_password():
    msg = "looking up vllm 0.20.0: https://alice:%s@mirror.example/pypi/vllm/0.20.0/json answered 500" % PASSWORD
    errors = FILTERS["engine_node_lookup_errors"](
        {"version": "0.20.0", "lookup_pypi": {"index_url": "https://alice:%s@mirror.example" % PASSWORD},
         "lookup_github": None, "lookup_uv": {"index_url": "https://%s@mirror.example" % PASSWORD, "version": "0.9"}},
        {"msg": msg}, {}, {"msg": msg})
    assert len(errors) == 2 and all(PASSWORD not in e for e in errors), errors
    assert "https://alice:****@mirror.example/pypi/vllm/0.20.0/json answered 500" in errors[0]
    error = FILTERS["engine_node_error"]({"task": "Install", "msg": msg}, "cu129", {}, [])
    assert PASSWORD not in error and "https://alice:****@mirror.example/" in error
    assert PASSWORD not in FILTERS["engine_node_error"]({"task": "t", "msg": "https://%s@h/x" % PASSWORD}, "auto", {}, [])
    fleet = FILTERS["engine_node_fleet_errors"]({"name": "g"}, {"failed": True, "msg": msg}, {"cache_error": msg}, [])
    assert len(fleet) == 2 and all(PASSWORD not in e for e in fleet), fleet
