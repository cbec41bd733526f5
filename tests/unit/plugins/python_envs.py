"""Python environments for tests of checks that run isolated (``python -I``), where PYTHONPATH
cannot bring packages: a venv of this interpreter with the packages in its site-packages."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import zipfile

FAKE_RUNTIME_WHEELS = ("torch-2.11.0-py3-none-any.whl", "vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl")


def make_env(root, files=(), wheels=()):
    """A venv at ``root`` whose site-packages hold ``files`` (``{relative path: text}``) and the
    contents of ``wheels``; returns its interpreter's path."""
    root = pathlib.Path(root)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name, text in dict(files).items():
        target = pathlib.Path(site) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    return str(python)


def fake_runtime_env(tmp_path_factory):
    """An environment with the fake upstream's torch 2.11.0 (CUDA 13.0) and vLLM 0.20.0."""
    from tests.upstream import build_packages

    packages = tmp_path_factory.mktemp("packages")
    build_packages(packages)
    return make_env(tmp_path_factory.mktemp("fake-runtime") / "env",
                    wheels=[packages / "pypi" / name for name in FAKE_RUNTIME_WHEELS])
