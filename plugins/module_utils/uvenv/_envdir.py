# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The environment directory of the uv flow: its marker (``.llmfleet-engine.json``) and the spec
it records, whether it is intact, the switch of a new environment into place, the leftovers
(``<path>.partial``, ``<path>.old``) of a run that was killed, uv's cache directory, and the
filesystems a build writes to.

A leftover is touched only when it carries this module's mark: the marker of an environment it
built, or the token (``.llmfleet-build.json``, naming ``path``) it writes into ``<path>.partial``
when it creates it, before ``uv venv`` fills it. Anything else at those names is left alone and
reported. uv's cache is removed entry by entry, and only what uv puts there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import (
    CleanupFailed, NotAnEnvironment, SwitchFailed)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import free_bytes, fsync_dir, json_file_text, write_json_atomic
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import strip_userinfo
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import normalize_sha256, omitted_packages
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._kernels import kernels_wanted
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvlock import text_sha256

MARKER_NAME = ".llmfleet-engine.json"
LOCK_FILE_NAME = "llmfleet-requirements.txt"
MARKER_FORMAT = 1
# Written into <path>.partial when this module creates it, before uv fills it; it stays in the
# environment. It names the path the partial is built for.
BUILD_TOKEN_NAME = ".llmfleet-build.json"


def wanted_spec(params, uv_version):
    """The spec the marker records and a re-run compares: what decides the content.

    URLs without their credentials: the marker is world-readable, and a rotated token must not
    rebuild the environment.
    """
    wheel = params.get("wheel")
    spec = {
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
        "exclude_newer": params.get("exclude_newer"),
        "exclude_newer_package": {
            k: (False if v is False or str(v).lower() == "false" else str(v))
            for k, v in sorted((params.get("exclude_newer_package") or {}).items())
        },
        "python": params["python"],
        "python_preference": params["python_preference"],
        "uv": uv_version,
    }
    if params.get("lock") is not None:
        # Installed from a lock given as text (the fleet's): nothing is resolved, so what the
        # resolution reads (requirements, indexes, cut-offs) decides nothing; any mirror serves
        # the files, whose hashes the lock pins. The lock's sha256 does decide.
        for key in ("requirements", "index_url", "extra_index_url", "index_strategy", "exclude_newer",
                    "exclude_newer_package"):
            del spec[key]
        spec["lock_sha256"] = text_sha256(params["lock"])
    else:
        # in the spec only when set (an environment built before these options stays up to date), sorted:
        # a list in another order is the same lock
        omit = omitted_packages(params["engine"], params.get("omit_packages"))
        kernels = kernels_wanted(params)
        if omit:
            spec["omit_packages"] = omit
        if kernels:
            spec["kernels"] = kernels
        if params.get("engine_file"):
            spec["engine_file"] = {"filename": params["engine_file"]["filename"],
                                   "sha256": normalize_sha256(params["engine_file"]["sha256"])}
    return spec


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
    return free_bytes(directory)[0] / float(1 << 30)


def filesystem_of(directory):
    """The device id of the filesystem ``directory`` is on."""
    return os.stat(directory).st_dev


def environment_summary(name, marker, current_name):
    """One environment as the engine_node role's report lists it (``engine_node_state.environments``),
    from its directory name (``<version>-<build>``) and its marker as parsed JSON.

    What the marker lacks is null, except version and build, which the name gives (a marker without a
    spec, written before the spec was recorded); ``fleet_lock`` says the spec records the fleet's lock.
    """
    if not isinstance(marker, dict):
        raise ValueError("the marker of %s is not a JSON object" % name)
    spec = marker.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    lock = marker.get("lock")
    lock = lock if isinstance(lock, dict) else {}
    version, _sep, build = name.rpartition("-")
    return {
        "name": name,
        "version": spec.get("version", version if _sep else name),
        "build": spec.get("build", build),
        "current": name == current_name,
        "exclude_newer": spec.get("exclude_newer"),
        "installed_at": marker.get("installed_at"),
        "packages": lock.get("packages"),
        "lock_sha256": lock.get("sha256"),
        "fleet_lock": "lock_sha256" in spec,
        "gpu": marker.get("gpu"),
    }


def marker_json(marker):
    return json_file_text(marker) if marker else ""


def remove_tree(path):
    """Delete a file, link or directory tree; missing is fine. True if something was there.

    An entry that cannot be removed or read for want of permission is retried once after making
    its directory (and itself, when a directory) 0o700, only inside the tree: nothing above
    ``path``, its parent included, is ever changed; a failure there is raised as it is.
    """
    if not os.path.lexists(path):
        return False
    if os.path.isdir(path) and not os.path.islink(path):
        top = os.path.abspath(path)
        retried = set()

        def inside(target):
            return target == top or target.startswith(top.rstrip(os.sep) + os.sep)

        def _retry_writable(func, target, exc):
            error = exc[1] if isinstance(exc, tuple) else exc
            target = os.path.abspath(target)
            parent = os.path.dirname(target)
            writing = func in (os.rmdir, os.unlink, os.remove)
            # removing an entry needs its directory: never chmod the directory above the tree
            if target in retried or not inside(target) or (writing and not inside(parent)):
                raise error
            retried.add(target)
            if inside(parent):
                os.chmod(parent, 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
                if not writing:  # it could not be read: its entries are still there
                    _rmtree(target)
                    return
            func(target)

        def _rmtree(target):
            if sys.version_info >= (3, 12):
                shutil.rmtree(target, onexc=_retry_writable)  # pylint: disable=unexpected-keyword-arg
            else:
                shutil.rmtree(target, onerror=_retry_writable)  # pylint: disable=deprecated-argument

        _rmtree(path)
        return True
    os.unlink(path)
    return True


# What a removal renames a tree to before deleting it (``discard_tree``): a removal killed half way
# leaves a name no one takes for an environment (hidden, never matched by the role's listing of
# environments), and the next run in the directory finishes it (``dead_trash``).
_TRASH = re.compile(r"^\.(?P<name>.+)\.trash-(?P<pid>[0-9]+)$")


def trash_name(path, pid=None):
    """``<parent>/.<name>.trash-<pid>``: where ``discard_tree`` moves ``path`` before deleting it."""
    parent, name = os.path.split(os.path.abspath(path).rstrip(os.sep))
    return os.path.join(parent, ".%s.trash-%d" % (name, os.getpid() if pid is None else pid))


def is_trash(name):
    return bool(_TRASH.match(name))


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def dead_trash(parent):
    """The trash names in ``parent`` whose removal was killed: their pid (in the name) is not a
    live process (a live one is still deleting it). Sorted."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    found = []
    for name in names:
        match = _TRASH.match(name)
        if match and int(match.group("pid")) != os.getpid() and not _pid_alive(int(match.group("pid"))):
            found.append(os.path.join(parent, name))
    return found


def discard_tree(path):
    """Remove ``path`` the way a kill cannot leave half of it under its own name: renamed to
    ``trash_name`` first (one atomic step, made durable), then deleted. True if something was
    there."""
    if not os.path.lexists(path):
        return False
    trash = trash_name(path)
    os.rename(path, trash)
    fsync_dir(os.path.dirname(trash), quiet=True)
    remove_tree(trash)
    return True


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def built_here(directory):
    """Whether ``directory`` is a directory (not a link) holding the marker of an environment
    this module built (a JSON object with a ``spec`` object)."""
    if os.path.islink(directory) or not os.path.isdir(directory):
        return False
    marker = _read_json(os.path.join(directory, MARKER_NAME))
    return isinstance(marker, dict) and isinstance(marker.get("spec"), dict)


def carries_our_mark(directory, path):
    """Whether ``directory``, a leftover beside the environment ``path``, is this module's.

    It is when it is a directory (not a link) holding the marker of an environment this module
    built, or the build token naming ``path`` that this module writes into ``<path>.partial``
    when it creates it.
    """
    if os.path.islink(directory) or not os.path.isdir(directory):
        return False
    if built_here(directory):
        return True
    token = _read_json(os.path.join(directory, BUILD_TOKEN_NAME))
    return isinstance(token, dict) and token.get("path") == path


def _empty_dir(directory):
    try:
        return not os.path.islink(directory) and os.path.isdir(directory) and not os.listdir(directory)
    except OSError:
        return False


def start_partial(partial, path):
    """Create ``partial`` for a build of ``path`` with the build token in it (before uv fills it).

    Fails (FileExistsError) when anything is at ``partial``: leftovers are dealt with before.
    """
    os.mkdir(partial, 0o755)
    write_json_atomic(os.path.join(partial, BUILD_TOKEN_NAME), {
        "path": path, "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def switch_into_place(partial, path, rename=os.rename):
    """Move an old environment aside, rename the partial in, then delete the old one.

    Between the two renames ``path`` is missing for a moment; if the second rename fails the
    old environment is renamed back. A run killed in that window leaves ``<path>.old``, which
    the next run puts back (``pending_debris``). Something at ``<path>.old`` that is not this
    module's is never removed: the switch is refused before anything moves.

    Returns warnings: once the partial is in place the switch has happened, and a failure to
    delete the old environment is reported, not raised.
    """
    old = path + ".old"
    had_old = os.path.lexists(path)
    if had_old:
        if os.path.lexists(old):
            if not carries_our_mark(old, path):
                raise SwitchFailed(
                    "%s is in the way of the switch and is not a leftover of this module (no %s nor "
                    "%s in it): it is left alone and nothing was switched. Move it away and run again."
                    % (old, MARKER_NAME, BUILD_TOKEN_NAME))
            try:
                remove_tree(old)
            except OSError as exc:
                raise SwitchFailed("removing the leftover %s before the switch failed (%s); nothing was "
                                   "switched" % (old, exc))
        try:
            rename(path, old)
        except OSError as exc:
            raise SwitchFailed("moving %s aside to %s failed (%s); nothing was switched" % (path, old, exc))
    try:
        rename(partial, path)
    except OSError as exc:
        if had_old:
            rename(old, path)
        raise SwitchFailed(
            "renaming %s to %s failed (%s); the previous environment is back in place" % (partial, path, exc)
        )
    fsync_dir(os.path.dirname(path), quiet=True)
    warnings = []
    if had_old:
        try:
            remove_tree(old)
        except OSError as exc:
            warnings.append("the new environment is in place at %s, but the previous one, moved to %s, "
                            "could not be removed (%s); remove it by hand, or let the next run do it"
                            % (path, old, exc))
    return warnings


def pending_debris(path):
    """What a killed run of this module left: ``[(action, path)]`` with action restore/remove.

    Only leftovers that carry this module's mark (``carries_our_mark``) are listed, and an empty
    ``<path>.partial`` directory (a run killed between creating it and writing its token): it
    holds nothing to lose. ``foreign_debris`` lists the others.
    """
    actions = []
    old = path + ".old"
    if os.path.lexists(old) and carries_our_mark(old, path):
        actions.append(("remove" if os.path.lexists(path) else "restore", old))
    partial = path + ".partial"
    if os.path.lexists(partial) and (carries_our_mark(partial, path) or _empty_dir(partial)):
        actions.append(("remove", partial))
    # a removal killed half way, of any environment beside it (``discard_tree``)
    actions.extend(("remove", trash) for trash in dead_trash(os.path.dirname(os.path.abspath(path))))
    return actions


def foreign_debris(path):
    """``<path>.old`` and ``<path>.partial`` when something is there that is not this module's."""
    ours = [target for _action, target in pending_debris(path)]
    return [target for target in (path + ".old", path + ".partial")
            if os.path.lexists(target) and target not in ours]


def foreign_debris_warning(target):
    return ("%s is not a leftover of this module (it holds neither %s nor %s naming this path): "
            "left alone; move it away if it is not needed" % (target, MARKER_NAME, BUILD_TOKEN_NAME))


def clear_debris(path, actions):
    """Restore or remove what ``pending_debris`` listed; CleanupFailed names what could not be."""
    for action, target in actions:
        try:
            if action == "restore":
                os.rename(target, path)
            elif target.endswith(".partial") and _empty_dir(target):
                os.rmdir(target)
            else:
                remove_tree(target)
        except OSError as exc:
            raise CleanupFailed("%s %s, left by an earlier run, failed (%s): clear it by hand"
                                % ("putting back" if action == "restore" else "removing", target, exc),
                                debris=[target])


# --------------------------------------------------------------------------------------------
# uv's cache directory: used only when it is missing, empty or uv's own, and emptied of what uv
# put there only.

CACHEDIR_TAG = "CACHEDIR.TAG"
CACHEDIR_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
# What uv (0.13) writes at the top of its cache: the tag, .gitignore ("*"), .lock, and buckets
# named <name>-v<N> (wheels-v5, sdists-v10, interpreter-v5, ...); temporary .tmpXXXXXX.
_UV_CACHE_FILES = (CACHEDIR_TAG, ".gitignore", ".lock")
_UV_CACHE_BUCKET = re.compile(r"^(?:[a-z][a-z0-9]*(?:-[a-z0-9]+)*-v[0-9]+|\.tmp[A-Za-z0-9]+)$")


def _names(names, limit=5):
    names = sorted(names)
    more = len(names) - limit
    return ", ".join(names[:limit]) + (" and %d more" % more if more > 0 else "")


def _has_cachedir_tag(directory):
    try:
        with open(os.path.join(directory, CACHEDIR_TAG), "rb") as handle:
            return handle.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE.encode()
    except OSError:
        return False


def cache_dir_problem(cache_dir):
    """None when uv's cache can be ``cache_dir`` and be removed afterwards: the directory is
    missing, empty, or uv's own cache (uv's CACHEDIR.TAG, and nothing at its top that uv does
    not put there). Otherwise what is wrong, in words."""
    if not os.path.lexists(cache_dir):
        return None
    if not os.path.isdir(cache_dir):
        return "it is not a directory"
    try:
        names = os.listdir(cache_dir)
    except OSError as exc:
        return "it cannot be read (%s)" % exc
    if not names:
        return None
    if not _has_cachedir_tag(cache_dir):
        return "it is not empty and not a uv cache (no %s): it holds %s" % (CACHEDIR_TAG, _names(names))
    foreign = [name for name in names if not _uvs(name)]
    if foreign:
        return "besides uv's cache it holds %s, which uv does not put there" % _names(foreign)
    return None


def _bucket_trash(name):
    """Whether ``name`` is what ``clear_uv_cache`` renames one of uv's buckets to before deleting it."""
    match = _TRASH.match(name)
    return bool(match) and bool(_UV_CACHE_BUCKET.match(match.group("name")))


def _uvs(name):
    """Whether ``name``, at the top of a uv cache, is uv's (or one of its buckets on the way out)."""
    return name in _UV_CACHE_FILES or bool(_UV_CACHE_BUCKET.match(name)) or _bucket_trash(name)


def clear_dead_cache_trash(cache_dir):
    """Finish what a killed ``clear_uv_cache`` left in ``cache_dir``: the buckets it had renamed to a trash
    name (whose pid is no live process). uv reads none of them; they are only disk space."""
    for trash in dead_trash(cache_dir):
        if _bucket_trash(os.path.basename(trash)):
            remove_tree(trash)


def clear_uv_cache(cache_dir):
    """Remove what uv put in ``cache_dir`` (its buckets, then its tag files) and the directory
    itself once empty (a link to it stays). Returns the entries left: not uv's, so not removed.

    A directory without uv's tag is not uv's cache: nothing in it is removed.

    Each bucket is renamed to a trash name first (one atomic step, ``discard_tree``), then deleted: a
    run killed half way leaves every bucket whole under its own name, or gone, never a half-deleted one
    that uv would take as its cache and install from without checking its files again. The archives go
    last, after the buckets that point into them. What a killed run left is removed here and before the
    next build (``clear_dead_cache_trash``).
    """
    if not os.path.isdir(cache_dir):
        return []
    names = os.listdir(cache_dir)
    if names and not _has_cachedir_tag(cache_dir):
        return sorted(names)
    foreign = sorted(name for name in names if not _uvs(name))
    buckets = sorted((name for name in names if _UV_CACHE_BUCKET.match(name)),
                     key=lambda name: (name.startswith("archive-"), name))
    for name in buckets:
        discard_tree(os.path.join(cache_dir, name))
    clear_dead_cache_trash(cache_dir)
    if foreign:
        return foreign
    for name in (".gitignore", ".lock", CACHEDIR_TAG):  # the tag last: it says whose the rest is
        if name in names:
            os.unlink(os.path.join(cache_dir, name))
    if not os.path.islink(cache_dir):
        os.rmdir(cache_dir)
    return []
