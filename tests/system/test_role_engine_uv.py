"""The engine_uv role, the collection's one uv install, called through its interface as engine_cache
calls it (engine_node's calls run in test_role_fleet.py and test_role_install_checks.py): the wheel
for this machine from a uv index on 127.0.0.1, checked against its sha256, the binary put in place and
answering its version; a second run asks nothing; a missing wheel names the caller's variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.system.test_role_fleet import ARCH, UV_VERSION, UvIndex, uv_wheels

pytestmark = pytest.mark.integration

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Look for uv
      ansible.builtin.stat:
        path: %(dest)s
      register: have

    - name: Ask the index for the uv wheels
      llmfleet.engines.pypi_published:
        project: uv
        version: "%(version)s"
        index_url: %(index)s
      register: release
      when: not have.stat.exists

    - name: Install uv through engine_uv, as engine_cache does
      ansible.builtin.include_role:
        name: llmfleet.engines.engine_uv
      vars:
        engine_uv_version: "%(version)s"
        engine_uv_index_url: %(index)s
        engine_uv_files_url: %(index)s
        engine_uv_validate_certs: true
        engine_uv_release: "{{ release }}"
        engine_uv_arch: %(arch)s
        engine_uv_dest: %(dest)s
        engine_uv_named_by: engine_cache_uv
      when: not have.stat.exists
"""


def play(tmp_path, index, arch, dest):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY % {"dest": json.dumps(str(dest)), "version": UV_VERSION, "index": json.dumps(index.url),
                                "arch": json.dumps(arch)})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
               ANSIBLE_NOCOLOR="1", no_proxy="127.0.0.1", NO_PROXY="127.0.0.1")
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_engine_uv_installs_the_checked_binary_once_and_names_the_callers_variables(tmp_path):
    index = UvIndex(uv_wheels()).start()
    try:
        dest = tmp_path / "cache" / "uv" / UV_VERSION / "uv"
        proc = play(tmp_path, index, ARCH, dest)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        answer = subprocess.run([str(dest), "--version"], capture_output=True, text=True, timeout=60, check=False)
        assert answer.returncode == 0 and answer.stdout.split()[0] == "uv", answer
        assert os.listdir(dest.parent) == ["uv"]  # the wheel is gone once the binary is out
        fetched = [r for r in index.requests if "/files/" in r]
        assert len(fetched) == 1 and f"manylinux_2_17_{ARCH}" in fetched[0], index.requests

        asked = len(index.requests)
        again = play(tmp_path, index, ARCH, dest)
        assert again.returncode == 0 and len(index.requests) == asked, again.stdout[-3000:]

        other = tmp_path / "other" / "uv"
        missing = play(tmp_path, index, "riscv64", other)
        assert missing.returncode != 0
        text = missing.stdout + missing.stderr
        assert "has no manylinux wheel with a sha256 for machine architecture riscv64" in " ".join(text.split()), text
        assert "Choose another engine_cache_uv_version" in text and "engine_cache_uv_index_url names" in text, text
        assert not other.exists()
    finally:
        index.stop()
