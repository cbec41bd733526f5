# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The flow behind ``uv_fleet_lock``: the lock of a group of nodes, compiled once on the controller.

    the privilege line: uv resolved to an absolute path (a bare name on PATH) and judged with its
        real path (``_trust.resolve_program``); the lock's directory, <dest>, <dest>.json, the
        pylock, the cache and what it holds changeable by no other user (``_trust``), else refused
        before anything runs
    uv --version (the path judged, never the bare name)
    <dest>.json says the same inputs, <dest> (and the pylock) unchanged   -> nothing to do
    uv pip compile --generate-hashes --no-build --exclude-newer ... --python-version X.Y
        --python-platform TRIPLE [indexes] -> a private directory (mkdtemp) beside <dest>
    the lock checked: every line pinned and hashed, the engine at its version, ``expect``
    uv pip compile ... --format pylock.toml <the checked lock> -> pylock.<name>.toml (same pins)
    each written from what was checked to a mkstemp file beside its target (O_EXCL, a name nobody
    can guess), fsync'd, chmod'd through its descriptor, renamed into place; <dest>.json last

Whoever can change the lock's directory, the lock or its record decides what root installs on
every node (the nodes take the lock's text as it is), and whoever can change the uv binary runs as
this user: so the lock is not compiled, nor said to be up to date, from such a place.

The same requirement lines as a node's own resolution (``_uvcmd.requirement_lines``), the same
index options and credentials handling (credentials reach uv through its environment only), the
same checks as a lock given to ``uv_engine_env`` (``_uvlock``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import (
    InstallTimeout, LockInvalid, LockMismatch, OptionError, ResolveFailed, UvUnusable)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import write_atomic
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import last_lines
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import (
    owner_name, resolve_program, trusted_uids, untrusted_component, untrusted_content)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import (
    check_credential_transport, check_requirement_inputs, check_wheel_credentials, exclude_newer_package_args, fleet_compile_argv, fleet_environ, index_args,
    index_credentials, no_wheel, normalize_sha256, omitted_packages, param_secrets, parse_uv_version, requirement_lines)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._kernels import (
    flashinfer_version, kernel_exclude_newer, kernel_extra_index, kernel_failure, kernel_lines, kernel_problems,
    kernels_wanted)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import redact, strip_userinfo
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvlock import (
    check_engine, check_engine_file, check_expect, check_omitted, engine_file_problems, engine_file_warning,
    lock_text_problems, lock_versions, parse_lock, pin_lock_file, text_sha256)

STATE_FORMAT = 1
_PYTHON_VERSION = re.compile(r"3\.[0-9]+(?:\.[0-9]+)?")
_PLATFORM = re.compile(r"[a-z0-9_]+(?:-[a-z0-9_.]+)*")


def pylock_path(dest):
    """``locks/vllm-0.20.0-x86_64.txt`` -> ``locks/pylock.vllm-0_20_0-x86_64.toml``: PEP 751 (and
    uv) take only ``pylock.toml`` or ``pylock.<name>.toml`` with no dot in the name."""
    stem = os.path.basename(dest)
    if stem.endswith(".txt"):
        stem = stem[:-4]
    name = re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "lock"
    return os.path.join(os.path.dirname(dest), "pylock.%s.toml" % name)


def _sha256_of_file(path):
    try:
        with open(path, "rb") as handle:
            return text_sha256(handle.read().decode("utf-8", "replace"))
    except OSError:
        return None


class FleetLock:
    """The lock at ``params['dest']``; ``run`` is a command runner (``_proc.Runner()`` or a fake).
    ``uv_bin``: the uv option as given (a path, or a bare name looked up on PATH); ``self.uv`` is
    the absolute path it resolves to, judged, once ``check_privilege_line`` has run."""

    def __init__(self, params, run, uv_bin, check_mode=False, clock=time.monotonic, trusted=None):
        self.p = params
        self.run = run
        self.uv_value = uv_bin or "uv"
        self.uv = None
        self.check_mode = check_mode
        self.clock = clock
        self.dest = os.path.abspath(params["dest"])
        self.state_path = self.dest + ".json"
        self.pylock = pylock_path(self.dest) if params.get("pylock") else None
        self.secrets = param_secrets(params)
        self.cmd = None
        self.omit = []
        self.kernels = None
        # what the module warns (engine_file: the engine pinned to one late file)
        self.warnings = []
        # who may own what decides the lock (_trust): root, and the user running the module
        self.trusted = trusted_uids() if trusted is None else frozenset(trusted)

    # -- pieces ------------------------------------------------------------------------------

    def label(self):
        p = self.p
        return "%s %s for %s, Python %s" % (p["engine"], p["version"], p["python_platform"], p["python_version"])

    def validate(self):
        p = self.p
        if not _PYTHON_VERSION.fullmatch(p["python_version"] or ""):
            raise OptionError("python_version must be the nodes' Python as X.Y (for example 3.12), got %r"
                              % p["python_version"])
        if not _PLATFORM.fullmatch(p["python_platform"] or ""):
            raise OptionError("python_platform must be one of uv's target triples (for example "
                              "x86_64-manylinux_2_28 or aarch64-manylinux_2_28), got %r" % p["python_platform"])
        if os.path.isdir(self.dest):
            raise OptionError("dest %s is a directory; give the lock file's path (for example %s)"
                              % (self.dest, os.path.join(self.dest, "vllm.txt")))
        exclude_newer_package_args(p.get("exclude_newer_package"))
        # before uv runs (even its --version, whose environment holds the credentials)
        check_credential_transport(p)
        self.omit = omitted_packages(p["engine"], p.get("omit_packages"))
        self.kernels = kernels_wanted(p)
        check_requirement_inputs(p["engine"], p["version"], p.get("requirements"), p.get("wheel"), where=(
            "the caller: in the engine_node role, the wheel URL is the fleet cache's listing (devpi_wheel) or "
            "GitHub's release assets (github_digest), an upstream's word"))
        if p.get("wheel"):
            normalize_sha256(p["wheel"]["sha256"])
            check_wheel_credentials(p["wheel"]["url"], p.get("index_url"), p.get("extra_index_url"))
        check_engine_file(p.get("engine_file"), p.get("wheel"))

    def places(self):
        """``(option, path, what)`` of everything that decides the lock or runs: refused when another
        user could change it (``check_privilege_line``)."""
        places = [("dest", os.path.dirname(self.dest), "the directory of the lock, where it is written and renamed"),
                  ("dest", self.dest, "the lock every node of the group installs from, as root"),
                  ("dest", self.state_path, "the record of the lock's inputs and sha256, which says it is up to date")]
        if self.pylock:
            places.append(("pylock", self.pylock, "the lock in PEP 751 form"))
        if self.p.get("cache_dir"):
            places.append(("cache_dir", self.p["cache_dir"], "uv's cache, from which the lock's hashes may come"))
        return places

    def check_privilege_line(self, only=None):
        """Refuse (OptionError naming the path, its owner and mode) when another user could change the
        lock's directory, the lock, its record, the pylock, the uv binary or its cache (``_trust``): what
        root installs on every node, and what this user runs. uv is resolved here, once: a bare name
        on PATH becomes the absolute path that is judged and run (``_trust.resolve_program``)."""
        if only is None:
            self.uv = resolve_program("uv", self.uv_value, "the uv binary uv_fleet_lock runs as %s"
                                      % owner_name(os.geteuid()), uids=self.trusted)
        for option, place, what in self.places():
            if not place or (only is not None and place != only):
                continue
            problem = untrusted_component(place, self.trusted)
            if problem:
                raise OptionError(
                    "%s %s cannot be trusted: uv_fleet_lock, as %s, uses it as %s, and %s. Every directory on its "
                    "path must belong to %s and be writable by no one else: %s. Nothing was done."
                    % (option, place, owner_name(os.geteuid()), what, problem.describe(),
                       " or ".join(owner_name(uid) for uid in sorted(self.trusted)), problem.fix),
                    untrusted=dict(problem.as_dict(), option=option, path=place))
        cache = self.p.get("cache_dir")
        if only is None and cache:
            # uv takes what it finds unpacked in its cache (index pages, metadata) as it is
            problem = untrusted_content(cache, self.trusted)
            if problem:
                raise OptionError(
                    "cache_dir %s cannot be trusted: uv_fleet_lock, as %s, resolves the lock with what it holds, and "
                    "%s. Remove the cache, it is only a cache (%s), and find who wrote there. Nothing was done."
                    % (cache, owner_name(os.geteuid()), problem.describe(), problem.fix),
                    untrusted=dict(problem.as_dict(), option="cache_dir", path=cache))

    def env(self):
        credentials = index_credentials(self.p.get("index_url"), kernel_extra_index(
            self.p.get("extra_index_url"), self.p.get("kernels_index_url")))
        # no cache_dir: no cache at all (uv's default one, under XDG_CACHE_HOME or ~/.cache, is not
        # judged, and another user may have made it)
        return fleet_environ(self.p.get("cache_dir"), credentials)

    def uv_version(self):
        result = self.run([self.uv, "--version"], env=self.env(), timeout=60)
        version = parse_uv_version(result.out)
        if result.rc != 0 or version is None:
            raise UvUnusable("%s --version did not answer like uv (rc %s): %s; set the uv option to the uv binary"
                             % (self.uv, result.rc, last_lines(result.output) or "no output"))
        return version

    def inputs(self, uv_version):
        """What decides the lock, recorded in ``<dest>.json``: URLs without credentials."""
        p = self.p
        wheel = p.get("wheel")
        inputs = {
            "engine": p["engine"],
            "version": p["version"],
            "requirements": [r.strip() for r in p.get("requirements") or [] if r and r.strip()],
            "wheel": ({"url": strip_userinfo(wheel["url"].split("#", 1)[0]), "sha256": normalize_sha256(wheel["sha256"])}
                      if wheel else None),
            "index_url": strip_userinfo(p.get("index_url")),
            "extra_index_url": [strip_userinfo(u) for u in p.get("extra_index_url") or []],
            "index_strategy": p.get("index_strategy"),
            "exclude_newer": p["exclude_newer"],
            "exclude_newer_package": {
                k: (False if v is False or str(v).lower() == "false" else str(v))
                for k, v in sorted((p.get("exclude_newer_package") or {}).items())},
            "python_version": p["python_version"],
            "python_platform": p["python_platform"],
            "pylock": bool(p.get("pylock")),
            "uv": uv_version,
        }
        # recorded only when set: a lock compiled before these options existed stays up to date
        if self.omit:
            inputs["omit_packages"] = list(self.omit)
        if self.kernels:
            inputs["kernels"] = dict(self.kernels)
        if p.get("engine_file"):
            inputs["engine_file"] = {"filename": p["engine_file"]["filename"],
                                     "sha256": normalize_sha256(p["engine_file"]["sha256"])}
        return inputs

    def recorded(self):
        try:
            with open(self.state_path, encoding="utf-8") as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def reasons(self, wanted, state):
        """Why the lock must be compiled; empty when ``dest`` is what these inputs compiled."""
        if self.p.get("force"):
            return ["force is set"]
        if not os.path.isfile(self.dest):
            return ["no lock at %s" % self.dest]
        if state is None:
            return ["%s records no inputs" % self.state_path]
        if state.get("inputs") != wanted:
            old = state.get("inputs") or {}
            changed = sorted(k for k in set(old) | set(wanted) if old.get(k) != wanted.get(k))
            return ["the inputs changed: %s" % ", ".join(changed)]
        if _sha256_of_file(self.dest) != state.get("lock_sha256"):
            return ["%s was changed since it was compiled" % self.dest]
        if self.pylock and _sha256_of_file(self.pylock) != state.get("pylock_sha256"):
            return ["%s is missing or was changed since it was compiled" % self.pylock]
        return []

    def check(self, text, after):
        """The checks of a lock given to uv_engine_env: lines, engine (version, wheel), expect."""
        problems = lock_text_problems(text)
        if problems:
            raise LockInvalid("the lock compiled for %s cannot be installed from without resolving: %s. %s"
                              % (self.label(), "; ".join(problems), after), problems=problems)
        entries = parse_lock(text)
        wheel = self.p.get("wheel")
        problems = check_engine(entries, self.p["engine"], self.p["version"], dict(
            wheel, url=strip_userinfo(wheel["url"].split("#", 1)[0])) if wheel else None)
        problems += check_expect(entries, self.p.get("expect"))
        problems += check_omitted(entries, self.omit)
        problems += engine_file_problems(entries, self.p["engine"], self.p.get("engine_file"))
        if problems:
            raise LockMismatch("the lock compiled for %s is not what was asked: %s. %s"
                               % (self.label(), "; ".join(problems), after),
                               problems=problems, packages=lock_versions(entries))
        return entries

    def _argv(self, output, pylock=False, src="-", kernels=False):
        """``kernels``: the second resolution (and the pylock of a lock with the kernels): FlashInfer's
        index as the last extra index, the jit-cache's cut-off lifted."""
        p = self.p
        header = "llmfleet.engines.uv_fleet_lock: %s, as of %s" % (self.label(), p["exclude_newer"])
        extra, per_package = p.get("extra_index_url"), p.get("exclude_newer_package")
        if kernels:
            extra = kernel_extra_index(extra, p.get("kernels_index_url"))
            per_package = kernel_exclude_newer(per_package)
        return fleet_compile_argv(
            self.uv, output, p["exclude_newer"], p["python_version"], p["python_platform"],
            per_package, index_args(p.get("index_url"), extra, p.get("index_strategy")), header, pylock, src,
            omit=self.omit)

    def _compile(self, argv, data, deadline, what, failure=None):
        left = deadline - self.clock()
        if left <= 0:
            raise InstallTimeout("compiling the lock for %s did not finish within timeout (%s s)"
                                 % (self.label(), self.p["timeout"]))
        res = self.run(argv, data=data, env=self.env(), timeout=left)
        output = redact(last_lines(res.output), self.secrets)
        if res.timed_out:
            raise InstallTimeout("%s did not finish within timeout (%s s)" % (what, self.p["timeout"]),
                                 uv_output=output, cmd=redact(argv, self.secrets))
        if res.rc != 0:
            found = no_wheel(res.output)
            hint = ""
            if found:
                hint = (" %s has no wheel for %s (Python %s), and nothing is built from source (--no-build): "
                        "choose a build or a platform that has one."
                        % (found[0], self.p["python_platform"], self.p["python_version"]))
            raise ResolveFailed("%s failed (uv exit %s): %s.%s Nothing was written to %s."
                                % (failure(res.output) if failure else what, res.rc, output, hint, self.dest),
                                uv_output=output, cmd=redact(argv, self.secrets))
        return res

    # -- the flow ----------------------------------------------------------------------------

    def present(self):
        self.validate()
        if self.p.get("engine_file"):
            self.warnings.append(engine_file_warning(self.p["engine"], self.p["version"], self.p["engine_file"]))
        # before uv runs at all, and before the lock or its record is read
        self.check_privilege_line()
        wanted = self.inputs(self.uv_version())
        state = self.recorded()
        reasons = self.reasons(wanted, state)
        reqs = requirement_lines(self.p["engine"], self.p["version"], self.p.get("requirements"), self.p.get("wheel"))
        self.cmd = redact(self._argv(self.dest + ".tmp"), self.secrets)
        if not reasons:
            with open(self.dest, encoding="utf-8") as handle:
                text = handle.read()
            entries = self.check(text, "It is up to date with the inputs; set force: true to compile it again.")
            return self._result(False, state["lock_sha256"], entries, "the lock for %s at %s is up to date"
                                % (self.label(), self.dest), cmd=None)
        if self.check_mode:
            entries = {}
            sha = None
            if os.path.isfile(self.dest):
                with open(self.dest, encoding="utf-8") as handle:
                    entries = parse_lock(handle.read())
                sha = _sha256_of_file(self.dest)
            return self._result(True, sha, entries, "would compile the lock for %s at %s: %s"
                                % (self.label(), self.dest, "; ".join(reasons)), reasons=reasons)
        return self._build(wanted, reqs, reasons)

    def _build(self, wanted, reqs, reasons):
        deadline = self.clock() + self.p["timeout"]
        directory = os.path.dirname(self.dest)
        os.makedirs(directory, mode=0o755, exist_ok=True)
        self.check_privilege_line(only=directory)  # as made (the umask), or as found made by another run
        # uv writes into a directory of this run's own (0700: no other user can put or replace anything
        # there); what is renamed into place is the text that was checked, written by this module
        work = tempfile.mkdtemp(prefix=".uv_fleet_lock.", dir=directory)
        try:
            tmp = os.path.join(work, "lock.txt")
            argv = self._argv(tmp)
            self._compile(argv, "\n".join(reqs), deadline, "resolving %s for %s as of %s" % (
                ", ".join(reqs), self.p["python_platform"], self.p["exclude_newer"]))
            text = pin_lock_file(tmp, self.p["engine"], self.p.get("engine_file"))
            entries = self.check(text, "Nothing was written to %s." % self.dest)
            version = flashinfer_version(entries) if self.kernels else None
            if version:
                # FlashInfer's kernels at flashinfer-python's version, into the same lock
                argv = self._argv(tmp, kernels=True)
                self._compile(argv, "\n".join(reqs + kernel_lines(version, self.kernels["label"])), deadline,
                              "resolving FlashInfer's kernels for flashinfer-python %s" % version,
                              failure=lambda out: kernel_failure(out, version, self.kernels["label"],
                                                                 self.p["kernels_index_url"]))
                text = pin_lock_file(tmp, self.p["engine"], self.p.get("engine_file"))
                second = self.check(text, "Nothing was written to %s." % self.dest)
                problems = kernel_problems(entries, second, version, self.kernels["label"])
                if problems:
                    raise LockMismatch("the lock compiled for %s with FlashInfer's kernels is not what was asked: %s. "
                                       "Nothing was written to %s." % (self.label(), "; ".join(problems), self.dest),
                                       problems=problems, packages=lock_versions(second))
                entries = second
            pylock_sha = None
            if self.pylock:
                out = os.path.join(work, "pylock.toml")
                # from the checked lock: the same pins, in PEP 751 form
                self._compile(self._argv(out, pylock=True, src=tmp, kernels=bool(version)), None, deadline,
                              "writing the lock for %s as pylock.toml" % self.label())
                with open(out, "rb") as handle:
                    data = handle.read()
                write_atomic(self.pylock, data)
                pylock_sha = text_sha256(data.decode("utf-8", "replace"))
            write_atomic(self.dest, text.encode("utf-8"))
            lock_sha = text_sha256(text)
            state = {"format": STATE_FORMAT, "inputs": wanted, "lock_sha256": lock_sha,
                     "pylock_sha256": pylock_sha, "packages": lock_versions(entries),
                     "compiled_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            write_atomic(self.state_path, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.cmd = redact(argv, self.secrets)
        return self._result(True, lock_sha, entries, "compiled the lock for %s at %s: %s"
                            % (self.label(), self.dest, "; ".join(reasons)), reasons=reasons)

    def _result(self, changed, sha, entries, msg, cmd=False, **extra):
        result = {"changed": changed, "path": self.dest, "lock_sha256": sha,
                  "packages": lock_versions(entries or {}), "pylock_path": self.pylock,
                  "cmd": self.cmd if cmd is False else cmd, "msg": msg}
        result.update(extra)
        return result
