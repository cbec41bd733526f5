#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain, ready or put in maintenance servers of an HAProxy gateway through its admin socket
version_added: 0.7.0
description:
  - >-
    Sets the administrative state of servers of the HAProxy the C(engine_gateway) role runs, through
    its runtime API on the admin socket (C(set server <backend>/<server> state ...)), and reads them
    back. The C(engine_service) role drains a node's servers with it before it stops them, and makes
    them ready again after the readiness gate.
  - >-
    V(drain) - HAProxy sends the server no new connection (its current ones go on), and O(wait_idle)
    seconds are waited for the server's current and queued sessions to reach 0. A server still busy
    after that is returned in RV(busy), and the task does not fail (vLLM's own shutdown timeout then
    lets its requests finish).
  - V(ready) - the server takes traffic again once its health check passes. V(maint) - no traffic at
    all, and its health checks stop.
  - >-
    O(save_state) writes every server's state (C(show servers state)) to a root-only file after the
    change, the file C(engine_gateway)'s configuration loads after a reload, so that a reload of the
    gateway does not put a drained server back in rotation. With O(servers) empty it only saves.
  - Every server named must be known to the gateway; otherwise the task fails naming the ones it
    lacks and the ones it has, before any state is changed.
  - >-
    A server in maintenance (C(MAINT), set by hand through the socket) is left as it is whatever O(state) asks
    (V(ready) would put it in rotation, V(drain) would end the maintenance): it is returned in RV(maint), with a
    warning.
  - >-
    O(mark) records which servers a rollout drained (added by V(drain), removed by V(ready)), so that a later run
    makes ready only those (O(only_marked)), never a drain made by hand. The read, the decision and the change
    are made under a lock beside it (C(<mark>.lock)), so that two nodes drained at once see each other's drain.
  - >-
    A drain that would leave a backend with other servers but none of them in rotation (UP and ready: the model
    would be off the gateway while the rest of the fleet is drained or down) fails before anything is drained,
    unless O(drain_last); a drain of a backend's only server, and one let through by O(drain_last), warn.
author:
  - llmfleet maintainers (@llmfleet)
options:
  socket:
    description:
      - The gateway's admin socket (C(stats socket ... level admin)).
    type: path
    default: /run/llmfleet-gateway/admin.sock
  servers:
    description:
      - The servers, each C(<backend>/<server>) (C(engine_gateway) names them C(llmfleet_<model>/<inventory host>)).
    type: list
    elements: str
    default: []
  state:
    description:
      - The administrative state to set. Not given, nothing is set (with O(save_state), only saved).
    type: str
    choices: [ready, drain, maint]
  wait_idle:
    description:
      - With O(state=drain) or O(state=maint), seconds to wait for the servers' sessions to end; V(0) does not wait.
    type: int
    default: 0
  save_state:
    description:
      - A file to write every server's state to (root-only, replaced atomically) after the change.
    type: path
  mark:
    description:
      - A file (root-only JSON list, replaced atomically) of the servers a rollout drained - O(state=drain) adds
        the servers it drains, O(state=ready) removes the servers named. Its directory must exist. Also the lock's
        path less C(.lock).
    type: path
  only_marked:
    description:
      - With O(state=ready), only the servers named that O(mark) lists and the gateway holds drained are made
        ready; the others are left as they are. Needs O(mark).
    type: bool
    default: false
  drain_last:
    description:
      - With O(state=drain), V(false) refuses a drain that leaves a backend with other servers but none in
        rotation. V(true) drains it with a warning.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each command on the socket may take.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: In check mode the servers are read and the task says whether they would change; nothing is set, saved or waited for.
  diff_mode:
    support: full
    description: The diff shows each server's state before and after.
  platform:
    support: full
    platforms: posix
    description: The gateway host (run it with C(delegate_to)); root, since the socket is root-only.
notes:
  - A server's state set here is HAProxy's runtime state. It is kept across a reload only through O(save_state) and the
    configuration's C(load-server-state-from-file), and is lost when HAProxy is stopped and started without it.
"""

EXAMPLES = r"""
- name: Take node-3 out of the qwen model's rotation, up to 60 s for its requests to finish
  llmfleet.engines.haproxy_server:
    servers: [llmfleet_qwen/node-3]
    state: drain
    wait_idle: 60
  delegate_to: gateway-1

- name: Put it back
  llmfleet.engines.haproxy_server:
    servers: [llmfleet_qwen/node-3]
    state: ready
  delegate_to: gateway-1
"""

RETURN = r"""
servers:
  description: The servers named, as HAProxy reports them after the task (before it, in check mode).
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
      description: Sessions the server holds now.
      type: int
    queued:
      description: Requests queued for it.
      type: int
  sample: [{"backend": "llmfleet_qwen", "server": "node-3", "status": "DRAIN", "current": 0, "queued": 0}]
busy:
  description: The servers (C(<backend>/<server>)) that still held sessions when O(wait_idle) was over.
  returned: always
  type: list
  elements: str
waited:
  description: Seconds waited for the servers to be idle.
  returned: always
  type: float
saved:
  description: How many servers' states were written to O(save_state) (0 when not given, or in check mode).
  returned: always
  type: int
maint:
  description: The servers named that are in maintenance, left as they are.
  returned: always
  type: list
  elements: str
readied:
  description: With O(state=ready), the servers that were drained and are made ready (would be, in check mode).
  returned: always
  type: list
  elements: str
last:
  description: When a drain is refused (O(drain_last=false)), the backends it would have left with no server in rotation.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy


def _view(row):
    return {key: row[key] for key in ("backend", "server", "status", "current", "queued")}


def _last_words(socket_path, alone, last):
    out = []
    for entry in alone:
        out.append("%s has no other server on the gateway (%s): its requests fail while this node is drained"
                   % (entry["backend"], socket_path))
    for entry in last:
        out.append("%s has no other server in rotation on the gateway (%s): %s" % (
            entry["backend"], socket_path, ", ".join("%s %s" % item for item in sorted(entry["servers"].items()))))
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default="/run/llmfleet-gateway/admin.sock"),
            servers=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=list(_haproxy.STATES)),
            wait_idle=dict(type="int", default=0),
            save_state=dict(type="path"),
            mark=dict(type="path"),
            only_marked=dict(type="bool", default=False),
            drain_last=dict(type="bool", default=True),
            timeout=dict(type="int", default=10),
        ),
        required_one_of=[("state", "save_state")],
        supports_check_mode=True,
    )
    p = module.params
    names = p["servers"]
    state = p["state"]
    if p["wait_idle"] < 0 or p["timeout"] < 1:
        module.fail_json(msg="haproxy_server: wait_idle must be 0 or more and timeout 1 or more (got %d and %d)"
                         % (p["wait_idle"], p["timeout"]))
    if p["only_marked"] and (state != "ready" or not p["mark"]):
        module.fail_json(msg="haproxy_server: only_marked is for state=ready with a mark (the servers a rollout "
                             "drained), not state=%s and mark=%s" % (state, p["mark"]))
    try:
        for name in names:
            _haproxy.split_name(name)
        # read, decide and set under the gateway's lock: two nodes' drains at once see each other's
        with _haproxy.held(p["mark"] if not module.check_mode else None):
            known = _haproxy.servers(p["socket"], p["timeout"])
            before = _haproxy.find(known, names)
            admin = _haproxy.admin_states(p["socket"], p["timeout"]) if names else {}
            marks = _haproxy.read_marks(p["mark"]) if p["mark"] else []
            planned = _haproxy.plan(known, admin, names, state, marks, p["only_marked"])
            changing = planned["set"]
            result = dict(changed=bool(changing), servers=[_view(row) for row in before], busy=[], waited=0.0, saved=0,
                          maint=planned["maint"], readied=changing if state == "ready" else [])
            not_done = "drained" if state == "drain" else "made ready"
            warnings = ["%s is in maintenance (set by hand): left as it is, not %s" % (name, not_done)
                        for name in planned["maint"] if state in ("drain", "ready")]
            if state == "drain" and planned["wanted"]:
                alone, last = _haproxy.last_ones(known, admin, planned["wanted"])
                if last and not p["drain_last"]:
                    module.fail_json(msg="haproxy_server: not draining %s: %s. Nothing was drained; drain_last=true "
                                         "drains it anyway" % (", ".join(planned["wanted"]),
                                                               "; ".join(_last_words(p["socket"], [], last))),
                                     last=[entry["backend"] for entry in last], **result)
                warnings += _last_words(p["socket"], alone, last)
            for warning in warnings:
                module.warn(warning)
            if module._diff and changing:
                result["diff"] = dict(
                    before="".join("%s: %s\n" % (name, admin.get(name, "ready")) for name in names),
                    after="".join("%s: %s\n" % (name, state if name in changing else admin.get(name, "ready"))
                                  for name in names))
            if module.check_mode:
                module.exit_json(**result)
            # every server wanted is set (HAProxy takes the same state again as a no-op)
            for name in planned["wanted"] if state else []:
                _haproxy.set_state(p["socket"], name, state, p["timeout"])
            if p["mark"] and state and planned["marks"] != sorted(set(marks)):
                _haproxy.write_marks(p["mark"], planned["marks"])
        rows = _haproxy.find(_haproxy.servers(p["socket"], p["timeout"]), names)
        if state in ("drain", "maint") and p["wait_idle"] > 0 and planned["wanted"]:
            idle, waited, rows = _haproxy.wait_idle(p["socket"], names, p["wait_idle"])
            result["waited"] = waited
            if not idle:
                result["busy"] = ["%s/%s" % (row["backend"], row["server"]) for row in rows
                                  if row["current"] or row["queued"]]
        result["servers"] = [_view(row) for row in rows]
        if p["save_state"] and (changing or not state):
            result["saved"] = _haproxy.save_state(p["socket"], p["save_state"], p["timeout"])
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
