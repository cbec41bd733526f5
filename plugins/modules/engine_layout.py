#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_layout
short_description: Judge an engine root against the privilege line before root installs under it
version_added: 0.6.0
description:
  - Reads, and changes nothing, what the engine_node role needs to know before it lays out O(path)
    (its C(engine_node_root)) for root to install from, run and import - whether another user can change
    a directory on the way to O(path), and whether C(<path>/cache) and C(<path>/cache/uv) must be taken
    back.
  - The directories above O(path), and every symbolic link on the way (followed as the kernel follows
    it), are judged by the collection's one rule of the privilege line, the private C(_trust) module util
    that M(llmfleet.engines.uv_engine_env) applies too. Each must be owned by root or by the user running
    the module, and writable by nobody else, but for a sticky directory whose entry on the way such a
    user owns. O(path) itself is not judged, the role makes it root's and closes it.
  - C(<path>/cache) owned by another user (the layout of earlier versions of the collection) is to be
    taken back (RV(take_back)); run by another user than root, that cannot be done and is a problem.
    C(<path>/cache/uv), uv's cache, is to be dropped (RV(drop_uv_cache)) when C(<path>/cache) is taken
    back, or when it is another user's, writable by group or others, or not a directory.
  - O(trees) and O(programs) judge what is already under the root before root runs it (the engine_cache
    role's uv and devpi-server's environment, the Python it builds that from). A tree another user owns a
    part of, or can write, is what root would run.
  - The module does not fail on what it finds; the role fails the node on RV(problems), naming the
    host and its variable.
author:
  - llmfleet maintainers (@llmfleet)
attributes:
  check_mode:
    support: full
    description: The module only reads; check mode reports the same.
  diff_mode:
    support: none
    description: It changes nothing.
options:
  path:
    description: The engine root, an absolute path (the role's C(engine_node_root)). It need not exist.
    type: path
    required: true
  trees:
    description:
      - Directories (or files) root runs or imports from, usually under O(path). Each that exists is judged whole
        by C(_trust), itself and every directory on the way to it, then every entry below it (links not followed).
        Each must be owned by root or the user running the module, and writable by neither group nor others (uv's
        empty lock files aside). Each finding is one of RV(problems).
    type: list
    elements: path
    default: []
  programs:
    description:
      - Programs root runs, a path or a bare name looked up on E(PATH), each judged as every program the collection
        runs (C(_trust.resolve_program), the path and its real path). One that is not there is left to the task
        that runs it; one another user could change is one of RV(problems).
    type: list
    elements: str
    default: []
seealso:
  - module: llmfleet.engines.uv_engine_env
  - module: llmfleet.engines.engine_current
"""

EXAMPLES = r"""
- name: Judge the directories above /opt/llmfleet
  llmfleet.engines.engine_layout:
    path: /opt/llmfleet
  register: layout

- name: Stop when another user can change what root would install from
  ansible.builtin.fail:
    msg: "{{ layout.problems | join('; ') }}"
  when: layout.problems | length > 0
"""

RETURN = r"""
path:
  description: O(path), without a trailing C(/).
  returned: always
  type: str
euid:
  description: The effective uid the module ran as.
  returned: always
  type: int
root:
  description: Whether the module ran as root (the role then makes owners root's).
  returned: always
  type: bool
problems:
  description:
    - What another user can change on the way to O(path), one sentence each, from C(/) down, such as
      C(/srv (owner alice, mode 0775) is writable by others, who can replace /srv/llmfleet); and, run as
      another user than root, a C(<path>/cache) it cannot take back. Empty when there is nothing.
  returned: always
  type: list
  elements: str
take_back:
  description: Whether C(<path>/cache) exists and is owned by another user than root and the one running.
  returned: always
  type: bool
cache_owner:
  description: The owner of C(<path>/cache) (empty when it does not exist).
  returned: always
  type: str
drop_uv_cache:
  description: Whether C(<path>/cache/uv) exists and must be removed before it is made again.
  returned: always
  type: bool
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import (
    find_program, owner_name, program_problem, trusted_uids, untrusted_component, untrusted_components,
    untrusted_content, writable_by_others)


def describe(problem, uids):
    """One problem of the walk as the role words it: the directory, its owner and mode, and who can
    replace (or make first) the entry of it on the way."""
    where = "%s (owner %s, mode %04o)" % (problem.component, problem.owner, problem.mode)
    if problem.child is None:  # not given by a walk that leaves the path itself alone
        return "%s %s" % (where, problem.why)
    if problem.uid not in uids:
        return "%s is owned by %s, who can replace %s" % (where, problem.owner, problem.child)
    if not problem.child_exists:
        return "%s is writable by others, who can make %s first" % (where, problem.child)
    return "%s is writable by others, who can replace %s" % (where, problem.child)


def judge_trees(trees, programs, uids):
    """The problems of ``trees`` (each judged whole: its path, then what it holds) and ``programs``
    (each found as it would be run, then judged with its real path), one sentence each."""
    problems = []
    for tree in trees:
        if not os.path.lexists(tree):
            continue
        problem = untrusted_component(tree, uids) or untrusted_content(tree, uids)
        if problem is not None:
            problems.append("%s, which root runs or imports from: %s" % (tree, problem.describe()))
    for program in programs:
        found = find_program(program)
        if found is None or not os.path.exists(found):
            continue  # the task that runs it says it is missing
        problem = program_problem(found, uids)
        if problem is not None:
            problems.append("the program %s%s, which root runs: %s" % (
                program, "" if found == program else " (%s)" % found, problem.describe()))
    return problems


def judge(path, euid=None, trees=(), programs=()):
    """What the module returns for the engine root ``path``, run by ``euid``."""
    euid = os.geteuid() if euid is None else euid
    uids = trusted_uids(euid)
    problems = []
    for problem in untrusted_components(path, uids, final=False):
        words = describe(problem, uids)
        if words not in problems:
            problems.append(words)
    problems.extend(judge_trees(trees, programs, uids))
    cache, uv_cache = os.path.join(path, "cache"), os.path.join(path, "cache", "uv")
    try:
        cache_st = os.lstat(cache)
    except OSError:
        cache_st = None
    try:
        uv_st = os.lstat(uv_cache)
    except OSError:
        uv_st = None
    take_back = cache_st is not None and cache_st.st_uid not in uids
    if take_back and euid != 0:
        problems.append("%s is owned by %s, and the role, run as uid %d, cannot take it back (run it as root)"
                        % (cache, owner_name(cache_st.st_uid), euid))
    drop = uv_st is not None and (take_back or uv_st.st_uid not in uids or writable_by_others(uv_st.st_mode)
                                  or not stat.S_ISDIR(uv_st.st_mode))
    return dict(path=path, euid=euid, root=euid == 0, problems=problems, take_back=take_back,
                cache_owner=owner_name(cache_st.st_uid) if cache_st is not None else "", drop_uv_cache=drop)


def main():
    module = AnsibleModule(argument_spec=dict(
        path=dict(type="path", required=True),
        trees=dict(type="list", elements="path", default=[]),
        programs=dict(type="list", elements="str", default=[]),
    ), supports_check_mode=True)
    path = module.params["path"]
    if not os.path.isabs(path):
        module.fail_json(msg="parameter path is %r, allowed: an absolute path (the engine root)" % path)
    path = path.rstrip("/") or "/"
    try:
        result = judge(path, trees=module.params["trees"], programs=module.params["programs"])
    except OSError as exc:
        module.fail_json(msg="reading the directories on the way to %s failed: %s" % (path, exc), path=path)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
