"""Issue 27, items 2 and 5, with the real uv against the fake upstream: packages left out of the lock
(``omit_packages``, uv's ``--no-emit-package``) and FlashInfer's kernels resolved into the same lock
(``kernels_index_url``, ``kernels_label``), by uv_fleet_lock on the controller and by uv_engine_env
on a node; the node installs with ``--require-hashes`` from what was locked."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import urllib.request

import pytest

from tests.system.test_uv_engine_env_credentials import module_args, run_module as run_engine_env
from tests.system.test_uv_fleet_lock import CUTOFF_0200, fleet_args, run_fleet_lock
from tests.integration.test_targets import system_python

pytestmark = pytest.mark.integration

KERNEL_VERSION = "0.7.2.post1"


def node_python():
    import subprocess
    out = subprocess.check_output([system_python(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], text=True)
    return out.strip()


def installed(env_path):
    """The distributions in an environment's site-packages, by their dist-info directory names."""
    pattern = os.path.join(str(env_path), "lib", "python*", "site-packages", "*.dist-info")
    return sorted(os.path.basename(p) for p in glob.glob(pattern))


def sha256_of(upstream, path):
    with urllib.request.urlopen(upstream.url + path) as resp:  # noqa: S310 - 127.0.0.1
        return hashlib.sha256(resp.read()).hexdigest()


def test_an_omitted_package_is_left_out_of_the_lock_and_the_environment(upstream, tmp_path):
    py = node_python()
    args = fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", py, pylock=True,
                      omit_packages=["llmfleet_fakedep"])
    result = run_fleet_lock(tmp_path, args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["packages"] == {"torch": "2.11.0", "vllm": "0.20.0"}
    assert ["--no-emit-package", "llmfleet-fakedep"] == result["cmd"][result["cmd"].index("--no-emit-package"):][:2]
    text = open(result["path"]).read()
    assert not re.search(r"^llmfleet-fakedep", text, re.MULTILINE)
    assert 'name = "llmfleet-fakedep"' not in open(result["pylock_path"]).read()
    # the list is part of the lock's identity, in any order and spelling
    again = run_fleet_lock(tmp_path, dict(args, omit_packages=["LLMFLEET-fakedep", "llmfleet.fakedep"]))
    assert again["changed"] is False, again
    other = run_fleet_lock(tmp_path, dict(args, omit_packages=[]))
    assert other["changed"] is True and other["reasons"] == ["the inputs changed: omit_packages"]
    assert other["packages"]["llmfleet-fakedep"] == "1.1.0"

    # a node from the lock without it: --require-hashes, nothing resolved, the package not there
    path = tmp_path / "node" / "vllm"
    node = module_args(path, version="0.20.0", index_url=upstream.url + "/simple", lock=text,
                       omit_packages=["llmfleet-fakedep"])
    del node["exclude_newer"]
    env, _out = run_engine_env(tmp_path, node)
    assert env.get("failed") is not True, env.get("msg")
    dists = installed(path)
    assert any(d.startswith("vllm-0.20.0") for d in dists) and not any("fakedep" in d for d in dists)
    # and a lock that still holds it is refused for that node
    path2 = tmp_path / "node2" / "vllm"
    node2 = dict(node, path=str(path2), lock=open(other["path"]).read())
    refused, _out = run_engine_env(tmp_path, node2)
    assert refused.get("failed") is True
    assert "llmfleet-fakedep 1.1.0" in refused["msg"] and "omit_packages leaves it out" in refused["msg"]
    assert not path2.exists()


def test_an_environment_that_resolves_itself_leaves_them_out_too(upstream, tmp_path):
    path = tmp_path / "env"
    args = module_args(path, version="0.20.0", exclude_newer=CUTOFF_0200, index_url=upstream.url + "/simple",
                       omit_packages=["llmfleet-fakedep"])
    result, _out = run_engine_env(tmp_path, args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["lock"]["packages"] == {"torch": "2.11.0", "vllm": "0.20.0"}
    assert result["marker"]["spec"]["omit_packages"] == ["llmfleet-fakedep"]
    assert not any("fakedep" in d for d in installed(path))
    again, _out = run_engine_env(tmp_path, dict(args, omit_packages=["llmfleet_fakedep", "llmfleet-fakedep"]))
    assert again["changed"] is False, again.get("msg")


@pytest.mark.parametrize("omit, option, value", [
    (["vllm"], "omit_packages[0]", "'vllm'"),
    (["torch", "Vllm"], "omit_packages[1]", "'Vllm'"),
    (["torch vision"], "omit_packages[0]", "'torch vision'"),
    (["-torch"], "omit_packages[0]", "'-torch'"),
])
def test_a_bad_or_engine_name_is_refused_naming_the_parameter_and_value(upstream, tmp_path, omit, option, value):
    result = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", omit_packages=omit))
    assert result.get("failed") is True
    assert result["msg"].startswith("%s %s" % (option, value)), result["msg"]
    assert not os.path.exists(result["path"])
    env, _out = run_engine_env(tmp_path, module_args(tmp_path / "env", version="0.20.0", exclude_newer=CUTOFF_0200,
                                                     index_url=upstream.url + "/simple", omit_packages=omit))
    assert env.get("failed") is True and env["msg"].startswith("%s %s" % (option, value)), env["msg"]


def kernels(upstream, label):
    return {"kernels_index_url": upstream.url + "/flashinfer/whl/" + label, "kernels_label": label}


def test_flashinfer_kernels_join_the_fleet_lock_at_its_version_and_the_node_installs_them(upstream, tmp_path):
    py = node_python()
    args = fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", py, requirements=["flashinfer-python"],
                      **kernels(upstream, "cu129"))
    result = run_fleet_lock(tmp_path, args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["packages"]["flashinfer-python"] == KERNEL_VERSION
    assert result["packages"]["flashinfer-cubin"] == KERNEL_VERSION
    assert result["packages"]["flashinfer-jit-cache"] == KERNEL_VERSION + "+cu129"
    text = open(result["path"]).read()
    cubin = sha256_of(upstream, "/files/flashinfer_cubin-%s-py3-none-any.whl" % KERNEL_VERSION)
    jit = sha256_of(upstream, "/flashinfer/files/flashinfer_jit_cache-%s%%2Bcu129-py3-none-any.whl" % KERNEL_VERSION)
    assert "flashinfer-cubin==%s \\\n    --hash=sha256:%s" % (KERNEL_VERSION, cubin) in text
    assert "flashinfer-jit-cache==%s+cu129 \\\n    --hash=sha256:%s" % (KERNEL_VERSION, jit) in text
    assert jit in open(result["pylock_path"]).read()
    again = run_fleet_lock(tmp_path, args)
    assert again["changed"] is False

    path = tmp_path / "node" / "vllm"
    node = module_args(path, version="0.20.0", index_url=upstream.url + "/simple", lock=text,
                       **kernels(upstream, "cu129"))
    del node["exclude_newer"]
    env, _out = run_engine_env(tmp_path, node)
    assert env.get("failed") is not True, env.get("msg")
    dists = installed(path)
    for name in ("flashinfer_cubin-%s" % KERNEL_VERSION, "flashinfer_jit_cache-%s+cu129" % KERNEL_VERSION,
                 "flashinfer_python-%s" % KERNEL_VERSION):
        assert name + ".dist-info" in dists, dists


def test_a_fleet_lock_without_the_kernels_is_refused_by_a_node_that_wants_them(upstream, tmp_path):
    plain = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", node_python(),
                                                requirements=["flashinfer-python"]))
    assert plain.get("failed") is not True, plain.get("msg")
    assert "flashinfer-cubin" not in plain["packages"]
    path = tmp_path / "node" / "vllm"
    node = module_args(path, version="0.20.0", index_url=upstream.url + "/simple", lock=open(plain["path"]).read(),
                       **kernels(upstream, "cu129"))
    del node["exclude_newer"]
    env, _out = run_engine_env(tmp_path, node)
    assert env.get("failed") is True
    assert "flashinfer-cubin is not in the lock (wanted %s)" % KERNEL_VERSION in env["msg"], env["msg"]
    assert not path.exists()


def test_a_kernel_index_without_the_version_fails_naming_package_version_and_index(upstream, tmp_path):
    args = fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28", requirements=["flashinfer-python"],
                      **kernels(upstream, "cu130"))
    result = run_fleet_lock(tmp_path, args)
    assert result.get("failed") is True
    index = upstream.url + "/flashinfer/whl/cu130"
    said = "could not be resolved: flashinfer-jit-cache==%s+cu130, from the kernels' index %s" % (KERNEL_VERSION, index)
    assert said in result["msg"], result["msg"]
    assert not os.path.exists(result["path"])

    path = tmp_path / "env"
    env, _out = run_engine_env(tmp_path, module_args(path, version="0.20.0", exclude_newer=CUTOFF_0200,
                                                     index_url=upstream.url + "/simple",
                                                     requirements=["flashinfer-python"], **kernels(upstream, "cu130")))
    assert env.get("failed") is True
    assert said in env["msg"], env["msg"]
    assert not path.exists()


def test_the_environment_resolving_itself_gets_the_kernels_and_a_lock_without_flashinfer_is_unchanged(upstream, tmp_path):
    path = tmp_path / "env"
    args = module_args(path, version="0.20.0", exclude_newer=CUTOFF_0200, index_url=upstream.url + "/simple",
                       requirements=["flashinfer-python"], **kernels(upstream, "cu129"))
    result, _out = run_engine_env(tmp_path, args)
    assert result.get("failed") is not True, result.get("msg")
    assert result["lock"]["packages"]["flashinfer-jit-cache"] == KERNEL_VERSION + "+cu129"
    assert result["lock"]["packages"]["flashinfer-cubin"] == KERNEL_VERSION
    assert "flashinfer_jit_cache-%s+cu129.dist-info" % KERNEL_VERSION in installed(path)
    assert result["marker"]["spec"]["kernels"] == {"index_url": args["kernels_index_url"], "label": "cu129"}

    # no flashinfer-python in the lock: the kernels options add nothing
    plain = run_fleet_lock(tmp_path, fleet_args(upstream, tmp_path, "x86_64-manylinux_2_28",
                                                **kernels(upstream, "cu130")))
    assert plain.get("failed") is not True, plain.get("msg")
    assert plain["packages"] == {"llmfleet-fakedep": "1.1.0", "torch": "2.11.0", "vllm": "0.20.0"}
