# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The privilege line (docs: DESIGN.md, "Privilege line"): what root installs from, runs or imports
must not be writable by any other user, at any depth of its path. ``untrusted_component`` finds
the first place on a path where another user could change what the path leads to;
``untrusted_content`` does the same for everything below a directory (uv's cache).

Who is trusted: root, and the user running the module. Run as root, that is root alone. Run as
another user (tests, a user's own prefix), that user trusts itself and root, and nobody else.

Why each rule:

* A directory owned by another user: its owner can chmod it and replace any entry in it.
* A directory writable by its group or by others (the mode's ``g+w``/``o+w``; a POSIX ACL that
  grants write to someone shows as ``g+w``, its mask): anyone with that write can rename an entry
  away and put their own under the same name.
* Except a sticky directory (``/tmp``, mode 1777) owned by a trusted user: there only an entry's
  owner, the directory's owner and root may rename or remove it (``unlink(2)``, ``rename(2)``:
  ``EPERM`` under ``S_ISVTX``). So an entry a trusted user owns cannot be replaced by anyone else,
  and a sticky directory is as safe as a closed one *for that entry*. An entry another user owns
  in it is theirs to change, and a name missing there can be taken by anyone first, so both are
  refused. This is why a path under pytest's ``/tmp/pytest-of-root/...`` (root's, 0700, inside
  the sticky ``/tmp``) is trusted, and ``/tmp/shared-cache`` made by another user is not.
* The path itself (the last component) is judged as if what it holds were used: it must be owned
  by a trusted user and writable by neither group nor others, sticky or not (a sticky cache would
  still let anyone add entries to it).
* Symbolic links are followed the way the kernel follows them, each step judged: the link itself
  as an entry of its directory (it could be replaced like any entry), then every component of
  its target, from ``/`` for an absolute target. A link whose target another user can write is
  therefore untrusted. The owner and mode of a link itself say nothing (a link is always 0777,
  and changing it means replacing it in its directory).
* A component that does not exist yet ends the walk: whatever is missing, the caller makes below
  the last directory that exists, which was found closed to others (a sticky one is not enough
  there: another user could take the name first).

A program root runs (``resolve_program``): a bare name is looked up on PATH once, by this code,
and the absolute path found is what is judged and what runs. A name handed to ``exec`` would be
looked up again by the kernel's caller (``execvp``), possibly elsewhere, and a name judged as a
path relative to the working directory is not the file PATH gives. The path found and its real
path are each judged by ``untrusted_component``.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

_MAX_LINKS = 40  # as the kernel's ELOOP


def trusted_uids(euid=None):
    """The owners trusted by a module run by ``euid`` (the effective uid by default): root, and
    that user when it is not root."""
    euid = os.geteuid() if euid is None else euid
    return frozenset((0, euid))


def owner_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return "uid %d" % uid


def writable_by_others(mode):
    """Whether the group or others may write (``g+w`` or ``o+w``)."""
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH))


class Untrusted:
    """Where a path stops being trusted: ``component`` (a path as walked, symlinks resolved up to
    it), its ``uid`` and ``mode``, ``why`` (in words) and ``fix`` (the commands that fix it)."""

    def __init__(self, component, st, why, fix):
        self.component = component
        # for a directory on the way: the entry of it that another user could replace or make
        self.child = None
        self.child_exists = False
        self.uid = st.st_uid
        self.mode = stat.S_IMODE(st.st_mode)
        self.why = why
        self.fix = fix

    @property
    def owner(self):
        return owner_name(self.uid)

    def describe(self):
        return "%s (owner %s, mode %04o) %s" % (self.component, self.owner, self.mode, self.why)

    def as_dict(self):
        return {"component": self.component, "owner": self.owner, "uid": self.uid,
                "mode": "%04o" % self.mode, "why": self.why, "fix": self.fix}


def _trusted_names(uids):
    return " or ".join(owner_name(uid) for uid in sorted(uids))


def _owner_problem(path, st, uids):
    if st.st_uid in uids:
        return None
    return Untrusted(path, st, "is owned by %s, not by %s: its owner can change it and what it holds"
                     % (owner_name(st.st_uid), _trusted_names(uids)), "chown root %s; chmod go-w %s" % (path, path))


def _dir_problem(path, st, child, child_st, uids):
    """``path`` (a directory, ``st``) as the place of ``child`` (``child_st``: its lstat, None when
    missing). The ``Untrusted`` it gives also names that ``child`` and whether it exists."""
    problem = _place_problem(path, st, child, child_st, uids)
    if problem:
        problem.child = child
        problem.child_exists = child_st is not None
    return problem


def _place_problem(path, st, child, child_st, uids):
    problem = _owner_problem(path, st, uids)
    if problem or not writable_by_others(st.st_mode):
        return problem
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if sticky and child_st is not None and child_st.st_uid in uids:
        # the sticky bit keeps others from renaming or removing an entry a trusted user owns
        return None
    if sticky and child_st is not None:
        why = ("is writable by others (sticky, but its entry %s is owned by %s, who can replace it)"
               % (child, owner_name(child_st.st_uid)))
    elif sticky:
        why = "is writable by others (sticky), and %s is not there yet: anyone can take that name first" % child
    else:
        why = "is writable by %s, who can replace %s in it" % (
            "others" if st.st_mode & stat.S_IWOTH else "its group", child)
    return Untrusted(path, st, why, "chmod go-w %s" % path)


def _final_problem(path, st, uids):
    problem = _owner_problem(path, st, uids)
    if problem or not writable_by_others(st.st_mode):
        return problem
    return Untrusted(path, st, "is writable by %s" % ("others" if st.st_mode & stat.S_IWOTH else "its group"),
                     "chmod go-w %s" % path)


def untrusted_component(path, uids=None):
    """The first place on ``path`` another user could change, as ``Untrusted``; None when there is
    none. Walks from ``/`` down (the rules are in the module's docstring); what does not exist yet
    ends the walk. ``uids`` is the set of trusted owners (``trusted_uids()`` by default).
    """
    return next(untrusted_components(path, uids), None)


def untrusted_components(path, uids=None, final=True):
    """Every place on ``path`` another user could change, as ``Untrusted``, from ``/`` down (a
    generator: ``untrusted_component`` takes the first). With ``final`` false the path itself is
    not judged, only the directories on the way to it and the links there (for a directory the
    caller makes its own: chown and chmod).
    """
    uids = trusted_uids() if uids is None else frozenset(uids)
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    # not normpath: "link/.." is the link's target's parent, as the kernel takes it
    pending = [name for name in path.split("/") if name not in ("", ".")]
    pending.reverse()
    current = "/"
    current_st = os.lstat(current)
    links = 0
    while pending:
        name = pending.pop()
        if name == "..":
            # current is a real path (every link on the way is resolved): its parent was walked
            current = os.path.dirname(current)
            current_st = os.lstat(current)
            continue
        child = os.path.join(current, name)
        try:
            child_st = os.lstat(child)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise
            child_st = None
        problem = _dir_problem(current, current_st, child, child_st, uids)
        if problem:
            yield problem
        if child_st is None:
            return
        if stat.S_ISLNK(child_st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
            target = os.readlink(child)
            parts = [part for part in target.split("/") if part not in ("", ".")]
            pending.extend(reversed(parts))
            if target.startswith("/"):
                current = "/"
                current_st = os.lstat(current)
            continue
        if pending and not stat.S_ISDIR(child_st.st_mode):
            return  # "not a directory": nothing can be used below it
        current, current_st = child, child_st
    problem = _final_problem(current, current_st, uids) if final else None
    if problem:
        yield problem


def _lock_file(name, st):
    """uv makes its lock files (``.lock``, ``<wheel>.lock``) writable by all (0666), so that users
    sharing a cache can take them. uv only locks them and never reads them; an empty one holds
    nothing to run or import. One that is not empty is not uv's doing, and is refused."""
    return name.endswith(".lock") and stat.S_ISREG(st.st_mode) and st.st_size == 0


def untrusted_content(top, uids=None):
    """The first entry below the directory ``top`` owned by an untrusted user, or (not a symbolic
    link, nor one of uv's empty lock files) writable by group or others, as ``Untrusted``; None when
    there is none or ``top`` is not a directory. Links are not followed (a link made by a trusted
    user was put there by one).

    It reads every entry: meant for uv's cache, which the role removes after each build (a kept
    cache is read once per run). ``top`` itself is ``untrusted_component``'s.
    """
    uids = trusted_uids() if uids is None else frozenset(uids)
    if not os.path.isdir(top) or os.path.islink(top):
        return None

    def fail(exc):
        raise exc

    for where, dirs, files in os.walk(top, onerror=fail):
        for name in dirs + files:
            entry = os.path.join(where, name)
            st = os.lstat(entry)
            if st.st_uid not in uids:
                return Untrusted(entry, st, "is owned by %s, not by %s: it was not put there by the installs"
                                 % (owner_name(st.st_uid), _trusted_names(uids)), "rm -rf %s" % top)
            if not stat.S_ISLNK(st.st_mode) and writable_by_others(st.st_mode) and not _lock_file(name, st):
                return Untrusted(entry, st, "is writable by %s" % (
                    "others" if st.st_mode & stat.S_IWOTH else "its group"), "rm -rf %s" % top)
    return None


# -- the programs root runs ------------------------------------------------------------------


#: Where a bare name is looked up after PATH, as Ansible's ``get_bin_path`` does (a module's PATH may
#: lack the sbin directories).
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")


class ProgramRefused(LlmfleetError):
    """A program given by an option is not run: not found, not an executable file, or changeable by
    another user (``details['untrusted']``)."""


def find_program(value, search_path=None, extra_dirs=()):
    """The absolute path of the program ``value`` names, or None when a bare name is on none of the
    directories. ``value`` with a ``/`` is a path (relative: to the working directory); a bare name
    is looked up on ``search_path`` (this process's PATH by default), then ``extra_dirs``, the first
    executable regular file wins, as a shell finds it. A relative or empty PATH entry (the working
    directory) is skipped: root does not run what happens to be in the directory it was started in.
    """
    if os.sep in value:
        return os.path.abspath(value)
    search_path = os.environ.get("PATH", "") if search_path is None else search_path
    for directory in search_path.split(os.pathsep) + list(extra_dirs):
        if not directory or not os.path.isabs(directory):
            continue
        candidate = os.path.join(directory, value)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def program_problem(path, uids=None):
    """The privilege line for a program about to run: ``untrusted_component`` of ``path`` (the
    links on it followed, each step judged), then of its real path; the first problem, or None."""
    for place in dict.fromkeys((path, os.path.realpath(path))):
        problem = untrusted_component(place, uids)
        if problem is not None:
            return problem
    return None


def resolve_program(option, value, what, search_path=None, uids=None, extra_dirs=()):
    """The absolute path to run for the option ``option`` given ``value`` (a path, or a bare name
    looked up on PATH by ``find_program``), used as ``what`` (words): refused with ``ProgramRefused``,
    naming the option, the value, the path found and why, when it is not found, not an executable
    file, or another user could change it (``program_problem``). Run the path returned, never
    ``value``: that is the file judged."""
    uids = trusted_uids() if uids is None else frozenset(uids)
    found = find_program(value, search_path, extra_dirs) if value else None
    where = "" if not value or os.sep in value else " (found on PATH at %s)" % found
    head = "%s %s%s is not run" % (option, value, where)
    if found is None:
        dirs = [d for d in (os.environ.get("PATH", "") if search_path is None else search_path).split(os.pathsep)
                + list(extra_dirs) if d and os.path.isabs(d)]
        raise ProgramRefused("%s %s is not run: it is on none of the directories of PATH (%s). It is %s: give its "
                             "absolute path" % (option, value, os.pathsep.join(dirs) or "empty", what),
                             option=option, value=value)
    if not os.path.exists(found):
        raise ProgramRefused("%s: %s does not exist. It is %s" % (head, found, what),
                             option=option, value=value, program=found)
    problem = program_problem(found, uids)
    if problem is not None:
        raise ProgramRefused(
            "%s: %s. It is %s: it must belong to %s, and every directory on its path (links followed) must be "
            "writable by no one else: %s" % (head, problem.describe(), what, _trusted_names(uids), problem.fix),
            option=option, value=value, program=found, untrusted=dict(problem.as_dict(), option=option, path=found))
    if not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ProgramRefused("%s: %s is not an executable file. It is %s" % (head, found, what),
                             option=option, value=value, program=found)
    return found
