"""tools/gpu_capture.py, the capture of a real GPU node's fixtures, run against the fake nvidia-smi.

Its plumbing only (a real GPU is not here): nvidia-smi's outputs land as a case directory the fake
replays, gpu_probe runs through ansible-playbook and its results come back as JSON, the timings
are figures. The stand-in vLLM cases need nvcc and a GPU; they are left out (``--nvcc ''``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.unit.plugins.python_envs import make_env

pytestmark = pytest.mark.integration

CASE = REPO / "tests" / "fixtures" / "nvidia-smi" / "h200-580"


def test_capture_against_the_fake_nvidia_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(REPO / "tests" / "fixtures" / "bin" / "fake-nvidia-smi")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH="%s:%s:%s" % (bin_dir, pathlib.Path(sys.executable).parent, os.environ["PATH"]),
               FAKE_NVIDIA_SMI_CASE=str(CASE), ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "tools/gpu_capture.py", "--out", str(out), "--runs", "2", "--nvcc", "",
                           "--python", sys.executable], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    expected = ["capture.log", "gpu_probe.json", "nvidia-smi.txt", "q-x.xml", "query-gpu.csv", "timings.json"]
    assert sorted(p.name for p in out.iterdir()) == expected

    # nvidia-smi's outputs, in the layout of a case directory
    assert (out / "query-gpu.csv").read_text() == (CASE / "query-gpu.csv").read_text()
    assert (out / "q-x.xml").read_text() == (CASE / "q-x.xml").read_text()

    timings = json.loads((out / "timings.json").read_text())
    assert set(timings) == {"query", "xml"}
    for label in timings.values():
        assert set(label) == {"direct", "runner"}
        assert all(side["runs"] == 2 and 0 < side["min_s"] <= side["median_s"] <= side["max_s"] for side in label.values())

    results = json.loads((out / "gpu_probe.json").read_text())
    assert {name: r["choice"]["build"] for name, r in results.items() if name.startswith("choice")} == {
        "choice 0.20.0 auto": "cu13", "choice 0.11.0 auto": "cu129", "choice 0.20.0 cu129": "cu129",
        "choice 0.15.1 cu13": "cu13"}
    facts = results["choice 0.20.0 auto"]
    assert (facts["driver_version"], facts["cuda_version"], facts["gpu_count"]) == ("580.82.07", "13.0", 1)
    assert facts["nvidia_smi"] == str(bin_dir / "nvidia-smi")  # found on PATH, as on a real node
    # this interpreter has no torch: every check fails at its import, and says so, without failing the task
    checks = {name: r["compute"] for name, r in results.items() if name.startswith("check")}
    assert set(checks) == {"check torch_only", "check vllm_missing", "check no_visible_device"}
    for check in checks.values():
        assert (check["ok"], check["stage"], check["classification"]) == (False, "import torch", "other"), check
        assert "No module named 'torch'" in check["error"]
    assert not any(r.get("failed") for r in results.values())


def test_the_stand_in_vllm_gets_an_environment_of_its_own(tmp_path):
    """The compute check runs isolated (no PYTHONPATH): the stand-in vLLM of the nvcc cases comes
    from a venv whose .pth puts it before --python's own paths (where torch is)."""
    spec = importlib.util.spec_from_file_location("gpu_capture", REPO / "tools" / "gpu_capture.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    python = make_env(tmp_path / "torch-env", {  # --python: an environment with torch (and a vllm)
        "torch/__init__.py": "__version__ = 'torch-of-the-env'\n",
        "vllm/__init__.py": "__version__ = 'a vllm the stand-in must shadow'\n"})
    shim = tmp_path / "shim"
    (shim / "vllm").mkdir(parents=True)
    (shim / "vllm" / "__init__.py").write_text("import torch\n__version__ = 'stand-in'\n")
    with open(tmp_path / "capture.log", "w") as logfh:
        env_python = tool.standin_env(str(tmp_path / "work"), str(python), str(shim), logfh)
    code = "import torch, vllm; print(torch.__version__, vllm.__version__)"
    out = subprocess.run([env_python, "-I", "-c", code], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout
    assert out.split() == ["torch-of-the-env", "stand-in"]
