# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

File-system helpers shared by the uv flow, the path lock and the hub cache: the one atomic writer
(a new file beside the target, made with ``mkstemp``, written, fsync'd, renamed over it), free space
on the filesystem a path will live on, and the quiet forms of ``lstat``, ``unlink`` and ``rmdir``
that treat "already gone" as done.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile


def fsync_dir(directory, quiet=False):
    """fsync ``directory`` (so that a rename in it survives a crash). OSError is raised, or with
    ``quiet`` ignored (best effort)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        if quiet:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not quiet:
            raise
    finally:
        os.close(fd)


def write_atomic(path, data, mode=0o644):
    """``data`` (bytes) into ``path`` atomically: a new file beside it made by ``mkstemp`` (O_EXCL, a
    name nobody can guess, so no link planted in the directory is followed), written, fsync'd, its mode
    set through its descriptor, then renamed over ``path``; the directory fsync'd."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        unlink_quiet(tmp)
        raise
    fsync_dir(directory)


def json_file_text(data):
    """``data`` as the collection writes JSON files: indented, keys sorted, a final line break."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json_atomic(path, data, mode=0o644):
    """``data`` as JSON (``json_file_text``) into ``path``, atomically (``write_atomic``)."""
    write_atomic(path, json_file_text(data).encode("utf-8"), mode)


def nearest_existing(path):
    """``path`` or its nearest ancestor that exists (where a directory to be made will live)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path):
    """Free bytes (for an unprivileged user) on the filesystem of ``path`` or its nearest existing
    parent, and that directory."""
    place = nearest_existing(path)
    st = os.statvfs(place)
    return st.f_bavail * st.f_frsize, place


def lstat_or_none(path):
    """``os.lstat(path)``, or None when nothing is there (or a component is not a directory)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def unlink_quiet(path):
    """Remove the file (or link) ``path``; nothing there is fine. Other errors are raised."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def rmdir_if_empty(path):
    """Remove the directory ``path`` when it is empty: True when it went, False when it is not empty
    or not there. Other errors are raised."""
    try:
        os.rmdir(path)
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            return False
        raise
