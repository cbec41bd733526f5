#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_service_follow
short_description: Follow background downloads of M(llmfleet.engines.model_snapshot) until they end, printing their progress
version_added: 0.11.0
description:
  - Follows the downloads that M(llmfleet.engines.model_snapshot) runs in the background (C(async), C(poll=0),
    one job per model) until every one has ended, in one task (an action that runs on the controller).
  - >-
    At once and then every O(interval) seconds it keeps the run's rollout lock fresh (O(lock), with
    M(llmfleet.engines.rollout_lock) and O(lock_token)) and asks M(ansible.builtin.async_status) whether each
    job has ended. From the first interval on, for each download still going it reads its progress file
    (O(jobs[].progress), the module's O(llmfleet.engines.model_snapshot#module:progress_file)) and prints a line,
    C(<host> <name>: <files being downloaded>, <MiB done> of <MiB total> MiB at <rate> MiB/s, file <n> of <m>)
    followed by the seconds since the start in brackets; C(starting) in place of the figures before the file
    exists, C(finishing) once the module has removed it.
  - A lock that cannot be refreshed (another run took it over as stale) fails the task, with RV(lost); the
    run must not go on changing the node.
  - A download that failed does not fail this task; the task that collects the jobs' results
    (M(ansible.builtin.async_status)) fails with the module's message. Downloads that have not all ended
    after O(timeout) seconds fail it.
  - Meant for the C(llmfleet.engines.engine_service) role's own task files.
author:
  - llmfleet maintainers (@llmfleet)
options:
  jobs:
    description: The background jobs, one per model.
    type: list
    elements: dict
    required: true
    suboptions:
      jid:
        description: The job's id (C(ansible_job_id) of the task that started it).
        type: str
        required: true
      name:
        description: What is downloaded, on each line (the model's C(<repo>@<revision>)); the job's id when not given.
        type: str
      progress:
        description: The job's progress file on the node; without it the line says only C(starting).
        type: str
  interval:
    description: Seconds between two questions, and two lines per download (C(engine_service_model_progress_interval)); 1 or more.
    type: int
    default: 15
  timeout:
    description:
      - Seconds after which the downloads are given up (the task fails; the jobs may still run on the node); 1 or more.
      - The role gives the background jobs' own limit (C(engine_service_model_timeout)) and a margin, so that the
        jobs' limit ends them first.
    type: int
    required: true
  lock:
    description:
      - The rollout lock this run holds (M(llmfleet.engines.rollout_lock)'s O(llmfleet.engines.rollout_lock#module:path)),
        refreshed at once and every O(interval) seconds. Not given, no lock is refreshed.
      - Requires O(lock_token).
    type: str
  lock_token:
    description: The RV(llmfleet.engines.rollout_lock#module:token) the run took O(lock) with.
    type: str
attributes:
  check_mode:
    support: none
    description: There is no background download in check mode; the task is skipped there.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  action:
    support: full
    description: An action plugin; it runs on the controller and calls M(llmfleet.engines.rollout_lock),
      M(ansible.builtin.async_status) and M(ansible.builtin.slurp) on the node.
notes:
  - Each node's task holds one of the play's forks until its downloads end, so with more nodes than forks the
    others are followed as forks free up; their downloads run meanwhile, and those that have ended are seen at
    the first question, asked at once. Their locks are refreshed when their turn comes, well within
    C(engine_service_lock_stale) (twice C(engine_service_model_timeout) by default).
seealso:
  - module: llmfleet.engines.model_snapshot
  - module: llmfleet.engines.rollout_lock
  - module: llmfleet.engines.engine_node_follow
  - module: ansible.builtin.async_status
"""

EXAMPLES = r"""
# In the engine_service role (tasks/stage_weights.yml), after model_snapshot started with async and poll 0
- name: Follow the downloads until they end
  llmfleet.engines.engine_service_follow:
    jobs:
      - jid: "{{ started.ansible_job_id }}"
        name: llmfleet-test/tiny-chat@v1
        progress: /opt/llmfleet/models/llmfleet-test--tiny-chat@v1.json.progress
    interval: 15
    timeout: 14460
    lock: /opt/llmfleet/engines/vllm/.engine_service.lock
    lock_token: "{{ lock.token }}"
"""

RETURN = r"""
finished:
  description: Whether every download ended (false only when O(timeout) gave them up, or the lock was lost).
  returned: always
  type: bool
jobs:
  description: Each job, whether it ended and whether it failed (its result is async_status's, in the task that collects it).
  returned: when the lock was kept
  type: list
  elements: dict
  sample: [{"jid": "j1.2", "name": "llmfleet-test/tiny-chat@v1", "finished": true, "failed": false}]
lost:
  description: True when the lock was another run's (taken over as stale) or gone; the task fails.
  returned: when refreshing the lock failed
  type: bool
msg:
  description: Why the task failed, where it did.
  returned: on failure
  type: str
"""
