"""Capture what gpu_probe sees on a real GPU node, for the tests' fixtures.

Run on a node with an NVIDIA driver, from the collection's root, with ansible-core importable:

    python3 tools/gpu_capture.py --out DIR [--python ENV_PYTHON] [--nvcc nvcc]

It writes into DIR (at most six files):

- ``query-gpu.csv``, ``q-x.xml``, ``nvidia-smi.txt``: nvidia-smi's own output, in the layout of a
  case directory of ``tests/fixtures/nvidia-smi`` (what the fake nvidia-smi replays);
- ``timings.json``: nvidia-smi's wall time run directly and through the collection's runner
  (``_proc.Runner``: a session of its own, a time limit; its cost, for bench/);
- ``gpu_probe.json``: the results of ``llmfleet.engines.gpu_probe`` run by ``ansible-playbook``
  (``{task name: registered result}``, written by the play itself, so ansible-core alone will do):
  facts and build choices, and the compute check on the real GPU in ``--python``
  (a torch environment) for these cases: torch only; engine vllm without vLLM; and, where nvcc is
  there, a stand-in ``vllm`` package whose ``rms_norm`` launches a real CUDA kernel built for this
  GPU (sm_90), for a GPU it is not (sm_100: no kernel image), loads PTX newer than the driver
  (unsupported toolchain), or whose ``_C`` needs a CUDA 12 runtime that is not there. The stand-in
  only makes the CUDA runtime and driver produce their real errors; it is not vLLM. The check
  runs isolated (``python -I``, no PYTHONPATH), so the stand-in lives in an environment of its
  own: a venv of ``--python``'s interpreter whose ``.pth`` puts the stand-in first, then
  ``--python``'s own paths (its torch).
- ``capture.log``: what ran.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY = "--query-gpu=index,name,uuid,compute_cap,memory.total,driver_version"

KERNEL_CU = r"""
#include <cuda_runtime.h>
__global__ void llmfleet_touch(int *p) { if (p) p[threadIdx.x] = 1; }
extern "C" const char *llmfleet_launch(void) {
    llmfleet_touch<<<1, 32>>>(nullptr);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}
"""

SHIM_INIT = '''"""Stand-in for vLLM used by tools/gpu_capture.py (not vLLM)."""
import torch  # noqa: F401
__version__ = "0.0.0+llmfleet.capture"
'''

SHIM_C = '''"""Stand-in for vllm._C: loads a real CUDA library, so that loader errors are real."""
import ctypes
import os

MODE = os.environ.get("LLMFLEET_CAPTURE_MODE", "")
if MODE == "cudart12":
    try:
        ctypes.CDLL("libcudart.so.12")
    except OSError as exc:
        raise ImportError(str(exc)) from None
'''

SHIM_OPS = '''"""Stand-in for vllm._custom_ops.rms_norm: a real kernel launch, then torch's arithmetic."""
import ctypes
import os

import torch

from vllm import _C  # noqa: F401

PTX_TOO_NEW = (b".version 99.0\\n.target sm_90\\n.address_size 64\\n"
               b".visible .entry llmfleet_k()\\n{\\n ret;\\n}\\n")


def _cuda_error(lib, code):
    text = ctypes.c_char_p()
    lib.cuGetErrorString(code, ctypes.byref(text))
    return (text.value or b"CUDA driver error %d" % code).decode()


def _load_new_ptx():
    torch.cuda.init()
    cuda = ctypes.CDLL("libcuda.so.1")
    module = ctypes.c_void_p()
    code = cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX_TOO_NEW))
    if code:
        raise RuntimeError("CUDA error: " + _cuda_error(cuda, code))


def rms_norm(out, input, weight, epsilon):  # pylint: disable=redefined-builtin
    mode = os.environ.get("LLMFLEET_CAPTURE_MODE", "")
    if mode == "ptx_new":
        _load_new_ptx()
    elif os.environ.get("LLMFLEET_CAPTURE_LIB"):
        lib = ctypes.CDLL(os.environ["LLMFLEET_CAPTURE_LIB"])
        lib.llmfleet_launch.restype = ctypes.c_char_p
        error = lib.llmfleet_launch()
        if error:
            raise RuntimeError("CUDA error: " + error.decode())
    x = input.float()
    out.copy_((x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)).to(input.dtype) * weight)
'''


def log(fh, *parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


def timed(run, runs):
    seconds = []
    for _run in range(runs):
        started = time.monotonic()
        run()
        seconds.append(time.monotonic() - started)
    return {"median_s": round(statistics.median(seconds), 4), "min_s": round(min(seconds), 4),
            "max_s": round(max(seconds), 4), "runs": runs}


def standin_env(work, python, shim_path, logfh):
    """A venv of ``python``'s interpreter that imports the stand-in vllm from ``shim_path`` and
    everything else (torch) from ``python``'s own paths; its interpreter."""
    env_dir = os.path.join(work, "standin-env")
    proc = subprocess.run([python, "-m", "venv", "--without-pip", env_dir], capture_output=True, text=True,
                          check=False)
    log(logfh, "$", python, "-m venv --without-pip", env_dir, "->", proc.returncode, proc.stderr.strip()[-500:])
    paths = subprocess.run([python, "-I", "-c", "import json, sys; print(json.dumps([p for p in sys.path if p]))"],
                           capture_output=True, text=True, check=True).stdout
    env_python = os.path.join(env_dir, "bin", "python")
    site = subprocess.run([env_python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "llmfleet_capture_standin.pth"), "w") as fh:
        fh.write("\n".join([shim_path] + json.loads(paths)) + "\n")
    return env_python


def build_shim(work, nvcc, python, logfh):
    """The stand-in vllm package, its environment and the kernel libraries:
    {case: (interpreter, env)} for the compute checks."""
    pkg = os.path.join(work, "shim", "vllm")
    os.makedirs(pkg)
    for name, text in (("__init__.py", SHIM_INIT), ("_C.py", SHIM_C), ("_custom_ops.py", SHIM_OPS)):
        with open(os.path.join(pkg, name), "w") as fh:
            fh.write(text)
    src = os.path.join(work, "touch.cu")
    with open(src, "w") as fh:
        fh.write(KERNEL_CU)
    env_python = standin_env(work, python, os.path.join(work, "shim"), logfh)
    cases = {"vllm_standin_cudart12": (env_python, {"LLMFLEET_CAPTURE_MODE": "cudart12"}),
             "vllm_standin_ptx_too_new": (env_python, {"LLMFLEET_CAPTURE_MODE": "ptx_new"})}
    for case, gencode in (("sm_90", "arch=compute_90,code=sm_90"), ("sm_100", "arch=compute_100,code=sm_100")):
        lib = os.path.join(work, "libtouch_%s.so" % case)
        argv = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", gencode, src, "-o", lib]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        log(logfh, "$", " ".join(argv), "->", proc.returncode, proc.stderr.strip()[-500:])
        if proc.returncode == 0:
            cases["vllm_standin_%s" % case] = (env_python, {"LLMFLEET_CAPTURE_LIB": lib})
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--python", default=sys.executable, help="a torch environment's interpreter")
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "")
    parser.add_argument("--ansible-playbook", default=shutil.which("ansible-playbook") or "ansible-playbook")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    logfh = open(os.path.join(args.out, "capture.log"), "w")
    smi = shutil.which("nvidia-smi") or "/usr/bin/nvidia-smi"
    log(logfh, "nvidia-smi:", smi, "python:", args.python, "nvcc:", args.nvcc or "(none)")

    for name, argv in (("query-gpu.csv", [smi, QUERY, "--format=csv,noheader,nounits"]),
                       ("q-x.xml", [smi, "-q", "-x"]), ("nvidia-smi.txt", [smi])):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        log(logfh, "$", " ".join(argv), "->", proc.returncode, proc.stderr.strip())
        with open(os.path.join(args.out, name), "w") as fh:
            fh.write(proc.stdout)

    work = tempfile.mkdtemp(prefix="llmfleet-capture-")
    collections = os.path.join(work, "collections", "ansible_collections", "llmfleet")
    os.makedirs(collections)
    os.symlink(ROOT, os.path.join(collections, "engines"))
    sys.path.insert(0, os.path.join(work, "collections"))
    from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner  # pylint: disable=import-outside-toplevel

    timings = {}
    runner = Runner()
    for label, argv in (("query", [smi, QUERY, "--format=csv,noheader,nounits"]), ("xml", [smi, "-q", "-x"])):
        timings[label] = {
            "direct": timed(lambda argv=argv: subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                             check=False), args.runs),
            "runner": timed(lambda argv=argv: runner(argv, timeout=30), args.runs),
        }
        log(logfh, label, json.dumps(timings[label]))
    with open(os.path.join(args.out, "timings.json"), "w") as fh:
        json.dump(timings, fh, indent=1)

    checks = {"torch_only": (args.python, "none", {}), "vllm_missing": (args.python, "vllm", {}),
              "no_visible_device": (args.python, "none", {"CUDA_VISIBLE_DEVICES": ""})}
    if args.nvcc:
        for case, (python, env) in build_shim(work, args.nvcc, args.python, logfh).items():
            checks[case] = (python, "vllm", env)

    tasks = []
    for version, build in (("0.20.0", "auto"), ("0.11.0", "auto"), ("0.20.0", "cu129"), ("0.15.1", "cu13")):
        tasks.append({"name": "choice %s %s" % (version, build),
                      "llmfleet.engines.gpu_probe": {"version": version, "build": build}})
    for case, (python, engine, env) in checks.items():
        tasks.append({"name": "check %s" % case,
                      "llmfleet.engines.gpu_probe": {"python": python, "engine": engine, "env": env,
                                                     "python_timeout": 300, "version": "0.20.0"}})
    results_file = os.path.abspath(os.path.join(args.out, "gpu_probe.json"))
    names = {}
    for number, task in enumerate(tasks):
        task["ignore_errors"] = True
        task["register"] = "capture_%d" % number
        names[task["name"]] = task["register"]
    # the play writes its own results: no callback plugin needed beyond ansible-core
    content = "{{ {%s} | to_nice_json }}" % ", ".join("%s: %s" % (json.dumps(name), var) for name, var in names.items())
    tasks.append({"name": "write the results", "ansible.builtin.copy": {"dest": results_file, "content": content,
                                                                        "mode": "0644"}})
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    playbook = os.path.join(work, "capture.yml")
    with open(playbook, "w") as fh:
        json.dump(play, fh)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(work, "collections"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False", LC_ALL="C.UTF-8")
    argv = [args.ansible_playbook, "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, playbook]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    log(logfh, "$", " ".join(argv), "->", proc.returncode, "in %.1f s" % (time.monotonic() - started))
    log(logfh, (proc.stdout + proc.stderr).strip()[-6000:])
    try:
        with open(results_file) as fh:
            results = json.load(fh)
        for name, res in results.items():
            check = res.get("compute") or {}
            log(logfh, "%-34s failed=%s build=%s ok=%s class=%s error=%s" % (
                name, res.get("failed", False), (res.get("choice") or {}).get("build"),
                check.get("ok"), check.get("classification"), (check.get("error") or res.get("msg") or "")[:160]))
    except (OSError, ValueError, AttributeError) as exc:
        log(logfh, "could not read the play's results:", exc)
    shutil.rmtree(work, ignore_errors=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
