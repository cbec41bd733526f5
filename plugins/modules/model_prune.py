#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_prune
short_description: Remove from a hub cache the models a node no longer lists, except what is in use
version_added: 0.4.0
description:
  - In the Hugging Face hub cache O(cache_dir) (as M(llmfleet.engines.model_snapshot) writes it), every
    model directory C(models--<org>--<name>) whose repo is not in O(repos) loses its snapshots, except
    the commits in O(in_use) (what the node's units serve, which is also what a rollback returns to),
    with the blobs, C(.incomplete) downloads and refs only they used. A directory left with nothing
    of the cache's in it is removed.
  - The repos in O(repos) are left alone (M(llmfleet.engines.model_snapshot) prunes them, keeping its
    own count). Entries that are not the cache's (datasets, a link, a file someone left) are never
    touched, and are reported in RV(unknown).
  - One run per repo at a time, by the same lock file as M(llmfleet.engines.model_snapshot)
    (C(.llmfleet-snapshot.lock) in the repo's directory).
  - A O(cache_dir) that another user could change is refused.
author:
  - llmfleet maintainers (@llmfleet)
attributes:
  check_mode:
    support: full
    description: Writes nothing; says what would be removed.
  diff_mode:
    support: full
    description: The model directories and their snapshots, before and after.
  platform:
    support: full
    platforms: posix
    description: Needs only Python; runs on the node that holds the cache.
options:
  cache_dir:
    description: The hub cache directory (C(HF_HUB_CACHE)). Nothing is done when it does not exist.
    type: path
    required: true
  repos:
    description: The repos (C(org/name)) the node lists; their directories are left alone.
    type: list
    elements: str
    required: true
  in_use:
    description: Commits never removed, whatever repo they belong to (for example, what running units serve).
    type: list
    elements: str
    default: []
  lock_timeout:
    description: Seconds to wait for another run on the same repo to finish.
    type: int
    default: 3600
seealso:
  - module: llmfleet.engines.model_snapshot
"""

EXAMPLES = r"""
- name: Remove the models this node no longer serves, keeping what its units still serve
  llmfleet.engines.model_prune:
    cache_dir: /opt/llmfleet/models
    repos: [Qwen/Qwen3-0.6B]
    in_use: ["{{ served_commit }}"]
"""

RETURN = r"""
pruned:
  description: For each model directory pruned (or that would be), the commits whose snapshots were removed.
  returned: always
  type: dict
  sample: {"models--org--old-model": ["9c1d3b1a3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b"]}
removed:
  description: The model directories removed whole (nothing of the cache's left in them).
  returned: always
  type: list
  elements: str
kept:
  description: For each model directory not listed, the commits kept because they are in O(in_use).
  returned: always
  type: dict
blobs_removed:
  description: How many blobs and C(.incomplete) files were removed (or would be).
  returned: always
  type: int
unknown:
  description: Entries that are not the cache's and were left alone.
  returned: always
  type: list
  elements: str
msg:
  description: What happened, in one line.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import (
    LOCK_NAME,
    remove_empty_repo,
    repo_prune,
    repo_prune_plan,
    unlisted_repos,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import validate_repo
from ansible_collections.llmfleet.engines.plugins.module_utils.common._pathlock import PathLock
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import owner_name, untrusted_component


def _problem(p):
    for repo in p["repos"]:
        problem = validate_repo(repo)
        if problem:
            return "repos: %s" % problem
    bad = [c for c in p["in_use"] if not (len(c) == 40 and all(ch in "0123456789abcdef" for ch in c))]
    if bad:
        return "in_use must list full commits (40 lower-case hex digits); not one: %s" % ", ".join(map(repr, bad))
    if p["lock_timeout"] < 0:
        return "lock_timeout must not be negative, got %d" % p["lock_timeout"]
    return None


def _does_something(plan):
    return bool(plan["snapshots"] or plan["blobs"] or plan["partials"] or plan["refs"] or not plan["kept"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cache_dir=dict(type="path", required=True),
            repos=dict(type="list", elements="str", required=True),
            in_use=dict(type="list", elements="str", default=[]),
            lock_timeout=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, pruned={}, removed=[], kept={}, blobs_removed=0, unknown=[])
    problem = _problem(p)
    if problem:
        module.fail_json(msg=problem, **result)
    cache_dir = p["cache_dir"]
    untrusted = untrusted_component(cache_dir)
    if untrusted:
        module.fail_json(
            msg="cache_dir %s cannot be trusted: the engine loads the models from it, and %s. Every directory on "
                "its path must belong to root or %s and be writable by no one else: %s. Nothing was done."
                % (cache_dir, untrusted.describe(), owner_name(os.geteuid()), untrusted.fix),
            untrusted=untrusted.as_dict(), **result)
    in_use = set(p["in_use"])
    before, after = [], []
    try:
        for name in unlisted_repos(cache_dir, p["repos"]):
            repo_dir = os.path.join(cache_dir, name)
            lock = None
            if not module.check_mode:
                lock = PathLock(os.path.join(repo_dir, LOCK_NAME), p["lock_timeout"],
                                about="model_prune %s" % name)
                lock.acquire()
            try:
                plan = repo_prune_plan(repo_dir, in_use, 0, set())
                before.extend("%s %s" % (name, c) for c in sorted(plan["kept"] + plan["snapshots"]))
                after.extend("%s %s" % (name, c) for c in plan["kept"])
                result["unknown"].extend(plan["unknown"])
                if plan["kept"]:
                    result["kept"][name] = plan["kept"]
                if not _does_something(plan):
                    continue
                if plan["snapshots"]:
                    result["pruned"][name] = plan["snapshots"]
                result["blobs_removed"] += len(plan["blobs"]) + len(plan["partials"])
                gone = not plan["kept"] and not plan["unknown"]
                if not module.check_mode:
                    repo_prune(repo_dir, plan)
                    if gone:
                        gone = remove_empty_repo(repo_dir)
                if gone:
                    result["removed"].append(name)
                result["changed"] = result["changed"] or bool(
                    plan["snapshots"] or plan["blobs"] or plan["partials"] or plan["refs"] or gone)
            finally:
                if lock is not None:
                    lock.release()
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **dict(result, **exc.details))
    except OSError as exc:
        module.fail_json(msg="pruning the models not listed in %s: %s" % (cache_dir, exc), **result)
    if module._diff:
        result["diff"] = {"before_header": cache_dir, "after_header": cache_dir,
                          "before": "".join(line + "\n" for line in before),
                          "after": "".join(line + "\n" for line in after)}
    verb = "would prune" if module.check_mode else "pruned"
    if result["changed"]:
        result["msg"] = "%s %s: %d snapshots of %d models no longer listed (%d blobs)%s%s" % (
            verb, cache_dir, sum(len(v) for v in result["pruned"].values()), len(result["pruned"]),
            result["blobs_removed"], ", removed %s" % ", ".join(result["removed"]) if result["removed"] else "",
            ", kept in use: %s" % ", ".join("%s@%s" % (k, ",".join(c[:12] for c in v))
                                            for k, v in sorted(result["kept"].items())) if result["kept"] else "")
    else:
        result["msg"] = "%s: no model that is no longer listed to prune" % cache_dir
    module.exit_json(**result)


if __name__ == "__main__":
    main()
