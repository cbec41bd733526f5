#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_node_follow
short_description: Follow a background build of M(llmfleet.engines.uv_engine_env) until it ends, printing its step
version_added: 0.10.0
description:
  - Follows a build that M(llmfleet.engines.uv_engine_env) runs in the background (C(async), C(poll=0)) until
    it ends, in one task (an action that runs on the controller).
  - >-
    Every O(interval) seconds it asks M(ansible.builtin.async_status) whether the build has ended and, while it
    has not, reads the step the build is in (O(progress), which M(llmfleet.engines.uv_engine_env) keeps) and
    prints a line, C(<what> on <host>: <step in words>, <seconds in the step> s (building for <seconds> s)).
  - Its result is M(ansible.builtin.async_status)'s last one, the build's result; a build that failed fails
    this task. A build that has not ended after O(timeout) seconds fails it too.
  - Meant for the C(llmfleet.engines.engine_node) role's own task files.
author:
  - llmfleet maintainers (@llmfleet)
options:
  jid:
    description: The background job's id (C(ansible_job_id) of the task that started it).
    type: str
    required: true
  progress:
    description: The progress file on the node (C(<path>.progress.json)).
    type: str
    required: true
  interval:
    description: Seconds between two questions, and two lines (C(engine_node_progress_interval)); 1 or more.
    type: int
    default: 15
  timeout:
    description:
      - Seconds after which the build is given up (the task fails; the job may still run on the node); 1 or more.
      - The role gives the background job's own limit and a margin, so that the job's limit ends it first.
    type: int
    required: true
  what:
    description: What is built, at the start of each line (C(vllm <version> <build>)).
    type: str
    default: the build
  steps:
    description: The steps in words, by the name the progress file gives; a step not named here is shown by its name.
    type: dict
    default: {}
attributes:
  check_mode:
    support: none
    description: There is no background build in check mode; the role does not run it there.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  action:
    support: full
    description: An action plugin; it runs on the controller and calls M(ansible.builtin.async_status) and
      M(ansible.builtin.slurp) on the node.
notes:
  - Each node's task holds one of the play's forks until its build ends, so with more nodes than forks the
    others are followed as forks free up; their builds run meanwhile, and one that has ended is seen at the
    first question, asked at once.
seealso:
  - module: llmfleet.engines.uv_engine_env
  - module: ansible.builtin.async_status
"""

EXAMPLES = r"""
# In the engine_node role (tasks/install_build.yml), after uv_engine_env started with async and poll 0
- name: Follow the build until it ends
  llmfleet.engines.engine_node_follow:
    jid: "{{ __engine_node_launch.ansible_job_id }}"
    progress: "{{ __engine_node_job.path }}.progress.json"
    interval: "{{ engine_node_progress_interval }}"
    timeout: "{{ engine_node_install_timeout | int * 2 + 600 + 2 * engine_node_progress_interval | int }}"
    what: vllm {{ __engine_node_job.version }} {{ __engine_node_job.build }}
    steps: "{{ __engine_node_step_words }}"
  register: __engine_node_build
"""

RETURN = r"""
finished:
  description: Whether the build ended (false only when O(timeout) gave it up).
  returned: always
  type: bool
ansible_job_id:
  description: The job's id.
  returned: always
  type: str
msg:
  description: Why the task failed, where it did.
  returned: on failure
  type: str
"""
