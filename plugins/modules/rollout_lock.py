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
    atomic) and writes O(holder) into its C(holder) file. The lock outlives this call; the run that
    took it removes it when it is done (M(ansible.builtin.file) C(state=absent)).
  - When another run holds it, waits up to O(wait) seconds for it to be given back, then fails with
    RV(busy) and the holder's text.
  - A lock older than O(stale) seconds (its holder file's age, or the directory's own) was left by a
    run that died. It is taken over, under a second lock (C(<path>.takeover)) so that two runs never
    both take it over, and RV(taken_over) says how old it was.
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
    description: Who takes the lock, and since when, for the message of a run that waits in vain.
    type: str
    required: true
  wait:
    description: Seconds to wait for another run to give the lock back; V(0) fails at once.
    type: int
    default: 600
  stale:
    description: A lock older than this many seconds is taken over.
    type: int
    default: 14400
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

- name: Give it back
  ansible.builtin.file:
    path: /opt/llmfleet/engines/vllm/.engine_service.lock
    state: absent
"""

RETURN = r"""
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
  returned: when RV(busy)
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
            holder=dict(type="str", required=True),
            wait=dict(type="int", default=600),
            stale=dict(type="int", default=14400),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, taken_over=None)
    try:
        found = _rolloutlock.acquire(params["path"], params["holder"], max(params["wait"], 0), max(params["stale"], 1))
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **exc.details)
    module.exit_json(changed=False, taken_over=None if found is None else int(found))


if __name__ == "__main__":
    main()
