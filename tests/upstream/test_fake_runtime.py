"""The fake torch and vLLM at run time: each FAKE_TORCH_CUDA / FAKE_VLLM_KERNEL mode behaves and fails
the way docs/dev/CONTRACTS.md says (message fragments as real CUDA/torch print them)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
UV = REPO / ".venv" / "bin" / "uv"
PYTHON = "/usr/bin/python3.11" if os.access("/usr/bin/python3.11", os.X_OK) else sys.executable

NO_KERNEL = "CUDA error: no kernel image is available for execution on the device"
PTX = "CUDA error: the provided PTX was compiled with an unsupported toolchain."
DRIVER = "The NVIDIA driver on your system is too old (found version 12020)."
LIBCUDART = "libcudart.so.13: cannot open shared object file: No such file or directory"
GLIBC = "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by "

# Runs inside the node's Python: each step's result or "<ExceptionType>: <message>".
PROBE = r'''
import json, sys, warnings

def step(fn):
    try:
        return {"ok": fn()}
    except BaseException as exc:  # noqa: B036
        return {"error": "%s: %s" % (type(exc).__name__, exc)}

out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    import vllm
    out["versions"] = [vllm.__version__, torch.__version__, torch.version.cuda]
    out["available"] = torch.cuda.is_available()
out["warnings"] = ["%s: %s" % (w.category.__name__, w.message) for w in caught]
out["count"] = torch.cuda.device_count()
out["devices"] = step(lambda: [[torch.cuda.get_device_name(i), list(torch.cuda.get_device_capability(i))]
                               for i in range(torch.cuda.device_count())])
out["arch"] = torch.cuda.get_arch_list()
out["init"] = step(lambda: torch.cuda.init())
out["cpu"] = step(lambda: (torch.ones(2, 3) * 2 + 1).sum().item())

def cuda_math():
    x = torch.ones(4, 8, device="cuda:0", dtype=torch.float16)
    y = (x * 2 + x).float().sum().item()
    torch.cuda.synchronize(0)
    return y

out["cuda_alloc"] = step(lambda: list(torch.ones(4, 8, device="cuda", dtype=torch.float16).shape))
out["cuda_math"] = step(cuda_math)

def vllm_op():
    from vllm import _custom_ops as ops
    x = torch.ones(2, 4, device="cuda:0", dtype=torch.float16) * 3
    w = torch.ones(4, device="cuda:0", dtype=torch.float16) * 0.5
    out = torch.empty_like(x)
    ops.rms_norm(out, x, w, 1e-6)
    return [round(v, 4) for v in out.tolist()]

out["vllm_op"] = step(vllm_op)
out["vllm_C"] = step(lambda: __import__("vllm._C").__name__)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def site(upstream_packages, tmp_path_factory):
    """torch 2.11.0 + vllm 0.20.0 from the PyPI side, installed by uv into a --target dir."""
    dest = tmp_path_factory.mktemp("fake-runtime")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update({"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(dest / "cache"), "UV_PYTHON_PREFERENCE": "only-system"})
    subprocess.run(
        [str(UV), "pip", "install", "--python", PYTHON, "--target", str(dest / "site"), "--no-deps", "--no-index",
         str(upstream_packages / "pypi" / "torch-2.11.0-py3-none-any.whl"),
         str(upstream_packages / "pypi" / "vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl")],
        env=env, check=True, capture_output=True, timeout=60,
    )
    return dest / "site"


def node_env(site, **fake):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env["PYTHONPATH"] = str(site)
    env.update(fake)
    return env


def probe(site, **fake) -> dict:
    proc = subprocess.run([PYTHON, "-c", PROBE], env=node_env(site, **fake), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def vllm_version(site, **fake):
    return subprocess.run([str(site / "bin" / "vllm"), "--version"], env=node_env(site, **fake),
                          capture_output=True, text=True, timeout=60, check=False)


H100 = [["NVIDIA H100 80GB HBM3", [9, 0]]]
ARCH_13 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"]
RMS_OUT = [0.5] * 8  # x = 3 everywhere: x / sqrt(mean(x^2)) = 1, times weight 0.5

# mode, env, expected: step -> exact value, or ("error", fragment)
CASES = [
    ("none", {}, {
        "available": False, "count": 0, "devices": {"ok": []}, "arch": [], "cpu": {"ok": 18.0},
        "init": ("error", "RuntimeError: Found no NVIDIA driver on your system"),
        "cuda_alloc": ("error", "RuntimeError: Found no NVIDIA driver on your system"),
        "cuda_math": ("error", "Found no NVIDIA driver"), "vllm_op": ("error", "Found no NVIDIA driver"),
        "vllm_C": {"ok": "vllm"}, "warnings": []}),
    ("ok", {"FAKE_TORCH_CUDA": "ok"}, {
        "available": True, "count": 1, "devices": {"ok": H100}, "arch": ARCH_13, "init": {"ok": None},
        "cuda_alloc": {"ok": [4, 8]}, "cuda_math": {"ok": 96.0}, "vllm_op": {"ok": RMS_OUT},
        "vllm_C": {"ok": "vllm"}, "warnings": []}),
    ("no_kernel_image", {"FAKE_TORCH_CUDA": "no_kernel_image"}, {
        "available": True, "count": 1, "devices": {"ok": H100}, "init": {"ok": None},
        "cuda_alloc": {"ok": [4, 8]}, "cuda_math": ("error", "RuntimeError: " + NO_KERNEL),
        "vllm_op": ("error", "RuntimeError: " + NO_KERNEL)}),
    ("unsupported_ptx", {"FAKE_TORCH_CUDA": "unsupported_ptx"}, {
        "available": True, "cuda_alloc": {"ok": [4, 8]}, "cuda_math": ("error", "RuntimeError: " + PTX),
        "vllm_op": ("error", "RuntimeError: " + PTX)}),
    ("driver_too_old", {"FAKE_TORCH_CUDA": "driver_too_old"}, {
        "available": False, "count": 0, "arch": [],
        "warnings": ("error", "UserWarning: CUDA initialization: " + DRIVER),
        "init": ("error", "RuntimeError: " + DRIVER), "cuda_alloc": ("error", "RuntimeError: " + DRIVER),
        "cuda_math": ("error", DRIVER)}),
    ("missing_libcudart", {"FAKE_TORCH_CUDA": "missing_libcudart"}, {
        "available": True, "cuda_math": {"ok": 96.0}, "vllm_op": ("error", "ImportError: " + LIBCUDART),
        "vllm_C": ("error", "ImportError: " + LIBCUDART)}),
    ("glibc", {"FAKE_TORCH_CUDA": "glibc"}, {
        "available": True, "cuda_math": {"ok": 96.0}, "vllm_op": ("error", "ImportError: " + GLIBC),
        "vllm_C": ("error", "/vllm/_C.abi3.so)")}),
    ("vllm kernel only", {"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_KERNEL": "no_kernel_image"}, {
        "available": True, "cuda_math": {"ok": 96.0}, "vllm_op": ("error", "RuntimeError: " + NO_KERNEL),
        "vllm_C": {"ok": "vllm"}}),
    ("two gpus", {"FAKE_TORCH_CUDA": "ok", "FAKE_TORCH_GPUS": "NVIDIA A100-SXM4-80GB=8.0;Tesla T4=7.5"}, {
        "count": 2, "devices": {"ok": [["NVIDIA A100-SXM4-80GB", [8, 0]], ["Tesla T4", [7, 5]]]},
        "cuda_math": {"ok": 96.0}}),
]


@pytest.mark.parametrize("name, fake, expected", CASES, ids=[c[0] for c in CASES])
def test_mode(site, name, fake, expected):
    got = probe(site, **fake)
    assert got["versions"] == ["0.20.0", "2.11.0", "13.0"]
    for key, want in expected.items():
        if isinstance(want, tuple):
            text = got[key]["error"] if isinstance(got[key], dict) else " | ".join(got[key])
            assert want[1] in text, (name, key, got[key])
        else:
            assert got[key] == want, (name, key, got[key])


def test_vllm_version_fails_without_gpu(site):
    proc = vllm_version(site)
    assert proc.returncode == 1
    assert "RuntimeError: Failed to infer device type" in proc.stderr
    # while importing vllm works (FACTS.md: measured with vllm 0.11.0)
    ok = subprocess.run([PYTHON, "-c", "import vllm; print(vllm.__version__)"], env=node_env(site),
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0 and ok.stdout.strip() == "0.20.0"


@pytest.mark.parametrize("mode", ["ok", "no_kernel_image", "missing_libcudart"])
def test_vllm_version_prints_with_gpu(site, mode):
    proc = vllm_version(site, FAKE_TORCH_CUDA=mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0.20.0"


def test_unknown_mode_is_refused(site):
    proc = subprocess.run([PYTHON, "-c", "import torch; torch.cuda.is_available()"],
                          env=node_env(site, FAKE_TORCH_CUDA="maybe"), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1 and "FAKE_TORCH_CUDA='maybe'" in proc.stderr
