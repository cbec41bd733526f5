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
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default="/run/llmfleet-gateway/admin.sock"),
            backends=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    try:
        rows = _haproxy.servers(module.params["socket"], module.params["timeout"])
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **exc.details)
    wanted = module.params["backends"]
    module.exit_json(changed=False, servers=[row for row in rows if not wanted or row["backend"] in wanted])


if __name__ == "__main__":
    main()
