"""pypi_published against the real PyPI (marker ``network``; CI, or a machine that reaches PyPI).

vLLM 0.11.0 is old and fixed: its three files and their upload times do not change. From some
networks PyPI's release JSON answers 404 (FACTS.md), so these tests accept either JSON endpoint
and check the simple-index fallback on its own.
"""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.index import _pypi
from ansible_collections.llmfleet.engines.plugins.modules import pypi_published

pytestmark = pytest.mark.network

PUBLISHED = "2025-10-04T01:39:32.382596Z"  # the first upload: the x86_64 wheel
LAST_UPLOAD = "2025-10-04T01:39:57.798320Z"
FILES = {
    "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl": ("bdist_wheel", PUBLISHED),
    "vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl": ("bdist_wheel", "2025-10-04T01:39:50.251865Z"),
    "vllm-0.11.0.tar.gz": ("sdist", LAST_UPLOAD),
}


def client():
    return _http.HttpClient(timeout=30, retries=2, backoff=1.0)


def check_vllm_0110(result):
    assert result["published"] == PUBLISHED
    assert result["exclude_newer"] == "2025-10-05T01:39:32.382596Z"
    assert result["last_upload"] == LAST_UPLOAD and result["late_files"] == []  # 25 s apart
    assert {f["filename"]: (f["packagetype"], f["upload_time"]) for f in result["files"]} == FILES
    for item in result["files"]:
        assert re.match(r"^[0-9a-f]{64}$", item["sha256"]), item
        assert item["size"] > 1_000_000
        assert item["url"].startswith("https://") and item["url"].endswith(item["filename"])
        assert item["yanked"] is False
    assert result["yanked"] is False


def test_module_with_its_default_index(capsys):
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args({"project": "vllm", "version": "0.11.0"}):
        with pytest.raises(SystemExit) as exc:
            pypi_published.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0, result
    assert result["changed"] is False
    assert result["source"] in ("release_json", "project_json")
    assert result["source_url"].startswith(_pypi.DEFAULT_INDEX_URL + "/pypi/vllm/")
    check_vllm_0110(result)


def test_simple_json_alone_gives_the_same_answer():
    # JSON API base that does not exist on PyPI: both JSON endpoints 404, the simple index answers.
    result = _pypi.lookup(client(), "vllm", "0.11.0", index_url=_pypi.DEFAULT_INDEX_URL + "/llmfleet-no-json-api",
                          simple_url=_pypi.DEFAULT_INDEX_URL + "/simple")
    assert result["source"] == "simple_json"
    check_vllm_0110(result)


def test_a_version_that_does_not_exist_names_its_neighbours():
    with pytest.raises(_pypi.VersionNotFoundError) as exc:
        _pypi.lookup(client(), "vllm", "0.11.99")
    assert "0.11.0" in exc.value.details["nearest_versions"]
    assert "no version 0.11.99" in exc.value.msg


def test_a_project_that_does_not_exist():
    with pytest.raises(_pypi.ProjectNotFoundError) as exc:
        _pypi.lookup(client(), "llmfleet-engines-no-such-project-4b1d", "1.0")
    assert "/simple/llmfleet-engines-no-such-project-4b1d/" in exc.value.msg
