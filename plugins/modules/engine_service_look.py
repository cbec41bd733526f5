#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_service_look
short_description: Find a settled serving node in one task, and sum it up
version_added: 0.10.0
description:
  - The C(look) step of the C(llmfleet.engines.engine_service) role, as one task per serving node (an
    action that runs on the controller and calls M(llmfleet.engines.engine_service_survey) on the node).
    C(playbooks/site.yml) runs it in its engine play on each serving node whose engine
    C(llmfleet.engines.engine_node) leaves as it is.
  - On the controller, first (O(validate)) checks the role's variables as the role's C(validate.yml) does, with
    the same function and words (P(llmfleet.engines.engine_service_variable_problems#filter)); a problem fails the
    host before anything is read.
  - Then pins each pinned model from the lock the role already holds (O(locks)), else from the lock kept in
    O(lock_dir), read back and checked as M(llmfleet.engines.hf_revision) reads it back (no request to the hub).
    Where a pin cannot be read that way (no O(lock_dir), O(refresh), a lock not written yet or one that cannot be
    used), or a model is placed on GPUs and O(gpus) is not given, the node is not asked anything. RV(pins_needed)
    is true, and the role pins the models (once for the play) and looks again with the locks.
  - Renders the units as the role renders them (its C(__engine_service_rendered), with O(environment), the locks
    and O(gpus)), unless O(units) is given. Works out each unit's secret file from the role's variables (only its
    SHA-256 goes to the node). Then has the node read everything the role would change, and gate each model, in
    one module call.
  - Then checks the models' placement on the node's GPUs, C(/dev/shm) and C(LimitNOFILE), as the
    role's preflight does (P(llmfleet.engines.engine_service_placement_problems#filter)).
  - A node where all of it holds is settled. It is summed up as the role's last step sums a node
    up (the keys of C(engine_service_result), with RV(mode) V(steady) and RV(settled) true), its
    readiness is told (the result's C(msg), shown with C(-v), as a settled node is an C(ok) like any module's),
    and it is added to the play's stats under C(engine_service).
  - Any other node gets RV(settled) false and RV(reasons), and takes the role's full way.
  - Meant for the role's own task files; a playbook uses the role's C(look) entry point. Each option left out is
    the C(llmfleet.engines.engine_service) role's variable named in its description (the action reads it from the
    host's variables), so the role's task gives only what differs.
author:
  - llmfleet maintainers (@llmfleet)
options:
  environment:
    description: The environment the units run (what C(current) names).
    type: str
    required: true
  validate:
    description: Check the role's variables first (P(llmfleet.engines.engine_service_variable_problems#filter)).
    type: bool
    default: false
  models:
    description: C(engine_service_models).
    type: list
    elements: dict
  units:
    description:
      - The units to compare with the node (P(llmfleet.engines.engine_service_units#filter)).
      - Left out, the role's own rendering for O(environment), the locks and O(gpus).
    type: list
    elements: dict
  pins:
    description: The pinned models. Left out, those of O(models) (P(llmfleet.engines.engine_service_model_pins#filter)).
    type: list
    elements: dict
  locks:
    description: The pinned models' locks the role holds already, by pin key; the others are read from O(lock_dir).
    type: dict
    default: {}
  lock_dir:
    description: C(engine_service_model_lock_dir), where the controller keeps the models' locks; empty - none kept.
    type: str
  refresh:
    description: C(engine_service_model_refresh); true - no kept lock is used (the hub is asked again).
    type: bool
  gpus:
    description: The node's GPUs (M(llmfleet.engines.gpu_probe)'s C(gpus)), when a model is placed on them.
    type: list
    elements: dict
  api_key:
    description: C(engine_service_api_key).
    type: str
  hf_token:
    description: C(engine_service_hf_token).
    type: str
  secret_environment:
    description: C(engine_service_secret_environment).
    type: dict
  unit_dir:
    description: C(engine_service_unit_dir).
    type: path
  unit_prefix:
    description: The prefix of the role's units (C(__engine_service_unit_prefix)).
    type: str
  lock:
    description: The node's rollout lock (C(__engine_service_lock)).
    type: path
  record_dir:
    description: Where the gate records go (C(__engine_service_dir)).
    type: path
  user:
    description: C(engine_service_user).
    type: str
  cache_dir:
    description: The node's hub cache (C(<engine_service_root>/models)).
    type: path
  keep:
    description: C(engine_service_model_keep).
    type: int
  steady_timeout:
    description: C(engine_service_steady_timeout).
    type: int
  shm_min_mib:
    description: C(engine_service_shm_min_mib).
    type: int
  limit_nofile:
    description: C(engine_service_limit_nofile).
    type: int
attributes:
  check_mode:
    support: full
    description: Reads the same, asks no gate and records nothing.
  diff_mode:
    support: none
    description: Nothing the role converges changes, so there is no diff.
  action:
    support: full
    description: An action plugin; it runs on the controller and calls M(llmfleet.engines.engine_service_survey) on the node.
notes:
  - Never returns a secret.
seealso:
  - module: llmfleet.engines.engine_service_survey
  - module: llmfleet.engines.engine_ready
"""

EXAMPLES = r"""
# In the engine_service role (tasks/look.yml), which site.yml includes
# (every other option is the role's variable)
- name: Look whether this node's models are settled
  llmfleet.engines.engine_service_look:
    environment: "{{ engine_node_result.current }}"
    validate: true
    locks: "{{ __engine_service_model_locks | default({}) }}"
  register: engine_service_result
"""

RETURN = r"""
settled:
  description: Whether the node is settled.
  returned: always
  type: bool
reasons:
  description: Why it is not (empty when it is).
  returned: always
  type: list
  elements: str
pins_needed:
  description:
    - Whether the models must be pinned (or the node's GPUs read) before the node can be looked at; RV(reasons) says
      why, and the node was not asked anything.
  returned: always
  type: bool
survey:
  description: What M(llmfleet.engines.engine_service_survey) returned.
  returned: when the node was read and is not settled
  type: dict
host:
  description: The inventory host.
  returned: when settled
  type: str
current:
  description: The environment the units run.
  returned: when settled
  type: str
mode:
  description: Always V(steady).
  returned: when settled
  type: str
rolled_back:
  description: Always false.
  returned: when settled
  type: bool
error:
  description: Always null.
  returned: when settled
  type: str
warnings:
  description: Always empty.
  returned: when settled
  type: list
  elements: str
units:
  description: The units of the node's models.
  returned: when settled
  type: list
  elements: str
removed:
  description: Always empty.
  returned: when settled
  type: list
  elements: str
gates:
  description: Each unit's steady gate (empty in check mode).
  returned: when settled
  type: list
  elements: dict
"""
