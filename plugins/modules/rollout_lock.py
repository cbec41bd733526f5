#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollout_lock
short_description: Take a node's rollout lock, waiting for another run, taking over one a dead run left
version_added: 0.9.0
description:
  - One rollout per node at a time. Takes the lock directory O(path) (made with C(mkdir), which is
    atomic) and writes O(holder) into its C(holder) file, with a new RV(token) for this run. The lock
    outlives this call; the run that took it keeps it fresh and gives it back with this module and
    its RV(token) (O(token)).
  - With O(state=present) and O(token), refreshes the run's lock (a heartbeat between long steps; the
    holder file's time is set to now, so the lock is not stale while the run lives), and fails with
    RV(lost) when the lock is not the run's any more (taken over as stale while the run held it);
    the run must not go on changing the node.
  - With O(state=absent), gives the run's lock back; removes it only when its token is O(token). A
    lock another run took over is left to it (RV(released) false, with a warning naming its holder),
    never removed from under it.
  - Refreshing and giving back happen under the take-over lock, so that no take-over falls between
    reading the token and the change.
  - When another run holds it, waits up to O(wait) seconds for it to be given back, then fails with
    RV(busy) and the holder's text.
  - A lock older than O(stale) seconds (its holder file's age, or the directory's own; the last
    heartbeat) was left by a run that died. It is taken over, under a second lock (C(<path>.takeover))
    so that two runs never both take it over (the lock's age is read again under it), and
    RV(taken_over) says how old it was.
  - Follows no link. A lock path, holder or take-over lock that is a symbolic link, or not a
    directory, fails the call.
  - In check mode, takes nothing.
author:
  - llmfleet maintainers (@llmfleet)
options:
  path:
    description: The lock directory. Its parent must exist.
    type: path
    required: true
  holder:
    description:
      - Who takes the lock, and since when, for the message of a run that waits in vain.
      - Required to take the lock (O(state=present) without O(token)).
    type: str
  state:
    description:
      - V(present) takes the lock (without O(token)) or refreshes the run's (with it); V(absent) gives
        the run's lock back.
    type: str
    choices: [present, absent]
    default: present
  token:
    description:
      - The RV(token) the call that took the lock returned. Required with O(state=absent).
    type: str
  wait:
    description: Seconds to wait for another run to give the lock back; V(0) fails at once.
    type: int
    default: 600
  stale:
    description:
      - A lock older than this many seconds (since its last heartbeat) is taken over. Keep it well above
        the longest step a run takes between heartbeats.
    type: int
    default: 28800
attributes:
  check_mode:
    support: full
    description: In check mode it takes nothing and reports nothing changed.
  diff_mode:
    support: none
    description: A lock is not a change; there is no diff.
"""

EXAMPLES = r"""
- name: Take this node's rollout lock
  llmfleet.engines.rollout_lock:
    path: /opt/llmfleet/engines/vllm/.engine_service.lock
    holder: "a run from {{ lookup('ansible.builtin.pipe', 'hostname') }} since {{ now(utc=true).isoformat() }}"
    wait: 600
  register: lock

- name: Keep it fresh between long steps (fails when another run took it over)
  llmfleet.engines.rollout_lock:
    path: /opt/llmfleet/engines/vllm/.engine_service.lock
    token: "{{ lock.token }}"

- name: Give it back (only if it is still this run's)
  llmfleet.engines.rollout_lock:
    path: /opt/llmfleet/engines/vllm/.engine_service.lock
    state: absent
    token: "{{ lock.token }}"
"""

RETURN = r"""
token:
  description: This run's hold of the lock, for O(token) when it refreshes or gives the lock back.
  returned: when the lock was taken (not in check mode)
  type: str
  sample: 0f1e2d3c4b5a69788796a5b4c3d2e1f0
released:
  description: With O(state=absent), whether the run's lock was removed (false when there was none, or another run holds it).
  returned: when O(state=absent)
  type: bool
lost:
  description: True when the run's lock is gone or another run's (O(state=present) with O(token); the call fails).
  returned: failure
  type: bool
taken_over:
  description: The age in seconds of a stale lock this call took over; null when there was none.
  returned: success
  type: int
  sample: 3600
busy:
  description: True when another run still held the lock after O(wait) seconds (the call fails).
  returned: failure
  type: bool
holder:
  description: The text of the run that holds the lock ('' when unknown).
  returned: when RV(busy), RV(lost), or O(state=absent) left another run's lock
  type: str
waited:
  description: Seconds waited.
  returned: when RV(busy)
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _rolloutlock


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            holder=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            token=dict(type="str", no_log=False),
            wait=dict(type="int", default=600),
            stale=dict(type="int", default=28800),
        ),
        required_if=[("state", "absent", ("token",))],
        supports_check_mode=True,
    )
    params = module.params
    path, token = params["path"], params["token"]
    if params["state"] == "present" and not token and not params["holder"]:
        module.fail_json(msg="rollout_lock: holder is required to take the lock %s (state present without token)" % path)
    if module.check_mode:
        module.exit_json(changed=False, taken_over=None)
    try:
        if params["state"] == "absent":
            state, other = _rolloutlock.release(path, token)
            if state == "held":
                module.warn("the rollout lock %s is another run's now (%s): it was taken over while this run held it,"
                            " and is left to that run" % (path, other))
            elif state == "gone":
                module.warn("the rollout lock %s was gone when this run gave it back (taken over and given back by"
                            " another run, or removed by hand)" % path)
            module.exit_json(changed=False, released=state == "released", holder=other)
        if token:
            _rolloutlock.refresh(path, token)
            module.exit_json(changed=False, token=token, taken_over=None)
        token = _rolloutlock.new_token()
        found = _rolloutlock.acquire(path, params["holder"], max(params["wait"], 0), max(params["stale"], 1),
                                     token=token)
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **exc.details)
    module.exit_json(changed=False, token=token, taken_over=None if found is None else int(found))


if __name__ == "__main__":
    main()
