# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Files shared between the environments kept side by side: after uv has installed a new
environment into ``<path>.partial``, each of its regular files that is identical to the file at
the same relative path in another environment this module built in the same parent is replaced
by a hard link to that file. Two adjacent engine versions share most of their wheels, so a kept
environment then costs only what it adds.

Identical: both regular files (no links followed, in the file's directories either), the same
size, permission bits, owner and group, on the same filesystem, and the same bytes (compared
only when everything else matches, in chunks, stopping at the first difference). Each file is
replaced atomically: linked under a temporary name in its directory, then renamed over it.

Only directories carrying this module's marker are read (``_envdir.built_here``); links (the
role's ``current``), ``.partial`` and ``.old`` leftovers, and the environment being replaced
(``path`` itself, deleted after the switch) are not. A link that fails (too many links, another
filesystem, no permission) leaves the copy in place and is counted; sharing never fails a build.

A hard link is one file in two environments: an environment is treated as read-only. Removing
one (``remove_tree``) removes its names only; a file another environment links stays.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from ansible_collections.llmfleet.engines.plugins.module_utils._envdir import (
    BUILD_TOKEN_NAME, LOCK_FILE_NAME, MARKER_NAME, built_here)

# Written by the module itself, not installed by uv: never shared.
OWN_FILES = frozenset((MARKER_NAME, BUILD_TOKEN_NAME, LOCK_FILE_NAME))
CHUNK = 1 << 20
# Failures that say a whole sibling cannot be linked from: it is not tried again.
_SIBLING_WIDE = frozenset((errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EROFS))


def sibling_environments(path):
    """The environments this module built beside ``path`` (same parent), sorted by name.

    Directories only, never a link to one; not ``path`` itself, and not ``<name>.partial`` or
    ``<name>.old`` (a build in progress, a killed switch), whatever they hold.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    found = []
    for name in names:
        full = os.path.join(parent, name)
        if full == path or full == path + ".partial" or name.endswith((".partial", ".old")):
            continue
        if built_here(full):
            found.append(full)
    return found


def same_bytes(one, other, size):
    """Whether the files ``one`` and ``other`` (both ``size`` bytes) hold the same bytes."""
    with open(one, "rb") as a, open(other, "rb") as b:
        left = size
        while True:
            x = a.read(CHUNK)
            y = b.read(CHUNK)
            if x != y:
                return False
            if not x:
                return left == 0
            left -= len(x)


def _same_metadata(st, other):
    return (stat.S_ISREG(other.st_mode) and other.st_size == st.st_size
            and stat.S_IMODE(other.st_mode) == stat.S_IMODE(st.st_mode)
            and other.st_uid == st.st_uid and other.st_gid == st.st_gid
            and other.st_dev == st.st_dev and other.st_ino != st.st_ino)


def _real_dir(root, rel, cache):
    """Whether ``root/rel`` is a directory reached without a link (``rel`` "" is ``root``)."""
    if rel in cache:
        return cache[rel]
    if rel == "":
        ok = True
    else:
        ok = _real_dir(root, os.path.dirname(rel), cache)
        if ok:
            try:
                ok = stat.S_ISDIR(os.lstat(os.path.join(root, rel)).st_mode)
            except OSError:
                ok = False
    cache[rel] = ok
    return ok


def _replace_by_link(source, target):
    """``target`` becomes a hard link to ``source``: linked beside it, then renamed over it."""
    tmp = os.path.join(os.path.dirname(target), ".%s.llmfleet-link.%d" % (os.path.basename(target), os.getpid()))
    os.link(source, tmp)
    try:
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _share_one(shared, used, siblings, dir_ok, target, rel_dir, rel, st):
    """Link ``target`` to the first sibling's identical file; a failed link is counted and the
    next sibling tried (a sibling that cannot be linked from at all is not tried again)."""
    for sibling in list(siblings):
        if not _real_dir(sibling, rel_dir, dir_ok[sibling]):
            continue
        source = os.path.join(sibling, rel)
        try:
            other = os.lstat(source)
        except OSError:
            continue
        if not _same_metadata(st, other):
            continue
        try:
            if not same_bytes(target, source, st.st_size):
                continue
            _replace_by_link(source, target)
        except OSError as exc:
            shared["failed"] += 1
            name = errno.errorcode.get(exc.errno, str(exc.errno))
            shared["errors"][name] = shared["errors"].get(name, 0) + 1
            if exc.errno in _SIBLING_WIDE:
                siblings.remove(sibling)
            continue
        shared["files"] += 1
        shared["bytes"] += st.st_size
        used.add(os.path.basename(sibling))
        return


def share_identical_files(new_env, siblings, deadline=None, clock=time.monotonic):
    """Replace each regular file of ``new_env`` identical to the same file of one of ``siblings``
    by a hard link to it. Returns ``{files, bytes, from, failed, errors, stopped}``: the files and
    bytes now shared, the siblings' names linked from, the links that failed (kept as copies) and
    their errors by name, and whether ``deadline`` (a ``clock()`` value) stopped it early.
    """
    shared = {"files": 0, "bytes": 0, "from": [], "failed": 0, "errors": {}, "stopped": False}
    siblings = list(siblings)
    dir_ok = {sibling: {} for sibling in siblings}
    used = set()
    stack = [""]
    while stack and siblings and not shared["stopped"]:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(new_env, rel_dir)) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if deadline is not None and clock() > deadline:
                shared["stopped"] = True
                break
            rel = os.path.join(rel_dir, entry.name)
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(rel)
                continue
            if rel in OWN_FILES or ".llmfleet-link." in entry.name:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                _share_one(shared, used, siblings, dir_ok, entry.path, rel_dir, rel, st)
    shared["from"] = sorted(used)
    return shared
