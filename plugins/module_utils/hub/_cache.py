# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The Hugging Face hub cache on disk, as the real ``huggingface_hub`` lays it out and reads it offline
(docs/dev/MODELS.md): ``models--<org>--<name>/`` with ``blobs/<sha256 or git blob id>``,
``snapshots/<commit>/<path>`` (relative links to the blobs) and ``refs/<revision>``. What a lock may
lay out there (``cache_lock_problems``), the check of a file's bytes against the lock (``Digest``), and
pruning: the snapshots, blobs and refs a lock no longer needs (``repo_prune_plan``, ``repo_prune``), the
repos no lock lists (``unlisted_repos``, ``remove_empty_repo``).

One lock in one cache directory, and the download that fills it, are ``_snapshot``'s; the streaming
GET is ``_fetch``'s. Files in place are 0644 and directories 0755, owned by whoever runs this: the
service user reads the weights and cannot change them.
"""

from __future__ import annotations

import hashlib
import os
import stat

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import lstat_or_none, rmdir_if_empty, unlink_quiet
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import HEX40, HEX64, validate_lock

#: Bytes read (and hashed) at a time.
CHUNK_SIZE = 1024 * 1024
#: The lock file that keeps two runs from writing the same repo directory at once.
LOCK_NAME = ".llmfleet-snapshot.lock"
MIB = 1024 * 1024
DIR_MODE = 0o755
FILE_MODE = 0o644
#: An .incomplete file's mode until its bytes are checked: what arrives is nobody else's to read.
PARTIAL_MODE = 0o600


# -- errors ------------------------------------------------------------------------------------

class CacheError(LlmfleetError):
    """Base of every failure of the hub cache (and of a run's parallel downloads into it)."""


class IntegrityError(CacheError):
    """Downloaded (or found) bytes that are not the lock's: wrong size or wrong hash."""


class InTheWay(CacheError):
    """Something that is not what the cache layout puts there (a directory for a file, a link for a
    directory) sits where this run must write: it is never removed."""


# -- the lock ----------------------------------------------------------------------------------

def cache_lock_problems(lock):
    """What keeps ``lock`` from being laid out: the lock's own problems (``_lock.validate_lock``),
    and a revision that cannot be a file under ``refs/`` (the real client writes
    ``refs/<revision>``, so ``refs/pr/1`` is fine, ``../x`` is not)."""
    problems = validate_lock(lock)
    if isinstance(lock, dict) and lock.get("revision") != lock.get("commit"):
        revision = lock.get("revision")
        if isinstance(revision, str) and revision:
            why = None
            if revision.startswith("/") or any(ord(ch) < 32 or ord(ch) == 127 for ch in revision):
                why = "is absolute or has control characters"
            elif any(part in ("", ".", "..") for part in revision.split("/")):
                why = "has an empty, '.' or '..' component"
            if why:
                problems.append("revision %r %s: it cannot name a file under refs/" % (revision, why))
    return problems


def repo_folder(repo):
    """``models--<org>--<name>``, the repo's directory in the hub cache."""
    return "models--" + repo.replace("/", "--")


def link_target(path, blob):
    """The relative target of ``snapshots/<commit>/<path>``: ``../../blobs/<blob>``, one more
    ``../`` per directory of ``path`` (what ``os.path.relpath`` gives huggingface_hub)."""
    return "../" * (path.count("/") + 2) + "blobs/" + blob


# -- hashing -----------------------------------------------------------------------------------

class Digest(object):
    """The check of one file of the lock, fed as the bytes stream by: sha256 for an LFS file, the
    git blob id (``sha1(b"blob <size>\\0" + content)``) for a git file, and the byte count."""

    def __init__(self, entry):
        self.entry = entry
        self.kind = "sha256" if entry.get("sha256") else "git_oid"
        self.expected = entry[self.kind]
        self.reset()

    def reset(self):
        if self.kind == "sha256":
            self._hash = hashlib.sha256()
        else:
            self._hash = hashlib.sha1()  # nosec: git's blob id, checked as git computes it
            self._hash.update(b"blob %d\0" % self.entry["size"])
        self.size = 0

    def update(self, data):
        self._hash.update(data)
        self.size += len(data)

    def hexdigest(self):
        return self._hash.hexdigest()

    def problem(self):
        """What is wrong with the bytes seen (a sentence), or None when they are the lock's."""
        if self.size != self.entry["size"]:
            return "%d bytes, not the lock's %d" % (self.size, self.entry["size"])
        got = self.hexdigest()
        if got != self.expected:
            return "%s %s, not the lock's %s" % (self.kind, got, self.expected)
        return None


def file_problem(path, entry, chunk_size=CHUNK_SIZE):
    """What is wrong with the file at ``path`` against ``entry`` (its size, then its hash)."""
    digest = Digest(entry)
    with open(path, "rb") as handle:
        while True:
            data = handle.read(chunk_size)
            if not data:
                break
            digest.update(data)
    return digest.problem()


# -- pruning ----------------------------------------------------------------------------------

def repo_prune_plan(repo_dir, keep_set, room, used):
    """The prune plan of the repo directory ``repo_dir`` (see ``Snapshot.prune_plan``): the snapshots
    in ``keep_set`` stay, and the ``room`` newest others; blobs in ``used`` (the lock's) stay, and
    those linked by a kept snapshot; everything else of the cache's layout goes, .incomplete files
    included, whether or not a snapshot goes (a failed download of another revision does not stay)."""
    plan = {"snapshots": [], "blobs": [], "partials": [], "refs": [], "unknown": [], "kept": []}
    if os.path.islink(repo_dir) or not os.path.isdir(repo_dir):
        return plan
    snapshots_dir = os.path.join(repo_dir, "snapshots")
    blobs_dir = os.path.join(repo_dir, "blobs")
    refs_dir = os.path.join(repo_dir, "refs")
    others = []
    kept = []
    if os.path.isdir(snapshots_dir) and not os.path.islink(snapshots_dir):
        for name in sorted(os.listdir(snapshots_dir)):
            path = os.path.join(snapshots_dir, name)
            st = lstat_or_none(path)
            if st is None:
                continue
            if not stat.S_ISDIR(st.st_mode):
                plan["unknown"].append(path)
                continue
            if name in keep_set:
                kept.append(name)
            else:
                others.append((st.st_mtime, name))
    others.sort(reverse=True)
    kept.extend(name for _mtime, name in others[:room])
    plan["snapshots"] = sorted(name for _mtime, name in others[room:])
    plan["kept"] = sorted(kept)
    used = set(used)
    for name in kept:
        used |= _linked_blobs(blobs_dir, os.path.join(snapshots_dir, name))
    if os.path.isdir(blobs_dir) and not os.path.islink(blobs_dir):
        for name in sorted(os.listdir(blobs_dir)):
            path = os.path.join(blobs_dir, name)
            st = lstat_or_none(path)
            base = name[:-len(".incomplete")] if name.endswith(".incomplete") else name
            if st is None:
                continue
            if not (HEX40.fullmatch(base) or HEX64.fullmatch(base)) or not (
                    stat.S_ISREG(st.st_mode) or (stat.S_ISLNK(st.st_mode) and base == name)):
                plan["unknown"].append(path)
                continue
            if base in used:
                continue
            plan["partials" if base != name else "blobs"].append(name)
    kept_set = set(kept) | set(keep_set)
    if os.path.isdir(refs_dir) and not os.path.islink(refs_dir):
        for top, dirs, files in os.walk(refs_dir):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)
                if os.path.islink(path):
                    plan["unknown"].append(path)
                    continue
                try:
                    with open(path, encoding="utf-8") as handle:
                        target = handle.read(100)
                except (OSError, ValueError):
                    continue
                if target not in kept_set:
                    plan["refs"].append(os.path.relpath(path, refs_dir).replace(os.sep, "/"))
    return plan


def _linked_blobs(blobs_dir, snapshot):
    names = set()
    for top, _dirs, files in os.walk(snapshot):
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                continue
            target = os.path.normpath(os.path.join(top, os.readlink(path)))
            if os.path.dirname(target) == os.path.normpath(blobs_dir):
                names.add(os.path.basename(target))
    return names


def repo_prune(repo_dir, plan):
    """Remove what ``plan`` names; entries of a snapshot that are not links, files or directories
    are left (and reported in the plan's ``unknown``)."""
    snapshots_dir = os.path.join(repo_dir, "snapshots")
    blobs_dir = os.path.join(repo_dir, "blobs")
    refs_dir = os.path.join(repo_dir, "refs")
    for commit in plan["snapshots"]:
        top_dir = os.path.join(snapshots_dir, commit)
        for top, dirs, files in os.walk(top_dir, topdown=False):
            for name in files + dirs:
                path = os.path.join(top, name)
                st = lstat_or_none(path)
                if st is None:
                    continue
                if stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode):
                    os.unlink(path)
                elif stat.S_ISDIR(st.st_mode):
                    rmdir_if_empty(path)
                else:
                    plan["unknown"].append(path)
        rmdir_if_empty(top_dir)
    for ref in plan["refs"]:
        path = os.path.join(refs_dir, *ref.split("/"))
        unlink_quiet(path)
        parent = os.path.dirname(path)
        while parent != refs_dir and parent.startswith(refs_dir):
            if not rmdir_if_empty(parent):
                break
            parent = os.path.dirname(parent)
    for name in plan["blobs"] + plan["partials"]:
        unlink_quiet(os.path.join(blobs_dir, name))


def unlisted_repos(cache_dir, listed):
    """The repo directories (``models--<org>--<name>``, real directories) of ``cache_dir`` whose repo
    is not in ``listed``, sorted. Other entries (datasets, spaces, a link, huggingface_hub's
    ``.locks``) are not the models' and are never returned."""
    if os.path.islink(cache_dir) or not os.path.isdir(cache_dir):
        return []
    wanted = set(repo_folder(repo) for repo in listed)
    out = []
    for name in sorted(os.listdir(cache_dir)):
        if not name.startswith("models--") or name in wanted:
            continue
        st = lstat_or_none(os.path.join(cache_dir, name))
        if st is not None and stat.S_ISDIR(st.st_mode):
            out.append(name)
    return out


def remove_empty_repo(repo_dir):
    """Remove the repo directory's empty ``snapshots``, ``blobs`` and ``refs`` trees, its lock file
    and itself, when nothing else is in it; True when it is gone."""
    for sub in ("refs", "snapshots", "blobs"):
        top_dir = os.path.join(repo_dir, sub)
        if os.path.islink(top_dir) or not os.path.isdir(top_dir):
            continue
        for top, dirs, _files in os.walk(top_dir, topdown=False):
            for name in dirs:
                rmdir_if_empty(os.path.join(top, name))
        rmdir_if_empty(top_dir)
    lock_path = os.path.join(repo_dir, LOCK_NAME)
    rest = [name for name in os.listdir(repo_dir) if name != LOCK_NAME]
    if rest:
        return False
    unlink_quiet(lock_path)
    return rmdir_if_empty(repo_dir)
