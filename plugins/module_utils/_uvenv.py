# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The flow behind ``uv_engine_env``: an engine's Python environment, built by uv beside the live
one and switched in only once it is proven.

An environment at ``path`` carries a marker (``.llmfleet-engine.json``) with the spec it was
built for and the sha256 of its lock (``llmfleet-requirements.txt``, every file pinned by hash).
When the wanted spec equals the marker's and the environment is intact, nothing runs but
``uv --version``: no network. Otherwise, holding ``<path>.lock``:

    <path>.partial   uv venv --relocatable
                     uv pip compile --generate-hashes --exclude-newer   (the lock)
                     the lock checked against ``expect``
                     uv pip install --require-hashes --no-deps -r lock
                     the engine imported (or ``verify_command``), GPU compute check
                     marker written
    <path>           the old one moved to <path>.old, the partial renamed in, the old deleted

Any failure deletes the partial environment and keeps the uv cache; the live environment is
never touched before the switch, and the switch puts it back if the rename fails. Debris of a
killed run (``.partial``, ``.old``) is cleared or restored by the next run.

Pure helpers (argv, spec, lock parsing) are small functions so that they can be tested alone;
``EngineEnv`` runs the flow with an injected command runner.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from datetime import datetime, timezone
from urllib.parse import unquote, urlsplit

from ansible_collections.llmfleet.engines.plugins.module_utils import _gpu

MARKER_NAME = ".llmfleet-engine.json"
LOCK_FILE_NAME = "llmfleet-requirements.txt"
MARKER_FORMAT = 1
TAIL_LINES = 6
KILL_GRACE_S = 10.0

# Environment variables that would change what uv resolves or how it checks files. The node's
# configuration must not decide what is installed (UV_NO_CONFIG=1 covers the files; these are
# the variables). Network settings (proxies, certificates, timeouts) are left alone.
RESOLUTION_ENV = (
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_INDEX_STRATEGY",
    "UV_EXCLUDE_NEWER",
    "UV_PRERELEASE",
    "UV_RESOLUTION",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_BUILD_CONSTRAINT",
    "UV_TORCH_BACKEND",
    "UV_NO_BINARY",
    "UV_NO_BINARY_PACKAGE",
    "UV_NO_BUILD",
    "UV_NO_BUILD_PACKAGE",
    "UV_PYTHON",
    "UV_SYSTEM_PYTHON",
    "UV_BREAK_SYSTEM_PACKAGES",
    "UV_REQUIRE_HASHES",
    "UV_VERIFY_HASHES",
    "UV_NO_VERIFY_HASHES",
    "UV_CONFIG_FILE",
    "UV_CUSTOM_COMPILE_COMMAND",
)

PYTHON_PREFERENCES = ("only-managed", "managed", "system", "only-system")
INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")

VERIFY_SNIPPET = (
    "import importlib, json, sys\n"
    "m = importlib.import_module(sys.argv[1])\n"
    "print(json.dumps({'version': getattr(m, '__version__', None),"
    " 'file': getattr(m, '__file__', None)}))\n"
)


# --------------------------------------------------------------------------------------------
# Errors: one class per way the flow fails; the module turns them into fail_json.


class UvEnvError(Exception):
    """Base of every failure of the flow; ``details`` go into the module's result."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.msg = msg
        self.details = details


class OptionError(UvEnvError):
    """An option's value cannot be used."""


class UvUnusable(UvEnvError):
    """The uv binary is missing or does not answer ``--version``."""


class LockBusy(UvEnvError):
    """Another run holds the path's lock longer than lock_timeout."""


class NotEnoughSpace(UvEnvError):
    """Less free space under the path's parent than free_gb."""


class InstallTimeout(UvEnvError):
    """The whole install ran past ``timeout``."""


class UvCommandFailed(UvEnvError):
    """A uv command exited non-zero."""


class VenvFailed(UvCommandFailed):
    """``uv venv`` failed (often: the Python asked for is not available)."""


class ResolveFailed(UvCommandFailed):
    """``uv pip compile`` found no resolution."""


class InstallFailed(UvCommandFailed):
    """``uv pip install`` failed (download, hash mismatch, ...)."""


class LockMismatch(UvEnvError):
    """The lock resolved, but not to what ``expect`` (or the engine's version) asks."""


class VerifyFailed(UvEnvError):
    """The engine does not import, has the wrong version, or verify_command failed."""


class GpuCheckFailed(UvEnvError):
    """The new environment cannot compute on this node's GPU."""


class SwitchFailed(UvEnvError):
    """Renaming the new environment into place failed (the old one is put back)."""


class NotAnEnvironment(UvEnvError):
    """Something other than a Python environment is at path: it is never replaced or removed."""


# --------------------------------------------------------------------------------------------
# Pure helpers.


def normalize_name(name):
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def utc_now():
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def tail(text, lines=TAIL_LINES):
    """The last few non-empty lines of a command's output, joined with `` / ``.

    uv explains a failed resolution over several lines; the last alone rarely says why.
    """
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " / ".join(kept[-lines:]).rstrip(".")


def parse_uv_version(output):
    """``uv 0.13.8 (x86_64-unknown-linux-gnu)`` -> ``0.13.8``; None if it is not uv."""
    match = re.search(r"^uv (\S+)", (output or "").strip())
    return match.group(1) if match else None


def normalize_sha256(value):
    """Lower-case hex; accepts GitHub's ``sha256:<hex>`` form. Raises OptionError."""
    text = (value or "").strip().lower()
    if text.startswith("sha256:"):
        text = text[len("sha256:"):]
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise OptionError(
            "wheel.sha256 must be 64 hex digits (optionally prefixed by 'sha256:'), got %r" % value
        )
    return text


def exclude_newer_package_args(per_package):
    """``{name: timestamp|false}`` -> ``--exclude-newer-package NAME=VALUE`` pairs, sorted."""
    args = []
    for name in sorted(per_package or {}):
        value = per_package[name]
        if value is False or (isinstance(value, str) and value.strip().lower() == "false"):
            rendered = "false"
        elif isinstance(value, str) and value.strip():
            rendered = value.strip()
        else:
            raise OptionError(
                "exclude_newer_package[%s] must be a timestamp (e.g. 2025-10-03T20:10:00Z) or "
                "false, got %r" % (name, value)
            )
        args += ["--exclude-newer-package", "%s=%s" % (name, rendered)]
    return args


def index_args(index_url=None, extra_index_url=None, index_strategy=None):
    """The index options, the same for compile and install."""
    args = []
    if index_url:
        args += ["--index-url", index_url]
    for url in extra_index_url or []:
        args += ["--extra-index-url", url]
    if index_strategy:
        args += ["--index-strategy", index_strategy]
    return args


def engine_requirement(engine, version, wheel=None):
    """The engine's requirement line: a pin, or the wheel's URL pinned by its sha256."""
    if wheel:
        url = wheel["url"].split("#", 1)[0]
        return "%s @ %s#sha256=%s" % (engine, url, normalize_sha256(wheel["sha256"]))
    return "%s==%s" % (engine, version)


def requirement_lines(engine, version, requirements=None, wheel=None):
    """What uv pip compile reads on stdin: the engine first, then the extra requirements."""
    return [engine_requirement(engine, version, wheel)] + [
        r.strip() for r in (requirements or []) if r and r.strip()
    ]


def wanted_spec(params, uv_version):
    """The spec the marker records and a re-run compares: what decides the content."""
    wheel = params.get("wheel")
    return {
        "engine": params["engine"],
        "version": params["version"],
        "build": params.get("build"),
        "requirements": list(params.get("requirements") or []),
        "wheel": (
            {"url": wheel["url"].split("#", 1)[0], "sha256": normalize_sha256(wheel["sha256"])}
            if wheel
            else None
        ),
        "index_url": params.get("index_url"),
        "extra_index_url": list(params.get("extra_index_url") or []),
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


def uv_environ(cache_dir, python_install_dir, python_preference, python_install_mirror=None):
    """The environment every uv command runs with."""
    env = {
        "UV_CACHE_DIR": cache_dir,
        "UV_PYTHON_INSTALL_DIR": python_install_dir,
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_PREFERENCE": python_preference,
        "NO_COLOR": "1",
    }
    if python_install_mirror:
        env["UV_PYTHON_INSTALL_MIRROR"] = python_install_mirror
    return env


def scrub_environ(environ=None):
    """Drop the node's resolution-changing uv variables from this (module) process."""
    environ = os.environ if environ is None else environ
    removed = [name for name in RESOLUTION_ENV if name in environ]
    for name in removed:
        del environ[name]
    return removed


def venv_argv(uv, python, target):
    return [uv, "venv", "--relocatable", "--no-project", "--python", python, target]


def compile_argv(uv, python_bin, lock_path, exclude_newer, per_package=None, indexes=(), header=None):
    argv = [uv, "pip", "compile", "--generate-hashes", "--emit-index-annotation",
            "--exclude-newer", exclude_newer]
    argv += exclude_newer_package_args(per_package)
    argv += list(indexes)
    if header:
        argv += ["--custom-compile-command", header]
    argv += ["--python", python_bin, "--output-file", lock_path, "-"]
    return argv


def install_argv(uv, python_bin, lock_path, indexes=()):
    return [uv, "pip", "install", "--python", python_bin, "--require-hashes", "--no-deps",
            "-r", lock_path] + list(indexes)


def verify_argv(python_bin, import_name):
    return [python_bin, "-I", "-c", VERIFY_SNIPPET, import_name]


def resolve_command(argv, env_dir):
    """A bare program name that the environment's ``bin/`` has is taken from there."""
    argv = list(argv)
    if argv and "/" not in argv[0]:
        candidate = os.path.join(env_dir, "bin", argv[0])
        if os.path.exists(candidate):
            argv[0] = candidate
    return argv


def version_from_url(url):
    """The version in a wheel's or sdist's file name at the end of a URL, or None."""
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if name.endswith(".whl"):
        parts = name[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip", ".tar.bz2"):
        if name.endswith(ext):
            stem = name[: -len(ext)]
            return stem.rsplit("-", 1)[1] if "-" in stem else None
    return None


def local_label(version):
    return version.split("+", 1)[1] if version and "+" in version else None


def versions_match(got, wanted):
    """``0.20.0+cu129`` matches ``0.20.0``; a wanted local label must match exactly."""
    if got is None:
        return False
    if got == wanted:
        return True
    return "+" not in wanted and got.split("+", 1)[0] == wanted


def parse_lock(text):
    """uv's compiled requirements -> ``{normalised name: entry}``.

    entry: ``name`` (as written), ``version``, ``url`` (direct references), ``index`` (from
    ``# from``, with --emit-index-annotation), ``via`` (list), ``hashes`` (list of
    ``sha256:<hex>``).
    """
    packages = {}
    current = None
    in_via = False
    for raw in (text or "").splitlines():
        if not raw.strip():
            continue
        stripped = raw.strip()
        if not raw[0].isspace():
            in_via = False
            current = None
            if stripped.startswith("#") or stripped.startswith("-"):
                continue
            req = stripped.rstrip("\\").strip().split(";", 1)[0].strip()
            if " @ " in req:
                name, url = [part.strip() for part in req.split(" @ ", 1)]
                version = version_from_url(url)
            elif "==" in req:
                name, version = [part.strip() for part in req.split("==", 1)]
                url = None
            else:
                continue
            name = name.split("[", 1)[0].strip()
            current = {"name": name, "version": version, "url": url, "index": None, "via": [],
                       "hashes": []}
            packages[normalize_name(name)] = current
            continue
        if current is None:
            continue
        if stripped.startswith("--hash="):
            current["hashes"].append(stripped[len("--hash="):].rstrip("\\").strip())
            in_via = False
        elif stripped.startswith("# via"):
            rest = stripped[len("# via"):].strip()
            if rest:
                current["via"].append(rest)
                in_via = False
            else:
                in_via = True
        elif stripped.startswith("# from "):
            current["index"] = stripped[len("# from "):].strip()
            in_via = False
        elif in_via and stripped.startswith("#"):
            current["via"].append(stripped.lstrip("#").strip())
    return packages


def lock_versions(packages):
    return {entry["name"]: entry["version"] for _name, entry in sorted(packages.items())}


def describe_package(entry):
    """``torch 2.8.0 from https://.../simple (via vllm)``."""
    where = entry.get("index") or entry.get("url") or "an unknown source"
    text = "%s %s from %s" % (entry["name"], entry["version"], where)
    if entry.get("via"):
        text += " (via %s)" % ", ".join(entry["via"])
    return text


def check_expect(packages, expect):
    """Problems with the lock against ``expect`` (``{name: "+label" | "exact version"}``)."""
    problems = []
    for name in sorted(expect or {}):
        wanted = str(expect[name]).strip()
        entry = packages.get(normalize_name(name))
        if entry is None:
            problems.append("%s is not in the lock at all (expected %s)" % (name, wanted))
            continue
        got = entry["version"] or ""
        if wanted.startswith("+"):
            ok = local_label(got) == wanted[1:]
            want_text = "the local label %s" % wanted
        else:
            ok = got == wanted
            want_text = "version %s" % wanted
        if not ok:
            problems.append("resolved %s, but expect wants %s" % (describe_package(entry), want_text))
    return problems


def check_engine(packages, engine, version, wheel=None):
    """Problems with the engine's entry in the lock (its version, the wheel's pinned hash)."""
    entry = packages.get(normalize_name(engine))
    if entry is None:
        return ["%s is not in the lock" % engine]
    problems = []
    if not versions_match(entry["version"], version):
        problems.append("resolved %s, not %s" % (describe_package(entry), version))
    if wheel:
        sha = normalize_sha256(wheel["sha256"])
        if entry["url"] is None or entry["url"].split("#", 1)[0] != wheel["url"].split("#", 1)[0]:
            problems.append("resolved %s, not the wheel %s" % (describe_package(entry), wheel["url"]))
        elif entry["hashes"] and "sha256:%s" % sha not in entry["hashes"]:
            problems.append(
                "the lock pins %s for %s but the wheel's published sha256 is %s: the file "
                "downloaded is not the one published" % (", ".join(entry["hashes"]), entry["name"], sha)
            )
    return problems


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


# --------------------------------------------------------------------------------------------
# Locks, progress, commands.


class PathLock:
    """An flock on ``<path>.lock``, waited for at most ``timeout`` seconds.

    After the lock is taken, the file at the lock path must still be the one locked (a run
    removing the environment may have unlinked it); otherwise it is opened again. With
    ``create=False`` (check mode) a missing lock file means there is nothing to wait for.
    """

    def __init__(self, lock_path, timeout, shared=False, create=True, describe_holder=None,
                 sleep=time.sleep, clock=time.monotonic):
        self.lock_path = lock_path
        self.timeout = timeout
        self.shared = shared
        self.create = create
        self.describe_holder = describe_holder
        self.fd = None
        self._sleep = sleep
        self._clock = clock

    def acquire(self):
        started = self._clock()
        deadline = started + self.timeout
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        while True:
            try:
                if self.create:
                    fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                else:
                    fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                if self.create:
                    raise
                return False
            delay = 0.05
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        os.close(fd)
                        raise
                    if self._clock() >= deadline:
                        os.close(fd)
                        holder = self.describe_holder() if self.describe_holder else ""
                        raise LockBusy(
                            "another run holds %s%s; waited %d s (lock_timeout). Let it finish, or "
                            "raise lock_timeout." % (self.lock_path, holder, self.timeout)
                        )
                    self._sleep(delay)
                    delay = min(delay * 2, 1.0)
            try:
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                self.waited = self._clock() - started
                return True
            os.close(fd)
            if not self.create:
                return False

    def release(self, unlink=False):
        if self.fd is None:
            return
        if unlink:
            try:
                os.unlink(self.lock_path)
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class CommandResult:
    def __init__(self, rc, out, err, timed_out=False):
        self.rc = rc
        self.out = out or ""
        self.err = err or ""
        self.timed_out = timed_out

    @property
    def output(self):
        return (self.out + "\n" + self.err).strip()


def _stop(proc, grace=KILL_GRACE_S):
    try:
        proc.terminate()
        proc.wait(grace)
    except Exception:  # pylint: disable=broad-except
        try:
            proc.kill()
        except OSError:
            pass


class ModuleRunner:
    """Runs argv lists with ``module.run_command``, killing a command at its time limit.

    ``keep_fds`` (the path's lock) are passed to every command: a uv left running after this
    process is killed still holds the lock, so the next run cannot clear a partial
    environment that is still being written.
    """

    def __init__(self, module, keep_fds=()):
        self.module = module
        self.keep_fds = list(keep_fds)

    def __call__(self, argv, data=None, env=None, cwd=None, timeout=None):
        timers = []
        state = {"timed_out": False}

        def arm(proc):
            if timeout is None:
                return

            def expire():
                state["timed_out"] = True
                _stop(proc)

            timer = threading.Timer(max(float(timeout), 0.01), expire)
            timer.daemon = True
            timer.start()
            timers.append(timer)

        kwargs = {"environ_update": env or {}, "cwd": cwd, "expand_user_and_vars": False,
                  "before_communicate_callback": arm}
        if data is not None:
            kwargs["data"] = data
        if self.keep_fds:
            kwargs["pass_fds"] = self.keep_fds
        try:
            rc, out, err = self.module.run_command(argv, **kwargs)
        finally:
            for timer in timers:
                timer.cancel()
        return CommandResult(rc, out, err, state["timed_out"])


class Progress:
    """``<path>.progress.json``: the current step and when it started, for whoever looks."""

    def __init__(self, progress_path, about):
        self.progress_path = progress_path
        self.data = dict(about, pid=os.getpid(), started=utc_now(), step=None, step_started=None,
                         done=[])

    def step(self, name, done):
        self.data.update(step=name, step_started=utc_now(), done=list(done))
        try:
            write_json_atomic(self.progress_path, self.data)
        except OSError:
            pass

    def remove(self):
        try:
            os.unlink(self.progress_path)
        except OSError:
            pass


def read_progress(progress_path):
    try:
        with open(progress_path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------
# GPU: the compute check belongs to _gpu.py; this is the one place the flow calls it.


def gpu_step(run, python_bin, env, nvidia_smi, timeout, engine="vllm"):
    """The GPU compute check (``_gpu``) in the new environment, as a dict.

    ``{"skipped": True, "reason": ...}`` on a node without a driver; the check's result when
    it passes; GpuCheckFailed (with the result and its classification) when it does not.
    """
    def run_command(argv, environ_update=None):
        res = run(argv, env=environ_update)
        return res.rc, res.out, res.err

    try:
        facts = _gpu.gather_facts(run_command, nvidia_smi, timeout=30)
    except _gpu.GpuError as exc:
        raise GpuCheckFailed("asking the driver for the node's GPUs before the GPU check failed: %s" % exc)
    if not facts.get("driver_version"):
        return {"skipped": True,
                "reason": "no NVIDIA driver on this node (%s)" % (facts.get("driver_error") or "nvidia-smi found none")}
    result = _gpu.compute_check(run_command, python_bin, timeout, env=env, engine=engine)
    if not result.get("ok"):
        raise GpuCheckFailed(_gpu.failure_message(result), gpu=result,
                             classification=result.get("classification"), hint=result.get("hint"))
    result["driver_version"] = facts.get("driver_version")
    return result


# --------------------------------------------------------------------------------------------
# The flow.


class EngineEnv:
    """One engine environment at ``params['path']``.

    ``run`` is a command runner (``ModuleRunner`` or a fake): ``run(argv, data=None, env=None,
    cwd=None, timeout=None) -> CommandResult``. ``runner_factory(keep_fds)`` makes one that
    passes the lock to the commands it starts.
    """

    def __init__(self, params, runner_factory, uv_bin, check_mode=False, clock=time.monotonic,
                 gpu=None):
        self.p = params
        self.path = os.path.abspath(params["path"]).rstrip("/") or "/"
        self.parent = os.path.dirname(self.path)
        self.partial = self.path + ".partial"
        self.lock_path = self.path + ".lock"
        self.progress_path = self.path + ".progress.json"
        self.cache_dir = params.get("cache_dir") or os.path.join(self.parent, ".uv-cache")
        self.python_install_dir = params.get("python_install_dir") or os.path.join(
            self.parent, ".uv-python")
        self.runner_factory = runner_factory
        self.run = runner_factory(())
        self.uv = uv_bin
        self.check_mode = check_mode
        self.clock = clock
        self.gpu = gpu or gpu_step
        self.steps = []

    # -- pieces ------------------------------------------------------------------------------

    def uv_env(self):
        return uv_environ(self.cache_dir, self.python_install_dir, self.p["python_preference"],
                          self.p.get("python_install_mirror"))

    def uv_version(self):
        if not self.uv or not os.path.isfile(self.uv) or not os.access(self.uv, os.X_OK):
            raise UvUnusable("the uv binary %s does not exist or is not executable; install uv there, "
                             "or set the uv option to it" % self.uv)
        result = self.run([self.uv, "--version"], env=self.uv_env(), timeout=60)
        version = parse_uv_version(result.out)
        if result.rc != 0 or version is None:
            raise UvUnusable(
                "%s --version did not answer like uv (rc %s): %s; set the uv option to the uv "
                "binary" % (self.uv, result.rc, tail(result.output) or "no output")
            )
        return version

    def _holder(self):
        data = read_progress(self.progress_path)
        if not data:
            return ""
        return " (pid %s, installing %s %s: step %s since %s)" % (
            data.get("pid"), data.get("engine"), data.get("version"), data.get("step"),
            data.get("step_started"))

    def _lock(self, shared=False, create=True):
        return PathLock(self.lock_path, self.p["lock_timeout"], shared=shared, create=create,
                        describe_holder=self._holder)

    def _result(self, changed, marker, lock_entries, msg, **extra):
        lock = None
        if marker:
            lock = {"path": os.path.join(self.path, LOCK_FILE_NAME),
                    "sha256": (marker.get("lock") or {}).get("sha256"),
                    "packages": lock_versions(lock_entries or {})}
        result = {"changed": changed, "path": self.path, "marker": marker, "lock": lock,
                  "steps": self.steps, "gpu": (marker or {}).get("gpu"), "msg": msg}
        result.update(extra)
        return result

    def _read_lock_entries(self, env_dir):
        try:
            with open(os.path.join(env_dir, LOCK_FILE_NAME), encoding="utf-8") as handle:
                return parse_lock(handle.read())
        except OSError:
            return {}

    def _label(self):
        build = self.p.get("build")
        return "%s %s%s" % (self.p["engine"], self.p["version"], " (%s)" % build if build else "")

    # -- state=present -----------------------------------------------------------------------

    def present(self, diff=False):
        t0 = self.clock()
        uv_version = self.uv_version()
        wanted = wanted_spec(self.p, uv_version)
        if not self.check_mode:
            os.makedirs(self.parent, exist_ok=True)
        lock = self._lock(shared=self.check_mode, create=not self.check_mode)
        lock.acquire()
        try:
            debris = pending_debris(self.path)
            restore = [d for d in debris if d[0] == "restore"]
            if restore and not self.check_mode:
                clear_debris(self.path, restore)
                debris = [d for d in debris if d[0] != "restore"]
            # in check mode, judge the environment a restore would bring back
            state = inspect_env(restore[0][1] if restore and self.check_mode else self.path)
            refuse_foreign(self.path, "replace")
            reasons = rebuild_reasons(state, wanted, self.p.get("force"))
            before = state["marker"] if state["exists"] else None
            self.steps.append({"name": "check", "seconds": round(self.clock() - t0, 3)})
            if not reasons:
                entries = self._read_lock_entries(self.path)
                problems = check_expect(entries, self.p.get("expect"))
                if problems:
                    raise LockMismatch(
                        "the environment at %s is up to date with the spec, but its lock does not "
                        "meet expect: %s. Set force: true to resolve again."
                        % (self.path, "; ".join(problems)))
                changed = bool(debris)
                if debris and not self.check_mode:
                    clear_debris(self.path, debris)
                return self._result(
                    changed, state["marker"], entries,
                    "%s is up to date at %s%s" % (self._label(), self.path, "; cleared %s" % ", ".join(
                        t for _action, t in debris) if debris else ""),
                    debris=[t for _action, t in debris],
                    diff=self._diff(before, state["marker"]) if diff else None)
            if self.check_mode:
                after = self._predicted_marker(wanted)
                return self._result(
                    True, before, self._read_lock_entries(self.path) if before else {},
                    "would build %s at %s: %s" % (self._label(), self.path, "; ".join(reasons)),
                    reasons=reasons, debris=[t for _action, t in debris],
                    diff=self._diff(before, after) if diff else None)
            clear_debris(self.path, debris)
            marker, entries = self._build(wanted, lock.fd)
            return self._result(
                True, marker, entries,
                "built %s at %s: %s" % (self._label(), self.path, "; ".join(reasons)),
                reasons=reasons, debris=[t for _action, t in debris],
                diff=self._diff(before, marker) if diff else None)
        finally:
            lock.release()

    def _predicted_marker(self, wanted):
        return {"format": MARKER_FORMAT, "spec": wanted,
                "lock": {"file": LOCK_FILE_NAME, "sha256": "(known once resolved)"},
                "installed_at": "(at install)"}

    @staticmethod
    def _diff(before, after):
        return {"before": marker_json(before), "after": marker_json(after),
                "before_header": MARKER_NAME + " (before)", "after_header": MARKER_NAME + " (after)"}

    def _build(self, wanted, lock_fd):
        p = self.p
        deadline = self.clock() + p["timeout"]
        progress = Progress(self.progress_path, {"path": self.path, "engine": p["engine"],
                                                 "version": p["version"], "build": p.get("build")})
        cache_lock = None
        ok = False
        try:
            os.makedirs(os.path.dirname(self.cache_dir) or "/", exist_ok=True)
            cache_lock = PathLock(self.cache_dir + ".lock", p["lock_timeout"], shared=True)
            cache_lock.acquire()
            run = self.runner_factory((lock_fd, cache_lock.fd))
            env = self.uv_env()
            python_bin = os.path.join(self.partial, "bin", "python")
            lock_file = os.path.join(self.partial, LOCK_FILE_NAME)
            indexes = index_args(p.get("index_url"), p.get("extra_index_url"), p.get("index_strategy"))
            reqs = requirement_lines(p["engine"], p["version"], p.get("requirements"), p.get("wheel"))

            def timed(name):
                return _Step(self, progress, name)

            def remaining(step):
                left = deadline - self.clock()
                if left <= 0:
                    raise InstallTimeout(self._timeout_msg(step))
                return left

            def uv(step, argv, error, what, data=None):
                res = run(argv, data=data, env=env, cwd=self.parent, timeout=remaining(step))
                if res.timed_out:
                    raise InstallTimeout(self._timeout_msg(step), uv_output=tail(res.output))
                if res.rc != 0:
                    raise error("%s failed (uv exit %s): %s. The environment at %s is unchanged; the uv "
                                "cache is kept." % (what, res.rc, tail(res.output), self.path),
                                uv_output=tail(res.output), cmd=argv)
                return res

            with timed("prepare"):
                if p.get("free_gb"):
                    free = available_gb(self.parent)
                    if free < p["free_gb"]:
                        raise NotEnoughSpace(
                            "installing %s needs about %s GB free under %s and there are %.1f GB "
                            "available; free space there, or lower free_gb"
                            % (self._label(), _num(p["free_gb"]), self.parent, free))
            with timed("venv"):
                uv("venv", venv_argv(self.uv, p["python"], self.partial), VenvFailed,
                   "creating a Python %s environment in %s (python_preference %s)"
                   % (p["python"], self.partial, p["python_preference"]))
            with timed("resolve"):
                header = "llmfleet.engines.uv_engine_env: %s, as of %s" % (self._label(), p["exclude_newer"])
                uv("resolve",
                   compile_argv(self.uv, python_bin, lock_file, p["exclude_newer"],
                                p.get("exclude_newer_package"), indexes, header),
                   ResolveFailed,
                   "resolving %s as of %s" % (", ".join(reqs), p["exclude_newer"]),
                   data="\n".join(reqs))
                with open(lock_file, encoding="utf-8") as handle:
                    entries = parse_lock(handle.read())
                problems = check_engine(entries, p["engine"], p["version"], p.get("wheel"))
                unmet = check_expect(entries, p.get("expect"))
                if problems or unmet:
                    hint = ""
                    if unmet:
                        hint = (" If the index that should supply it publishes no upload times, "
                                "exclude_newer drops its files: lift the cut-off for that package "
                                "with exclude_newer_package (e.g. {torch: false}).")
                    raise LockMismatch(
                        "the lock for %s is not what was asked: %s. Nothing was installed; the "
                        "environment at %s is unchanged.%s"
                        % (self._label(), "; ".join(problems + unmet), self.path, hint),
                        problems=problems + unmet, packages=lock_versions(entries))
            with timed("install"):
                uv("install", install_argv(self.uv, python_bin, lock_file, indexes), InstallFailed,
                   "installing the lock of %s (%d packages) into %s" % (self._label(), len(entries), self.partial))
            with timed("verify"):
                verified = self._verify(run, python_bin, remaining("verify"))
            gpu_result = {"skipped": True, "reason": "gpu_check is false"}
            if p.get("gpu_check"):
                with timed("gpu"):
                    engine = "vllm" if normalize_name(p["engine"]) == "vllm" else "none"
                    try:
                        gpu_result = self.gpu(run, python_bin, self._check_env(), p.get("nvidia_smi"),
                                              min(remaining("gpu"), 600), engine)
                    except GpuCheckFailed as exc:
                        exc.msg = "%s is installed in %s but is not switched in: %s. The environment at %s is unchanged." % (
                            self._label(), self.partial, exc.msg, self.path)
                        raise
            with timed("marker"):
                marker = {
                    "format": MARKER_FORMAT,
                    "spec": wanted,
                    "lock": {"file": LOCK_FILE_NAME, "sha256": file_sha256(lock_file),
                             "packages": len(entries)},
                    "installed_at": utc_now(),
                    "verified": verified,
                    "gpu": gpu_result,
                }
                write_json_atomic(os.path.join(self.partial, MARKER_NAME), marker)
            with timed("switch"):
                switch_into_place(self.partial, self.path)
            ok = True
        finally:
            if not ok:
                remove_tree(self.partial)
            progress.remove()
            if cache_lock is not None:
                if ok and not p.get("keep_cache"):
                    self._drop_cache(cache_lock)
                cache_lock.release()
        return marker, entries

    def _drop_cache(self, cache_lock):
        """Delete the uv cache unless another install is using it (its shared lock)."""
        try:
            fcntl.flock(cache_lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        remove_tree(self.cache_dir)
        try:
            os.unlink(cache_lock.lock_path)
        except OSError:
            pass
        return True

    def _timeout_msg(self, step):
        return ("installing %s into %s did not finish within timeout (%s s); stopped during "
                "step %s. The uv cache is kept, so a re-run goes on from what was downloaded; "
                "raise timeout on a slow network." % (self._label(), self.path, self.p["timeout"], step))

    def _check_env(self):
        env = {"VIRTUAL_ENV": self.partial,
               "PATH": os.path.join(self.partial, "bin") + os.pathsep + os.environ.get("PATH", "")}
        env.update({k: str(v) for k, v in (self.p.get("env") or {}).items()})
        return env

    def _verify(self, run, python_bin, budget):
        p = self.p
        if p.get("verify_command"):
            argv = resolve_command(p["verify_command"], self.partial)
            res = run(argv, env=self._check_env(), cwd=self.partial, timeout=budget)
            if res.timed_out or res.rc != 0:
                raise VerifyFailed(
                    "%s is installed in %s but verify_command %s %s: %s. The environment at %s "
                    "is unchanged." % (self._label(), self.partial, " ".join(p["verify_command"]),
                                       "timed out" if res.timed_out else "exited %s" % res.rc,
                                       tail(res.output) or "no output", self.path),
                    verify_output=tail(res.output))
            return {"command": list(p["verify_command"]), "rc": res.rc, "output": tail(res.out, 3)}
        import_name = p.get("import_name") or p["engine"].replace("-", "_")
        res = run(verify_argv(python_bin, import_name), env=self._check_env(), cwd=self.partial,
                  timeout=budget)
        info = None
        if res.rc == 0 and not res.timed_out:
            for line in reversed(res.out.strip().splitlines()):
                try:
                    info = json.loads(line)
                    break
                except ValueError:
                    continue
        if not isinstance(info, dict):
            raise VerifyFailed(
                "%s is installed in %s but 'import %s' fails there: %s. The environment at %s is "
                "unchanged." % (self._label(), self.partial, import_name,
                                tail(res.output) or "no output", self.path),
                verify_output=tail(res.output))
        got = info.get("version")
        if not versions_match(got, p["version"]):
            raise VerifyFailed(
                "%s.__version__ in the new environment is %r, not %s; the environment at %s is "
                "unchanged." % (import_name, got, p["version"], self.path))
        where = os.path.realpath(info["file"]) if info.get("file") else None
        if where and not where.startswith(os.path.realpath(self.partial) + os.sep):
            raise VerifyFailed(
                "'import %s' in the new environment loads %s, which is outside it: something on "
                "the interpreter's path shadows the installed engine." % (import_name, where))
        return {"import": import_name, "version": got}

    # -- state=absent ------------------------------------------------------------------------

    def absent(self, diff=False):
        refuse_foreign(self.path, "remove")
        targets = [self.path, self.partial, self.path + ".old"]
        present = [t for t in targets if os.path.lexists(t)]
        before = inspect_env(self.path)["marker"] if os.path.lexists(self.path) else None
        result = {"changed": bool(present), "path": self.path, "marker": None, "lock": None,
                  "steps": self.steps, "gpu": None, "removed": present,
                  "msg": ("would remove %s" if self.check_mode else "removed %s") % ", ".join(present)
                  if present else "nothing at %s" % self.path}
        if diff:
            result["diff"] = self._diff(before, None)
        if self.check_mode or not present and not os.path.lexists(self.lock_path):
            return result
        if not os.path.isdir(self.parent):
            return result
        lock = self._lock()
        lock.acquire()
        unlink = False
        try:
            present = [t for t in targets if os.path.lexists(t)]
            for target in present:
                remove_tree(target)
            try:
                os.unlink(self.progress_path)
            except OSError:
                pass
            result.update(changed=bool(present), removed=present)
            unlink = True
        finally:
            lock.release(unlink=unlink)
        return result


class _Step:
    """Times one step, announces it in the progress file, appends it to ``steps``."""

    def __init__(self, flow, progress, name):
        self.flow = flow
        self.progress = progress
        self.name = name

    def __enter__(self):
        self.start = self.flow.clock()
        self.progress.step(self.name, [s["name"] for s in self.flow.steps])
        return self

    def __exit__(self, exc_type, exc, tb):
        self.flow.steps.append({"name": self.name, "seconds": round(self.flow.clock() - self.start, 3)})
        if exc is not None and isinstance(exc, UvEnvError):
            exc.details.setdefault("failed_step", self.name)
        return False


def _num(value):
    """1000000.0 -> ``1000000``, 2.5 -> ``2.5`` (no exponent)."""
    value = float(value)
    return str(int(value)) if value.is_integer() else ("%.3f" % value).rstrip("0")
