#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: net_address_info
short_description: Read this node's network interfaces and their addresses, and check that one holds an address
version_added: 0.12.0
description:
  - >-
    Lists every address of every interface of the node, IPv4 and IPv6, as the kernel has them (one rtnetlink
    request; no program is run).
  - >-
    With O(interface) and O(address), fails unless that interface holds that address, naming both and what the
    node has instead. The C(engine_service) role checks a model group's member this way before anything stops
    (C(engine_service_group_interface), C(engine_service_group_address)): gloo and NCCL bind that interface and
    vLLM tells the other members that address.
author:
  - llmfleet maintainers (@llmfleet)
options:
  interface:
    description:
      - The interface that must hold O(address).
    type: str
  address:
    description:
      - The address O(interface) must hold (IPv4 or IPv6).
    type: str
attributes:
  check_mode:
    support: full
    description: The module only reads.
  diff_mode:
    support: none
    description: Nothing changes.
  platform:
    support: full
    platforms: posix
    description: Linux (rtnetlink); any user.
requirements:
  - Linux
"""

EXAMPLES = r"""
- name: Check this member's side of its group's network
  llmfleet.engines.net_address_info:
    interface: ens5f0
    address: 10.20.0.7

- name: List the node's addresses
  llmfleet.engines.net_address_info:
  register: net
"""

RETURN = r"""
interfaces:
  description: Each interface that has an address, with its addresses.
  returned: success
  type: dict
  sample: {"lo": ["127.0.0.1", "::1"], "ens5f0": ["10.20.0.7", "fe80::1"]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.serve._netif import addresses, interface_problem


def main():
    module = AnsibleModule(
        argument_spec=dict(interface=dict(type="str"), address=dict(type="str")),
        required_together=[("interface", "address")],
        supports_check_mode=True,
    )
    try:
        found = addresses()
    except OSError as exc:
        module.fail_json(msg="the node's addresses cannot be read from the kernel (rtnetlink): %s" % exc)
    interface, address = module.params["interface"], module.params["address"]
    if interface:
        problem = interface_problem(interface, address, found)
        if problem:
            module.fail_json(msg="interface %s and address %s: %s" % (interface, address, problem), interfaces=found)
    module.exit_json(changed=False, interfaces=found)


if __name__ == "__main__":
    main()
