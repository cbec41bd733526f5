# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The one way root makes and changes the directories a service user writes (its home, working
directories and caches), so that nothing that user can plant steers what root does.

Root walks from a directory it trusts (``root``: root's, closed to others at every depth, checked
with ``_trust``) down to each directory, one component at a time, by file descriptor: every step
is ``openat(parent, name, O_DIRECTORY | O_NOFOLLOW)``, and owner and mode are changed with
``fchown``/``fchmod`` on the descriptor of the directory actually opened, never by path. So:

* a symbolic link anywhere below ``root`` (planted by the service user in a directory it owns)
  ends the walk with an error naming it: it is never followed, so root never changes the owner
  or mode of what the link points to (the unit directory, the secrets directory, ``/etc``);
* a regular file, a device or anything else that is not a directory is refused the same way;
* a directory is handed to the service user only when this walk has just created it (``mkdirat``,
  then opened without following links, then checked to be root's and new, so a directory swapped
  in between is refused), or when it is already that user's; an existing directory of root or of
  any other user at a path the service user should own is refused, named (the service user never
  gets one of root's directories, whatever a path value says);
* the directories on the way (``root/cache``, say) may be root's or the service user's, never
  another user's.

A directory cannot be hard-linked and the service user cannot move root's directories into its own
tree (that needs write access to their parent), so a descriptor opened this way is the directory
found there, and changing it through the descriptor cannot reach anything else.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _trust
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class ServiceDirError(LlmfleetError):
    """A directory that cannot be made or handed to the service user safely (``path``: which)."""

    def __init__(self, msg, path=None):
        super().__init__(msg, path=path)
        self.path = path


def _lstat_at(name, dir_fd):
    """lstat of ``name`` in the directory open at ``dir_fd`` (a function of its own, so that a test
    can swap the entry between this look and the open that follows, as a racing user would)."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def _kind(st):
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    return "not a directory (%s)" % stat.filemode(st.st_mode)[0]


def _name(uid):
    return _trust.owner_name(uid)


def _describe(st):
    return "%s:%s %04o" % (_name(st.st_uid), _group_name(st.st_gid), stat.S_IMODE(st.st_mode))


def _wanted(uid, gid, mode):
    """``owner:group mode`` of what a directory is made, as ``_describe`` shows what it is."""
    return "%s:%s %04o" % (_name(uid), _group_name(gid), mode)


def _group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return str(gid)


def resolve_owner(owner, group=None):
    """(uid, gid) of ``owner`` (a user name) and ``group`` (a group name; the user's primary group
    when None)."""
    try:
        user = pwd.getpwnam(owner)
    except KeyError:
        raise ServiceDirError("the user %s does not exist on this node" % owner)
    if user.pw_uid == 0:
        raise ServiceDirError("the service user must not be root (owner=%s)" % owner)
    if group is None:
        return user.pw_uid, user.pw_gid
    try:
        return user.pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        raise ServiceDirError("the group %s does not exist on this node" % group)


def relative_parts(root, path):
    """The components of ``path`` below ``root``; refuses a path outside it or with ``..``/``.``."""
    if not os.path.isabs(path) or not os.path.isabs(root):
        raise ServiceDirError("%s: an absolute path below %s is needed" % (path, root), path)
    root_parts = [p for p in root.split("/") if p]
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts) or any(p in (".", "..") for p in root_parts):
        raise ServiceDirError("%s: '.' and '..' are not allowed in the service user's directories" % path, path)
    if parts[:len(root_parts)] != root_parts or len(parts) == len(root_parts):
        raise ServiceDirError("%s is not below %s: the service user's directories are made only inside the tree"
                              " root keeps for the services (%s)" % (path, root, root), path)
    return parts[len(root_parts):]


def _open_trusted_root(root):
    problem = _trust.untrusted_component(root)
    if problem is not None:
        raise ServiceDirError("%s cannot hold the service user's directories: %s (fix: %s)"
                              % (root, problem.describe(), problem.fix), root)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ServiceDirError("%s cannot be opened: %s" % (root, exc.strerror), root)
    st = os.fstat(fd)
    if st.st_uid != 0 and st.st_uid != os.geteuid():
        os.close(fd)
        raise ServiceDirError("%s is owned by %s: root trusts only its own directories" % (root, _name(st.st_uid)), root)
    return fd


def ensure(root, path, uid, gid, mode, check_mode=False):
    """Make ``path`` (below ``root``) a directory owned by ``uid``:``gid`` with ``mode``, the way the
    module docstring says. Returns ``{path, before, after, changed, created}`` (before/after as
    ``owner:group mode``, or ``absent``). Raises ``ServiceDirError`` naming the refused path."""
    parts = relative_parts(root, path)
    if check_mode and not os.path.lexists(root):
        # a check before the run that makes the root (a fresh host): all of it would be made
        return {"path": path, "before": "absent", "after": _wanted(uid, gid, mode),
                "changed": True, "created": True}
    fd = _open_trusted_root(root)
    here = root.rstrip("/") or "/"
    created_any = False
    before = after = None
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            here = "%s/%s" % (here, name)
            try:
                st = _lstat_at(name, fd)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise ServiceDirError("%s cannot be read: %s" % (here, exc.strerror), here)
                st = None
            if st is None:
                if check_mode:
                    # the rest would be made by this walk: nothing to open
                    return {"path": path, "before": "absent", "after": _wanted(uid, gid, mode),
                            "changed": True, "created": True}
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except OSError as exc:
                    if exc.errno == errno.EEXIST:
                        # something was put there between the look and the mkdir (the service user racing root)
                        try:
                            what = _kind(_lstat_at(name, fd))
                        except OSError:
                            what = "something"
                        raise ServiceDirError("%s appeared (%s) while root made it: refused (root neither follows nor"
                                              " replaces what it finds in the service user's directories; remove it,"
                                              " then run again)" % (here, what), here)
                    raise ServiceDirError("%s cannot be made: %s" % (here, exc.strerror), here)
                new = True
            else:
                if not stat.S_ISDIR(st.st_mode):
                    raise ServiceDirError(
                        "%s is %s, not a directory: refused (root neither follows nor replaces what it finds in the"
                        " service user's directories; remove it, then run again)" % (here, _kind(st)), here)
                new = False
            try:
                child = os.open(name, _OPEN_DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ServiceDirError("%s was replaced by a symbolic link or a file while it was made: refused" % here,
                                          here)
                raise ServiceDirError("%s cannot be opened: %s" % (here, exc.strerror), here)
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if new:
                if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
                    raise ServiceDirError("%s was replaced by another directory (%s) while it was made: refused"
                                          % (here, _describe(st)), here)
                os.fchown(fd, uid, gid)
                os.fchmod(fd, mode)
                created_any = True
                if last:
                    before, after = "absent", _describe(os.fstat(fd))
                continue
            if not last:
                if st.st_uid not in (0, os.geteuid(), uid):
                    raise ServiceDirError("%s is owned by %s, neither root's nor the service user's: refused"
                                          % (here, _name(st.st_uid)), here)
                continue
            # the directory itself, found there: only the service user's own is taken as it is
            if st.st_uid != uid:
                raise ServiceDirError(
                    "%s is a directory of %s (%s), not of the service user %s: refused (root hands the service user"
                    " only directories it makes itself; a path value that names one of root's directories is wrong,"
                    " or something else made this one)" % (here, _name(st.st_uid), _describe(st), _name(uid)), here)
            before = _describe(st)
            if check_mode:
                want = _wanted(uid, gid, mode)
                return {"path": path, "before": before, "after": want, "changed": before != want, "created": False}
            if st.st_gid != gid:
                os.fchown(fd, -1, gid)
            if stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(fd, mode)
            after = _describe(os.fstat(fd))
    finally:
        os.close(fd)
    return {"path": path, "before": before, "after": after, "changed": created_any or before != after,
            "created": created_any}
