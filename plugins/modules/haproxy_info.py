#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: haproxy_info
short_description: Read the servers of an HAProxy gateway and their state from its admin socket
version_added: 0.7.0
description:
  - >-
    Reads every server of every backend of the HAProxy the C(engine_gateway) role runs (C(show stat) on its
    admin socket): its status (UP, DOWN, DRAIN, MAINT), the sessions it holds and its last health check. The
    fleet report (C(playbooks/report.yml)) shows them per gateway.
  - >-
    A server whose address the gateway could not resolve (C(MAINT (resolution)): the configuration's
    C(init-addr none) keeps the gateway running without it) is named in a warning.
  - >-
    With O(mark), also which servers a rollout drained and left drained (RV(marked)): site.yml reads them once
    per gateway and run, and a node with such a server is not settled.
author:
  - llmfleet maintainers (@llmfleet)
options:
  socket:
    description:
      - The gateway's admin socket.
    type: path
    default: /run/llmfleet-gateway/admin.sock
  backends:
    description:
      - Only the servers of these backends; empty for all.
    type: list
    elements: str
    default: []
  mark:
    description:
      - The record of the servers a rollout drained (C(llmfleet.engines.haproxy_server)'s O(llmfleet.engines.haproxy_server#module:mark)).
    type: path
  timeout:
    description:
      - Seconds the command on the socket may take.
    type: int
    default: 10
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
    description: The gateway host; root, since the socket is root-only.
"""

EXAMPLES = r"""
- name: Read the gateway's servers
  llmfleet.engines.haproxy_info:
  register: gateway

- name: Say which servers are not UP
  ansible.builtin.debug:
    msg: "{{ gateway.servers | rejectattr('status', 'equalto', 'UP') | list }}"
"""

RETURN = r"""
servers:
  description: Each server, in HAProxy's order.
  returned: always
  type: list
  elements: dict
  contains:
    backend:
      description: The backend (C(llmfleet_<model>)).
      type: str
    server:
      description: The server (the node's inventory name).
      type: str
    status:
      description: HAProxy's status (UP, DOWN, DRAIN, MAINT, C(UP 1/2) while its checks change, C(no check)).
      type: str
    current:
      description: Sessions it holds now.
      type: int
    queued:
      description: Requests queued for it.
      type: int
    total:
      description: Sessions it has had since HAProxy started.
      type: int
    check:
      description: Its last health check (C(L7OK), C(L4CON), ...).
      type: str
    address:
      description: Its address and port.
      type: str
    weight:
      description: Its effective weight.
      type: int
  sample: [{"backend": "llmfleet_qwen", "server": "node-3", "status": "UP", "current": 2, "queued": 0,
            "total": 1520, "check": "L7OK", "address": "10.0.0.3:8000", "weight": 1}]
marked:
  description: With O(mark), the servers (C(<backend>/<server>)) it lists that the gateway still holds drained.
  returned: always
  type: list
  elements: str
  sample: [llmfleet_qwen/node-3]
unresolved:
  description: The servers (C(<backend>/<server>)) in maintenance for want of an address.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default="/run/llmfleet-gateway/admin.sock"),
            backends=dict(type="list", elements="str", default=[]),
            mark=dict(type="path"),
            timeout=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    marked = []
    try:
        rows = _haproxy.servers(p["socket"], p["timeout"])
        if p["mark"]:
            marks = _haproxy.read_marks(p["mark"])
            if marks:
                admin = _haproxy.admin_states(p["socket"], p["timeout"])
                marked = [name for name in marks if admin.get(name) == "drain"]
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **exc.details)
    wanted = p["backends"]
    rows = [row for row in rows if not wanted or row["backend"] in wanted]
    unresolved = ["%s/%s" % (row["backend"], row["server"]) for row in rows if "resolution" in str(row["status"])]
    for name in unresolved:
        module.warn("the gateway (%s) could not resolve the address of its server %s: it is in maintenance until it "
                    "resolves (set engine_gateway_address or ansible_host of that node to an address the gateway "
                    "resolves)" % (p["socket"], name))
    module.exit_json(changed=False, servers=rows, marked=marked, unresolved=unresolved)


if __name__ == "__main__":
    main()
