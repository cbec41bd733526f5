"""The origins the engine_node role fetches wheels from on an upstream's word (issue 30, item 11):
the uv wheel the index's JSON lists, and the +cuNNN wheel github_digest names."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.filter.engine_node_wheels import (
    engine_node_github_wheel, engine_node_uv_wheel_problem)

INDEX = "http://127.0.0.1:8080"
FILES = "https://files.pythonhosted.org"
NAME = "uv-0.13.8-py3-none-manylinux_2_17_x86_64.whl"


@pytest.mark.parametrize("url", [
    "%s/files/%s" % (INDEX, NAME),
    "http://127.0.0.1:8080/a/b/%s" % NAME,
    "https://files.pythonhosted.org/packages/ab/cd/%s" % NAME,
    "HTTP://127.0.0.1:8080/files/%s" % NAME,
])
def test_the_index_s_own_origin_and_its_files_host_are_fetched(url):
    assert engine_node_uv_wheel_problem(url, INDEX, FILES) == ""


@pytest.mark.parametrize("url, why", [
    ("file:///etc/hostname", "its scheme is 'file'"),
    ("ftp://127.0.0.1:8080/%s" % NAME, "its scheme is 'ftp'"),
    ("http://127.0.0.2:8080/files/%s" % NAME, "it is on http://127.0.0.2:8080, not on http://127.0.0.1:8080 nor https://files.pythonhosted.org"),
    ("http://127.0.0.1:8081/files/%s" % NAME, "it is on http://127.0.0.1:8081"),
    ("https://127.0.0.1:8080/files/%s" % NAME, "it is on https://127.0.0.1:8080"),
    ("http://files.pythonhosted.org/%s" % NAME, "it is on http://files.pythonhosted.org"),
    ("http://user:pw@127.0.0.1:8080/files/%s" % NAME, "userinfo"),
    ("http://127.0.0.1:8080/${UV_INDEX_LLMFLEET_DEFAULT_PASSWORD}/%s" % NAME, "'$'"),
    ("http://127.0.0.1:8080/%%24%%7BGITHUB_TOKEN%%7D/%s" % NAME, "decodes to '$'"),
    ("http://127.0.0.1:8080/files/ %s" % NAME, "white space"),
    ("", "there is no URL"),
])
def test_other_urls_are_refused_naming_them(url, why):
    problem = engine_node_uv_wheel_problem(url, INDEX, FILES)
    assert why in problem and "is not fetched" in problem and "%s lists" % INDEX in problem, problem
    assert "pw" not in problem


def test_without_a_files_host_only_the_index_s_origin():
    assert "is not fetched" in engine_node_uv_wheel_problem("%s/packages/%s" % (FILES, NAME), INDEX, "")
    assert engine_node_uv_wheel_problem("%s/files/%s" % (INDEX, NAME), "http://u:p@127.0.0.1:8080/", "") == ""


GITHUB = "http://127.0.0.1:9000/github/download"
ASSET = {"url": "http://127.0.0.1:9000/github/download/vllm-project/vllm/releases/download/v0.20.0/"
                "vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_31_x86_64.whl", "sha256": "3" * 64, "name": "x"}


def test_a_github_wheel_on_the_download_origin_is_taken_as_it_is():
    assert engine_node_github_wheel(ASSET, GITHUB) == ASSET
    assert engine_node_github_wheel({"msg": "HTTP 404"}, GITHUB) == {"msg": "HTTP 404"}


@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.2:9000/x/vllm-0.20.0%2Bcu129.whl", "it is on http://127.0.0.2:9000, not on http://127.0.0.1:9000"),
    ("https://objects.githubusercontent.example/vllm-0.20.0%2Bcu129.whl", "not on http://127.0.0.1:9000"),
    ("file:///etc/hostname", "its scheme is 'file'"),
    ("http://127.0.0.1:9000/${GITHUB_TOKEN}/vllm.whl", "'$'"),
])
def test_a_github_wheel_elsewhere_becomes_a_failed_look_up_naming_it(url, why):
    got = engine_node_github_wheel(dict(ASSET, url=url), GITHUB)
    assert "sha256" not in got and got["refused_url"] == url
    assert why in got["msg"] and url in got["msg"] and "engine_node_github_download_url" in got["msg"], got
