"""End to end: uv (and pip) lock and install the fake packages from the fake upstream.

These pin down the uv behaviour the collection relies on (FACTS.md, uv): ``--exclude-newer``
filters by upload time, a GitHub ``+cu129`` wheel locks the ``+cu129`` torch from the extra index
only with torch's cut-off lifted (the torch index dates its newest torch only, as PyTorch's does)
and silently falls back to PyPI's torch without, and uv's default index strategy looks for the
dependencies the torch index mirrors there alone.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
UV = pathlib.Path(sys.executable).parent / "uv"  # uv is pinned in every test venv
PYTHON = "/usr/bin/python3.11" if os.access("/usr/bin/python3.11", os.X_OK) else sys.executable
CUTOFF_0110 = "2025-10-03T20:00:00Z"  # vllm 0.11.0's last upload + 24 h
CUTOFF_0200 = "2026-06-11T12:00:00Z"  # vllm 0.20.0's upload + 24 h


@pytest.fixture
def uv_env(tmp_path):
    """An environment where uv and pip see no configuration and no index but the ones given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "FAKE_"))}
    env.update(
        {
            "UV_NO_CONFIG": "1",
            "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "UV_PYTHON_PREFERENCE": "only-system",
            "UV_NO_PROGRESS": "1",
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    return env


def run(cmd, env, cwd=None, check=True):
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (cmd, proc.returncode, proc.stdout, proc.stderr))
    return proc


def pins(lock_text: str) -> dict[str, str]:
    """{name: version or URL} of a uv lock (requirements format)."""
    found = {}
    for line in lock_text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(==| @ )(\S+)", line)
        if match:
            found[match.group(1)] = match.group(3)
    return found


def compile_lock(tmp_path, env, requirement, *args):
    req = tmp_path / "requirements.in"
    req.write_text(requirement + "\n")
    lock = tmp_path / "requirements.txt"
    run([UV, "pip", "compile", "--generate-hashes", "--python", PYTHON, *args, req, "-o", lock], env)
    return lock


def test_lock_and_install_vllm_0110_with_exclude_newer(upstream, tmp_path, uv_env):
    lock = compile_lock(
        tmp_path, uv_env, "vllm==0.11.0", "--exclude-newer", CUTOFF_0110, "--index-url", upstream.url + "/simple"
    )
    text = lock.read_text()
    assert pins(text) == {"llmfleet-fakedep": "1.1.0", "torch": "2.8.0", "vllm": "0.11.0"}
    catalog = {
        f["filename"]: f["sha256"] for row in upstream.catalog()["releases"] for f in row["files"] if row["where"] == "pypi"
    }
    # both vLLM files (wheel and sdist) are hashed; the hashes are those the index serves
    for name in ("vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl", "vllm-0.11.0.tar.gz", "torch-2.8.0-py3-none-any.whl"):
        assert "--hash=sha256:" + catalog[name] in text

    venv = tmp_path / "venv"
    run([UV, "venv", "--python", PYTHON, venv], uv_env)
    run(
        [UV, "pip", "install", "--python", venv / "bin" / "python", "--require-hashes", "--no-deps",
         "-r", lock, "--index-url", upstream.url + "/simple"],
        uv_env,
    )
    out = run([venv / "bin" / "python", "-c", "import vllm, torch; print(vllm.__version__, torch.version.cuda)"], uv_env)
    assert out.stdout.split() == ["0.11.0", "12.8"]
    downloads = [e["path"] for e in upstream.log() if e["path"].startswith("/files/")]
    assert "/files/llmfleet_fakedep-2.0.0-py3-none-any.whl" not in downloads


def test_pip_installs_the_lock_with_require_hashes(upstream, tmp_path, uv_env):
    lock = compile_lock(
        tmp_path, uv_env, "vllm==0.11.0", "--exclude-newer", CUTOFF_0110, "--index-url", upstream.url + "/simple"
    )
    target = tmp_path / "site"
    run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "--target", target,
         "--index-url", upstream.url + "/simple", "-r", lock],
        uv_env,
    )
    assert (target / "vllm" / "_custom_ops.py").is_file()
    assert sorted(p.name for p in target.glob("*.dist-info")) == [
        "llmfleet_fakedep-1.1.0.dist-info",
        "torch-2.8.0.dist-info",
        "vllm-0.11.0.dist-info",
    ]
    record = (target / "vllm-0.11.0.dist-info" / "RECORD").read_text()
    assert "vllm/__init__.py,sha256=" in record


def _github_pin(upstream, tag, name):
    with urllib.request.urlopen(upstream.url + "/github/api/repos/vllm-project/vllm/releases/tags/" + tag) as resp:
        release = json.load(resp)
    asset = next(a for a in release["assets"] if a["name"] == name)
    assert asset["digest"].startswith("sha256:")
    return "vllm @ %s#sha256=%s" % (asset["browser_download_url"], asset["digest"][len("sha256:"):])


GH_0200 = "vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl"
LIFT_TORCH = ("--exclude-newer-package", "torch=false")


@pytest.mark.parametrize(
    "torch_upload_times, cutoff_args, expected_torch",
    [
        ("partial", (), "2.11.0+cu129"),
        # what the role passes: the cut-off, lifted for torch
        ("partial", ("--exclude-newer", CUTOFF_0200) + LIFT_TORCH, "2.11.0+cu129"),
        # the hazard: the torch index dates only its newest torch (2.12.0, after the cut-off),
        # --exclude-newer drops the rest, and unsafe-best-match quietly takes PyPI's torch (the
        # other CUDA build)
        ("partial", ("--exclude-newer", CUTOFF_0200), "2.11.0"),
        ("none", ("--exclude-newer", CUTOFF_0200), "2.11.0"),
        ("none", ("--exclude-newer", CUTOFF_0200) + LIFT_TORCH, "2.11.0+cu129"),
        # an index that dated every file would need no lift
        ("all", ("--exclude-newer", CUTOFF_0200), "2.11.0+cu129"),
    ],
)
def test_github_cu129_wheel_locks_matching_torch(
    upstream, tmp_path, uv_env, torch_upload_times, cutoff_args, expected_torch
):
    upstream.switch(torch_upload_times=torch_upload_times)
    args = ["--index-url", upstream.url + "/simple", "--extra-index-url", upstream.url + "/torch/cu129",
            "--index-strategy", "unsafe-best-match", *cutoff_args]
    lock = compile_lock(tmp_path, uv_env, _github_pin(upstream, "v0.20.0", GH_0200), *args)
    locked = pins(lock.read_text())
    assert locked["torch"] == expected_torch
    assert locked["vllm"].split("#")[0].endswith("/v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl")
    # the torch index's undated mirror of fakedep 1.0.0 never wins over PyPI's newer releases
    assert locked["llmfleet-fakedep"] == ("1.1.0" if cutoff_args else "2.0.0")


def test_first_index_strategy_takes_mirrored_dependencies_from_the_torch_index_only(upstream, tmp_path, uv_env):
    """uv's default (first-index): a package the extra index has at all is taken from there alone."""
    pin = _github_pin(upstream, "v0.20.0", GH_0200)
    args = ["--index-url", upstream.url + "/simple", "--extra-index-url", upstream.url + "/torch/cu129"]
    # without a cut-off: the torch index's old mirrored fakedep, although PyPI has newer ones
    locked = pins(compile_lock(tmp_path, uv_env, pin, *args).read_text())
    assert (locked["torch"], locked["llmfleet-fakedep"]) == ("2.11.0+cu129", "1.0.0")
    # with the cut-off (torch lifted, as the role does): the mirror is undated, so nothing is left
    req = tmp_path / "requirements.in"
    proc = run([UV, "pip", "compile", "--python", PYTHON, *args, "--exclude-newer", CUTOFF_0200, *LIFT_TORCH,
                req], uv_env, check=False)
    assert proc.returncode == 1, proc.stdout
    assert "llmfleet-fakedep" in proc.stderr and "missing an upload date" in proc.stderr, proc.stderr


def test_github_cu129_wheel_installs_with_require_hashes(upstream, tmp_path, uv_env):
    args = ["--index-url", upstream.url + "/simple", "--extra-index-url", upstream.url + "/torch/cu129",
            "--index-strategy", "unsafe-best-match", "--exclude-newer", CUTOFF_0200, *LIFT_TORCH]
    lock = compile_lock(tmp_path, uv_env, _github_pin(upstream, "v0.20.0", GH_0200), *args)
    venv = tmp_path / "venv"
    run([UV, "venv", "--python", PYTHON, venv], uv_env)
    run([UV, "pip", "install", "--python", venv / "bin" / "python", "--require-hashes", "--no-deps", "-r", lock,
         *args], uv_env)
    out = run([venv / "bin" / "python", "-c", "import vllm, torch; print(vllm.__version__, torch.__version__, "
               "torch.version.cuda)"], uv_env)
    assert out.stdout.split() == ["0.20.0+cu129", "2.11.0+cu129", "12.9"]
    raw = [e["raw_path"] for e in upstream.log() if e["path"].endswith(GH_0200)]
    assert raw and all("%2B" in p for p in raw)
    # uv followed GitHub's redirect to the signed object URL for the bytes
    downloads = [e for e in upstream.log() if e["path"].endswith(GH_0200)]
    objects = [e for e in upstream.log() if e["path"].startswith("/github-objects/")]
    assert {e["status"] for e in downloads} == {302} and len(objects) == len(downloads)
    assert {(e["method"], e["status"]) for e in objects} <= {("GET", 200), ("HEAD", 200)}


def test_tampered_github_wheel_fails_install_with_hash_mismatch(upstream, tmp_path, uv_env):
    args = ["--index-url", upstream.url + "/simple", "--extra-index-url", upstream.url + "/torch/cu129",
            "--index-strategy", "unsafe-best-match", "--exclude-newer", CUTOFF_0200, *LIFT_TORCH]
    lock = compile_lock(tmp_path, uv_env, _github_pin(upstream, "v0.20.0", GH_0200), *args)
    upstream.fault("tamper", filename=GH_0200)
    venv = tmp_path / "venv"
    run([UV, "venv", "--python", PYTHON, venv], uv_env)
    proc = run([UV, "pip", "install", "--python", venv / "bin" / "python", "--require-hashes", "--no-deps", "-r",
                lock, *args], uv_env, check=False)
    assert proc.returncode == 1
    assert "Hash mismatch" in proc.stderr
