#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: uv_fleet_lock
short_description: The lock of a group of nodes, compiled once on the controller by uv, pinned by hashes
version_added: 0.2.0
description:
  - Compiles the lock for a group of nodes that share an engine version, a build, an architecture, a manylinux
    level and a Python, with C(uv pip compile --generate-hashes --no-build --exclude-newer <time>
    --python-version <X.Y> --python-platform <triple>). The nodes are described by O(python_version) and
    O(python_platform), not by the machine it runs on, so an C(aarch64) lock compiles on an C(x86_64) controller.
  - It resolves the same requirement lines as a node's own resolution in M(llmfleet.engines.uv_engine_env)
    (C(<engine>==<version>) or the wheel URL pinned by its sha256, then O(requirements)), with the same index
    options.
  - The lock is checked as M(llmfleet.engines.uv_engine_env) checks a lock given to it (every requirement pinned
    with a C(--hash=sha256:), the engine at O(version), the wheel, O(expect)), then written atomically to O(dest).
    Its text is what the nodes take as M(llmfleet.engines.uv_engine_env)'s O(llmfleet.engines.uv_engine_env#module:lock).
  - With O(pylock), the same pins are also written in PEP 751 form, C(pylock.<name>.toml) beside O(dest).
  - The inputs are recorded in C(<dest>.json). When they are unchanged and the files are as they were written,
    nothing is compiled (only C(uv --version) runs).
  - Meant to run on the controller (C(delegate_to=localhost), C(run_once)); uv never downloads a Python for it.
  - Whoever can change the lock decides what root installs on every node. Before anything runs, the directory of
    O(dest), O(dest), C(<dest>.json), the pylock, the O(uv) binary (and its real path) and O(cache_dir) must belong
    to root or the user running the module on every directory of their path (links followed) and be writable by no
    one else; otherwise the task fails, naming the path, its owner and mode. O(uv) given as a bare name (the
    default, V(uv)) is looked up once on the controller's E(PATH); the file found is judged and run by that
    absolute path. The files are written through new, unguessable names
    beside them (C(mkstemp)), fsync'd, and renamed into place, so no link planted in the directory is followed.
  - A wheel URL or a requirement line with a C($), a C(%) escape that decodes to one, white space or a control
    character is refused before uv runs, and so is a compiled lock with one (uv expands C(${NAME}) in requirement
    lines from its environment, where the indexes' credentials are).
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.uv
attributes:
  check_mode:
    support: full
    description: Reads C(<dest>.json) and the lock only, and reports whether it would compile; compiles nothing.
  diff_mode:
    support: none
    description: The lock is a generated file; its sha256 and packages are in the result.
  platform:
    support: full
    platforms: posix
    description: Runs uv on the controller; Linux is what is tested.
options:
  dest:
    description:
      - The lock file to write, for example C(locks/vllm-0.20.0-cu130-x86_64-py312.txt). Its directory is created.
      - C(<dest>.json) records the inputs and the files' sha256.
    type: path
    required: true
  engine:
    description: Project name of the engine on the index, for example V(vllm).
    type: str
    required: true
  version:
    description:
      - The engine's version. The locked version must equal it (a local label such as C(+cu129) is allowed).
    type: str
    required: true
  exclude_newer:
    description: Resolve as the indexes stood at this time (RFC 3339, for example V(2026-06-11T12:00:00Z)).
    type: str
    required: true
  python_version:
    description: The nodes' Python, as C(X.Y) (for example V(3.12)); uv's C(--python-version).
    type: str
    required: true
  python_platform:
    description:
      - The nodes' platform, as one of uv's target triples (C(--python-platform)), for example
        V(x86_64-manylinux_2_28) or V(aarch64-manylinux_2_28). The manylinux level is the lowest glibc of the group.
    type: str
    required: true
  pylock:
    description:
      - Also write the lock in PEP 751 form (C(uv pip compile --format pylock.toml), from the checked lock, so the
        pins are the same) as C(pylock.<name>.toml) beside O(dest).
      - C(<name>) is O(dest)'s file name without C(.txt), every character other than letters, digits, C(-) and
        C(_) as C(_) (PEP 751 names allow no dot), for example C(pylock.vllm-0_20_0-x86_64.toml).
    type: bool
    default: true
  cache_dir:
    description:
      - uv's cache (C(UV_CACHE_DIR)). It must be beyond other users' reach as O(dest) is, and so must everything it
        holds (uv takes index pages and metadata it finds there as they are; uv's empty lock files aside); otherwise
        the task fails naming the entry, its owner and mode.
      - Not set, uv runs with no cache (C(UV_NO_CACHE); uv uses a private temporary directory), never uv's default
        cache under C(XDG_CACHE_HOME) or C(~/.cache), which nothing judges and another user may have made.
    type: path
  timeout:
    description: Seconds the compile may take (both formats together); a command still running then is stopped.
    type: int
    default: 600
  force:
    description: Compile again even when the inputs are unchanged.
    type: bool
    default: false
notes:
  - uv runs with C(UV_NO_CONFIG=1), C(UV_PYTHON_DOWNLOADS=never) and none of the controller's C(UV_*) variables but
    those that only tune the network, as in M(llmfleet.engines.uv_engine_env).
  - A requirements-format lock names versions, not URLs; nodes look up each locked package's index page to find
    the file. The C(pylock.toml) form carries the file URLs.
"""

EXAMPLES = r"""
- name: Compile the lock of the x86_64 nodes once, on the controller
  llmfleet.engines.uv_fleet_lock:
    dest: "{{ playbook_dir }}/locks/vllm-0.20.0-cu130-x86_64-py312.txt"
    engine: vllm
    version: "0.20.0"
    exclude_newer: "2026-06-11T12:00:00Z"
    python_version: "3.12"
    python_platform: x86_64-manylinux_2_28
    uv: /opt/llmfleet/uv/0.13.8/uv
  delegate_to: localhost
  run_once: true
  register: fleet_lock

- name: Install it on every node; nothing is resolved there
  llmfleet.engines.uv_engine_env:
    path: /opt/llmfleet/engines/vllm/0.20.0-cu130
    engine: vllm
    version: "0.20.0"
    lock: "{{ lookup('ansible.builtin.file', fleet_lock.path) }}"

- name: The GH200 nodes (aarch64), CUDA 12.9 build from its GitHub release, torch from PyTorch's index
  llmfleet.engines.uv_fleet_lock:
    dest: "{{ playbook_dir }}/locks/vllm-0.20.0-cu129-aarch64-py312.txt"
    engine: vllm
    version: "0.20.0"
    wheel:
      url: https://github.com/vllm-project/vllm/releases/download/v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_aarch64.whl
      sha256: "{{ vllm_digest.sha256 }}"
    extra_index_url:
      - https://download.pytorch.org/whl/cu129
    index_strategy: unsafe-best-match
    expect:
      torch: "+cu129"
    exclude_newer: "2026-06-11T12:00:00Z"
    exclude_newer_package:
      torch: false
    python_version: "3.12"
    python_platform: aarch64-manylinux_2_28
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The lock file (O(dest)).
  returned: always
  type: str
lock_sha256:
  description: The lock file's sha256 (null in check mode when there is none yet).
  returned: always
  type: str
  sample: 9f2c1b0d8e7a6f5e4d3c2b1a09f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a190
packages:
  description: Every locked package, name to version.
  returned: always
  type: dict
  sample: {"torch": "2.11.0", "vllm": "0.20.0"}
pylock_path:
  description: The PEP 751 lock beside it; null when O(pylock=false).
  returned: always
  type: str
cmd:
  description:
    - The C(uv pip compile) argv that ran (or would run); an index with credentials appears as C(NAME=URL) without
      them. Null when the lock was up to date.
  returned: always
  type: list
  elements: str
reasons:
  description: Why the lock was (or would be) compiled.
  returned: when it was or would be compiled
  type: list
  elements: str
uv_output:
  description: The last lines of the failed uv command's output (credentials taken out).
  returned: when a uv command failed
  type: str
problems:
  description: What the checks found wrong with the compiled lock.
  returned: when the lock failed its checks
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._fleetlock import FleetLock
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvoptions import uv_argument_spec
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import redact
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import param_secrets, scrub_environ


def argument_spec():
    return dict(
        uv_argument_spec(),
        dest=dict(type="path", required=True),
        engine=dict(type="str", required=True),
        version=dict(type="str", required=True),
        exclude_newer=dict(type="str", required=True),
        python_version=dict(type="str", required=True),
        python_platform=dict(type="str", required=True),
        pylock=dict(type="bool", default=True),
        cache_dir=dict(type="path"),
        timeout=dict(type="int", default=600),
        force=dict(type="bool", default=False),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    secrets = param_secrets(params)
    module.no_log_values.update(secrets)
    scrub_environ()
    # a bare name (the default, uv) is looked up on PATH by the flow, judged, and run by that path
    flow = FleetLock(params, Runner(), params["uv"] or "uv", check_mode=module.check_mode)
    try:
        result = flow.present()
    except LlmfleetError as exc:
        module.fail_json(**redact(dict(exc.details, msg=exc.msg, path=flow.dest), secrets))
    except OSError as exc:
        module.fail_json(msg="uv_fleet_lock at %s: %s" % (flow.dest, exc), path=flow.dest)
    for warning in flow.warnings:
        module.warn(warning)
    module.exit_json(**redact(result, secrets))


if __name__ == "__main__":
    main()
