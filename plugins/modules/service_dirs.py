#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: service_dirs
short_description: Make the directories a service user writes, without following anything it planted
version_added: 0.5.0
description:
  - Makes each of O(paths) a directory owned by O(owner) with O(mode), walking down from O(root)
    one component at a time by file descriptor (C(openat) with C(O_NOFOLLOW)), and changing owner
    and mode through the descriptor of the directory actually opened. The engine_service role makes
    every directory its services write this way.
  - Unlike M(ansible.builtin.file), it never follows a symbolic link and never hands over a
    directory it did not make. A link, a file or anything else at one of the paths or on the way
    to it fails the task, naming it; so does an existing directory at one of O(paths) that belongs
    to root or to any user but O(owner). A directory is given to O(owner) only when this task just
    created it, or when it is already O(owner)'s (then only its group and mode are set).
  - O(root) must be closed to every user but root at every depth (the collection's privilege
    line), and every path must lie below it.
author:
  - llmfleet maintainers (@llmfleet)
attributes:
  check_mode:
    support: full
    description: Walks and reports what it would create or change, and refuses what the real run
      would refuse; changes nothing. A missing O(owner) is taken as a user yet to be made.
  diff_mode:
    support: full
    description: Owner, group and mode of each directory before and after (C(absent) when missing).
options:
  root:
    description:
      - The directory root trusts, under which every path lies (the role's C(engine_service_root)).
        It must exist, be root's and be writable by no other user at any depth.
    type: path
    required: true
  paths:
    description:
      - The directories to make, each an absolute path below O(root); parents come first when they
        are listed too (the list is sorted). Missing directories on the way are made as well, owned
        by O(owner) with O(mode).
    type: list
    elements: path
    required: true
  owner:
    description: The service user (not root), owner of the directories.
    type: str
    required: true
  group:
    description: Their group (the owner's primary group when not given).
    type: str
  mode:
    description: Their mode, as an octal string.
    type: str
    default: "0750"
notes:
  - Refusing is the point; the message says what to remove. A directory the service user owns is
    its to fill; the module looks only at the directory itself, never at what it holds.
seealso:
  - module: ansible.builtin.file
"""

EXAMPLES = r"""
- name: Make the directories the services write
  llmfleet.engines.service_dirs:
    root: /opt/llmfleet
    paths:
      - /opt/llmfleet/serve
      - /opt/llmfleet/serve/chat
      - /opt/llmfleet/cache/vllm/0.20.0-cu129
    owner: llmfleet-vllm
    mode: "0750"
"""

RETURN = r"""
dirs:
  description: One entry per path, C({path, before, after, changed, created}); C(before) and C(after)
    as C(owner:group mode) (C(absent) for a directory that did not exist).
  returned: always
  type: list
  elements: dict
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _servicedirs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            paths=dict(type="list", elements="path", required=True),
            owner=dict(type="str", required=True),
            group=dict(type="str"),
            mode=dict(type="str", default="0750"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not re.fullmatch(r"0?[0-7]{3}", p["mode"] or ""):
        module.fail_json(msg="parameter mode is %r, allowed: an octal mode such as \"0750\"" % p["mode"])
    mode = int(p["mode"], 8)
    if mode & 0o022:
        module.fail_json(msg="parameter mode is %r: a directory the service user owns must not be writable by its"
                         " group or others (allowed: 0700, 0750, 0755 and the like)" % p["mode"])
    results = []
    try:
        try:
            uid, gid = _servicedirs.resolve_owner(p["owner"], p["group"])
        except _servicedirs.ServiceDirError:
            if not module.check_mode:
                raise
            # a check before the role has made the user: no directory can be its yet
            uid = gid = -1
        for path in sorted(set(p["paths"])):
            results.append(_servicedirs.ensure(p["root"], path, uid, gid, mode, check_mode=module.check_mode))
    except _servicedirs.ServiceDirError as exc:
        module.fail_json(msg=exc.msg, path=exc.path, dirs=results)
    changed = any(r["changed"] for r in results)
    diff = {"before": "".join("%s: %s\n" % (r["path"], r["before"]) for r in results if r["changed"]),
            "after": "".join("%s: %s\n" % (r["path"], r["after"]) for r in results if r["changed"])}
    module.exit_json(changed=changed, dirs=results, diff=diff)


if __name__ == "__main__":
    main()
