#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_node_plan
short_description: Check a host's engine_node variables, read the node and decide which vLLM it runs, in one task
version_added: 0.9.0
description:
  - The first step of the C(llmfleet.engines.engine_node) role, as one task per node (an action
    that runs on the controller and calls M(llmfleet.engines.gpu_probe) on the node).
  - Checks the host's C(engine_node_*) variables against the role's argument spec (O(validate));
    a bad value fails the host with a message that names the host, the variable, the value and
    what is allowed.
  - Reads the node's NVIDIA driver, GPUs, glibc, architecture and where C(<root>/engines/vllm/current)
    points, with M(llmfleet.engines.gpu_probe) (skipped for O(build=none); one C(nvidia-smi) command,
    with C(cuda=false), as the CUDA version the driver supports does not decide the build and the plan's
    facts go without it), and decides the build as the P(llmfleet.engines.engine_build_plan#filter) filter does.
  - Its RV(action) is V(unchanged) when C(current) is the environment the node should run,
    V(none) when the node runs no engine, and V(look) otherwise (the role then looks at the
    environments on disk, and switches or installs). For V(unchanged) and V(none) it also returns
    the node's result (the keys of the role's C(engine_node_result)), adds it to the play's stats
    under C(engine_node), and says what the node runs in RV(msg).
  - A build asked for by name whose wheel the node cannot take fails the node, before any
    look-up or download, unless C(current) already is that build.
  - Where O(probe) holds a read of this run made as this one reads, the node is not read again.
  - Read-only; changes nothing on the node and asks nothing upstream.
  - Meant for the role's own task files (it reads the role's C(meta/argument_specs.yml)); a
    playbook uses the role, or its C(plan) entry point.
author:
  - llmfleet maintainers (@llmfleet)
options:
  version:
    description: The vLLM release the node should run (C(engine_node_version)).
    type: str
    required: true
  build:
    description: The build asked for (C(engine_node_build)).
    type: str
    choices: [auto, cu13, cu129, cpu, none]
    default: auto
  package:
    description: The distribution of vLLM's code installed (C(engine_node_package)).
    type: str
    default: vllm
  root:
    description: The engine root on the node (C(engine_node_root)).
    type: path
    required: true
  nvidia_smi:
    description: The C(nvidia-smi) to run (C(engine_node_nvidia_smi)); by default the one on C(PATH).
    type: path
  switch:
    description:
      - Whether this run moves C(current) (C(engine_node_switch)); V(false) where
        C(llmfleet.engines.engine_service) switches it after draining. Shapes the summed-up result.
    type: bool
    default: true
  validate:
    description: Check the host's C(engine_node_*) variables first.
    type: bool
    default: true
  probe:
    description:
      - >-
        What an earlier step of this run read on the node as this one reads it (M(llmfleet.engines.gpu_probe)'s
        result with its C(link)), with C(read_with), the link and C(nvidia-smi) it was read with
        (C({link, nvidia_smi}), C(nvidia_smi) null for the one on C(PATH)): C(engine_node_probe).
      - >-
        Used instead of running M(llmfleet.engines.gpu_probe) when it was read at C(<root>/engines/vllm/current)
        with the same O(nvidia_smi); anything else (none, a failed read, another link or C(nvidia-smi)) and the
        node is read here. C(playbooks/site.yml) gives it what M(llmfleet.engines.engine_service_look) read on a
        serving node, so that such a node costs one module call.
    type: raw
attributes:
  check_mode:
    support: full
    description: It only reads; it runs the same way in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  action:
    support: full
    description: An action plugin; it runs on the controller and calls M(llmfleet.engines.gpu_probe) on the node.
notes:
  - The decision's facts, for the role's next step, are in RV(plan).
seealso:
  - module: llmfleet.engines.gpu_probe
"""

EXAMPLES = r"""
# In the engine_node role (tasks/plan.yml)
- name: Check, read and decide what this node runs
  llmfleet.engines.engine_node_plan:
    version: "{{ engine_node_version }}"
    build: "{{ engine_node_build }}"
    package: "{{ engine_node_package }}"
    root: "{{ engine_node_root }}"
    switch: "{{ engine_node_switch }}"
  register: engine_node_result
"""

RETURN = r"""
asked_node:
  description: Whether this task ran M(llmfleet.engines.gpu_probe) on the node (false for O(build=none), and where O(probe) stood for it).
  returned: unless the host's variables failed the check
  type: bool
action:
  description:
    - V(unchanged), V(none) (summed up), or V(look) (the role goes on).
  returned: success
  type: str
  sample: unchanged
plan:
  description: The decision (the build plan, the wanted and current environments, gpu_probe's facts), for the role's next step.
  returned: success
  type: dict
gpus:
  description:
    - The node's GPUs as M(llmfleet.engines.gpu_probe) read them (index, name, UUID, memory of each; empty without
      a driver), for the roles that place models on them in the same run (the C(llmfleet.engines.engine_service)
      role's look).
  returned: when the node was read (O(build) is not V(none))
  type: list
  elements: dict
msg:
  description:
    - What the node runs, in one line.
    - Shown with C(-v). Shown without it too where it says more than "nothing to do" (no build runs on this node,
      and why; V(auto) keeping a build after a failed GPU check).
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
  sample: "node1: vllm 0.20.0 cu13 is current (/opt/llmfleet/engines/vllm/0.20.0-cu13); nothing to do."
host:
  description: The inventory host.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
version:
  description: The vLLM version the node should run.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
requested:
  description: The build asked for.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
wanted:
  description: The build the node should run.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
effective:
  description: The build C(current) names (V(none) for none).
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
current:
  description: The environment C(current) names.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
pending:
  description: Always empty here (nothing changed).
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
path:
  description: The path of the environment C(current) names.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
fallback:
  description: Always null here (auto's kept fallback is read by the role's next step).
  returned: when RV(action) is V(unchanged) or V(none)
  type: dict
error:
  description: Always null here.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
fleet_lock:
  description: Always null here.
  returned: when RV(action) is V(unchanged) or V(none)
  type: dict
why:
  description: Why the node gets that build.
  returned: when RV(action) is V(unchanged) or V(none)
  type: str
check_mode:
  description: Whether the run is in check mode.
  returned: when RV(action) is V(unchanged) or V(none)
  type: bool
"""
