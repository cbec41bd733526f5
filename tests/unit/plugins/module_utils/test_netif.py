"""module_utils/serve/_netif.py: the node's interfaces and addresses as the kernel lists them (rtnetlink).

Read inside a network namespace the test makes (``unshare --net``, as root): a veth pair, one end with two addresses
(one IPv4, one IPv6), the other with none, and the loopback; the answer is compared with what the test configured, and with iproute2's
own listing of the same namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _netif

IP = shutil.which("ip") or "/usr/sbin/ip"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
HERE = os.path.dirname(os.path.abspath(_netif.__file__))

PROGRAM = """
import json, subprocess, sys
sys.path[:0] = json.loads(sys.argv[1])
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _netif
ip = sys.argv[2]
for command in (["link", "set", "lo", "up"], ["link", "add", "grp0", "type", "veth", "peer", "name", "grp1"],
                ["addr", "add", "10.20.0.7/24", "dev", "grp0"], ["addr", "add", "fd00:20::7/64", "dev", "grp0", "nodad"],
                ["link", "set", "grp0", "up"], ["link", "set", "grp1", "up"]):
    subprocess.run([ip] + command, check=True)
listed = json.loads(subprocess.run([ip, "-j", "addr"], check=True, capture_output=True, text=True).stdout)
found = _netif.addresses()
print(json.dumps({"found": found, "ip": {i["ifname"]: [a["local"] for a in i.get("addr_info", [])] for i in listed},
                  "good": _netif.interface_problem("grp0", "10.20.0.7"),
                  "other": _netif.interface_problem("grp0", "10.20.0.8"),
                  "missing": _netif.interface_problem("eth9", "10.20.0.7"),
                  "v6": _netif.interface_problem("grp0", "fd00:20:0::7")}))
"""


@pytest.fixture(scope="module")
def namespace():
    if os.geteuid() != 0:
        pytest.fail("run as root (CI does): the test makes a network namespace with a veth pair")
    paths = [p for p in sys.path if p]
    result = subprocess.run([UNSHARE, "--net", sys.executable, "-c", PROGRAM, json.dumps(paths), IP],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_address_of_the_namespace_is_found_on_its_interface(namespace):
    found = namespace["found"]
    assert sorted(found["grp0"])[:1] == ["10.20.0.7"] and "fd00:20::7" in found["grp0"]
    assert sorted(found["lo"]) == ["127.0.0.1", "::1"]
    # the same as iproute2 lists (interfaces without an address left out)
    assert {k: sorted(v) for k, v in found.items()} == {k: sorted(v) for k, v in namespace["ip"].items() if v}


def test_an_interface_and_address_are_checked_against_the_node(namespace):
    assert namespace["good"] is None and namespace["v6"] is None
    assert namespace["other"].startswith("interface grp0 of this node has 10.20.0.7, ")
    assert namespace["other"].endswith(", not 10.20.0.8")
    assert namespace["missing"] == "this node has no interface eth9 with an address (it has grp0, grp1, lo)"  # grp1: its link-local address alone


def test_the_loopback_interface_answers_for_the_whole_of_127_0_0_0_8():
    found = {"lo": ["127.0.0.1", "::1"], "eth0": ["10.0.0.1"]}
    assert _netif.interface_problem("lo", "127.0.0.2", found=found) is None
    assert _netif.interface_problem("eth0", "127.0.0.2", found=found) == "interface eth0 of this node has 10.0.0.1, not 127.0.0.2"
    assert _netif.interface_problem("lo", "::2", found=found) == "interface lo of this node has 127.0.0.1, ::1, not ::2"


def test_a_word_that_is_no_address_is_said_so():
    assert _netif.interface_problem("lo", "gpu-a.example", found={"lo": ["127.0.0.1"]}) == \
        "gpu-a.example is not an IP address"


def test_the_module_lists_the_addresses_and_refuses_an_interface_without_the_address(capsys):
    from ansible_collections.llmfleet.engines.plugins.modules import net_address_info
    from tests.unit.plugins.lookup_fakes import run_module

    code, result, _out = run_module(net_address_info.main, {}, capsys)
    assert code == 0 and result["changed"] is False and "127.0.0.1" in result["interfaces"]["lo"]
    code, result, _out = run_module(net_address_info.main, {"interface": "lo", "address": "127.0.0.1"}, capsys)
    assert code == 0, result
    code, result, _out = run_module(net_address_info.main, {"interface": "lo", "address": "10.20.0.9"}, capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("interface lo and address 10.20.0.9: interface lo of this node has 127.0.0.1")
    code, result, _out = run_module(net_address_info.main, {"interface": "lo"}, capsys)
    assert code == 1 and "parameters are required together: interface, address" in result["msg"]
