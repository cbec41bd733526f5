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

A sibling's file is what it is when it is compared, not when it is linked: another file renamed
over it in between must not be linked instead. So both files are compared through descriptors
(each directory of the sibling opened in the one before, nothing opened through a link), the
sibling's file is linked from that directory without following a link, and the temporary link
must then be the very file compared (its device and inode); else it is removed before it replaces
anything, the copy stays, and it counts as failed (``ESTALE``).

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

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import (
    BUILD_TOKEN_NAME, LOCK_FILE_NAME, MARKER_NAME, built_here, is_trash)

# Written by the module itself, not installed by uv: never shared.
OWN_FILES = frozenset((MARKER_NAME, BUILD_TOKEN_NAME, LOCK_FILE_NAME))
CHUNK = 1 << 20
# Failures that say a whole sibling cannot be linked from: it is not tried again.
_SIBLING_WIDE = frozenset((errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EROFS))
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY


def sibling_environments(path):
    """The environments this module built beside ``path`` (same parent), sorted by name.

    Directories only, never a link to one; not ``path`` itself, and not ``<name>.partial`` or
    ``<name>.old`` (a build in progress, a killed switch), nor a ``.<name>.trash-<pid>`` (a removal
    under way or killed), whatever they hold.
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
        if full == path or full == path + ".partial" or name.endswith((".partial", ".old")) or is_trash(name):
            continue
        if built_here(full):
            found.append(full)
    return found


def _open_file(path, dir_fd=None):
    """A read-only descriptor of the file ``path`` (a name in ``dir_fd`` when given), never through
    a link; a FIFO or a device does not block or become the controlling terminal (what it is, its
    ``fstat`` tells the caller)."""
    return os.open(path, _FILE_FLAGS, dir_fd=dir_fd)


def same_bytes(one, other, size):
    """Whether the files ``one`` and ``other`` (both ``size`` bytes) hold the same bytes. Each is
    an open descriptor (read from where it stands, left open) or a path (opened, no link followed).
    """
    opened, fds = [], []
    try:
        for given in (one, other):
            if isinstance(given, str):
                opened.append(_open_file(given))
                given = opened[-1]
            fds.append(given)
        with open(fds[0], "rb", closefd=False) as a, open(fds[1], "rb", closefd=False) as b:
            left = size
            while True:
                x = a.read(CHUNK)
                y = b.read(CHUNK)
                if x != y:
                    return False
                if not x:
                    return left == 0
                left -= len(x)
    finally:
        for fd in opened:
            os.close(fd)


def _same_metadata(st, other):
    return (stat.S_ISREG(other.st_mode) and other.st_size == st.st_size
            and stat.S_IMODE(other.st_mode) == stat.S_IMODE(st.st_mode)
            and other.st_uid == st.st_uid and other.st_gid == st.st_gid
            and other.st_dev == st.st_dev and other.st_ino != st.st_ino)


def _open_dir(root, rel):
    """A descriptor of the directory ``root/rel`` (``rel`` "" is ``root``), each part of it opened
    in the one before without following a link; ``None`` when one is missing or not a directory."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    for part in rel.split(os.sep) if rel else ():
        try:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            inner = None
        os.close(fd)
        if inner is None:
            return None
        fd = inner
    return fd


def _replace_by_link(source, target, src_dir_fd=None, expect=None):
    """``target`` becomes a hard link to ``source`` (a name in ``src_dir_fd`` when given; a link is
    never followed): linked beside it, then renamed over it. ``expect``: the ``(st_dev, st_ino)``
    the new link must have (the file compared); when the name led elsewhere meanwhile, the new link
    is removed and ``target`` is left as it is (``OSError`` ``ESTALE``)."""
    tmp = os.path.join(os.path.dirname(target), ".%s.llmfleet-link.%d" % (os.path.basename(target), os.getpid()))
    os.link(source, tmp, src_dir_fd=src_dir_fd, follow_symlinks=False)
    try:
        if expect is not None:
            made = os.lstat(tmp)
            if (made.st_dev, made.st_ino) != tuple(expect):
                raise OSError(errno.ESTALE, "%s was replaced after it was compared" % source)
        os.replace(tmp, target)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _link_if_same(target_fd, st, sibling_dir, name, target):
    """Link ``target`` (open as ``target_fd``, ``st``) to the file ``name`` of the sibling directory
    open as ``sibling_dir`` if it is identical. Compared through a descriptor of it, and the link
    made must be that very file (``_replace_by_link``). Whether it was linked; OSError when the link
    failed."""
    try:
        if not _same_metadata(st, os.lstat(name, dir_fd=sibling_dir)):
            return False
        source_fd = _open_file(name, dir_fd=sibling_dir)
    except OSError:
        return False
    try:
        other = os.fstat(source_fd)
        if not _same_metadata(st, other):
            return False
        os.lseek(target_fd, 0, os.SEEK_SET)
        if not same_bytes(target_fd, source_fd, st.st_size):
            return False
        _replace_by_link(name, target, src_dir_fd=sibling_dir, expect=(other.st_dev, other.st_ino))
        return True
    finally:
        os.close(source_fd)


def _share_one(shared, used, siblings, dirs, target, rel_dir, st):
    """Link ``target`` to the first sibling's identical file; a failed link is counted and the
    next sibling tried (a sibling that cannot be linked from at all is not tried again)."""
    try:
        target_fd = _open_file(target)
    except OSError:
        return
    try:
        mine = os.fstat(target_fd)
        if not stat.S_ISREG(mine.st_mode) or (mine.st_dev, mine.st_ino) != (st.st_dev, st.st_ino):
            return
        for sibling in list(siblings):
            if sibling not in dirs:
                dirs[sibling] = _open_dir(sibling, rel_dir)
            if dirs[sibling] is None:
                continue
            try:
                if not _link_if_same(target_fd, mine, dirs[sibling], os.path.basename(target), target):
                    continue
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
    finally:
        os.close(target_fd)


def share_identical_files(new_env, siblings, deadline=None, clock=time.monotonic):
    """Replace each regular file of ``new_env`` identical to the same file of one of ``siblings``
    by a hard link to it. Returns ``{files, bytes, from, failed, errors, stopped}``: the files and
    bytes now shared, the siblings' names linked from, the links that failed (kept as copies) and
    their errors by name, and whether ``deadline`` (a ``clock()`` value) stopped it early.
    """
    shared = {"files": 0, "bytes": 0, "from": [], "failed": 0, "errors": {}, "stopped": False}
    siblings = list(siblings)
    used = set()
    stack = [""]
    while stack and siblings and not shared["stopped"]:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(new_env, rel_dir)) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError:
            continue
        dirs = {}  # sibling -> a descriptor of its rel_dir (None: it has none), opened when needed
        try:
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
                    _share_one(shared, used, siblings, dirs, entry.path, rel_dir, st)
        finally:
            for fd in dirs.values():
                if fd is not None:
                    os.close(fd)
    shared["from"] = sorted(used)
    return shared
