"""engine_node_switch (mutation audit of issue 17: guarded only by molecule before): with false,
engine_node leaves `current` alone and reports the proven environment as pending, for
engine_service to switch between drain and restart; with true it switches at once. The wanted
environment is already on disk, so the role decides, switches or not, and asks nothing upstream."""

from __future__ import annotations

import json
import subprocess

from tests.roles import conftest

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"


def run_engine_node(node, switch):
    folder = node.tmp / ("engine-node-%s" % switch)
    folder.mkdir()
    result = folder / "result.json"
    play = [{"name": "engine_node", "hosts": "localhost", "gather_facts": False,
             "roles": [{"role": "llmfleet.engines.engine_node"}],
             "post_tasks": [{"name": "Write the result down", "ansible.builtin.copy": {
                 "content": "{{ engine_node_result | to_json }}", "dest": str(result), "mode": "0644"}}]}]
    (folder / "site.yml").write_text(json.dumps(play))
    extra = {"ansible_connection": "local", "ansible_python_interpreter": conftest.PYTHON,
             "engine_node_root": str(node.root), "engine_node_version": "0.15.1", "engine_node_build": "cu129",
             "engine_node_switch": switch, "engine_node_keep": 1,
             "engine_node_nvidia_smi": str(conftest.REPO / "tests" / "fixtures" / "bin" / "fake-nvidia-smi"),
             # nothing upstream is reachable: a look-up would fail the test
             "engine_node_index_url": "http://127.0.0.1:9/simple", "engine_node_pypi_url": "http://127.0.0.1:9"}
    (folder / "extra.json").write_text(json.dumps(extra))
    env = node.env(ANSIBLE_COLLECTIONS_PATH=str(conftest.COLLECTIONS), ANSIBLE_NOCOLOR="1",
                   FAKE_NVIDIA_SMI_CASE=str(conftest.REPO / "tests" / "fixtures" / "nvidia-smi" / "h100-580"))
    proc = subprocess.run([str(conftest.ANSIBLE_PLAYBOOK), "-i", "localhost,", str(folder / "site.yml"),
                           "-e", "@%s" % (folder / "extra.json")], env=env, cwd=str(folder), capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(result.read_text())


def test_engine_node_switch_false_leaves_current_for_engine_service(node):
    node.make_env(*OLD.split("-"))
    node.make_env(*NEW.split("-"))
    node.set_current(OLD)

    held = run_engine_node(node, False)
    assert node.current() == OLD
    assert (held["current"], held["pending"]) == (OLD, NEW), held

    switched = run_engine_node(node, True)
    assert node.current() == NEW
    assert (switched["current"], switched["pending"]) == (NEW, ""), switched
