"""engine_node_environments: the environments and fallback notes state.yml reports (engine_node_state's
environments and fallback_notes), read from marker files as uv_engine_env writes them (_envdir's spec,
_fs's writer) and handed over as slurp does (base64 in a loop's results)."""

from __future__ import annotations

import base64
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import write_json_atomic
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import (
    LOCK_FILE_NAME, MARKER_FORMAT, MARKER_NAME, wanted_spec)
from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

environments = filter_plugin("engine_node_layout").FilterModule().filters()["engine_node_environments"]

# roles/engine_node/vars/main.yml's __engine_node_env_regex
PATTERN = r"^[0-9][0-9A-Za-z.+!]*-(cu13|cu129|cpu)$"
GPU = {"ok": True, "gpus": 1, "classification": None}


def params(version, build, lock=None):
    return {"engine": "vllm", "version": version, "build": build, "requirements": ["vllm==" + version],
            "wheel": None, "index_url": "https://user:s3cret@pypi.example/simple", "extra_index_url": [],
            "index_strategy": "first-index", "exclude_newer": "2026-01-02T00:00:00Z", "exclude_newer_package": {},
            "python": "3.12", "python_preference": "only-managed", "lock": lock}


def marker(spec, packages=180):
    # the marker uv_engine_env writes (module_utils/uvenv/_uvenv.py) once a build is proven
    return {"format": MARKER_FORMAT, "spec": spec,
            "lock": {"file": LOCK_FILE_NAME, "sha256": "a" * 64, "packages": packages},
            "installed_at": "2026-01-03T04:05:06Z", "verified": {"vllm": "ok"}, "gpu": GPU}


def slurped(root, *paths):
    """The files as state.yml's slurp loop registers them."""
    return [{"item": str(root / p), "content": base64.b64encode((root / p).read_bytes()).decode("ascii"),
             "source": str(root / p), "encoding": "base64", "changed": False} for p in paths]


def write(root, rel, data):
    os.makedirs(os.path.dirname(str(root / rel)), exist_ok=True)
    write_json_atomic(str(root / rel), data)
    return rel


def test_environments_from_the_markers_uv_engine_env_writes(tmp_path):
    cu13 = write(tmp_path, "0.20.0-cu13/" + MARKER_NAME, marker(wanted_spec(params("0.20.0", "cu13"), "0.9.5")))
    # installed from the fleet's lock: the spec records the lock's sha256, no cut-off
    fleet = write(tmp_path, "0.20.0-cu129/" + MARKER_NAME,
                  marker(wanted_spec(params("0.20.0", "cu129", lock="vllm==0.20.0\n"), "0.9.5"), packages=7))
    # an old marker without a spec (nor lock, nor gpu): the name gives version and build
    old = write(tmp_path, "0.19.1-cpu/" + MARKER_NAME, {"format": 1, "installed_at": "2025-12-01T00:00:00Z"})
    # not environments: a build in progress, and a directory whose name is no <version>-<build>
    partial = write(tmp_path, "0.21.0-cu13.partial/" + MARKER_NAME, marker(wanted_spec(params("0.21.0", "cu13"), "0.9.5")))
    odd = write(tmp_path, "mine/" + MARKER_NAME, marker(wanted_spec(params("0.18.0", "cu13"), "0.9.5")))
    note = write(tmp_path, "0.20.0-cu13.gpu-check-failed.json",
                 {"version": "0.20.0", "from": "cu13", "to": "cu129", "classification": "no_kernel_image",
                  "hint": None, "error": "no kernel image", "driver_version": "575.51", "gpus": ["GPU-1"]})
    out = environments(slurped(tmp_path, partial, cu13, odd, note, fleet, old), "0.20.0-cu129", PATTERN)
    assert out == {
        "environments": [
            {"name": "0.19.1-cpu", "version": "0.19.1", "build": "cpu", "current": False, "exclude_newer": None,
             "installed_at": "2025-12-01T00:00:00Z", "packages": None, "lock_sha256": None, "fleet_lock": False,
             "gpu": None},
            {"name": "0.20.0-cu129", "version": "0.20.0", "build": "cu129", "current": True, "exclude_newer": None,
             "installed_at": "2026-01-03T04:05:06Z", "packages": 7, "lock_sha256": "a" * 64, "fleet_lock": True,
             "gpu": GPU},
            {"name": "0.20.0-cu13", "version": "0.20.0", "build": "cu13", "current": False,
             "exclude_newer": "2026-01-02T00:00:00Z", "installed_at": "2026-01-03T04:05:06Z", "packages": 180,
             "lock_sha256": "a" * 64, "fleet_lock": False, "gpu": GPU},
        ],
        "notes": [{"version": "0.20.0", "from": "cu13", "to": "cu129", "classification": "no_kernel_image",
                   "hint": None, "error": "no kernel image", "driver_version": "575.51", "gpus": ["GPU-1"]}],
    }


def test_nothing_current_and_no_files():
    assert environments([], "", PATTERN) == {"environments": [], "notes": []}


def test_the_spec_s_version_and_build_win_over_the_name(tmp_path):
    # the spec says what was installed; the name only stands in where there is no spec
    rel = write(tmp_path, "0.20.0-cu13/" + MARKER_NAME, marker({"version": "0.20.0.post1", "build": "cu13"}))
    (env,) = environments(slurped(tmp_path, rel), "", PATTERN)["environments"]
    assert (env["version"], env["build"], env["current"]) == ("0.20.0.post1", "cu13", False)


@pytest.mark.parametrize("reads, words", [
    ("not a list", "must be slurp's loop results"),
    ([{"content": ""}], "needs item"),
    ([{"item": "/r/0.20.0-cu13/" + MARKER_NAME, "content": base64.b64encode(b"{not json").decode()}],
     "/r/0.20.0-cu13/.llmfleet-engine.json cannot be read as JSON"),
    ([{"item": "/r/0.20.0-cu13/" + MARKER_NAME, "content": base64.b64encode(b"[1]").decode()}],
     "not a JSON object"),
])
def test_bad_input_is_refused_naming_the_file(reads, words):
    with pytest.raises(filter_error(), match=words):
        environments(reads, "", PATTERN)
