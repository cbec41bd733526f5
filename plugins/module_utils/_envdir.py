# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The environment directory of the uv flow: its marker (``.llmfleet-engine.json``) and the spec
it records, whether it is intact, the switch of a new environment into place, and the leftovers
(``<path>.partial``, ``<path>.old``) of a run that was killed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

from ansible_collections.llmfleet.engines.plugins.module_utils._errors import NotAnEnvironment, SwitchFailed
from ansible_collections.llmfleet.engines.plugins.module_utils._uvcmd import normalize_sha256, strip_userinfo

MARKER_NAME = ".llmfleet-engine.json"
LOCK_FILE_NAME = "llmfleet-requirements.txt"
MARKER_FORMAT = 1


def wanted_spec(params, uv_version):
    """The spec the marker records and a re-run compares: what decides the content.

    URLs without their credentials: the marker is world-readable, and a rotated token must not
    rebuild the environment.
    """
    wheel = params.get("wheel")
    return {
        "engine": params["engine"],
        "version": params["version"],
        "build": params.get("build"),
        "requirements": list(params.get("requirements") or []),
        "wheel": (
            {"url": strip_userinfo(wheel["url"].split("#", 1)[0]), "sha256": normalize_sha256(wheel["sha256"])}
            if wheel
            else None
        ),
        "index_url": strip_userinfo(params.get("index_url")),
        "extra_index_url": [strip_userinfo(url) for url in params.get("extra_index_url") or []],
        "index_strategy": params.get("index_strategy"),
        "exclude_newer": params["exclude_newer"],
        "exclude_newer_package": {
            k: (False if v is False or str(v).lower() == "false" else str(v))
            for k, v in sorted((params.get("exclude_newer_package") or {}).items())
        },
        "python": params["python"],
        "python_preference": params["python_preference"],
        "uv": uv_version,
    }


def spec_differences(old, new):
    """Keys whose values differ, each as ``key: old -> new`` (short)."""
    if not isinstance(old, dict):
        return ["no recorded spec"]
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append("%s: %s -> %s" % (key, _short(old.get(key)), _short(new.get(key))))
    return out


def _short(value, limit=80):
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def inspect_env(path):
    """What is at ``path``: ``{exists, intact, reason, marker, lock_sha256}``.

    Intact: the marker parses, ``bin/python`` exists (its target too), the lock file is there
    and its sha256 is the one the marker recorded. Reads files only.
    """
    state = {"exists": os.path.lexists(path), "intact": False, "reason": None, "marker": None,
             "lock_sha256": None}
    if not state["exists"]:
        state["reason"] = "no environment at %s" % path
        return state
    marker_path = os.path.join(path, MARKER_NAME)
    try:
        with open(marker_path, encoding="utf-8") as handle:
            marker = json.load(handle)
        if not isinstance(marker, dict) or not isinstance(marker.get("spec"), dict):
            raise ValueError("not a marker object")
    except (OSError, ValueError) as exc:
        state["reason"] = "the marker %s cannot be read (%s)" % (marker_path, exc)
        return state
    state["marker"] = marker
    if not os.path.exists(os.path.join(path, "bin", "python")):
        state["reason"] = "%s/bin/python is missing or points nowhere" % path
        return state
    lock_path = os.path.join(path, LOCK_FILE_NAME)
    try:
        state["lock_sha256"] = file_sha256(lock_path)
    except OSError as exc:
        state["reason"] = "the lock file %s cannot be read (%s)" % (lock_path, exc)
        return state
    recorded = (marker.get("lock") or {}).get("sha256")
    if state["lock_sha256"] != recorded:
        state["reason"] = "the lock file's sha256 (%s) is not the marker's (%s)" % (
            state["lock_sha256"], recorded)
        return state
    state["intact"] = True
    return state


def looks_like_env(path):
    """True when ``path`` is missing, or is a virtual environment (or one this module built)."""
    if not os.path.lexists(path):
        return True
    return any(os.path.isfile(os.path.join(path, name)) for name in (MARKER_NAME, "pyvenv.cfg"))


def refuse_foreign(path, doing):
    if not looks_like_env(path):
        raise NotAnEnvironment(
            "%s exists but is not a Python environment (no %s, no pyvenv.cfg): refusing to %s it. "
            "Move it away, or choose another path." % (path, MARKER_NAME, doing))


def rebuild_reasons(state, wanted, force=False):
    """Why the environment must be built; empty when it is up to date."""
    reasons = []
    if force:
        reasons.append("force is set")
    if not state["intact"]:
        reasons.append(state["reason"])
    elif state["marker"].get("spec") != wanted:
        reasons.append("the spec changed: " + "; ".join(spec_differences(state["marker"].get("spec"), wanted)))
    return reasons


def available_gb(directory):
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize / float(1 << 30)


def marker_json(marker):
    return json.dumps(marker, indent=2, sort_keys=True) + "\n" if marker else ""


def remove_tree(path):
    """Delete a file, link or directory tree; missing is fine. True if something was there."""
    if not os.path.lexists(path):
        return False
    if os.path.isdir(path) and not os.path.islink(path):

        def _retry_writable(func, target, _exc):
            parent = os.path.dirname(target)
            os.chmod(parent, 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
            func(target)

        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=_retry_writable)  # pylint: disable=unexpected-keyword-arg
        else:
            shutil.rmtree(path, onerror=_retry_writable)  # pylint: disable=deprecated-argument
    else:
        os.unlink(path)
    return True


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(marker_json(data))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def switch_into_place(partial, path, rename=os.rename):
    """Move an old environment aside, rename the partial in, then delete the old one.

    Between the two renames ``path`` is missing for a moment; if the second rename fails the
    old environment is renamed back. A run killed in that window leaves ``<path>.old``, which
    ``recover_debris`` puts back.
    """
    old = path + ".old"
    had_old = os.path.lexists(path)
    if had_old:
        remove_tree(old)
        rename(path, old)
    try:
        rename(partial, path)
    except OSError as exc:
        if had_old:
            rename(old, path)
        raise SwitchFailed(
            "renaming %s to %s failed (%s); the previous environment is back in place" % (partial, path, exc)
        )
    _fsync_dir(os.path.dirname(path))
    if had_old:
        remove_tree(old)


def pending_debris(path):
    """What a killed run left: ``[(action, path)]`` with action restore/remove."""
    actions = []
    old = path + ".old"
    if os.path.lexists(old):
        actions.append(("remove" if os.path.lexists(path) else "restore", old))
    if os.path.lexists(path + ".partial"):
        actions.append(("remove", path + ".partial"))
    return actions


def clear_debris(path, actions):
    for action, target in actions:
        if action == "restore":
            os.rename(target, path)
        else:
            remove_tree(target)
