"""engine_node_exclude_newer_package (plugins/filter/engine_node_lock.py), and through it the lock item's
``exclude_newer_package``: a release whose aarch64 wheel came after the cut-off (issue 30, finding 6)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

REPO = pathlib.Path(__file__).resolve().parents[4]

cutoff = filter_plugin("engine_node_lock")
node_report = filter_plugin("engine_node_lock")
AnsibleFilterError = filter_error()
LIFT = cutoff.FilterModule().filters()["engine_node_exclude_newer_package"]
ENGINE_FILE = cutoff.FilterModule().filters()["engine_node_engine_file"]
LOCK_ITEM = node_report.FilterModule().filters()["engine_node_lock_item"]

# as pypi_published answers for a release whose x86_64 wheel and sdist came on one day and its
# aarch64 wheel, then a pure wheel, months later
RELEASE = {
    "published": "2026-06-10T12:00:00Z", "exclude_newer": "2026-06-11T12:00:00Z",
    "files": [{"filename": "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl", "sha256": "a" * 64},
              {"filename": "vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl", "sha256": "b" * 64},
              {"filename": "vllm-0.20.0.tar.gz", "sha256": "c" * 64}],
    "late_files": [
        {"filename": "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl", "upload_time": "2026-09-01T12:00:00Z",
         "exclude_newer": "2026-09-02T12:00:00Z", "sha256": "a" * 64},
        {"filename": "vllm-0.20.0.tar.gz", "upload_time": "2026-10-01T12:00:00Z", "exclude_newer": "2026-10-02T12:00:00Z",
         "sha256": "c" * 64},
    ],
}
PYPI = {"version": "0.20.0", "build": "cu13", "source": {"origin": "pypi"}}
GITHUB = {"version": "0.20.0", "build": "cu129", "source": {"origin": "github", "torch_index": "cu129"}}


def test_the_documentation_file():
    doc = yaml.safe_load((REPO / "plugins" / "filter" / "engine_node_exclude_newer_package.yml").read_text())
    assert doc["DOCUMENTATION"]["name"] == "engine_node_exclude_newer_package"
    assert "llmfleet.engines.engine_node_exclude_newer_package" in doc["EXAMPLES"]


def test_the_late_platform_gets_the_engines_own_cut_off_the_other_nothing():
    assert LIFT(dict(PYPI, arch="aarch64"), RELEASE) == {"vllm": "2026-09-02T12:00:00Z"}
    # the x86_64 wheel came first: its node resolves exactly as before the aarch64 wheel was added,
    # and the sdist (nothing is built from source) lifts nothing
    assert LIFT(dict(PYPI, arch="x86_64"), RELEASE) == {}
    assert LIFT(dict(PYPI, arch="x86_64"), {"exclude_newer": "2026-06-11T12:00:00Z", "late_files": []}) == {}


def test_a_late_wheel_never_replaces_an_on_time_one_that_fits():
    # issue 44, finding 15: a pure wheel added later fits every node, but each has an on-time file or
    # an earlier late wheel of its own: nothing moves to the pure wheel
    late_any = {"filename": "vllm-0.20.0-py3-none-any.whl", "upload_time": "2026-11-01T00:00:00Z",
                "exclude_newer": "2026-11-02T00:00:00Z", "sha256": "d" * 64}
    release = dict(RELEASE, files=RELEASE["files"] + [{"filename": late_any["filename"], "sha256": "d" * 64}],
                   late_files=RELEASE["late_files"] + [late_any])
    assert LIFT(dict(PYPI, arch="x86_64"), release) == {}
    assert ENGINE_FILE(dict(PYPI, arch="x86_64"), release) == {}
    assert LIFT(dict(PYPI, arch="aarch64"), release) == {"vllm": "2026-09-02T12:00:00Z"}
    assert ENGINE_FILE(dict(PYPI, arch="aarch64"), release) == {
        "filename": "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl", "sha256": "a" * 64}
    # an on-time pure wheel and a build-tagged rebuild a year later: no node is lifted
    tagged = {"filename": "vllm-0.20.0-1-cp38-abi3-manylinux_2_28_x86_64.whl", "upload_time": "2027-06-10T12:00:00Z",
              "exclude_newer": "2027-06-11T12:00:00Z", "sha256": "e" * 64}
    universal = {"exclude_newer": "2026-06-11T12:00:00Z", "late_files": [tagged],
                 "files": [{"filename": "vllm-0.20.0-py3-none-any.whl", "sha256": "f" * 64},
                           {"filename": tagged["filename"], "sha256": "e" * 64}]}
    for arch in ("x86_64", "aarch64"):
        assert LIFT(dict(PYPI, arch=arch), universal) == {}
        assert ENGINE_FILE(dict(PYPI, arch=arch), universal) == {}


def test_only_a_late_pure_wheel_fits_every_architecture_gets_it():
    release = {"exclude_newer": "2026-06-11T12:00:00Z",
               "files": [{"filename": "vllm-0.20.0.tar.gz", "sha256": "c" * 64},
                         {"filename": "vllm-0.20.0-py3-none-any.whl", "sha256": "d" * 64}],
               "late_files": [{"filename": "vllm-0.20.0-py3-none-any.whl", "upload_time": "2026-11-01T00:00:00Z",
                               "exclude_newer": "2026-11-02T00:00:00Z", "sha256": "d" * 64}]}
    for arch in ("x86_64", "aarch64"):
        assert LIFT(dict(PYPI, arch=arch), release) == {"vllm": "2026-11-02T00:00:00Z"}
        wanted = {"filename": "vllm-0.20.0-py3-none-any.whl", "sha256": "d" * 64}
        assert ENGINE_FILE(dict(PYPI, arch=arch), release) == wanted
    assert ENGINE_FILE(dict(GITHUB, arch="x86_64"), release) == {}


def test_a_github_build_gets_the_torch_exceptions_only():
    # the engine is a wheel URL there, which no cut-off filters
    assert LIFT(dict(GITHUB, arch="aarch64"), RELEASE, {"torch": False}) == {"torch": False}
    assert LIFT(dict(GITHUB, arch="aarch64"), RELEASE) == {}


def test_bad_input_is_named():
    with pytest.raises(AnsibleFilterError, match="release must be a dict"):
        LIFT(dict(PYPI, arch="x86_64"), ["not", "a", "dict"])


def test_the_lock_item_carries_the_engines_cut_off_for_its_architecture():
    def item(arch):
        return LOCK_ITEM(dict(PYPI, arch=arch), {"glibc": "2.36"}, RELEASE, {}, "3.12", "/srv/locks",
                         "https://pypi/simple", "https://torch/whl", {"torch": False}, "")
    arm, x86 = item("aarch64"), item("x86_64")
    assert arm["exclude_newer"] == x86["exclude_newer"] == "2026-06-11T12:00:00Z"
    assert arm["exclude_newer_package"] == {"vllm": "2026-09-02T12:00:00Z"}
    assert x86["exclude_newer_package"] is None
    assert arm["engine_file"] == {"filename": "vllm-0.20.0-cp38-abi3-manylinux_2_28_aarch64.whl", "sha256": "a" * 64}
    assert "engine_file" not in x86
