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
    C(playbooks/site.yml) runs it in its engine play on each serving node, once, before
    C(llmfleet.engines.engine_node)'s plan (O(node), the role's C(look_node) entry point), where its one module
    call also reads the node for that plan. The role's C(look) entry point runs it after the plan, for a playbook
    of one's own.
  - On the controller, first (O(validate)) checks the role's variables as the role's C(validate.yml) does, with
    the same function and words (P(llmfleet.engines.engine_service_variable_problems#filter)); a problem fails the
    host before anything is read.
  - Then pins each pinned model from the lock the role already holds (O(locks)), else from the lock kept in
    O(lock_dir), read back and checked as M(llmfleet.engines.hf_revision) reads it back (no request to the hub).
    Where a pin cannot be read that way (no O(lock_dir), O(refresh), a lock not written yet or one that cannot be
    used), the node is not asked anything. After the plan (O(environment)), the same holds where a model is placed
    on GPUs and O(gpus) is not given; RV(pins_needed) is true, and the role's C(look) entry point pins the models
    (once for the play) and looks again with the locks. Before the plan (O(node)), the node takes the full way
    (which pins them); C(playbooks/site.yml) pins by the hub, once per batch before the looks, the models whose
    locks the controller does not keep, and gives them in O(pinned).
  - Renders the units as the role renders them (its C(__engine_service_rendered), with O(environment), the locks
    and O(gpus)), unless O(units) is given. Works out each unit's secret file from the role's variables (only its
    SHA-256 goes to the node). Then has the node read everything the role would change, and gate each model, in
    one module call.
  - >-
    With O(node) (before the plan), O(environment) is not known yet: the units are rendered for each environment
    the plan may keep (C(<version>-<build>) for each build the C(build) of O(node) may pick) and only their digests are sent;
    the module reads the node as M(llmfleet.engines.gpu_probe) reads it for the plan (RV(probe)), takes the
    environment C(current) names, and compares the unit files with that environment's digests. Then the plan's
    own decision (the same function C(llmfleet.engines.engine_node_plan) calls, on the same read) must leave
    C(current) as it is, or the node is not settled. The unit of a model placed on GPUs names them: its digest
    is not sent (null in the module's C(candidates)); the module returns the file's digest, and the unit is
    rendered here with the GPUs the module read (when the role reads them with the same C(nvidia-smi) as the plan,
    else the node takes the full way) and compared with it, once all else holds.
  - Then checks the models' placement on the node's GPUs, C(/dev/shm) and C(LimitNOFILE), as the
    role's preflight does (P(llmfleet.engines.engine_service_placement_problems#filter)).
  - A node where all of it holds is settled. It is summed up as the role's last step sums a node
    up (the keys of C(engine_service_result), with RV(mode) V(steady) and RV(settled) true), its
    readiness is told (the result's C(msg), shown with C(-v), as a settled node is an C(ok) like any module's),
    and it is added to the play's stats under C(engine_service).
  - Any other node gets RV(settled) false and RV(reasons), and takes the role's full way.
  - >-
    With O(node), a host that serves no model (no models given, C(engine_service_models) empty or not set) is not
    looked at: the action reads the node as the plan reads it (M(llmfleet.engines.gpu_probe), RV(probe)) and runs
    C(llmfleet.engines.engine_node_plan) on that read (its result is RV(engine_node), its message and stats the
    result's), so that each node of C(playbooks/site.yml)'s engine play takes one task before the nodes with
    nothing to do end the play. RV(settled) is false.
  - Meant for the role's own task files; a playbook uses the role's C(look) entry point. Each option left out is
    the C(llmfleet.engines.engine_service) role's variable named in its description (the action reads it from the
    host's variables), so the role's task gives only what differs.
author:
  - llmfleet maintainers (@llmfleet)
options:
  environment:
    description: The environment the units run (what C(current) names). Required without O(node).
    type: str
  node:
    description:
      - >-
        Look before C(llmfleet.engines.engine_node)'s plan, and read the node for it (see the description):
        that plan's options on this host, C(version), C(build), C(package), C(root) and C(nvidia_smi)
        (C(engine_node_version), C(engine_node_build), C(engine_node_package), C(engine_node_root),
        C(engine_node_nvidia_smi); empty - the one on the node's C(PATH)), and C(switch) (C(engine_node_switch)),
        for the plan's summary of a settled node (RV(engine_node)).
      - >-
        Each one left out is this host's engine_node variable named beside it, where the play holds it (C({}):
        all of them, as the role's C(look_node) entry point gives it unless C(engine_service_look_node) is set).
    type: dict
  validate:
    description:
      - Check the role's variables first (P(llmfleet.engines.engine_service_variable_problems#filter)), those
        P(llmfleet.engines.engine_service_checked_variables#filter) names from the role's argument spec, as the
        role's C(validate.yml) does. Only from the role (its C(look) and C(look_node) entry points). With O(node),
        C(llmfleet.engines.engine_node)'s variables too, as its plan checks them (a settled node takes no plan task
        in C(playbooks/site.yml)).
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
  pinned:
    description:
      - The results of a M(llmfleet.engines.hf_revision) looped over pins (each item with its C(key)), the locks the
        play pinned by the hub (C(playbooks/site.yml)'s look, once per batch). Used for a pin that is not in O(locks)
        and whose lock the controller does not keep (no O(lock_dir), or O(refresh)); a host that keeps its locks
        reads its own.
    type: list
    elements: dict
  lock_dir:
    description: C(engine_service_model_lock_dir), where the controller keeps the models' locks; empty - none kept.
    type: str
  refresh:
    description: C(engine_service_model_refresh); true - no kept lock is used (the hub is asked again).
    type: bool
  gateway_read:
    description:
      - What site.yml read once per gateway (the results of M(llmfleet.engines.haproxy_info) with its C(mark), each
        with C(item.gateway)). A server of this node that a gateway holds drained since a rollout makes the node not
        settled - its full way makes the server ready after a passing gate. Left out - the gateways are not asked.
    type: list
    elements: dict
  gpus:
    description:
      - The node's GPUs (M(llmfleet.engines.gpu_probe)'s C(gpus)), when a model is placed on them.
      - With O(node), the GPUs the module reads replace it where the role reads them with the plan's C(nvidia-smi).
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
  systemctl:
    description:
      - C(engine_service_systemctl), the absolute path of the C(systemctl) the node runs as root to read the
        units; M(llmfleet.engines.engine_service_survey) judges it before it runs it.
      - Without it nor that variable, the module finds C(systemctl) on E(PATH) and judges it.
    type: path
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
# In the engine_service role (tasks/look_node.yml), which site.yml imports before engine_node's plan
- name: Look whether this node's models are settled, reading it for the plan
  llmfleet.engines.engine_service_look:
    node: {}  # the plan's options: this host's engine_node variables
    validate: true
  register: engine_service_result

# In the engine_service role (tasks/look.yml), its look entry point after the plan
# (every other option is the role's variable)
- name: Look whether this node's models are settled
  llmfleet.engines.engine_service_look:
    environment: "{{ engine_node_result.current }}"
    validate: true
    locks: "{{ __engine_service_model_locks | default({}) }}"
  register: engine_service_result
"""

RETURN = r"""
asked_node:
  description: Whether this task ran M(llmfleet.engines.engine_service_survey) on the node (false where its pins were
    not held, or no engine is kept).
  returned: always
  type: bool
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
deferred:
  description:
    - With O(node), always false - nothing is left for after the plan (a pin not held sends the node the full way,
      a model placed on GPUs is rendered with the GPUs the same module call reads). Kept for the playbooks that
      read it.
  returned: with O(node)
  type: bool
probe:
  description:
    - With O(node), what the module read for the plan (M(llmfleet.engines.gpu_probe)'s result with its
      C(link)), and C(read_with) (the link and C(nvidia-smi) it was read with); C(playbooks/site.yml) hands it to the
      plan as C(engine_node_probe).
  returned: with O(node), when the node was read (a host that serves no model too)
  type: dict
engine_node:
  description:
    - With O(node), on a settled node, what C(llmfleet.engines.engine_node)'s plan would register as
      C(engine_node_result) for it (its engine stays); on a host that serves no model, what the plan returned.
      C(playbooks/site.yml) ends such a node with nothing to do before the plan task and takes this for it. The
      play's stats hold it under C(engine_node), as the plan's do.
  returned: with O(node), when the node is settled or serves no model
  type: dict
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
