"""The pure parts of _devpi: which wheels fit a node, a wheel's project, index names, credentials."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils._devpi import (
    DevpiError,
    check_index_name,
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
