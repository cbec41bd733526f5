"""_gpu: nvidia-smi parsing, facts, the compute check and its classifier."""

from __future__ import annotations

import json
import os
import pathlib
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds, _gpu
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from tests.unit.plugins.python_envs import fake_runtime_env, make_env

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures"
SMI_CASES = FIXTURES / "nvidia-smi"
FAKE_SMI = str(FIXTURES / "bin" / "fake-nvidia-smi")

# the collection's one runner, for real
real_run = _proc.Runner(grace=1.0)


class Canned:
    """A runner that answers from a script, ``(rc, out, err[, timed_out])`` each, and records
    what it was asked to run: ``(argv, env, timeout)``."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv, data=None, env=None, cwd=None, timeout=None):
        self.calls.append((argv, env, timeout))
        return _proc.CommandResult(*self.answers.pop(0))

    def commands(self):
        return [argv for argv, _env, _timeout in self.calls]


# --- parsing the captured outputs ---------------------------------------------------------

# case: (driver, cuda, [(name, compute capability, MiB), ...])
NODES = {
    "h100-580": ("580.65.06", "13.0", [("NVIDIA H100 80GB HBM3", "9.0", 81559)]),
    "h200-580": ("580.82.07", "13.0", [("NVIDIA H200", "9.0", 143771)]),
    "a100-535": ("535.104.05", "12.2", [("NVIDIA A100-SXM4-80GB", "8.0", 81920)]),
    "t4-550": ("550.54.15", "12.4", [("Tesla T4", "7.5", 15360)]),
    "v100-535": ("535.104.05", "12.2", [("Tesla V100-SXM2-32GB", "7.0", 32768)]),
    "mixed-a100-v100-535": ("535.104.05", "12.2", [("NVIDIA A100-SXM4-40GB", "8.0", 40960),
                                                   ("Tesla V100-SXM2-32GB", "7.0", 32768)]),
    "mixed-h100-t4-580": ("580.65.06", "13.0", [("NVIDIA H100 80GB HBM3", "9.0", 81559), ("Tesla T4", "7.5", 15360)]),
    "8xh100-580": ("580.65.06", "13.0", [("NVIDIA H100 80GB HBM3", "9.0", 81559)] * 8),
}


@pytest.mark.parametrize("case", sorted(NODES))
def test_parse_query_of_each_captured_node(case):
    driver, _cuda, gpus = NODES[case]
    got_driver, got = _gpu.parse_query((SMI_CASES / case / "query-gpu.csv").read_text())
    assert got_driver == driver
    assert [(g["name"], g["compute_capability"], g["memory_mib"]) for g in got] == gpus
    assert [g["index"] for g in got] == list(range(len(gpus)))
    assert all(g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40 for g in got)
    assert len({g["uuid"] for g in got}) == len(got)


@pytest.mark.parametrize("case", sorted(NODES))
def test_parse_xml_of_each_captured_node(case):
    driver, cuda, gpus = NODES[case]
    info = _gpu.parse_xml((SMI_CASES / case / "q-x.xml").read_text())
    assert info == {"driver_version": driver, "cuda_version": cuda, "attached_gpus": len(gpus)}


def test_parse_query_keeps_a_name_with_a_comma_and_sorts_by_index():
    text = "1, NVIDIA A100, PCIe, GPU-b, 8.0, 40960, 535.104.05\n0, Tesla T4, GPU-a, [N/A], [N/A], 535.104.05\n"
    driver, gpus = _gpu.parse_query(text)
    assert driver == "535.104.05"
    assert gpus == [
        {"index": 0, "name": "Tesla T4", "uuid": "GPU-a", "compute_capability": None, "memory_mib": None},
        {"index": 1, "name": "NVIDIA A100, PCIe", "uuid": "GPU-b", "compute_capability": "8.0", "memory_mib": 40960},
    ]


@pytest.mark.parametrize("text", ["0, Tesla T4, GPU-a\n", "x, Tesla T4, GPU-a, 7.5, 15360, 550.54.15\n"])
def test_parse_query_refuses_lines_it_cannot_read(text):
    with pytest.raises(_gpu.NvidiaSmiError, match="nvidia-smi printed a line"):
        _gpu.parse_query(text)


def test_parse_xml_tolerates_a_warning_before_the_document():
    xml = (SMI_CASES / "a100-535" / "q-x.xml").read_text()
    assert _gpu.parse_xml("WARNING: infoROM is corrupted at gpu 0000:18:00.0\n" + xml)["cuda_version"] == "12.2"


@pytest.mark.parametrize("text, match", [("Unknown Error\n", "printed no XML"), ("<nvidia_smi_log><driver", "does not parse")])
def test_parse_xml_refuses_what_is_not_its_xml(text, match):
    with pytest.raises(_gpu.NvidiaSmiError, match=match):
        _gpu.parse_xml(text)


# --- facts through a canned runner --------------------------------------------------------

QUERY = _gpu.query_argv("/usr/bin/nvidia-smi")
XML = ["/usr/bin/nvidia-smi", "-q", "-x"]
A100_CSV = (SMI_CASES / "a100-535" / "query-gpu.csv").read_text()
A100_XML = (SMI_CASES / "a100-535" / "q-x.xml").read_text()
NOT_ANSWERING = (SMI_CASES / "not-responding" / "fail.txt").read_text()


@pytest.fixture
def smi_path(monkeypatch):
    """Make /usr/bin/nvidia-smi look present and executable, whatever this machine has."""
    real_exists, real_access, real_isdir = os.path.exists, os.access, os.path.isdir
    target = "/usr/bin/nvidia-smi"
    monkeypatch.setattr(_gpu.os.path, "exists", lambda p: p == target or real_exists(p))
    monkeypatch.setattr(_gpu.os, "access", lambda p, m: p == target or real_access(p, m))
    monkeypatch.setattr(_gpu.os.path, "isdir", lambda p: False if p == target else real_isdir(p))
    return target


def test_facts_ask_both_commands_each_within_the_timeout(smi_path):
    runner = Canned((0, A100_CSV, ""), (0, A100_XML, ""))
    facts = _gpu.gather_facts(runner, smi_path, timeout=7)
    assert runner.commands() == [
        [smi_path, "--query-gpu=index,name,uuid,compute_cap,memory.total,driver_version",
         "--format=csv,noheader,nounits"],
        XML,
    ]
    assert [timeout for _argv, _env, timeout in runner.calls] == [7, 7]
    assert facts["driver_version"] == "535.104.05" and facts["cuda_version"] == "12.2"
    assert facts["gpu_count"] == 1 and facts["gpus"][0]["compute_capability"] == "8.0"
    assert facts["driver_error"] is None and facts["nvidia_smi"] == smi_path


def test_without_cuda_one_command_gives_the_driver_and_the_gpus(smi_path):
    """cuda=False (the engine_node plan of every run): no -q -x, the slow command on a node of many GPUs."""
    runner = Canned((0, A100_CSV, ""))
    facts = _gpu.gather_facts(runner, smi_path, timeout=7, cuda=False)
    assert runner.commands() == [QUERY]
    assert facts["driver_version"] == "535.104.05" and facts["cuda_version"] is None
    assert facts["gpu_count"] == 1 and facts["gpus"][0]["compute_capability"] == "8.0"
    assert facts["driver_error"] is None


@pytest.mark.parametrize("case", sorted(NODES))
def test_the_build_chosen_without_cuda_is_the_one_chosen_with_it(monkeypatch, case):
    """What the plan decides from (the driver, the GPUs) is the same with one command as with both."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(SMI_CASES / case))
    both = _gpu.gather_facts(real_run, FAKE_SMI, timeout=20)
    one = _gpu.gather_facts(real_run, FAKE_SMI, timeout=20, cuda=False)
    assert dict(one, cuda_version=both["cuda_version"]) == both
    for version in ("0.20.0", "0.11.0", "0.31.0"):
        assert _builds.choose(one, version, "auto") == _builds.choose(both, version, "auto")


@pytest.mark.parametrize("rc, out", [(9, NOT_ANSWERING), (12, "NVML Shared Library Not Found\n"),
                                     (6, "No devices were found\n"), (255, NOT_ANSWERING)])
def test_a_driver_that_does_not_answer_is_a_fact(smi_path, rc, out):
    runner = Canned((rc, out, ""))
    facts = _gpu.gather_facts(runner, smi_path)
    assert facts["driver_version"] is None and facts["gpus"] == [] and facts["gpu_count"] == 0
    assert facts["driver_error"] == out.strip()
    assert len(runner.calls) == 1


def test_an_old_driver_without_compute_cap_is_asked_again_without_it(smi_path):
    runner = Canned((2, 'Field "compute_cap" is not a valid field to query.\n\n', ""),
                    (0, "0, Tesla K80, GPU-k, 11441, 470.82.01\n", ""), (0, A100_XML, ""))
    facts = _gpu.gather_facts(runner, smi_path)
    assert runner.commands()[1][1] == "--query-gpu=index,name,uuid,memory.total,driver_version"
    assert facts["gpus"] == [{"index": 0, "name": "Tesla K80", "uuid": "GPU-k", "compute_capability": None,
                              "memory_mib": 11441}]


def test_other_nvidia_smi_failures_are_errors(smi_path):
    lost = "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    with pytest.raises(_gpu.NvidiaSmiError, match=r"exited 15: Unable to determine the device handle"):
        _gpu.gather_facts(Canned((15, lost, "")), smi_path)
    with pytest.raises(_gpu.NvidiaSmiError, match=r"-q -x exited 3"):
        _gpu.gather_facts(Canned((0, A100_CSV, ""), (3, "Not Supported\n", "")), smi_path)


def test_a_hanging_nvidia_smi_is_an_error_that_says_so(smi_path):
    runner = Canned((137, "", "", True))
    with pytest.raises(_gpu.NvidiaSmiTimeout, match=r"did not answer within 5 s: the driver or a GPU may be hung"):
        _gpu.gather_facts(runner, smi_path, timeout=5)


@pytest.mark.parametrize("rc", [124, 137])
def test_exit_124_or_137_of_nvidia_smi_itself_is_not_a_timeout(smi_path, rc):
    # nvidia-smi's own exit status (or a kill by someone else): only the runner says timed out
    with pytest.raises(_gpu.NvidiaSmiError, match="exited %d" % rc):
        _gpu.gather_facts(Canned((rc, "weird\n", "")), smi_path, timeout=5)


def test_no_nvidia_smi_is_a_fact_and_runs_nothing(tmp_path):
    runner = Canned()
    facts = _gpu.gather_facts(runner, None)
    assert facts["driver_version"] is None and facts["gpus"] == []
    assert "no nvidia-smi on this node" in facts["driver_error"]
    missing = str(tmp_path / "nvidia-smi")
    facts = _gpu.gather_facts(runner, missing)
    assert facts["driver_error"] == "%s does not exist" % missing and facts["nvidia_smi"] == missing
    assert runner.calls == []


def test_a_directory_given_as_nvidia_smi_is_an_error(tmp_path):
    with pytest.raises(_gpu.NvidiaSmiError, match="is not an executable file"):
        _gpu.gather_facts(Canned(), str(tmp_path))


def test_glibc_and_architecture_are_always_reported():
    facts = _gpu.gather_facts(Canned(), None)
    libc = os.confstr("CS_GNU_LIBC_VERSION")
    assert facts["glibc"] == (libc.split()[1] if libc and libc.startswith("glibc") else None)
    assert facts["architecture"] == os.uname().machine


# --- facts from the fake nvidia-smi, run for real ------------------------------------------


@pytest.mark.parametrize("case", sorted(NODES))
def test_facts_from_the_fake_nvidia_smi(monkeypatch, case):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(SMI_CASES / case))
    facts = _gpu.gather_facts(real_run, FAKE_SMI, timeout=20)
    driver, cuda, gpus = NODES[case]
    assert (facts["driver_version"], facts["cuda_version"], facts["gpu_count"]) == (driver, cuda, len(gpus))
    assert [(g["name"], g["compute_capability"], g["memory_mib"]) for g in facts["gpus"]] == gpus


def test_not_responding_from_the_fake_nvidia_smi(monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(SMI_CASES / "not-responding"))
    facts = _gpu.gather_facts(real_run, FAKE_SMI, timeout=20)
    assert facts["driver_version"] is None and facts["gpus"] == []
    assert facts["driver_error"].startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")


def test_hanging_fake_nvidia_smi_is_cut_off(monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CASE", str(SMI_CASES / "hanging"))
    started = time.monotonic()
    with pytest.raises(_gpu.NvidiaSmiTimeout, match="did not answer within 1 s"):
        _gpu.gather_facts(real_run, FAKE_SMI, timeout=1)
    assert time.monotonic() - started < 10


# --- the classifier -----------------------------------------------------------------------

NO_KERNEL = "RuntimeError: CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors might"
PTX = "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain."
DRIVER_OLD = ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12020). "
              "Please update your GPU driver")
INSUFFICIENT = "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
CUDART13 = "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
CUDART12 = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
GLIBC = ("ImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found "
         "(required by /venv/lib/python3.11/site-packages/vllm/_C.abi3.so)")
H100_DEV = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}]
V100_DEV = [{"index": 0, "name": "NVIDIA A100", "capability": "8.0"}, {"index": 1, "name": "Tesla V100", "capability": "7.0"}]

CLASSES = [
    # (text, torch_cuda, devices, classification, hint fragment)
    (NO_KERNEL, "13.0", H100_DEV, "no_kernel_image",
     "this build has no kernels for this GPU: set engine_node_build to cu129 for this node"),
    (NO_KERNEL, "12.9", H100_DEV, "no_kernel_image",
     "this build has no kernels for this GPU: set engine_node_build to cu13 for this node"),
    (NO_KERNEL, "12.9", V100_DEV, "no_kernel_image",
     "GPU 1 (Tesla V100) has compute capability 7.0, older than any vLLM build supports (7.5): "
     "set engine_node_build to none for this node"),
    (PTX, "13.0", H100_DEV, "unsupported_ptx", "set engine_node_build to cu129 for this node, or upgrade the driver"),
    (PTX, "12.9", H100_DEV, "unsupported_ptx", "upgrade the driver (CUDA 12.9 runs fully from driver 575.51.03)"),
    (DRIVER_OLD, "13.0", [], "driver_too_old",
     "set engine_node_build to cu129 for this node, or upgrade the NVIDIA driver to 580 or newer"),
    (INSUFFICIENT, "12.9", [], "driver_too_old", "upgrade the NVIDIA driver to 525.60.13 or newer"),
    (CUDART13, "12.9", H100_DEV, "cuda_runtime_mismatch",
     "the engine was built for CUDA 13 (it looks for libcudart.so.13) and torch here is a CUDA 12.9 build: "
     "rebuild the environment with torch from the PyTorch index of the build (cu130)"),
    (CUDART12, "13.0", H100_DEV, "cuda_runtime_mismatch", "PyTorch index of the build (cu129)"),
    (CUDART13, "13.0", H100_DEV, "cuda_runtime_mismatch", "libcudart.so.13, which the engine and torch (CUDA 13.0) both need"),
    ("ImportError: libcublasLt.so.12: cannot open shared object file", "13.0", H100_DEV, "cuda_runtime_mismatch",
     "built for CUDA 12 (it looks for libcublasLt.so.12)"),
    ("ImportError: libnccl.so.2: cannot open shared object file", "13.0", H100_DEV, "other", "not recognised"),
    (GLIBC, "13.0", H100_DEV, "glibc", "the engine's compiled code needs glibc 2.38 and this node has"),
    ("RuntimeError: Found no NVIDIA driver on your system.", "13.0", [], "no_device", "torch sees no GPU"),
    ("RuntimeError: No CUDA GPUs are available", "13.0", [], "no_device", "CUDA_VISIBLE_DEVICES"),
    ("AssertionError: Torch not compiled with CUDA enabled", None, [], "no_device", "CPU-only build"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "13.0", H100_DEV, "other", "not recognised"),
]


@pytest.mark.parametrize("text, torch_cuda, devices, kind, hint", CLASSES)
def test_classify(text, torch_cuda, devices, kind, hint):
    got_kind, got_hint = _gpu.classify("Traceback ...\n" + text + "\n", {"torch_cuda": torch_cuda, "devices": devices})
    assert got_kind == kind
    assert hint in got_hint
    assert got_kind in _gpu.CLASSIFICATIONS


# --- the compute check, canned ------------------------------------------------------------


def doc(**kw):
    out = {"llmfleet_gpu_check": 1, "ok": False, "stage": None, "error": None, "traceback": None, "torch": "2.11.0",
           "torch_cuda": "13.0", "arch_list": ["sm_90"], "devices": [], "engine_op": None, "warnings": []}
    out.update(kw)
    return json.dumps(out)


def test_check_passes_and_keeps_other_output_apart():
    out = "INFO 11-30 vllm logging on stdout\n{not json\n" + doc(ok=True, devices=H100_DEV) + "\n"
    runner = Canned((0, out, "a warning on stderr\n"))
    result = _gpu.compute_check(runner, "/env/bin/python", 60, env={"CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": "/x"})
    argv, env, timeout = runner.calls[0]
    assert argv == ["/env/bin/python", "-I", "-u", "-c", _gpu.COMPUTE_CHECK_SCRIPT, "vllm"] and timeout == 60
    # PYTHONPATH and PYTHONHOME removed, given or inherited
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": None, "PYTHONHOME": None}
    assert result["ok"] is True and result["classification"] is None and result["hint"] is None
    assert result["devices"] == H100_DEV and result["stage"] is None
    assert result["output"] == "INFO 11-30 vllm logging on stdout\n{not json\na warning on stderr"


def test_check_failure_is_classified_from_the_document():
    out = doc(stage="torch computing on GPU 0", error="RuntimeError: CUDA error: no kernel image is available "
              "for execution on the device", devices=H100_DEV) + "\n"
    result = _gpu.compute_check(Canned((1, out, "")), "/env/bin/python", 60, engine="none")
    assert result["ok"] is False and result["engine"] == "none"
    assert (result["classification"], result["stage"]) == ("no_kernel_image", "torch computing on GPU 0")
    assert result["hint"] == "this build has no kernels for this GPU: set engine_node_build to cu129 for this node"
    msg = _gpu.failure_message(result)
    assert msg.startswith("the GPU check in /env/bin/python failed at torch computing on GPU 0: RuntimeError")
    assert "[no_kernel_image] this build has no kernels" in msg


def test_check_classifies_from_warnings_too():
    out = doc(stage="CUDA initialisation", error="RuntimeError: torch sees no CUDA device",
              warnings=["UserWarning: CUDA initialization: The NVIDIA driver on your system is too old"]) + "\n"
    result = _gpu.compute_check(Canned((1, out, "")), "/env/bin/python", 60)
    assert result["classification"] == "driver_too_old"


def test_an_interpreter_that_dies_before_the_document_is_classified_from_its_output():
    err = "Traceback (most recent call last):\n  ...\n" + GLIBC + "\n"
    result = _gpu.compute_check(Canned((1, "", err)), "/env/bin/python", 60)
    assert result["ok"] is False and result["classification"] == "glibc"
    assert result["error"] == "/env/bin/python exited 1 without the check's result"
    assert result["stage"] == "start of the interpreter"
    assert "GLIBC_2.38" in result["output"]


def test_a_passing_document_with_a_failing_exit_is_not_a_pass():
    result = _gpu.compute_check(Canned((139, doc(ok=True) + "\n", "Segmentation fault\n")), "/env/bin/python", 60)
    assert result["ok"] is False and result["error"] == "the check passed but /env/bin/python exited 139"
    assert result["classification"] == "other"


def test_a_check_that_runs_out_of_time():
    result = _gpu.compute_check(Canned((137, "loading...\n", "", True)), "/env/bin/python", 30)
    assert result["ok"] is False and result["timed_out"] is True and result["classification"] == "other"
    assert result["error"] == "did not finish within 30 s"
    assert "raise the timeout" in result["hint"] and result["output"] == "loading..."


# --- the compute check, run for real in an interpreter with the fake torch and vLLM ----------


@pytest.fixture(scope="module")
def fake_runtime(tmp_path_factory):
    """The interpreter of an environment holding the fake torch and vLLM (the check runs
    isolated, so PYTHONPATH cannot bring them)."""
    return fake_runtime_env(tmp_path_factory)


FAKE_MODES = [
    # (environment, ok, classification, stage)
    ({"FAKE_TORCH_CUDA": "ok"}, True, None, None),
    ({"FAKE_TORCH_CUDA": "ok", "FAKE_TORCH_GPUS": "NVIDIA H100 80GB HBM3=9.0;Tesla T4=7.5"}, True, None, None),
    ({"FAKE_TORCH_CUDA": "none"}, False, "no_device", "CUDA initialisation"),
    ({"FAKE_TORCH_CUDA": "no_kernel_image"}, False, "no_kernel_image", "torch computing on GPU 0"),
    ({"FAKE_TORCH_CUDA": "unsupported_ptx"}, False, "unsupported_ptx", "torch computing on GPU 0"),
    ({"FAKE_TORCH_CUDA": "driver_too_old"}, False, "driver_too_old", "CUDA initialisation"),
    ({"FAKE_TORCH_CUDA": "missing_libcudart"}, False, "cuda_runtime_mismatch", "import vllm._C"),
    ({"FAKE_TORCH_CUDA": "glibc"}, False, "glibc", "import vllm._C"),
    ({"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_KERNEL": "no_kernel_image"}, False, "no_kernel_image",
     "vllm._custom_ops.rms_norm on GPU 0"),
]


@pytest.mark.parametrize("env, ok, kind, stage", FAKE_MODES)
def test_compute_check_with_the_fake_runtime(fake_runtime, env, ok, kind, stage):
    result = _gpu.compute_check(real_run, fake_runtime, 60, env=env)
    assert (result["ok"], result["classification"], result["stage"]) == (ok, kind, stage), result
    assert result["torch"] == "2.11.0" and result["torch_cuda"] == "13.0"
    if ok:
        gpus = env.get("FAKE_TORCH_GPUS", "NVIDIA H100 80GB HBM3=9.0").split(";")
        assert [d["name"] + "=" + d["capability"] for d in result["devices"]] == gpus
        assert all(d["ok"] for d in result["devices"])
        assert result["engine_op"] == {"name": "vllm", "version": "0.20.0", "op": "vllm._custom_ops.rms_norm", "ok": True}
        assert "sm_90" in result["arch_list"]
    else:
        assert result["hint"] and result["error"]


def test_the_engine_op_proves_more_than_torch(fake_runtime):
    env = {"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_KERNEL": "no_kernel_image"}
    torch_only = _gpu.compute_check(real_run, fake_runtime, 60, env=env, engine="none")
    assert torch_only["ok"] is True and torch_only["engine_op"] is None
    with_engine = _gpu.compute_check(real_run, fake_runtime, 60, env=env, engine="vllm")
    assert with_engine["ok"] is False and with_engine["devices"][0]["ok"] is True
    assert with_engine["engine_op"]["ok"] is False


def tiny_torch(version, arithmetic="(self.v * 2 + 1)", sum_of="self.v * 256", prelude=""):
    """A torch of a few lines: enough API for the check with engine none."""
    return (
        prelude
        + "__version__ = %r\n" % version
        + "float16 = float32 = 'f'\n"
        "class version: cuda = '13.0'\n"
        "class T:\n"
        "    def __init__(self, v): self.v = v\n"
        "    def __mul__(self, o): return T(self.v * o if %s else self.v)\n" % (arithmetic != "broken")
        + "    def __add__(self, o): return T(self.v + o if %s else self.v)\n" % (arithmetic != "broken")
        + "    def float(self): return self\n"
        "    def sum(self): return T(%s)\n" % sum_of
        + "    def item(self): return self.v\n"
        "def ones(*shape, device=None, dtype=None): return T(1.0)\n"
        "class cuda:\n"
        "    is_available = staticmethod(lambda: True)\n"
        "    device_count = staticmethod(lambda: 1)\n"
        "    get_arch_list = staticmethod(lambda: ['sm_90'])\n"
        "    get_device_name = staticmethod(lambda i: 'Tiny GPU')\n"
        "    get_device_capability = staticmethod(lambda i: (9, 0))\n"
        "    synchronize = staticmethod(lambda i=None: None)\n"
    )


def test_a_wrong_result_on_the_gpu_fails_the_check(tmp_path):
    """A torch whose arithmetic is wrong: a check that only ran kernels would pass."""
    python = make_env(tmp_path / "env", {"torch/__init__.py": tiny_torch("0.0.1", arithmetic="broken")})
    result = _gpu.compute_check(real_run, python, 60, engine="none")
    assert result["ok"] is False and result["classification"] == "other"
    assert "gave 256.0 instead of 768.0: the GPU computed a wrong result" in result["error"]


def test_a_hanging_check_is_stopped_and_its_output_kept(tmp_path):
    python = make_env(tmp_path / "env", {
        "torch/__init__.py": "print('initialising the GPU', flush=True)\nimport time\ntime.sleep(120)\n"})
    started = time.monotonic()
    result = _gpu.compute_check(real_run, python, 1)
    assert time.monotonic() - started < 10
    assert result["timed_out"] is True and result["ok"] is False and result["classification"] == "other"
    assert result["output"] == "initialising the GPU"


def test_the_check_sees_only_the_environment_s_own_packages(tmp_path, monkeypatch):
    """A torch on PYTHONPATH (inherited, or given in env) or in the working directory does not
    stand in for the environment's own, and the check's own processes do not inherit PYTHONPATH."""
    python = make_env(tmp_path / "env", {"torch/__init__.py": tiny_torch(
        "1.0+env", sum_of="self.v * 256",
        prelude="import os\nprint('PYTHONPATH seen: %s' % os.environ.get('PYTHONPATH'), flush=True)\n")})
    shadow = tmp_path / "shadow"
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text(tiny_torch("6.6.6+shadow"))
    workdir = tmp_path / "workdir"
    (workdir / "torch").mkdir(parents=True)
    (workdir / "torch" / "__init__.py").write_text(tiny_torch("7.7.7+cwd"))
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.chdir(workdir)
    result = _gpu.compute_check(real_run, python, 60, env={"PYTHONPATH": str(shadow)}, engine="none")
    assert result["torch"] == "1.0+env", result
    assert result["ok"] is True, result
    assert result["output"] == "PYTHONPATH seen: None"


# --- the CPU build's check: torch on the CPU and vLLM's CPU kernels, no GPU, no nvidia-smi ----

CPU_MODES = [
    # (environment, ok, classification, stage, error fragment)
    ({}, True, None, None, None),
    ({"FAKE_TORCH_CPU": "wrong"}, False, "other", "torch computing on the CPU",
     "differs from the exact product in 1 of 32 elements"),
    ({"FAKE_TORCH_CPU": "illegal_instruction"}, False, "other", "torch computing on the CPU", "(killed by signal 4)"),
    ({"FAKE_TORCH_CUDA": "glibc"}, False, "glibc", "import vllm._C", "GLIBC_2.38"),
]


@pytest.mark.parametrize("env, ok, kind, stage, error", CPU_MODES)
def test_cpu_check_with_the_fake_runtime(fake_runtime, env, ok, kind, stage, error):
    """FAKE_TORCH_CUDA stays none (no GPU) unless said: the CPU check needs none."""
    result = _gpu.compute_check(real_run, fake_runtime, 60, env=env, target="cpu")
    assert (result["ok"], result["classification"], result["stage"]) == (ok, kind, stage), result
    assert result["target"] == "cpu"
    if ok:
        assert [d["ok"] for d in result["devices"]] == [True] and result["devices"][0]["name"].startswith("cpu (")
        assert result["engine_op"] == {"name": "vllm", "version": "0.20.0", "op": "vllm._custom_ops.rms_norm", "ok": True}
    else:
        assert error in result["error"] and result["hint"], result
        assert _gpu.failure_message(result).startswith("the CPU check in %s failed" % fake_runtime)
    if env.get("FAKE_TORCH_CPU") == "illegal_instruction":
        assert "illegal instruction" in result["hint"]


def test_cpu_check_imports_the_engine_kernels(tmp_path):
    """torch computes right, but the engine's compiled kernels do not load: the check fails at them."""
    python = make_env(tmp_path / "env", {
        "torch/__init__.py": CPU_TORCH,
        "vllm/__init__.py": "__version__ = '0.31.0+cpu'\n",
        "vllm/_C.py": "raise ImportError('libnuma.so.1: cannot open shared object file: No such file or directory')\n",
    })
    torch_only = _gpu.compute_check(real_run, python, 60, engine="none", target="cpu")
    assert torch_only["ok"] is True and torch_only["engine_op"] is None, torch_only
    result = _gpu.compute_check(real_run, python, 60, engine="vllm", target="cpu")
    assert (result["ok"], result["stage"]) == (False, "import vllm._C"), result
    assert "libnuma.so.1" in result["error"] and result["engine_op"]["version"] == "0.31.0+cpu"
    assert "system library libnuma.so.1" in result["hint"] and "libnuma1" in result["hint"], result["hint"]


def test_cpu_check_needs_a_cxx_compiler_for_the_engine(tmp_path):
    """torch and vLLM's kernels load, but no g++ is on the PATH: the engine would die at its first
    request (torch's Inductor compiles with it), so the check fails before the switch, saying what to
    install. Found on the real engine in a Debian 12 container."""
    python = make_env(tmp_path / "env", {
        "torch/__init__.py": CPU_TORCH + (
            "class Block:\n"
            "    def __mul__(self, other): return self\n"
            "    def sum(self): return self\n"
            "    def item(self): return 256.0\n"
            "ones = lambda *a, **k: Block()\n"
            "empty_like = lambda x: Block()\n"),
        "vllm/__init__.py": "__version__ = '0.31.0+cpu'\n",
        "vllm/_C.py": "",
        "vllm/_custom_ops.py": "def rms_norm(out, x, weight, eps): pass\n",
    })
    empty = tmp_path / "bin"
    empty.mkdir()
    result = _gpu.compute_check(real_run, python, 60, env={"PATH": str(empty), "CXX": ""}, engine="vllm",
                                target="cpu")
    assert result["ok"] is False, result
    if result["stage"] == "a C++ compiler and Python's headers for torch's Inductor":
        assert "no C++ compiler (g++ or c++)" in result["error"] and "g++" in result["hint"], result
    else:
        raise AssertionError("the check failed before the compiler: %s" % result)


# a torch of a few lines that multiplies for real (nested lists, as real torch's tolist gives)
CPU_TORCH = '''
__version__ = "2.13.0+cpu"
float32 = "f"
class version: cuda = None
class T:
    def __init__(self, rows): self.rows = rows
    def __matmul__(self, o):
        return T([[sum(a * b for a, b in zip(r, c)) for c in zip(*o.rows)] for r in self.rows])
    def tolist(self): return self.rows
def tensor(data, dtype=None): return T([[float(x) for x in r] for r in data])
'''


def test_the_cpu_check_needs_no_gpu_and_no_nvidia_smi(fake_runtime, monkeypatch, tmp_path):
    """The GPU check fails on this node (no CUDA device); the CPU check passes, with no nvidia-smi on PATH
    (only the C++ compiler the engine's CPU code needs)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "g++").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CXX", raising=False)
    gpu = _gpu.compute_check(real_run, fake_runtime, 60, env={"FAKE_TORCH_CUDA": "none"})
    assert gpu["ok"] is False and gpu["classification"] == "no_device"
    cpu = _gpu.compute_check(real_run, fake_runtime, 60, env={"FAKE_TORCH_CUDA": "none"}, target="cpu")
    assert cpu["ok"] is True and cpu["torch_cuda"] == "13.0", cpu


def test_compute_check_refuses_an_unknown_target():
    with pytest.raises(ValueError, match="target must be gpu or cpu, not 'tpu'"):
        _gpu.compute_check(Canned((0, "", "")), "/env/bin/python", 30, target="tpu")


# -- the privilege line for nvidia-smi, in gather_facts: every caller (gpu_probe, the plan's read_node,
#    uv_engine_env's GPU step) runs only a judged nvidia-smi (issue #44, 10) ---------------------------

NOBODY = 65534


def _planted_smi(directory, uid=None):
    """An nvidia-smi that leaves a marker when it runs: the proof that it did."""
    os.makedirs(str(directory), exist_ok=True)
    marker = str(directory) + ".ran"
    smi = directory / "nvidia-smi"
    smi.write_text("#!/bin/sh\ntouch %s\n" % marker)
    smi.chmod(0o755)
    if uid is not None:
        os.chown(str(smi), uid, -1)
    return str(smi), marker


def _callers(smi):
    """The three ways root reaches nvidia-smi, with the real runner."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvenv
    return {
        "gather_facts": lambda: _gpu.gather_facts(_proc.Runner(), smi, timeout=10),
        "read_node": lambda: _gpu.read_node(_proc.Runner(), smi, "/nonexistent/current", timeout=10),
        "gpu_step": lambda: _uvenv.gpu_step(_proc.Runner(), "/bin/false", {}, smi, 10),
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")
@pytest.mark.parametrize("caller", ["gather_facts", "read_node", "gpu_step"])
def test_an_nvidia_smi_another_user_owns_never_runs(tmp_path, caller):
    from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
    smi, marker = _planted_smi(tmp_path / "bin", uid=NOBODY)
    with pytest.raises(LlmfleetError) as exc:
        _callers(smi)[caller]()
    assert "nvidia_smi %s is not run: %s (owner nobody, mode 0755) is owned by nobody" % (smi, smi) in exc.value.msg
    assert not os.path.exists(marker), "the untrusted nvidia-smi ran as root"


@pytest.mark.parametrize("caller", ["gather_facts", "read_node", "gpu_step"])
def test_a_bare_nvidia_smi_in_a_world_writable_directory_on_path_never_runs(tmp_path, monkeypatch, caller):
    """A bare name is looked up on PATH once, and the file found is judged (not cwd/nvidia-smi)."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
    shared = tmp_path / "shared"
    smi, marker = _planted_smi(shared)
    shared.chmod(0o777)
    monkeypatch.setenv("PATH", "%s:%s" % (shared, os.environ.get("PATH", "")))
    with pytest.raises(LlmfleetError) as exc:
        _callers("nvidia-smi")[caller]()
    assert "nvidia_smi %s is not run: %s (owner root, mode 0777) is writable by others" % (smi, shared) \
        in exc.value.msg, exc.value.msg
    assert not os.path.exists(marker), "the planted nvidia-smi ran as root"
