"""How the engine_node role names the environment `current` points to (__engine_node_link_name in
roles/engine_node/vars/main.yml), from what gpu_probe's ``link`` option really returns, for every
shape `current` can take on a node. plan.yml (converge) and state.yml (report) both use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import COLLECTIONS, REPO

pytestmark = pytest.mark.integration

PLAY = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - %(vars_file)s
  tasks:
    - name: Probe each shape of current
      llmfleet.engines.gpu_probe:
        nvidia_smi: /nonexistent/nvidia-smi
        link: "{{ item }}"
      loop: %(paths)s
      register: probes

    - name: Name what current points to, as the role does
      ansible.builtin.debug:
        msg: "{{ __engine_node_link_name }}"
      loop: "{{ probes.results }}"
      vars:
        __engine_node_link: "{{ item.link }}"
      register: names

    - name: Write the names down
      ansible.builtin.copy:
        dest: %(out)s
        content: "{{ names.results | map(attribute='msg') | list | to_json }}"
        mode: "0644"
"""


def test_current_link_names(tmp_path):
    roots = {}
    for shape in ("missing", "link", "dangling", "directory", "file"):
        envs = tmp_path / shape / "engines" / "vllm"
        envs.mkdir(parents=True)
        roots[shape] = envs
    (roots["link"] / "0.20.0-cu13").mkdir()
    (roots["link"] / "current").symlink_to("0.20.0-cu13")
    (roots["dangling"] / "current").symlink_to("0.15.1-cu129")  # its environment removed by hand
    (roots["directory"] / "current").mkdir()
    (roots["file"] / "current").write_text("")

    out = tmp_path / "names.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY % {"vars_file": json.dumps(str(REPO / "roles" / "engine_node" / "vars" / "main.yml")),
                                "paths": json.dumps([str(r / "current") for r in roots.values()]),
                                "out": json.dumps(str(out))})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # only a link to an environment that is there names one; anything else is "no current"
    assert dict(zip(roots, json.loads(out.read_text()))) == {
        "missing": "", "link": "0.20.0-cu13", "dangling": "", "directory": "", "file": ""}
