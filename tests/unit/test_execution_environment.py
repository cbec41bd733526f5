"""meta/execution-environment.yml: the build context ansible-builder writes from it, and introspection.

Building the image needs its base image from a registry (unreachable here); ``ansible-builder
create`` writes the build context without one, so that is what CI checks: the Containerfile
installs the pinned ansible-core and ansible-runner, and feeds the collection's Python and system
requirements to ansible-builder's introspection and assemble steps, from real files. And when
the collection is installed into some other execution environment, ansible-builder's
introspection of it must find the same requirements, relative to the collection root.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

EE_FILE = REPO / "meta" / "execution-environment.yml"


def builder() -> str:
    """ansible-builder: beside this Python, else the tool venv's (ansible-builder is in dev.txt)."""
    for candidate in (pathlib.Path(sys.executable).parent / "ansible-builder", REPO / ".venv" / "bin" / "ansible-builder"):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("ansible-builder")
    assert found, "ansible-builder is not installed: it is pinned in requirements/dev.txt (make venv)"
    return found


def requirement_lines(path: pathlib.Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("ee") / "context"
    proc = subprocess.run(
        [builder(), "create", "-f", str(EE_FILE), "-c", str(out), "--output-filename", "Containerfile"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def definition() -> dict:
    return yaml.safe_load(EE_FILE.read_text())


def test_definition_is_v3_with_file_requirements(definition):
    assert definition["version"] == 3
    deps = definition["dependencies"]
    # Plain file names: introspection (which reads this file from installed collections) takes
    # them relative to the collection root and fails on anything else.
    assert deps["python"] == "requirements.txt" and deps["system"] == "bindep.txt", deps
    assert definition["images"]["base_image"]["name"], definition


@pytest.mark.parametrize("name", ["requirements.txt", "bindep.txt"])
def test_meta_copies_equal_the_collection_root_files(name):
    assert (REPO / "meta" / name).read_text() == (REPO / name).read_text(), (
        f"meta/{name} and {name} differ: ansible-builder reads one when it builds this file and the "
        "other when it introspects the installed collection; keep them identical"
    )
    assert not (REPO / "meta" / name).is_symlink()


def _lower_bound(spec: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.search(r">=\s*([0-9]+(?:\.[0-9]+)*)", spec).group(1).split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def test_ansible_core_pin_matches_requires_ansible(definition):
    pin = definition["dependencies"]["ansible_core"]["package_pip"]
    requires = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    assert pin.startswith("ansible-core"), pin
    assert _lower_bound(pin) == _lower_bound(requires), (pin, requires)


def test_context_carries_the_requirement_files(context):
    build = context / "_build"
    for name in ("requirements.txt", "bindep.txt"):
        copied = build / name
        assert copied.is_file() and not copied.is_symlink(), sorted(p.name for p in build.iterdir())
        assert copied.read_text() == (REPO / name).read_text()
    for script in ("assemble", "introspect.py", "install-from-bindep", "check_ansible"):
        assert (build / "scripts" / script).is_file(), script


def test_containerfile_installs_ansible_and_the_collection_requirements(context, definition):
    text = (context / "Containerfile").read_text()
    lines = text.splitlines()
    base = definition["images"]["base_image"]["name"]
    assert f'ARG EE_BASE_IMAGE="{base}"' in lines
    assert "FROM $EE_BASE_IMAGE AS base" in lines
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"$', text, re.M).group(1)
    assert definition["dependencies"]["ansible_core"]["package_pip"] in refs, refs
    assert definition["dependencies"]["ansible_runner"]["package_pip"] in refs, refs
    assert 'ARG PYCMD="%s"' % definition["dependencies"]["python_interpreter"]["python_path"] in lines
    # The requirement files go into the builder stage and through introspection and assemble.
    assert "COPY _build/requirements.txt requirements.txt" in lines
    assert "COPY _build/bindep.txt bindep.txt" in lines
    introspect = [line for line in lines if "introspect.py introspect" in line]
    assert len(introspect) == 1, introspect
    assert "--user-pip=requirements.txt" in introspect[0] and "--user-bindep=bindep.txt" in introspect[0]
    assert lines.index("RUN /output/scripts/assemble") > lines.index(introspect[0])
    assert "RUN /output/scripts/install-from-bindep && rm -rf /output/wheels" in lines
    assert "LABEL ansible-execution-environment=true" in lines


def test_introspection_of_the_installed_collection_finds_its_requirements(tmp_path):
    collections = tmp_path / "collections"
    link = collections / "ansible_collections" / "llmfleet" / "engines"
    link.parent.mkdir(parents=True)
    link.symlink_to(REPO, target_is_directory=True)
    proc = subprocess.run(
        [builder(), "introspect", "--sanitize", str(collections)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = yaml.safe_load(proc.stdout)
    tag = "  # from collection llmfleet.engines"
    system = [line[: -len(tag)] if line.endswith(tag) else line for line in found["system"] or []]
    python = [line[: -len(tag)] if line.endswith(tag) else line for line in found["python"] or []]
    assert system == requirement_lines(REPO / "bindep.txt"), proc.stdout
    assert python == requirement_lines(REPO / "requirements.txt"), proc.stdout
    assert system, "bindep.txt lists no system package: the introspection check would prove nothing"
