#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_service_survey
short_description: Read in one call whether a serving node is settled, and gate its models
version_added: 0.10.0
description:
  - The node's side of M(llmfleet.engines.engine_service_look), which gives it its options from the
    role's variables. Read-only but for the gate records.
  - Says RV(settled) only when each of these holds, in this order, and stops at the first that does
    not (RV(reasons) says which), since the role's full way reads the rest in its own words.
  - No rollout holds the lock O(lock) (any entry there, link or not).
  - No unit of O(unit_prefix) in O(unit_dir) is left that O(units) does not list.
  - With O(probe), the node is read first (RV(probe)) and, with O(candidates), C(current) names one of them.
  - Each unit file holds its O(units[].text), or has the digest O(candidates) gives it, unless that digest is null
    (read as systemd reads it, through a link; each file's digest is returned, RV(unit_sha256)). Each unit's secret
    file (O(units[].environment_file), missing counting as empty) has the SHA-256 O(units[].secret_sha256).
    No secret is sent or returned.
  - Each model in O(model_paths) exists and O(user) may read it (and enter it, a directory). A child process takes
    the user's groups, gid and effective uid and opens the path, with no PAM session; its real and saved uid stay
    root's, so the user cannot signal (stop) it, and a child that does not answer within 30 s is killed and the
    path is a reason ("cannot be checked").
  - Each snapshot in O(snapshots) is complete in O(cache_dir) (sizes checked, as M(llmfleet.engines.model_snapshot)
    checks by default), with nothing to prune beyond O(keep) and O(in_use), and no model that
    O(snapshots) does not list has anything to prune there (as M(llmfleet.engines.model_prune)).
  - >-
    Each unit passes the steady readiness gate (as M(llmfleet.engines.engine_ready) with
    O(llmfleet.engines.engine_ready#module:deadline_from=call)), within a window of O(steady_timeout)
    seconds from this call, and is then C(active). In check mode no gate is asked, and the units'
    states are read with one C(systemctl show).
  - >-
    When settled, and not in check mode, each unit's gate is recorded in
    C(<record_dir>/<unit>.gate.json) (root's, mode 0644, replaced atomically), a record of the run, not
    a change (the result is never changed).
author:
  - llmfleet maintainers (@llmfleet)
options:
  units:
    description: The units, as the filter P(llmfleet.engines.engine_service_units#filter) renders them, each with its secret file's digest.
    type: list
    elements: dict
    required: true
    suboptions:
      unit:
        description: The unit's file name.
        type: str
        required: true
      name:
        description: The served model name.
        type: str
        required: true
      text:
        description:
          - The unit file's text. Required without O(candidates); with them, each unit file is compared with the
            digest O(candidates) gives for the environment C(current) names.
        type: str
      url:
        description: Where the engine answers.
        type: str
        required: true
      environment_file:
        description: The unit's secret file.
        type: path
        required: true
      gate:
        description:
          - Whether the unit is judged by the readiness gate. V(false) for a model group's follower, which has no API
            server - its unit must be V(active) (the group's gate is its leader's).
        type: bool
        default: true
      secret_sha256:
        description: The SHA-256 (hex) of what the secret file must hold.
        type: str
        required: true
      api_key:
        description: The key the gate sends.
        type: str
  unit_dir:
    description: The systemd unit directory.
    type: path
    default: /etc/systemd/system
  unit_prefix:
    description: The prefix of the role's unit files.
    type: str
    default: llmfleet-vllm-
  lock:
    description: The node's rollout lock.
    type: path
    required: true
  record_dir:
    description: Where the gate records go (the environments' directory).
    type: path
    required: true
  environment:
    description:
      - The environment the units run, recorded with each gate. Required without O(probe); with it and
        left empty, the environment the link O(probe.link) names, and O(version) that environment's release.
    type: str
    default: ""
  version:
    description: The vLLM version C(/version) must answer; not asked when empty.
    type: str
    default: ""
  probe:
    description:
      - Read the node first as M(llmfleet.engines.gpu_probe) with O(llmfleet.engines.gpu_probe#module:link) and
        O(llmfleet.engines.gpu_probe#module:cuda=false) reads it for the engine_node role's plan (the driver,
        the GPUs, glibc, the architecture, and where the link points), and return it (RV(probe)), so that the plan
        needs no module call of its own. The first part of the look; a read that fails is a reason.
      - C(nvidia-smi) is run only when no other user can change it, as M(llmfleet.engines.gpu_probe) runs it.
    type: dict
    suboptions:
      link:
        description: The engine root's C(current) link.
        type: path
        required: true
      nvidia_smi:
        description: Path of C(nvidia-smi); the one on C(PATH) when left out.
        type: path
      timeout:
        description: Seconds C(nvidia-smi) may take.
        type: int
        default: 30
  candidates:
    description:
      - >-
        With O(probe), the environments the run keeps (engine_node's plan would leave C(current) as it is when it
        names one of them), each mapped to the SHA-256 of each unit's text rendered for it, as
        C({environment: {unit: sha256}}). C(current) naming none of them is a reason (the engine changes).
      - >-
        A unit mapped to null is not compared here: its text names what O(probe) reads (the GPUs of a model placed
        on them), so the caller renders it with RV(probe) and compares it with the file's digest (RV(unit_sha256)).
    type: dict
  steady_timeout:
    description: The gate's window, in seconds.
    type: int
    default: 120
  user:
    description: The service user.
    type: str
    default: llmfleet-vllm
  model_paths:
    description: The models given as paths.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The model's name.
        type: str
        required: true
      path:
        description: Its path.
        type: path
        required: true
  need_shm:
    description: Whether to read the size of C(/dev/shm) (RV(shm_mib)).
    type: bool
    default: false
  cache_dir:
    description: The hub cache the snapshots live in.
    type: path
  snapshots:
    description: The pinned models' locks (as M(llmfleet.engines.hf_revision) returns them).
    type: list
    elements: dict
    default: []
    suboptions:
      lock:
        description: The lock.
        type: dict
        required: true
  keep:
    description: Snapshots kept per model, as M(llmfleet.engines.model_snapshot)'s O(llmfleet.engines.model_snapshot#module:keep).
    type: int
    default: 2
  in_use:
    description: Commits never pruned.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds for each request of the gate, its whole answer included.
    type: int
    default: 30
  systemctl:
    description:
      - The C(systemctl) that reads the units, an absolute path or a bare name looked up on E(PATH) (then
        C(/sbin), C(/usr/sbin), C(/usr/local/sbin)) by the module itself. It runs as root, so the path found and
        its real path are judged first, as every program the collection runs (the privilege line), so it and every
        directory on the way to it must belong to root (or the user running the module) and be writable by no
        one else. Otherwise the task fails naming the option, the path and why, before anything is read. What
        runs is the absolute path judged, never the name.
      - M(llmfleet.engines.engine_service_look) passes the role's C(engine_service_systemctl).
    type: str
    default: systemctl
  journalctl:
    description:
      - The C(journalctl) a failed gate quotes, found and judged as O(systemctl). One that is on none of the
        directories leaves the journal out; one another user could change fails the task.
    type: str
    default: journalctl
attributes:
  check_mode:
    support: full
    description: Reads the same; asks no gate and records nothing.
  diff_mode:
    support: none
    description: Nothing the role converges changes, so there is no diff.
notes:
  - The role calls it through M(llmfleet.engines.engine_service_look); few playbooks will call it alone.
seealso:
  - module: llmfleet.engines.engine_service_look
  - module: llmfleet.engines.engine_ready
"""

EXAMPLES = r"""
- name: Is the node settled?
  llmfleet.engines.engine_service_survey:
    units:
      - unit: llmfleet-vllm-chat.service
        name: chat
        text: "{{ lookup('ansible.builtin.file', 'chat.service') }}"
        url: http://127.0.0.1:8000
        environment_file: /etc/llmfleet/engine_service/llmfleet-vllm-chat.service.env
        secret_sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    lock: /opt/llmfleet/engines/vllm/.engine_service.lock
    record_dir: /opt/llmfleet/engines/vllm
    environment: 0.20.0-cu13
    version: 0.20.0
  register: survey
"""

RETURN = r"""
settled:
  description: Whether every check held (see the description).
  returned: always
  type: bool
reasons:
  description: Why the node is not settled (the first part that found something; empty when settled).
  returned: always
  type: list
  elements: str
states:
  description: Per unit, its C(load), C(active) and C(sub) states, when they were read.
  returned: always
  type: dict
gates:
  description: The steady gate of each unit (unit, environment, stage, ready, ready_s, health_s, completion_ms, tries).
  returned: always
  type: list
  elements: dict
orphans:
  description: Units of the prefix that O(units) does not list.
  returned: always
  type: list
  elements: str
shm_mib:
  description: The size of C(/dev/shm) in MiB, when O(need_shm) and it was read.
  returned: always
  type: int
probe:
  description:
    - With O(probe), what was read (M(llmfleet.engines.gpu_probe)'s result for the same options, with its
      RV(llmfleet.engines.gpu_probe#module:link)); absent when the read failed (RV(reasons) says why).
  returned: when O(probe) is given and the read succeeded
  type: dict
unit_sha256:
  description:
    - The SHA-256 of each unit file read (as systemd reads it), by unit file name; the caller compares those that
      O(candidates) maps to null.
  returned: always
  type: dict
recorded:
  description: The units whose gate record was written.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import HttpClient
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import ProgramRefused
from ansible_collections.llmfleet.engines.plugins.module_utils.serve._ready import systemd_programs
from ansible_collections.llmfleet.engines.plugins.module_utils.serve._servicelook import Look


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="dict", required=True, options=dict(
                unit=dict(type="str", required=True),
                name=dict(type="str", required=True),
                text=dict(type="str"),
                url=dict(type="str", required=True),
                environment_file=dict(type="path", required=True),
                secret_sha256=dict(type="str", required=True, no_log=False),
                api_key=dict(type="str", no_log=True),
                gate=dict(type="bool", default=True),
            )),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            unit_prefix=dict(type="str", default="llmfleet-vllm-"),
            lock=dict(type="path", required=True),
            record_dir=dict(type="path", required=True),
            environment=dict(type="str", default=""),
            probe=dict(type="dict", options=dict(
                link=dict(type="path", required=True),
                nvidia_smi=dict(type="path"),
                timeout=dict(type="int", default=30),
            )),
            candidates=dict(type="dict"),
            version=dict(type="str", default=""),
            steady_timeout=dict(type="int", default=120),
            user=dict(type="str", default="llmfleet-vllm"),
            model_paths=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                path=dict(type="path", required=True),
            )),
            need_shm=dict(type="bool", default=False),
            cache_dir=dict(type="path"),
            snapshots=dict(type="list", elements="dict", default=[], options=dict(
                lock=dict(type="dict", required=True),
            )),
            keep=dict(type="int", default=2),
            in_use=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=30),
            systemctl=dict(type="str", default="systemctl"),
            journalctl=dict(type="str", default="journalctl"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["snapshots"] and not p["cache_dir"]:
        module.fail_json(msg="cache_dir is required with snapshots")
    if not p["environment"] and not p["probe"]:
        module.fail_json(msg="environment is required without probe")
    if p["candidates"] is None and any(u["text"] is None for u in p["units"]):
        module.fail_json(msg="units[].text is required without candidates")
    if p["probe"] and not p["probe"]["nvidia_smi"]:
        # the one on PATH, as gpu_probe finds it
        p["probe"]["nvidia_smi"] = module.get_bin_path("nvidia-smi")
    # the gate's client: no retries (the gate polls), api_key only to the engine's own origin, which is
    # this node's loopback: asked straight through http.client (no proxy, no urllib)
    client = HttpClient(timeout=p["timeout"], retries=0, allow_plain_http_credentials=True,
                        direct_loopback=True, deadline=p["timeout"])
    # root runs them: found once, judged, and run by the absolute path judged (_trust)
    try:
        systemctl, journalctl = systemd_programs(p["systemctl"], p["journalctl"])
    except ProgramRefused as exc:
        module.fail_json(msg=exc.msg, changed=False, **exc.details)
    look = Look(p, Runner(), systemctl, client, journalctl=journalctl, check_mode=module.check_mode)
    module.exit_json(changed=False, **look.look())


if __name__ == "__main__":
    main()
