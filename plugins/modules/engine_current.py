#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_current
short_description: Point an engine's C(current) link at one of its environments, and prune the others
version_added: 0.6.0
description:
  - Points C(<path>/current) at the environment O(target) (a relative link, its name), or removes
    the link (O(state=absent)). The new link is made beside the old one and renamed over it, so
    C(current) is never missing.
  - With O(keep), then removes the environments beyond O(keep) in O(path), never O(target); the one
    C(current) named before (O(previous)) is kept first, switching back to it being instant, then the
    most recently built. Each is removed as M(llmfleet.engines.uv_engine_env) O(state=absent) removes
    one, under its lock and renamed to a hidden trash name first.
  - With O(list_only), only lists the environments on disk (RV(environments)) and reads where
    C(current) points; changes nothing.
  - The one place the roles switch C(current), prune environments and list them (engine_node when it
    looks for an environment on disk and when it switches itself, engine_service when it rolls a node
    or rolls one back).
author:
  - llmfleet maintainers (@llmfleet)
attributes:
  check_mode:
    support: full
    description: Reports the link it would write and the environments it would remove; changes nothing.
      An O(target) not on disk yet (one a check-mode run would build) is not refused.
  diff_mode:
    support: full
    description: The environment C(current) names before and after (empty when none).
options:
  path:
    description: The directory of the engine's environments (the roles' C(<root>/engines/vllm)).
    type: path
    required: true
  state:
    description: V(present) points C(current) at O(target); V(absent) removes C(current).
    type: str
    choices: [present, absent]
    default: present
  target:
    description:
      - The name of the environment in O(path) to point C(current) at, a directory name that matches
        O(pattern). Required with O(state=present).
    type: str
  previous:
    description:
      - The environment C(current) named before the change, kept first when pruning. Defaults to the one
        C(current) names when the task starts. An empty string means none.
    type: str
  keep:
    description:
      - When given, how many environments besides O(target) stay; the others are removed. Not given,
        nothing is removed.
    type: int
  pattern:
    description:
      - A regular expression for the names of environments (C(<version>-<build>)). Only directories whose
        name matches it and that hold uv_engine_env's marker C(.llmfleet-engine.json) are pruned; C(current),
        C(*.partial), locks and caches never are.
    type: str
    default: '^[0-9][0-9A-Za-z.+!]*-(cu13|cu129|cpu)$'
  list_only:
    description:
      - Only list the environments in O(path) (RV(environments)) and read where C(current) points; change
        nothing. O(state), O(target), O(previous) and O(keep) are not used, and a C(current) that is not a
        link is not refused (RV(current) is then empty).
    type: bool
    default: false
    version_added: 0.6.0
  lock_timeout:
    description: Seconds to wait for an environment's lock (a build or check in progress) before removing it.
    type: int
    default: 3600
notes:
  - C(current) that exists and is not a link (a directory, a file) is refused, naming it.
seealso:
  - module: llmfleet.engines.uv_engine_env
"""

EXAMPLES = r"""
- name: Point current at 0.20.0-cu129 and keep one environment besides it
  llmfleet.engines.engine_current:
    path: /opt/llmfleet/engines/vllm
    target: 0.20.0-cu129
    previous: 0.19.1-cu129
    keep: 1

- name: List the environments on disk
  llmfleet.engines.engine_current:
    path: /opt/llmfleet/engines/vllm
    list_only: true
  register: on_disk

- name: Take current away
  llmfleet.engines.engine_current:
    path: /opt/llmfleet/engines/vllm
    state: absent
"""

RETURN = r"""
current:
  description: The environment C(current) names after the task (empty when none).
  returned: always
  type: str
previous:
  description: The environment kept first when pruning (O(previous), or what C(current) named before).
  returned: always
  type: str
removed:
  description: The environments removed (would be removed, in check mode), as paths.
  returned: always
  type: list
  elements: str
environments:
  description:
    - The environments in O(path), sorted by name - directories (not links) whose name matches O(pattern)
      and that hold uv_engine_env's marker; empty when O(path) does not exist.
  returned: when O(list_only=true)
  type: list
  elements: dict
  contains:
    name:
      description: The environment's directory name (C(<version>-<build>)).
      type: str
    mtime:
      description: When its marker was written (seconds since the epoch), as the roles order them.
      type: float
  sample: [{"name": "0.20.0-cu129", "mtime": 1764700000.0}]
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import MARKER_NAME
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvenv import EngineEnv

LINK = "current"


def link_name(path):
    """The environment ``<path>/current`` names: '' when missing or not a link. Raises OSError for
    anything else there (a directory, a file)."""
    link = os.path.join(path, LINK)
    if not os.path.lexists(link):
        return ""
    if not os.path.islink(link):
        raise OSError("%s exists and is not a link; move it away, current is always a link to an environment" % link)
    return os.path.basename(os.readlink(link).rstrip("/"))


def replace_link(path, target):
    """``<path>/current`` -> ``target``, made beside it and renamed over it (never missing)."""
    link = os.path.join(path, LINK)
    tmp = os.path.join(path, ".%s.%d.tmp" % (LINK, os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    try:
        os.rename(tmp, link)
    except OSError:
        os.unlink(tmp)
        raise
    _fsync(path)


def remove_link(path):
    os.unlink(os.path.join(path, LINK))
    _fsync(path)


def _fsync(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def environments(path, pattern):
    """[(name, marker mtime)] of the finished environments in ``path``."""
    found = []
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        marker = os.path.join(path, name, MARKER_NAME)
        full = os.path.join(path, name)
        if not re.match(pattern, name) or os.path.islink(full) or not os.path.isdir(full):
            continue
        try:
            found.append((name, os.lstat(marker).st_mtime))
        except OSError:
            continue
    return found


def beyond_keep(on_disk, target, previous, keep):
    """The names to remove: ``previous`` first, then the newest, are kept (``keep`` of them); ``target``
    always stays."""
    names = [name for name, _mtime in on_disk]
    left = [previous] if previous in names and previous != target else []
    others = [name for name, _mtime in sorted(on_disk, key=lambda item: item[1], reverse=True)
              if name not in (target, previous)]
    return (left + others)[keep:]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            target=dict(type="str"),
            previous=dict(type="str"),
            keep=dict(type="int"),
            pattern=dict(type="str", default=r"^[0-9][0-9A-Za-z.+!]*-(cu13|cu129|cpu)$"),
            list_only=dict(type="bool", default=False),
            lock_timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.abspath(p["path"])
    try:
        pattern = re.compile(p["pattern"])
    except re.error as exc:
        module.fail_json(msg="parameter pattern is %r: not a regular expression (%s)" % (p["pattern"], exc))
    if p["list_only"]:
        try:
            now = link_name(path)
        except OSError:
            now = ""
        module.exit_json(changed=False, path=path, current=now, previous=now, removed=[],
                         environments=[dict(name=name, mtime=mtime) for name, mtime in environments(path, pattern)])
    if p["state"] == "present" and not p["target"]:
        module.fail_json(msg="state is present but all of the following are missing: target")
    target = p["target"] if p["state"] == "present" else ""
    if p["state"] == "present" and (not pattern.match(target) or "/" in target):
        module.fail_json(msg="parameter target is %r, allowed: the name of an environment in %s matching %s"
                         % (target, path, p["pattern"]))
    if p["keep"] is not None and p["keep"] < 0:
        module.fail_json(msg="parameter keep is %r, allowed: 0 or more" % p["keep"])
    try:
        before = link_name(path)
    except OSError as exc:
        module.fail_json(msg=str(exc), path=path)
    previous = before if p["previous"] is None else p["previous"]
    if target and not module.check_mode and not os.path.isdir(os.path.join(path, target)):
        module.fail_json(msg="parameter target is %r: %s is not an environment on disk, allowed: one of %s"
                         % (target, os.path.join(path, target),
                            ", ".join(n for n, _m in environments(path, pattern)) or "none"), path=path)
    switched = before != target
    result = dict(changed=switched, current=target, previous=previous, removed=[], path=path,
                  diff=dict(before="current -> %s\n" % before if before else "",
                            after="current -> %s\n" % target if target else ""))
    if switched and not module.check_mode:
        try:
            replace_link(path, target) if target else remove_link(path)
        except OSError as exc:
            module.fail_json(msg="pointing %s at %s failed: %s" % (os.path.join(path, LINK), target or "nothing", exc),
                             path=path)
    if p["keep"] is not None:
        for name in beyond_keep(environments(path, pattern), target, previous, p["keep"]):
            flow = EngineEnv({"path": os.path.join(path, name), "lock_timeout": p["lock_timeout"]},
                             check_mode=module.check_mode)
            try:
                removed = flow.absent()["removed"]
            except (OSError, LlmfleetError) as exc:
                for warning in flow.warnings:
                    module.warn(warning)
                failed = dict(result)
                failed["changed"] = switched or bool(result["removed"])
                failed["msg"] = "removing %s beyond keep %d failed: %s" % (
                    os.path.join(path, name), p["keep"], getattr(exc, "msg", exc))
                module.fail_json(**failed)
            for warning in flow.warnings:
                module.warn(warning)
            result["removed"].extend(r for r in removed if os.path.basename(r) == name)
    result["changed"] = switched or bool(result["removed"])
    verb = "would " if module.check_mode else ""
    result["msg"] = "; ".join(filter(None, [
        ("%spoint current at %s" % (verb, target) if target else "%sremove current" % verb) if switched
        else "current names %s" % (target or "nothing"),
        ("%sremove %s" % (verb, ", ".join(result["removed"]))) if result["removed"] else ""]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
