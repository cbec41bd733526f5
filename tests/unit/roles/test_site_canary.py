"""The rollout's canary is the first serving host in inventory order, whichever node finished first; a model group
is one step of the rollout, its members together in one batch in rank order.

playbooks/site.yml groups the hosts that serve models with ``group_by``, which adds hosts in the
order their results reach the controller; the rollout play's first batch (one host, the canary)
must not depend on that race. Its ``hosts`` and ``serial`` are rendered here, by Ansible's own templar,
with the group in the reverse of inventory order (as a race can leave it).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
ROLLOUT = "Roll the served vLLM models onto the new engines"


# In a child process: the plugin loader set up for the collection (its filters) changes global state of ansible.
_RENDER = r"""
import json, sys
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

init_plugin_loader([sys.argv[1]])
plays = yaml.safe_load(open(sys.argv[2], encoding="utf-8").read())
play = next(p for p in plays if p["name"] == sys.argv[3])
variables = json.loads(sys.argv[4])
variables["__engine_service_rollout_plan"] = Templar(loader=DataLoader(), variables=variables).template(
    trust_as_template(play["vars"]["__engine_service_rollout_plan"]))
templar = Templar(loader=DataLoader(), variables=variables)
print(json.dumps([list(templar.template(trust_as_template(play["hosts"]))),
                  list(templar.template(trust_as_template(play["serial"])))]))
"""


def rollout_plan(groups, hostvars=None):
    """The rollout play's ``hosts`` and ``serial`` as Ansible's templar renders them (its play variable first),
    playbook strings trusted as templates as ansible-playbook trusts them."""
    variables = {"groups": groups, "hostvars": hostvars or {h: {} for h in groups["all"]}}
    proc = subprocess.run([sys.executable, "-c", _RENDER, str(REPO / "build" / "collections"),
                           str(REPO / "playbooks" / "site.yml"), ROLLOUT, json.dumps(variables)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("arrived", [["n3", "n1"], ["n1", "n3"]])
def test_the_canary_is_the_first_serving_host_in_inventory_order(arrived):
    groups = {"all": ["n1", "n2", "n3", "cache"], "llmfleet_engine_cache": ["cache"], "llmfleet_engine_service": arrived}
    hosts, serial = rollout_plan(groups)
    assert hosts == ["n1", "n3"]
    assert serial[0] == 1, "the first batch is the canary alone"


def test_a_fleet_that_serves_nothing_rolls_no_host():
    assert rollout_plan({"all": ["n1", "n2"]})[0] == []


def test_a_model_group_is_one_step_of_the_rollout_in_rank_order():
    groups = {"all": ["n1", "n2", "n3", "n4", "n5"], "llmfleet_engine_service": ["n1", "n2", "n3", "n4", "n5"]}
    model_groups = [{"name": "big", "members": ["n4", "n2"], "parallel": "tensor", "network": "10.0.0.0/24"}]
    hostvars = {h: {"engine_service_model_groups": model_groups} for h in groups["all"]}
    hosts, serial = rollout_plan(groups, hostvars)
    assert hosts == ["n1", "n4", "n2", "n3", "n5"] and serial == [1, 2, 1, 1]
