"""The fake upstream publishes vLLM 0.31.0's +cpu wheels (by digest) and a cpu torch index, as the
build table's cpu source expects them."""

from __future__ import annotations

import hashlib
import re

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds
from tests.upstream.test_server import get, get_json


def test_the_tables_cpu_pattern_finds_one_asset_per_arch_pinned_by_digest(upstream):
    status, release = get_json(upstream, "/github/api/repos/vllm-project/vllm/releases/tags/v0.31.0")
    assert status == 200
    for arch in ("x86_64", "aarch64"):
        source = _builds.builds("0.31.0", arch)["cpu"]
        [asset] = [a for a in release["assets"] if re.match(source["github"]["pattern"], a["name"])]
        assert asset["name"] == "vllm-0.31.0+cpu-cp38-abi3-%s_%s.whl" % (source["wheel"]["manylinux"], arch)
        assert asset["digest"].startswith("sha256:")


def test_the_cpu_torch_index_serves_the_cpu_torch(upstream):
    status, doc = get_json(upstream, "/torch/cpu/torch/", {"Accept": "application/vnd.pypi.simple.v1+json"})
    assert status == 200 and doc["versions"] == ["2.13.0+cpu"]
    [entry] = doc["files"]
    status, _headers, body = get(upstream, "/torch/files/" + entry["filename"].replace("+", "%2B"))
    assert status == 200 and hashlib.sha256(body).hexdigest() == entry["hashes"]["sha256"]
