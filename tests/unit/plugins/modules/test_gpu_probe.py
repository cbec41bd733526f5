"""gpu_probe: main() with patched arguments against the fake nvidia-smi; the JSON result checked."""

from __future__ import annotations

import os
import pathlib

import pytest

from ansible_collections.llmfleet.engines.plugins.modules import gpu_probe
from tests.unit.plugins.lookup_fakes import run_module, warnings_text
from tests.unit.plugins.python_envs import fake_runtime_env

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
FAKE_SMI = str(FIXTURES / "bin" / "fake-nvidia-smi")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """module.warn() collects into a process-wide dict: give each test its own, and module-side
    behaviour even when controller code imported earlier in the session set controller mode."""
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings

    monkeypatch.setattr(warnings, "_global_warnings", {})
    monkeypatch.setattr(_internal, "is_controller", False)


@pytest.fixture
def case(monkeypatch):
    def use(name):
        monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(FIXTURES / "nvidia-smi" / name))
    return use


def probe(capsys, **kw):
    args = {"nvidia_smi": FAKE_SMI}
    args.update(kw)
    return run_module(gpu_probe.main, args, capsys)


NODES = [
    # (case, driver, cuda, GPUs, build of 0.20.0, its origin, build of 0.15.1)
    ("h100-580", "580.65.06", "13.0", 1, "cu13", "pypi", "cu129"),
    ("h200-580", "580.82.07", "13.0", 1, "cu13", "pypi", "cu129"),
    ("8xh100-580", "580.65.06", "13.0", 8, "cu13", "pypi", "cu129"),
    ("a100-535", "535.104.05", "12.2", 1, "cu129", "github", "cu129"),
    ("t4-550", "550.54.15", "12.4", 1, "cu129", "github", "cu129"),
    ("mixed-h100-t4-580", "580.65.06", "13.0", 2, "cu13", "pypi", "cu129"),
    ("mixed-a100-v100-535", "535.104.05", "12.2", 2, "none", None, "none"),
    ("v100-535", "535.104.05", "12.2", 1, "none", None, "none"),
]


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("name, driver, cuda, count, build, origin, build_0151", NODES)
def test_facts_and_choice(case, capsys, check_mode, name, driver, cuda, count, build, origin, build_0151):
    case(name)
    code, result, _out = probe(capsys, version="0.20.0", _ansible_check_mode=check_mode)
    assert code == 0 and result["changed"] is False and "failed" not in result
    assert (result["driver_version"], result["cuda_version"], result["gpu_count"]) == (driver, cuda, count)
    assert len(result["gpus"]) == count and result["driver_error"] is None
    assert result["nvidia_smi"] == FAKE_SMI
    choice = result["choice"]
    assert (choice["build"], choice["requested"], choice["version"]) == (build, "auto", "0.20.0")
    assert (choice["source"] or {}).get("origin") == origin
    assert choice["skip_gpu_check"] is (build == "none")
    assert "compute" not in result
    code, result, _out = probe(capsys, version="0.15.1")
    assert result["choice"]["build"] == build_0151


def test_without_version_there_is_no_choice(case, capsys):
    case("a100-535")
    code, result, _out = probe(capsys)
    assert code == 0 and "choice" not in result
    assert result["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_no_driver(capsys, tmp_path):
    missing = str(tmp_path / "no-driver" / "nvidia-smi")
    code, result, _out = probe(capsys, nvidia_smi=missing, version="0.20.0")
    assert code == 0
    assert (result["driver_version"], result["gpus"], result["gpu_count"]) == (None, [], 0)
    assert result["driver_error"] == "%s does not exist" % missing
    assert result["choice"]["build"] == "cu13" and result["choice"]["skip_gpu_check"] is True
    assert "the GPU check will be skipped" in result["choice"]["why"]


def test_driver_not_answering(case, capsys):
    case("not-responding")
    code, result, _out = probe(capsys, version="0.15.1")
    assert code == 0 and result["driver_version"] is None and result["gpus"] == []
    assert "couldn't communicate with the NVIDIA driver" in result["driver_error"]
    assert result["choice"]["build"] == "cu129" and result["choice"]["skip_gpu_check"] is True


def test_hanging_nvidia_smi_fails_the_task(case, capsys):
    case("hanging")
    code, result, _out = probe(capsys, timeout=1)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("reading the node's GPUs: %s --query-gpu=" % FAKE_SMI)
    assert "did not answer within 1 s" in result["msg"]


def test_an_explicit_build_the_node_cannot_run_warns(case, capsys):
    case("a100-535")
    code, result, _out = probe(capsys, version="0.20.0", build="cu13")
    assert code == 0 and result["choice"]["build"] == "cu13"
    assert warnings_text(result) == [
        "build cu13 was asked for, but this node may not run it: driver 535.104.05 is older than 580, which CUDA 13 needs"
    ]


@pytest.fixture
def node_glibc(monkeypatch):
    """The node's glibc as gpu_probe reads it (os.confstr), replaced: an older OS, or musl (None)."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.node import _gpu

    def use(version):
        monkeypatch.setattr(_gpu, "glibc_version", lambda: version)
    return use


def test_an_explicit_build_whose_wheel_the_node_cannot_take_is_blocked_and_warned(case, node_glibc, capsys):
    case("h100-580")
    node_glibc("2.31")   # Ubuntu 20.04; vLLM 0.20.0's PyPI wheel is manylinux_2_35
    code, result, _out = probe(capsys, version="0.20.0", build="cu13")
    assert code == 0 and "failed" not in result and result["glibc"] == "2.31"
    choice = result["choice"]
    assert choice["build"] == "cu13" and choice["runnable"]["cu13"] is False
    assert choice["blocked"].startswith(
        "vLLM 0.20.0 build cu13 cannot be installed on this node (glibc 2.31, %s): glibc 2.31 is older than "
        "2.35, which vLLM 0.20.0's cu13 wheel on PyPI (manylinux_2_35) needs." % result["architecture"])
    assert warnings_text(result) == [choice["blocked"]]


def test_auto_takes_a_build_whose_wheel_fits(case, node_glibc, capsys):
    case("h100-580")
    node_glibc("2.31")
    code, result, _out = probe(capsys, version="0.20.0")
    choice = result["choice"]
    assert (choice["build"], choice["source"]["origin"], choice["blocked"]) == ("cu129", "github", None)
    assert "glibc 2.31 is older than 2.35" in choice["why"]
    code, result, _out = probe(capsys, version="0.21.0")   # manylinux_2_24: fits
    assert result["choice"]["build"] == "cu13" and result["choice"]["blocked"] is None


def test_an_unknown_glibc_is_warned_not_blocked(case, node_glibc, capsys):
    case("h100-580")
    node_glibc(None)   # musl, or a glibc whose version could not be read
    code, result, _out = probe(capsys, version="0.20.0", build="cu13")
    assert code == 0 and result["glibc"] is None
    assert result["choice"]["blocked"] is None and result["choice"]["build"] == "cu13"
    (warning,) = warnings_text(result)
    assert warning.startswith("this node's glibc is not known (its C library is not glibc, such as musl")


@pytest.mark.parametrize("version, build, fragment", [
    ("0.10.1", "auto", "choosing the build of vLLM 0.10.1: vLLM 0.10.1 is older than the oldest version"),
    ("0.11.0", "cu13", "choosing the build of vLLM 0.11.0: vLLM 0.11.0 publishes no cu13 build"),
    ("latest", "auto", "is not a version number"),
])
def test_bad_versions_fail_with_facts_kept(case, capsys, version, build, fragment):
    case("h100-580")
    code, result, _out = probe(capsys, version=version, build=build)
    assert code == 1 and fragment in result["msg"]
    assert result["driver_version"] == "580.65.06"


def test_a_build_outside_the_choices_is_refused(case, capsys):
    case("h100-580")
    code, result, _out = probe(capsys, version="0.20.0", build="cu12")
    assert code == 1 and "value of build must be one of: auto, cu13, cu129, cpu, none" in result["msg"]


@pytest.mark.parametrize("option", ["timeout", "python_timeout"])
def test_timeouts_must_be_positive(case, capsys, option):
    case("h100-580")
    code, result, _out = probe(capsys, **{option: 0})
    assert code == 1 and result["msg"] == "%s must be at least 1 second, not 0" % option


def test_a_python_that_is_not_there_fails(case, capsys, tmp_path):
    case("h100-580")
    code, result, _out = probe(capsys, python=str(tmp_path / "bin" / "python"))
    python = str(tmp_path / "bin" / "python")
    assert code == 1 and result["msg"].startswith("python %s is not run: %s does not exist. It is the interpreter of "
                                                  "the compute check, the interpreter of an engine environment"
                                                  % (python, python)), result["msg"]


@pytest.fixture(scope="module")
def fake_runtime(tmp_path_factory):
    """The interpreter of an environment holding the fake torch 2.11.0 and vLLM 0.20.0."""
    return fake_runtime_env(tmp_path_factory)


def test_compute_check_passes(case, capsys, fake_runtime):
    case("h100-580")
    code, result, _out = probe(capsys, python=fake_runtime, env={"FAKE_TORCH_CUDA": "ok"})
    assert code == 0 and warnings_text(result) == [], warnings_text(result)
    compute = result["compute"]
    assert compute["ok"] is True and compute["engine"] == "vllm" and compute["python"] == fake_runtime
    assert compute["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "ok": True}]
    assert compute["engine_op"]["ok"] is True and compute["engine_op"]["version"] == "0.20.0"


def test_compute_check_failure_is_returned_and_warned(case, capsys, fake_runtime):
    case("h100-580")
    env = {"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_KERNEL": "no_kernel_image"}
    code, result, _out = probe(capsys, python=fake_runtime, env=env)
    assert code == 0 and "failed" not in result
    compute = result["compute"]
    assert compute["ok"] is False and compute["classification"] == "no_kernel_image"
    assert compute["hint"] == "this build has no kernels for this GPU: set engine_node_build to cu129 for this node"
    (warning,) = warnings_text(result)
    assert warning.startswith("the GPU check in %s failed at vllm._custom_ops.rms_norm on GPU 0" % fake_runtime)


def test_engine_none_checks_torch_only(case, capsys, fake_runtime):
    case("h100-580")
    env = {"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_KERNEL": "no_kernel_image"}
    code, result, _out = probe(capsys, python=fake_runtime, env=env, engine="none")
    assert code == 0 and result["compute"]["ok"] is True and result["compute"]["engine_op"] is None


def test_link_is_read_without_following(case, capsys, tmp_path):
    case("h100-580")
    envs = tmp_path / "engines" / "vllm"
    (envs / "0.20.0-cu13").mkdir(parents=True)
    current = envs / "current"
    code, result, _out = probe(capsys, link=str(current))
    assert code == 0 and result["gpu_count"] == 1
    assert result["link"] == {"path": str(current), "exists": False, "is_link": False, "target": None,
                              "target_exists": False}

    current.symlink_to("0.20.0-cu13")
    code, result, _out = probe(capsys, link=str(current), _ansible_check_mode=True)
    assert result["link"] == {"path": str(current), "exists": True, "is_link": True, "target": "0.20.0-cu13",
                              "target_exists": True}

    # its environment removed by hand: the link dangles, and says so
    (envs / "0.20.0-cu13").rmdir()
    code, result, _out = probe(capsys, link=str(current))
    assert (result["link"]["exists"], result["link"]["target"], result["link"]["target_exists"]) == (
        True, "0.20.0-cu13", False)
    assert current.is_symlink()

    # a directory where the link should be is there, but not a link
    current.unlink()
    current.mkdir()
    code, result, _out = probe(capsys, link=str(current))
    assert (result["link"]["exists"], result["link"]["is_link"], result["link"]["target"]) == (True, False, None)


def test_no_link_asked_no_link_returned(case, capsys):
    case("h100-580")
    code, result, _out = probe(capsys)
    assert code == 0 and "link" not in result


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")
@pytest.mark.parametrize("how", ["owned-by-nobody", "in-an-open-directory"])
def test_an_nvidia_smi_or_python_another_user_can_change_is_not_run(capsys, tmp_path, how):
    """nvidia-smi runs as root on every play: one that another user could replace is refused, named."""
    import pwd
    import shutil as _shutil

    folder = tmp_path / "bin"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    marker = tmp_path / "ran"
    smi.write_text("#!/bin/sh\ntouch %s\n" % marker)
    smi.chmod(0o755)
    if how == "owned-by-nobody":
        nobody = pwd.getpwnam("nobody")
        os.chown(str(smi), nobody.pw_uid, nobody.pw_gid)
        culprit = str(smi)
    else:
        folder.chmod(0o777)
        culprit = str(folder)
    code, result, _out = probe(capsys, nvidia_smi=str(smi))
    assert code == 1 and result["msg"].startswith("nvidia_smi %s is not run: %s" % (smi, culprit)), result
    assert result["untrusted"]["component"] == culprit
    assert not marker.exists(), "the untrusted nvidia-smi ran"
    # the same for the compute check's interpreter
    code, result, _out = probe(capsys, python=str(smi))
    assert code == 1 and result["msg"].startswith("python %s is not run" % smi), result
    _shutil.rmtree(str(folder))


def test_the_real_h200_capture_gives_what_gpu_probe_answered_on_the_device(case, node_glibc, capsys):
    """tests/fixtures/nvidia-smi/h200-580-device is the real nvidia-smi of a lent H200, captured by
    tools/device_check.sh together with what gpu_probe answered there (device-gpu_probe.json).
    Replayed here, the same arguments must give the same facts and the same choice."""
    import json

    captured = FIXTURES / "nvidia-smi" / "h200-580-device"
    there = json.loads((captured / "device-gpu_probe.json").read_text())
    case("h200-580-device")
    node_glibc(there["glibc"])
    code, result, _out = probe(capsys, version="0.20.0", build="auto", timeout=60)
    assert code == 0 and "failed" not in result
    for key in ("gpus", "gpu_count", "driver_version", "cuda_version", "driver_error", "glibc"):
        assert result[key] == there[key], key
    if result["architecture"] == there["architecture"]:
        assert result["choice"] == there["choice"]
    else:   # the choice names the node's architecture only where a wheel does not fit
        assert result["choice"]["build"] == there["choice"]["build"]


def test_build_cpu_checks_on_the_cpu_without_a_driver(capsys, fake_runtime, tmp_path):
    """No nvidia-smi at all: build cpu's compute check runs on the CPU and passes; the GPU check fails there."""
    absent = str(tmp_path / "no-driver" / "nvidia-smi")
    code, result, _out = probe(capsys, nvidia_smi=absent, python=fake_runtime, build="cpu")
    assert code == 0 and result["driver_version"] is None and result["gpus"] == []
    compute = result["compute"]
    assert compute["ok"] is True and compute["target"] == "cpu", compute
    assert compute["engine_op"]["ok"] is True and compute["devices"][0]["name"].startswith("cpu (")
    code, result, _out = probe(capsys, nvidia_smi=absent, python=fake_runtime)
    assert result["compute"]["ok"] is False and result["compute"]["classification"] == "no_device"


def test_build_cpu_of_0_31_0_on_this_nodes_glibc(capsys, tmp_path):
    """The choice on this machine's own glibc: blocked below 2.39, naming both, else cpu."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds, _gpu

    code, result, _out = probe(capsys, nvidia_smi=str(tmp_path / "none"), version="0.31.0", build="cpu")
    assert code == 0 and result["choice"]["build"] == "cpu"
    glibc = _gpu.glibc_version()
    if _builds.at_least(glibc, "2.39"):
        assert result["choice"]["blocked"] is None
    else:
        assert "glibc %s is older than 2.39" % glibc in result["choice"]["blocked"]
        assert result["choice"]["blocked"] in warnings_text(result)
