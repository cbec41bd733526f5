# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

A node's GPU facts (from ``nvidia-smi``), its glibc and machine architecture, and the compute
check that proves an engine environment computes on the node's GPUs.

Commands run through ``run``, the collection's one runner (``_proc.Runner``) or anything with
its calling convention: ``run(argv, env=None, timeout=None) -> CommandResult`` (``rc``, ``out``,
``err``, ``timed_out``). Every command is bounded by ``timeout``: the runner stops the command's
whole process group then.

Public entry points
-------------------
``gather_facts(run, nvidia_smi, timeout=30, cuda=True) -> dict``
    ``{"nvidia_smi": path|None, "driver_version": str|None, "cuda_version": str|None,
    "gpus": [{"index": int, "name": str, "uuid": str, "compute_capability": str|None,
    "memory_mib": int|None}], "gpu_count": int, "driver_error": str|None,
    "glibc": str|None, "architecture": str}``.
    No ``nvidia-smi``, or one that cannot talk to the driver, is a fact (``driver_version``
    None, no GPUs, ``driver_error`` says why). Raises :class:`NvidiaSmiTimeout` when
    ``nvidia-smi`` hangs and :class:`NvidiaSmiError` when it fails otherwise. ``cuda`` false: one
    command (``--query-gpu``), no ``-q -x``; ``cuda_version`` is None.

``compute_check(run, python, timeout, env=None, engine="vllm") -> dict``
    Runs :data:`COMPUTE_CHECK_SCRIPT` in ``python`` (an engine environment's interpreter) in
    isolated mode (``-I``), with ``env`` added to the environment and without ``PYTHONPATH`` or
    ``PYTHONHOME`` (nothing from outside the environment shadows its torch or engine): a small
    computation on every visible GPU, then, for
    ``engine="vllm"``, vLLM's own compiled ``rms_norm`` on each. Never raises for a failed
    check; returns::

        {"ok": bool, "python": str, "engine": "vllm"|"none", "rc": int, "timed_out": bool,
         "seconds": float, "torch": str|None, "torch_cuda": str|None, "arch_list": [str],
         "devices": [{"index", "name", "capability", "ok"}],
         "engine_op": {"name", "version", "op", "ok"} | None,
         "stage": where it failed | None, "error": the exception | None,
         "classification": None | "no_kernel_image" | "unsupported_ptx" | "driver_too_old"
                           | "cuda_runtime_mismatch" | "glibc" | "no_device" | "other",
         "hint": what to do | None, "output": what else the interpreter printed (tail)}

``compute_check(..., target="cpu")``
    The check of the CPU build (:data:`CPU_CHECK_SCRIPT`): a small matrix product in torch on the
    CPU, compared with the product computed in plain Python, then, for ``engine="vllm"``, the
    import of vLLM's compiled CPU kernels (``vllm._C``) and its ``rms_norm`` on the CPU. Needs no
    GPU, no driver and no ``nvidia-smi``; the same result keys (``devices``: the CPU, ``torch_cuda``
    None), with ``target`` ``"cpu"`` (``"gpu"`` for the GPU check).

``failure_message(result) -> str``
    One message for a failed check (what ran, where it failed, the error, the hint).
"""

from __future__ import annotations

import json
import os
import platform
import re
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import (
    SBIN_DIRS, find_program, program_problem)

#: The fields asked of ``nvidia-smi --query-gpu``, in this order.
QUERY_FIELDS = ("index", "name", "uuid", "compute_cap", "memory.total", "driver_version")
#: How much of a command's other output is kept for messages.
OUTPUT_TAIL = 4000
#: A marker key in the compute check's JSON document, to find it among other output.
CHECK_MARK = "llmfleet_gpu_check"
CLASSIFICATIONS = (
    "no_kernel_image",
    "unsupported_ptx",
    "driver_too_old",
    "cuda_runtime_mismatch",
    "glibc",
    "no_device",
    "other",
)

# The end of both check scripts: run check(), catching everything, and print R as the last line.
_CHECK_MAIN = r'''

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        check()
        R["stage"] = None
        R["ok"] = True
    except BaseException as exc:
        R["error"] = ("%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")).strip()
        R["traceback"] = traceback.format_exc()[-3000:]
    R["warnings"] = ["%s: %s" % (w.category.__name__, w.message) for w in caught][:20]
sys.stdout.write("\n" + json.dumps(R) + "\n")
sys.stdout.flush()
sys.exit(0 if R["ok"] else 1)
'''

# The compute check, run by the engine environment's interpreter (any Python 3.8+): it prints
# one JSON document, on the last line of stdout, whatever happens. Uses only the torch API that
# docs/dev/CONTRACTS.md lists, so that it runs with real torch and with the tests' fake one.
COMPUTE_CHECK_SCRIPT = r'''
import json, sys, traceback, warnings

ENGINE = sys.argv[1] if len(sys.argv) > 1 else "none"
R = {"llmfleet_gpu_check": 1, "ok": False, "stage": "import torch", "error": None,
     "traceback": None, "torch": None, "torch_cuda": None, "arch_list": [], "devices": [],
     "engine_op": None, "warnings": []}


def expect(got, want, what):
    if abs(got - want) > 0.01 * max(1.0, abs(want)):
        raise RuntimeError("%s gave %r instead of %r: the GPU computed a wrong result" % (what, got, want))


def check():
    import torch
    R["torch"] = str(torch.__version__)
    R["torch_cuda"] = torch.version.cuda
    R["stage"] = "CUDA initialisation"
    if not torch.cuda.is_available():
        torch.cuda.init()
        raise RuntimeError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    count = torch.cuda.device_count()
    if count < 1:
        raise RuntimeError("torch sees no CUDA device (torch.cuda.device_count() is 0)")
    R["arch_list"] = [str(a) for a in torch.cuda.get_arch_list()]
    for i in range(count):
        cap = tuple(torch.cuda.get_device_capability(i))
        R["devices"].append({"index": i, "name": str(torch.cuda.get_device_name(i)),
                             "capability": "%d.%d" % (cap[0], cap[1]), "ok": False})
    for dev in R["devices"]:
        i = dev["index"]
        R["stage"] = "torch computing on GPU %d" % i
        x = torch.ones(256, device="cuda:%d" % i, dtype=torch.float16)
        total = (x * 2 + 1).float().sum()
        torch.cuda.synchronize(i)
        expect(total.item(), 768.0, "(ones * 2 + 1).sum() on GPU %d" % i)
        dev["ok"] = True
    if ENGINE != "vllm":
        return
    R["stage"] = "import vllm"
    R["engine_op"] = {"name": "vllm", "version": None, "op": "vllm._custom_ops.rms_norm", "ok": False}
    import vllm
    R["engine_op"]["version"] = str(getattr(vllm, "__version__", None))
    # vLLM's own compiled extension, imported here so that its ImportError (CUDA runtime, glibc)
    # is the error: vllm._custom_ops only logs it and fails later on a missing op
    R["stage"] = "import vllm._C"
    import vllm._C
    from vllm import _custom_ops
    for dev in R["devices"]:
        i = dev["index"]
        R["stage"] = "vllm._custom_ops.rms_norm on GPU %d" % i
        x = torch.ones(4, 64, device="cuda:%d" % i, dtype=torch.float16) * 3
        weight = torch.ones(64, device="cuda:%d" % i, dtype=torch.float16)
        out = torch.empty_like(x)
        _custom_ops.rms_norm(out, x, weight, 1e-6)
        torch.cuda.synchronize(i)
        expect(out.float().sum().item(), 256.0, "rms_norm of a 4x64 block of threes on GPU %d" % i)
    R["engine_op"]["ok"] = True
'''


# The CPU build's check, run like the GPU check (same JSON document, same exit status): torch
# multiplies two small matrices of small integers on the CPU (exact in float32) and every element
# must equal the product computed in plain Python; then vLLM's compiled CPU kernels are imported
# and run. Uses torch.tensor, the @ operator and .tolist() besides the GPU check's subset.
CPU_CHECK_SCRIPT = r'''
import json, platform, sys, traceback, warnings

ENGINE = sys.argv[1] if len(sys.argv) > 1 else "none"
R = {"llmfleet_gpu_check": 1, "ok": False, "stage": "import torch", "error": None,
     "traceback": None, "torch": None, "torch_cuda": None, "arch_list": [], "devices": [],
     "engine_op": None, "warnings": [], "target": "cpu"}
A = [[(3 * i + 5 * j) % 7 - 3 for j in range(16)] for i in range(8)]
B = [[(2 * i + 7 * j) % 9 - 4 for j in range(4)] for i in range(16)]


def stage(name):
    # a crash (SIGILL, SIGSEGV) leaves no final document: this one then says where it died
    R["stage"] = name
    sys.stdout.write("\n" + json.dumps({"llmfleet_gpu_check": 1, "ok": False, "stage": name, "target": "cpu"}) + "\n")
    sys.stdout.flush()


def flat(value):
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in flat(item)]
    return [float(value)]


def expect(got, want, what):
    if abs(got - want) > 0.01 * max(1.0, abs(want)):
        raise RuntimeError("%s gave %r instead of %r: the CPU computed a wrong result" % (what, got, want))


def check():
    import torch
    R["torch"] = str(torch.__version__)
    R["torch_cuda"] = torch.version.cuda
    dev = {"index": 0, "name": "cpu (%s)" % platform.machine(), "capability": None, "ok": False}
    R["devices"].append(dev)
    stage("torch computing on the CPU")
    want = [float(sum(A[i][k] * B[k][j] for k in range(16))) for i in range(8) for j in range(4)]
    got = flat((torch.tensor(A, dtype=torch.float32) @ torch.tensor(B, dtype=torch.float32)).tolist())
    if got != want:
        wrong = [n for n in range(len(want)) if n >= len(got) or got[n] != want[n]]
        raise RuntimeError("an 8x16 by 16x4 matrix product on the CPU differs from the exact product in %d of "
                           "%d elements (first at %d: %r instead of %r): the CPU computed a wrong result"
                           % (len(wrong), len(want), wrong[0], got[wrong[0]] if wrong[0] < len(got) else None,
                              want[wrong[0]]))
    dev["ok"] = True
    if ENGINE != "vllm":
        return
    stage("import vllm")
    R["engine_op"] = {"name": "vllm", "version": None, "op": "vllm._custom_ops.rms_norm", "ok": False}
    import vllm
    R["engine_op"]["version"] = str(getattr(vllm, "__version__", None))
    stage("import vllm._C")
    import vllm._C
    from vllm import _custom_ops
    stage("vllm._custom_ops.rms_norm on the CPU")
    x = torch.ones(4, 64, dtype=torch.float32) * 3
    weight = torch.ones(64, dtype=torch.float32)
    out = torch.empty_like(x)
    _custom_ops.rms_norm(out, x, weight, 1e-6)
    expect(out.sum().item(), 256.0, "rms_norm of a 4x64 block of threes on the CPU")
    R["engine_op"]["ok"] = True
    # torch's Inductor compiles vLLM's CPU code with a C++ compiler at the warm-up and at the first
    # request (even with --enforce-eager): without one the engine starts, then dies
    stage("a C++ compiler and Python's headers for torch's Inductor")
    import os, shutil, sysconfig
    if not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")):
        raise RuntimeError("no C++ compiler (g++ or c++) on this node's PATH: torch's Inductor compiles vLLM's CPU "
                           "code with it when the engine starts and at its first request")
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(headers):
        raise RuntimeError("no Python.h for this interpreter (%s): torch's Inductor compiles vLLM's CPU code against "
                           "Python's headers when the engine starts and at its first request" % headers)
'''
#: What each ``target`` of the compute check runs.
COMPUTE_CHECK_SCRIPT += _CHECK_MAIN
CPU_CHECK_SCRIPT += _CHECK_MAIN
CHECK_SCRIPTS = {"gpu": COMPUTE_CHECK_SCRIPT, "cpu": CPU_CHECK_SCRIPT}


class GpuError(LlmfleetError):
    """Base of this module's errors."""


class NvidiaSmiTimeout(GpuError):
    """nvidia-smi did not answer in time."""


class NvidiaSmiError(GpuError):
    """nvidia-smi failed in a way that is not "no driver"."""


# --- running commands -------------------------------------------------------------------

#: What the compute check's interpreter must not inherit: a path that would put other packages
#: before the environment's own (``-I`` ignores them in the check itself; this keeps them from
#: the processes it starts, such as torch's compile workers).
SCRUBBED_ENV = ("PYTHONPATH", "PYTHONHOME")


def last_chars(text, limit=OUTPUT_TAIL):
    """The end of ``text``, at most ``limit`` characters."""
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


# --- node facts -------------------------------------------------------------------------


def glibc_version():
    """The C library's version (``"2.36"``), or None where it is not glibc."""
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        value = None
    if value and value.startswith("glibc "):
        return value.split(" ", 1)[1].strip()
    name, version = platform.libc_ver()
    return version if name == "glibc" and version else None


def architecture():
    """The machine architecture (``uname -m``): ``x86_64``, ``aarch64``, ..."""
    return platform.machine()


def query_argv(nvidia_smi, fields=QUERY_FIELDS):
    """The ``--query-gpu`` command line."""
    return [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def xml_argv(nvidia_smi):
    """The ``-q -x`` command line."""
    return [nvidia_smi, "-q", "-x"]


def _na(value):
    value = (value or "").strip()
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported") else value


def _int(value):
    value = _na(value)
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def parse_query(text, fields=QUERY_FIELDS):
    """Rows of ``--query-gpu ... --format=csv,noheader,nounits`` -> ``(driver_version, gpus)``."""
    gpus, drivers = [], []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        values = [part.strip() for part in line.split(",")]
        if len(values) < len(fields):
            raise NvidiaSmiError("nvidia-smi printed a line that is not %d fields: %r" % (len(fields), line))
        # a name holding a comma: the extra parts belong to the name (the second field)
        extra = len(values) - len(fields)
        if extra:
            at = list(fields).index("name")
            values[at:at + extra + 1] = [", ".join(values[at:at + extra + 1])]
        row = dict(zip(fields, values))
        index = _int(row.get("index"))
        if index is None:
            raise NvidiaSmiError("nvidia-smi printed a line without a GPU index: %r" % line)
        gpus.append(
            {
                "index": index,
                "name": _na(row.get("name")),
                "uuid": _na(row.get("uuid")),
                "compute_capability": _na(row.get("compute_cap")),
                "memory_mib": _int(row.get("memory.total")),
            }
        )
        if _na(row.get("driver_version")):
            drivers.append(_na(row["driver_version"]))
    gpus.sort(key=lambda gpu: gpu["index"])
    return (drivers[0] if drivers else None), gpus


def parse_xml(text):
    """``nvidia-smi -q -x`` -> ``{"driver_version", "cuda_version", "attached_gpus"}``."""
    text = text or ""
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<nvidia_smi_log")
    if start < 0:
        raise NvidiaSmiError("nvidia-smi -q -x printed no XML: %s" % last_chars(text, 300))
    # imported here: the engine role's every-run probe (cuda false) reads no XML, and the import costs ~5 ms
    import xml.etree.ElementTree as ET  # pylint: disable=import-outside-toplevel

    try:
        root = ET.fromstring(text[start:].strip().encode("utf-8"))
    except ET.ParseError as exc:
        raise NvidiaSmiError("nvidia-smi -q -x printed XML that does not parse (%s)" % exc)
    return {
        "driver_version": _na(root.findtext("driver_version")),
        "cuda_version": _na(root.findtext("cuda_version")),
        "attached_gpus": _int(root.findtext("attached_gpus")),
    }


# nvidia-smi's ways of saying that no usable driver is there (exit 9: driver not loaded,
# 12: NVML library not found, 6 with "No devices were found").
_NO_DRIVER = re.compile(
    r"couldn't communicate with the NVIDIA driver|NVIDIA-SMI has failed|"
    r"NVML Shared Library Not Found|No devices were found|Driver Not Loaded",
    re.IGNORECASE,
)
_NO_DRIVER_RC = (9, 12)


def _no_driver(rc, text):
    return rc in _NO_DRIVER_RC or bool(_NO_DRIVER.search(text or ""))


# SBIN_DIRS (_trust): where nvidia-smi is looked for after PATH, as Ansible's ``get_bin_path`` does.


def check_nvidia_smi(path):
    """The privilege line for nvidia-smi, run as root on every play (``_trust.program_problem``:
    the path and its real path): NvidiaSmiError naming the culprit when another user could change it."""
    problem = program_problem(path)
    if problem is not None:
        raise NvidiaSmiError("nvidia_smi %s is not run: %s; fix: %s" % (path, problem.describe(), problem.fix),
                             untrusted=dict(problem.as_dict(), option="nvidia_smi", path=path))


def gather_facts(run, nvidia_smi, timeout=30, cuda=True):
    """The node's GPU facts (see the module docstring for the shape). ``cuda`` false: no ``-q -x``, the
    second and slower call (it reads every GPU's whole state), and ``cuda_version`` stays None."""
    facts = {
        "nvidia_smi": nvidia_smi or None,
        "driver_version": None,
        "cuda_version": None,
        "gpus": [],
        "gpu_count": 0,
        "driver_error": None,
        "glibc": glibc_version(),
        "architecture": architecture(),
    }
    if not nvidia_smi:
        facts["driver_error"] = "no nvidia-smi on this node (not on PATH, nor in the sbin directories)"
        return facts
    # the file that runs is the one judged: a bare name is looked up here, once (_trust)
    found = find_program(nvidia_smi, extra_dirs=SBIN_DIRS)
    if found is None:
        facts["driver_error"] = "no %s on this node (not on PATH, nor in the sbin directories)" % nvidia_smi
        return facts
    nvidia_smi = facts["nvidia_smi"] = found
    if not os.path.exists(nvidia_smi):
        facts["driver_error"] = "%s does not exist" % nvidia_smi
        return facts
    check_nvidia_smi(nvidia_smi)
    if not os.access(nvidia_smi, os.X_OK) or os.path.isdir(nvidia_smi):
        raise NvidiaSmiError(
            "%s is not an executable file: give the path of nvidia-smi in nvidia_smi" % nvidia_smi
        )

    def smi(argv):
        res = run(argv, timeout=timeout)
        if res.timed_out:
            raise NvidiaSmiTimeout(
                "%s did not answer within %g s: the driver or a GPU may be hung (look for Xid "
                "errors in the kernel log, `dmesg`); raise timeout if this node is only slow"
                % (" ".join(argv), float(timeout))
            )
        return res.rc, res.out, res.err

    fields = QUERY_FIELDS
    rc, out, err = smi(query_argv(nvidia_smi, fields))
    text = (out + "\n" + err).strip()
    if rc != 0 and re.search(r'"compute_cap" is not a valid field', text):
        # drivers before 510 do not know compute_cap (they are below every build's floor anyway)
        fields = tuple(f for f in QUERY_FIELDS if f != "compute_cap")
        rc, out, err = smi(query_argv(nvidia_smi, fields))
        text = (out + "\n" + err).strip()
    if rc != 0:
        if _no_driver(rc, text):
            facts["driver_error"] = last_chars(text, 500) or "nvidia-smi exited %d" % rc
            return facts
        raise NvidiaSmiError(
            "%s exited %d: %s" % (" ".join(query_argv(nvidia_smi, fields)), rc, last_chars(text, 1000))
        )
    driver, gpus = parse_query(out, fields)
    cuda_version = None
    if cuda:
        rc, out, err = smi(xml_argv(nvidia_smi))
        if rc != 0:
            text = (out + "\n" + err).strip()
            if _no_driver(rc, text):
                facts["driver_error"] = last_chars(text, 500)
                return facts
            raise NvidiaSmiError("%s -q -x exited %d: %s" % (nvidia_smi, rc, last_chars(text, 1000)))
        info = parse_xml(out)
        driver = info["driver_version"] or driver
        cuda_version = info["cuda_version"]
    facts.update(driver_version=driver, cuda_version=cuda_version, gpus=gpus, gpu_count=len(gpus))
    return facts


def read_link(path):
    """What is at ``path``, read without following it (gpu_probe's RETURN ``link``): ``path``, ``exists``,
    ``is_link``, ``target`` (as written in the link, None when it is not one) and ``target_exists``."""
    is_link = os.path.islink(path)
    return {
        "path": path,
        "exists": os.path.lexists(path),
        "is_link": is_link,
        "target": os.readlink(path) if is_link else None,
        "target_exists": os.path.exists(path),
    }


def link_name(link):
    """The environment a ``current`` link names, from :func:`read_link`'s result: '' when it is missing, is
    not a link, or dangles (the engine_node role's ``__engine_node_link_name``)."""
    link = link or {}
    if link.get("is_link") and link.get("target_exists"):
        return os.path.basename(str(link.get("target") or "").rstrip("/"))
    return ""


def read_node(run, nvidia_smi, link, timeout=30):
    """What engine_node's plan reads on a node (gpu_probe with ``link`` and ``cuda`` false): the GPU facts
    (:func:`gather_facts`, no CUDA version) and ``link`` (:func:`read_link`). ``nvidia_smi`` is run only
    when no other user can change it (:func:`gather_facts` judges it); else :class:`GpuError`."""
    facts = gather_facts(run, nvidia_smi, timeout, cuda=False)
    facts["link"] = read_link(link)
    return facts


# --- the compute check ------------------------------------------------------------------


def compute_argv(python, engine="vllm", target="gpu"):
    """The command line of the compute check: isolated mode (``-I``: no ``PYTHONPATH``, no user
    site, not the working directory), as the uv flow's import check."""
    return [python, "-I", "-u", "-c", CHECK_SCRIPTS[target], engine or "none"]


def check_environ(env=None):
    """The environment updates of the compute check: ``env``, less :data:`SCRUBBED_ENV`."""
    updates = dict((str(k), str(v)) for k, v in (env or {}).items())
    updates.update((name, None) for name in SCRUBBED_ENV)
    return updates


def parse_check_output(stdout):
    """``(document, other_output)``: the check's JSON document (None if absent) and the rest."""
    lines = (stdout or "").splitlines()
    for at in range(len(lines) - 1, -1, -1):
        line = lines[at].strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get(CHECK_MARK):
            return doc, "\n".join(lines[:at] + lines[at + 1:])
    return None, stdout or ""


def _table():
    """engine_node's build table (``_builds``), imported where a failed check is classified: reading the node (the
    hourly look's module) does not need it."""
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds

    return _builds


def _cuda_major(torch_cuda):
    found = _table().dotted(torch_cuda)
    return found[0] if found else None


def _other_build(torch_cuda):
    major = _cuda_major(torch_cuda)
    if major is None:
        return None
    return "cu129" if major >= 13 else "cu13"


def _weakest_below_floor(devices):
    _builds = _table()
    floor = min((req["compute_capability"] for req in _builds.REQUIREMENTS.values()), key=_builds.dotted)
    below = [d for d in devices or [] if _builds.dotted(d.get("capability")) and not _builds.at_least(d["capability"], floor)]
    if not below:
        return None, floor
    return min(below, key=lambda d: _builds.dotted(d["capability"])), floor


def classify(text, result=None):
    """``(classification, hint)`` for a failed check's text (error, traceback, output)."""
    _builds = _table()
    result = result or {}
    text = text or ""
    torch_cuda = result.get("torch_cuda")
    cuda_label = ("CUDA %s" % torch_cuda) if torch_cuda else "its CUDA"
    other = _other_build(torch_cuda)

    need = re.search(r"GLIBC_(\d+(?:\.\d+)+)'? not found", text)
    if need:
        have = glibc_version()
        return "glibc", (
            "the engine's compiled code needs glibc %s and this node has %s: use a build whose "
            "wheel targets an older manylinux (glibc), or move the node to a newer OS"
            % (need.group(1), have or "an older or a different C library")
        )

    # the CUDA libraries whose soname carries the CUDA major version (cuDNN, NCCL, cuFFT... do not)
    lib = re.search(r"\b(libcudart|libcublas(?:Lt)?|libnvrtc)\.so\.(\d+)[^:\s]*: cannot open shared object file", text)
    if lib:
        major = int(lib.group(2))
        library = "%s.so.%d" % (lib.group(1), major)
        if major != _cuda_major(torch_cuda):
            index = "cu130" if major >= 13 else "cu129"
            return "cuda_runtime_mismatch", (
                "the engine was built for CUDA %d (it looks for %s) and torch here is a %s build: "
                "rebuild the environment with torch from the PyTorch index of the build (%s) and "
                "check that the lock pins torch with the +%s label" % (major, library, cuda_label, index, index)
            )
        return "cuda_runtime_mismatch", (
            "%s, which the engine and torch (%s) both need, is not installed in this environment: "
            "the CUDA runtime packages (nvidia-*) are missing from the lock; rebuild the environment"
            % (library, cuda_label)
        )

    if "the provided PTX was compiled with an unsupported toolchain" in text:
        hint = "the NVIDIA driver is older than the %s toolkit this build's kernels were compiled with: " % cuda_label
        full = _builds.FULL_SUPPORT_DRIVER.get(".".join(str(p) for p in (_builds.dotted(torch_cuda) or ())[:2]))
        if _cuda_major(torch_cuda) and _cuda_major(torch_cuda) >= 13:
            hint += "set engine_node_build to cu129 for this node, or upgrade the driver"
        else:
            hint += "upgrade the driver"
        if full:
            hint += " (%s runs fully from driver %s)" % (cuda_label, full)
        return "unsupported_ptx", hint

    if "no kernel image is available for execution on the device" in text:
        weakest, floor = _weakest_below_floor(result.get("devices"))
        if weakest:
            return "no_kernel_image", (
                "GPU %s (%s) has compute capability %s, older than any vLLM build supports (%s): "
                "set engine_node_build to none for this node"
                % (weakest["index"], weakest.get("name"), weakest["capability"], floor)
            )
        return "no_kernel_image", (
            "this build has no kernels for this GPU: set engine_node_build to %s for this node"
            % (other or "the other build (cu13 or cu129)")
        )

    if re.search(
        r"CUDA driver version is insufficient for CUDA runtime version|"
        r"NVIDIA driver on your system is too old",
        text,
    ):
        if _cuda_major(torch_cuda) and _cuda_major(torch_cuda) >= 13:
            hint = "set engine_node_build to cu129 for this node, or upgrade the NVIDIA driver to %s or newer" % (
                _builds.REQUIREMENTS["cu13"]["driver"]
            )
        else:
            hint = "upgrade the NVIDIA driver to %s or newer" % _builds.REQUIREMENTS["cu129"]["driver"]
        return "driver_too_old", "the NVIDIA driver is too old for this build's %s: %s" % (cuda_label, hint)

    if "Torch not compiled with CUDA enabled" in text:
        return "no_device", (
            "torch %s in this environment is a CPU-only build: the environment resolved a CPU "
            "torch; rebuild it with torch from the build's index" % (result.get("torch") or "")
        )

    if re.search(
        r"Found no NVIDIA driver|no CUDA-capable device is detected|No CUDA GPUs are available|"
        r"torch sees no CUDA device|CUDA driver initialization failed",
        text,
    ):
        return "no_device", (
            "torch sees no GPU: check that the NVIDIA driver is loaded (nvidia-smi answers), that "
            "CUDA_VISIBLE_DEVICES does not hide the GPUs, and that this is a GPU node; skip the "
            "check on nodes without a GPU"
        )

    return "other", "the GPU check failed for a reason not recognised: read the error and the output"


def classify_cpu(text, result=None):
    """``(classification, hint)`` for a failed CPU check."""
    result = result or {}
    if re.search(r"GLIBC_(\d+(?:\.\d+)+)'? not found", text or ""):
        return classify(text, result)
    if result.get("rc") in (-4, 132) or "Illegal instruction" in (text or ""):
        return "other", ("the interpreter died of an illegal instruction: this CPU lacks an instruction set that "
                         "the CPU build of torch or vLLM was compiled for; set engine_node_build to none for this node")
    if "no C++ compiler (g++ or c++)" in (text or ""):
        return "other", ("install a C++ compiler on the node (Debian and Ubuntu: g++; RHEL: gcc-c++) and run again: "
                         "vLLM's CPU engine cannot serve without one")
    if "no Python.h for this interpreter" in (text or ""):
        return "other", ("install the headers of the node's Python (Debian and Ubuntu: python3-dev; RHEL: python3-devel), "
                         "or use an interpreter that has them (uv's managed Pythons do), and run again")
    missing = re.search(r"(lib[A-Za-z0-9_+-]+\.so[.0-9]*): cannot open shared object file", text or "")
    if missing:
        library = missing.group(1)
        package = {"libnuma.so.1": " (Debian and Ubuntu: libnuma1; RHEL: numactl-libs)"}.get(library, "")
        return "other", ("the engine's CPU kernels need the system library %s, which this node does not have: "
                         "install it%s and run again" % (library, package))
    return "other", "the CPU check failed for a reason not recognised: read the error and the output"


def compute_check(run, python, timeout, env=None, engine="vllm", target="gpu"):
    """Run the compute check in ``python``; see the module docstring for the result."""
    engine = engine or "none"
    if target not in CHECK_SCRIPTS:
        raise ValueError("target must be gpu or cpu, not %r" % (target,))
    started = time.monotonic()
    res = run(compute_argv(python, engine, target), env=check_environ(env), timeout=timeout)
    seconds = round(time.monotonic() - started, 3)
    rc, out, err, timed_out = res.rc, res.out, res.err, res.timed_out
    doc, rest = parse_check_output(out)
    doc = doc or {}
    output = last_chars("\n".join(part for part in (rest.strip(), err.strip()) if part))
    result = {
        "ok": bool(doc.get("ok")) and rc == 0 and not timed_out,
        "python": python,
        "engine": engine,
        "rc": rc,
        "timed_out": timed_out,
        "seconds": seconds,
        "torch": doc.get("torch"),
        "torch_cuda": doc.get("torch_cuda"),
        "arch_list": doc.get("arch_list") or [],
        "devices": doc.get("devices") or [],
        "engine_op": doc.get("engine_op"),
        "stage": doc.get("stage"),
        "error": doc.get("error"),
        "classification": None,
        "hint": None,
        "output": output,
        "target": target,
    }
    if result["ok"]:
        result["stage"] = None
        return result
    if timed_out:
        result["error"] = result["error"] or "did not finish within %g s" % float(timeout)
        result["classification"] = "other"
        result["hint"] = (
            "the check did not finish within %g s: the GPU may be busy or hung (look at nvidia-smi and "
            "for Xid errors in `dmesg`), or the environment is slow to import: raise the timeout"
            % float(timeout)
        )
        return result
    if not doc:
        result["error"] = "%s exited %d without the check's result" % (python, rc)
        result["stage"] = result["stage"] or "start of the interpreter"
    elif not doc.get("ok") and not doc.get("error"):
        result["error"] = "%s exited %d at %s without the check's result%s" % (
            python, rc, doc.get("stage"), " (killed by signal %d)" % (rc - 128 if rc > 128 else -rc) if rc > 128 or rc < 0 else "")
    elif doc.get("ok"):
        result["error"] = "the check passed but %s exited %d" % (python, rc)
    text = "\n".join(
        part
        for part in (doc.get("error"), doc.get("traceback"), "\n".join(doc.get("warnings") or []), output)
        if part
    )
    result["classification"], result["hint"] = (classify_cpu if target == "cpu" else classify)(text, result)
    return result


def failure_message(result):
    """A one-paragraph message for a failed compute check."""
    parts = [
        "the %s check in %s failed%s: %s"
        % (
            "CPU" if result.get("target") == "cpu" else "GPU",
            result.get("python"),
            (" at %s" % result["stage"]) if result.get("stage") else "",
            result.get("error") or "no error given",
        )
    ]
    if result.get("classification"):
        parts.append("[%s] %s" % (result["classification"], result.get("hint") or ""))
    if result.get("output"):
        parts.append("output: %s" % last_chars(result["output"], 1500))
    return "; ".join(parts)
