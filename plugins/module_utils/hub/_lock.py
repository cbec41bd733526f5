# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The model lock's format (docs/dev/MODELS.md), apart from the hub's protocol (``_hfhub``): what a
lock is (:func:`validate_lock`), how it is written (:func:`lock_text`) and where each of its files
lives in the hub cache (:func:`blob_name`). The node's cache code (``_cache``, ``_snapshot``) needs
only this, so that a look at a pinned model's snapshot does not load the hub client.
"""

from __future__ import annotations

import json
import re

LOCK_FORMAT = 1

# Whole values only: use them with fullmatch (``$`` with match lets a trailing newline through).
HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FILE_KEYS = ("path", "size", "sha256", "git_oid")
_LOCK_KEYS = ("format", "repo", "revision", "commit", "files", "size")


def validate_repo(repo):
    """What is wrong with ``repo`` as a hub model id (``org/name``), or None."""
    if not isinstance(repo, str) or not repo:
        return "repo %r is not of the form org/name" % (repo,)
    parts = repo.split("/")
    if len(parts) != 2:
        return ("repo %r is not of the form org/name (one '/'; models without an org, such as gpt2, "
                "now live under one, such as openai-community/gpt2)" % (repo,))
    for part in parts:
        if not _REPO_PART.fullmatch(part):
            return ("repo %r is not of the form org/name: each side starts with a letter or digit and "
                    "has only letters, digits, '.', '_' and '-'" % (repo,))
        if "--" in part or ".." in part:
            return "repo %r is not a hub model id: '--' and '..' are not allowed in it" % (repo,)
    return None


def is_commit(revision):
    """Whether ``revision`` is a full commit id (40 hex digits, any case)."""
    return isinstance(revision, str) and bool(HEX40.fullmatch(revision.lower()))


def path_problem(path):
    """What is wrong with ``path`` as a file of a lock (relative POSIX, no ``..``), or None."""
    if not isinstance(path, str) or not path:
        return "path %r is not a non-empty string" % (path,)
    if path.startswith("/"):
        return "path %r is absolute" % (path,)
    if "\\" in path or "\x00" in path:
        return "path %r has a backslash or a NUL" % (path,)
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return "path %r has an empty, '.' or '..' component" % (path,)
    return None


def is_size(value):
    """Whether ``value`` is a size in a lock: an int (not a bool), 0 or more."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def validate_lock(lock):
    """Every problem of ``lock`` against the format of docs/dev/MODELS.md (empty list: valid)."""
    if not isinstance(lock, dict):
        return ["the lock is not a JSON object (got %s)" % type(lock).__name__]
    problems = []
    extra = sorted(set(lock) - set(_LOCK_KEYS))
    if extra:
        problems.append("unknown keys %s" % ", ".join(map(str, extra)))
    if lock.get("format") != LOCK_FORMAT or isinstance(lock.get("format"), bool):
        problems.append("format is %r, not %d" % (lock.get("format"), LOCK_FORMAT))
    repo_problem = validate_repo(lock.get("repo"))
    if repo_problem:
        problems.append(repo_problem)
    revision = lock.get("revision")
    if not isinstance(revision, str) or not revision:
        problems.append("revision %r is not a non-empty string" % (revision,))
    commit = lock.get("commit")
    if not isinstance(commit, str) or not HEX40.fullmatch(commit):
        problems.append("commit %r is not 40 lower-case hex digits" % (commit,))
    files = lock.get("files")
    if not isinstance(files, list) or not files:
        problems.append("files is not a non-empty list")
        files = []
    seen = set()
    paths = []
    total = 0
    for index, item in enumerate(files):
        where = "files[%d]" % index
        if not isinstance(item, dict):
            problems.append("%s is not an object" % where)
            continue
        extra = sorted(set(item) - set(_FILE_KEYS))
        if extra:
            problems.append("%s has unknown keys %s" % (where, ", ".join(map(str, extra))))
        path = item.get("path")
        problem = path_problem(path)
        if problem:
            problems.append("%s: %s" % (where, problem))
        elif path in seen:
            problems.append("%s: path %r is listed twice" % (where, path))
        else:
            seen.add(path)
            paths.append(path)
        size = item.get("size")
        if not is_size(size):
            problems.append("%s: size %r is not a non-negative integer" % (where, size))
        else:
            total += size
        has_sha = "sha256" in item
        has_oid = "git_oid" in item
        if has_sha == has_oid:
            problems.append("%s has %s of sha256 and git_oid (exactly one is needed)"
                            % (where, "both" if has_sha else "neither"))
        if has_sha and not (isinstance(item["sha256"], str) and HEX64.fullmatch(item["sha256"])):
            problems.append("%s: sha256 %r is not 64 lower-case hex digits" % (where, item["sha256"]))
        if has_oid and not (isinstance(item["git_oid"], str) and HEX40.fullmatch(item["git_oid"])):
            problems.append("%s: git_oid %r is not 40 lower-case hex digits" % (where, item["git_oid"]))
    if paths != sorted(paths):
        problems.append("files are not sorted by path")
    size = lock.get("size")
    if not is_size(size):
        problems.append("size %r is not a non-negative integer" % (size,))
    elif size != total:
        problems.append("size %d is not the sum of the files' sizes (%d)" % (size, total))
    return problems


def lock_text(lock):
    """The lock file's text: JSON, sorted keys, indent 2, one trailing newline."""
    return json.dumps(lock, sort_keys=True, indent=2) + "\n"


def blob_name(entry):
    """The name of a lock entry's blob in the hub cache: its sha256, else its git_oid."""
    return entry.get("sha256") or entry["git_oid"]
