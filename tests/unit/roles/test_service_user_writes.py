"""A grep that cannot be fooled: root hands nothing to a service user except through service_dirs.

Every task of every role that creates, copies, templates or changes the ownership of a path is
listed (blocks, rescues and handlers included). Such a task fails this test when

- it gives the path an owner or group other than root (a service user, or a value from a loop or
  a variable that could name one): ``ansible.builtin.file`` and friends follow links, so only
  ``llmfleet.engines.service_dirs`` may make what a service user owns; or
- its path names one of the trees a service user writes (``<root>/serve``, the caches under
  ``<root>/cache`` but uv's, a unit's writable or working directories, the hub mirror's cache,
  devpi's data), where that user can plant a link for root to follow.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
WRITERS = {"file", "copy", "template", "lineinfile", "blockinfile", "get_url", "unarchive", "replace", "assemble",
           "tempfile", "acl"}
SAFE = "llmfleet.engines.service_dirs"
TASK_KEYWORDS = set(
    "name when loop loop_control register vars become become_user tags notify changed_when failed_when check_mode"
    " no_log delegate_to run_once block rescue always ignore_errors environment until retries delay args listen"
    " diff any_errors_fatal throttle timeout module_defaults collections async poll with_items with_dict"
    " delegate_facts".split())
# Where a service user writes (see the module docstring); uv's cache and <root>/cache itself are root's.
SERVICE_TREES = re.compile(r"/serve\b|writable_dirs|working_directory|cache_dirs|/cache/(?!uv\b)|hub_mirror_dir \}\}/cache"
                           r"|engine_cache_root \}\}/server")


def _tasks(items, where):
    for task in items or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _tasks(task[key], where)
        yield where, task


def role_tasks():
    files = sorted(REPO.glob("roles/*/tasks/*.yml")) + sorted(REPO.glob("roles/*/handlers/*.yml"))
    assert files, "no role task files found"
    for path in files:
        yield from _tasks(yaml.safe_load(path.read_text()), path.relative_to(REPO))


def _module(task):
    keys = [k for k in task if k not in TASK_KEYWORDS]
    return keys[0] if keys else None


def _only_root(value):
    """Whether an owner/group value can only be root (or omitted): ``root``, or
    ``{{ 'root' if <condition> else omit }}``."""
    text = str(value).strip()
    if text == "root":
        return True
    match = re.fullmatch(r"\{\{\s*'root'\s+if\s+(.+?)\s+else\s+omit\s*\}\}", text)
    return bool(match) and not re.search(r"user|owner", match.group(1))


def writer_tasks():
    out = []
    for where, task in role_tasks():
        module = _module(task)
        if not module or module.split(".")[-1] not in WRITERS and module != SAFE:
            continue
        out.append((where, task, module))
    return out


def test_the_scan_sees_the_tasks_that_write():
    found = writer_tasks()
    names = {task.get("name", "") for _where, task, _module in found}
    assert len(found) > 20, found
    assert "Make the directories the services write (home, working and cache directories)" in names
    # engine_cache's two (devpi's and the hub mirror's trees), engine_service's dirs.yml
    assert sum(1 for _where, _task, module in found if module == SAFE) >= 3, "service_dirs is used less than it should be"


@pytest.mark.parametrize("where, task, module", writer_tasks(),
                         ids=lambda v: v if isinstance(v, str) else (v.get("name", "") if isinstance(v, dict) else str(v)))
def test_no_task_hands_a_path_to_a_service_user_or_writes_in_its_trees_but_service_dirs(where, task, module):
    if module == SAFE:
        return
    args = task[module] if isinstance(task[module], dict) else {}
    for key in ("owner", "group"):
        if key in args:
            assert _only_root(args[key]), (
                "%s, task %r: %s=%r with %s, which follows links: make a service user's directory with %s"
                % (where, task.get("name"), key, args[key], module, SAFE))
    path = " ".join(str(args.get(k, "")) for k in ("path", "dest", "src"))
    loop = str(task.get("loop", "")) + str(task.get("with_items", ""))
    assert not SERVICE_TREES.search(path + " " + loop), (
        "%s, task %r: %s writes %r, in a tree a service user can write (a planted link would be followed): use %s"
        % (where, task.get("name"), module, path, SAFE))
