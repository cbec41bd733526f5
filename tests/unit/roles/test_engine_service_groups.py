"""The engine_service role's check of its model groups (tasks/validate.yml), run by ansible-playbook on an inventory
of three hosts (a local connection each): two members of a group and a host outside it. Every member reads the whole
group through hostvars, so a bad value on one member fails both, with the same words, and the host outside passes;
the units the role renders (its ``__engine_service_rendered``) give the leader the API and the follower
``--headless``."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[3]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODEL = {"name": "big", "model": "org/big", "port": 8000, "revision": COMMIT}


def run(tmp_path, b_models=None):
    inventory = {"all": {
        "vars": {"engine_service_model_groups": [{"name": "big", "members": ["a", "b"], "parallel": "tensor",
                                                  "network": "10.20.0.0/24"}],
                 "ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "hosts": {
            "a": {"engine_service_models": [MODEL], "engine_service_group_address": "10.20.0.1",
                  "engine_service_group_interface": "eth1"},
            "b": {"engine_service_models": b_models or [MODEL], "engine_service_group_address": "10.20.0.2",
                  "engine_service_group_interface": "eth1"},
            "c": {"engine_service_models": [{"name": "small", "model": "org/small", "port": 8000}]},
        }}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Validate", "ansible.builtin.import_role": {
            "name": "llmfleet.engines.engine_service", "tasks_from": "validate", "rolespec_validate": False,
            "public": True}},
        # what the role renders for each host (its vars/main.yml), for a new environment with the pin's lock,
        # written where the test reads it (no stdout callback to parse: ansible-core's differ between versions)
        {"name": "Keep the units", "ansible.builtin.copy": {
            "content": "{{ __engine_service_rendered | to_json }}", "dest": str(tmp_path / "{{ inventory_hostname }}.json"),
            "mode": "0644"},
         "vars": {"__engine_service_env": "0.32.0-cpu", "__engine_service_model_locks": {
             "org/big@" + COMMIT: {"commit": COMMIT}, "org/small@x": {}}}},
    ]}]
    (tmp_path / "play.json").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "build" / "collections"), ANSIBLE_STDOUT_CALLBACK="default")
    playbook = pathlib.Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run([str(playbook), "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.json")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    units = {host: json.loads((tmp_path / ("%s.json" % host)).read_text())
             for host in "abc" if (tmp_path / ("%s.json" % host)).exists()}
    return proc, units


def test_a_good_group_passes_on_every_host_and_its_members_units_are_the_groups(tmp_path):
    proc, units = run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (leader,), (follower,), (alone,) = units["a"], units["b"], units["c"]
    assert leader["group"] == {"group": "big", "rank": 0, "role": "leader", "leader": "a"}
    assert follower["group"] == {"group": "big", "rank": 1, "role": "follower", "leader": "a"}
    assert alone["group"] is None and "--nnodes" not in alone["argv"]
    assert " ".join(leader["argv"]).endswith(
        "--tensor-parallel-size 2 --nnodes 2 --node-rank 0 --master-addr 10.20.0.1 --master-port 29501")
    assert follower["argv"][-1] == "--headless" and "--port" not in follower["argv"]
    assert '"VLLM_HOST_IP=10.20.0.2"' in follower["environment"]


def test_a_member_on_another_commit_fails_every_member_with_the_same_words_and_no_other_host(tmp_path):
    other = dict(MODEL, revision="f" * 40)
    proc, units = run(tmp_path, b_models=[other])
    assert proc.returncode != 0
    # the host outside the group went on; neither member did
    assert sorted(units) == ["c"], proc.stdout[-3000:]
    for host in ("a", "b"):
        words = ('host %s: member b (rank 1 of group \\"big\\"): variable engine_service_models (model \\"big\\")'
                 ' has revision \\"%s\\", the leader a has \\"%s\\": allowed: the same on every member. Fix it in'
                 " the inventory (engine_service_model_groups, or the member's variables)." % (host, "f" * 40, COMMIT))
        assert re.search(r"fatal: \[%s\]: FAILED! => .*%s" % (host, re.escape(words)), proc.stdout), proc.stdout[-3000:]
