"""The rollout's canary is the first serving host in inventory order, whichever node finished first.

playbooks/site.yml groups the hosts that serve models with ``group_by``, which adds hosts in the
order their results reach the controller; the rollout play's first batch (one host, the canary)
must not depend on that race. Its ``hosts`` expression is rendered here, by Ansible's own templar,
with the group in the reverse of inventory order (as a race can leave it).
"""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = pathlib.Path(__file__).resolve().parents[3]
ROLLOUT = "Roll the served vLLM models onto the new engines"


def rollout_hosts(groups):
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text(encoding="utf-8"))
    play = next(p for p in plays if p["name"] == ROLLOUT)
    assert play["serial"][0] == 1, "the first batch is the canary alone"
    # a playbook's strings are templates ansible-playbook trusts; trust this one the same way
    return Templar(loader=DataLoader(), variables={"groups": groups}).template(trust_as_template(play["hosts"]))


@pytest.mark.parametrize("arrived", [["n3", "n1"], ["n1", "n3"]])
def test_the_canary_is_the_first_serving_host_in_inventory_order(arrived):
    groups = {"all": ["n1", "n2", "n3", "cache"], "llmfleet_engine_cache": ["cache"], "llmfleet_engine_service": arrived}
    assert list(rollout_hosts(groups)) == ["n1", "n3"]


def test_a_fleet_that_serves_nothing_rolls_no_host():
    assert list(rollout_hosts({"all": ["n1", "n2"]})) == []
