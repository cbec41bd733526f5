# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The look at a serving node that lets a converged run stop there (the ``engine_service_look``
module): in one module call, whether everything engine_service would check or change on the node
is already as wanted, and every model serves.

The look only ever says "settled" when each of these holds; anything else (and anything it cannot
read) is a reason, and the run takes the role's full way, which reads, decides and tells in its
own words:

- no rollout holds the node's lock;
- no unit of the role's prefix is left that no model lists;
- each unit file is the text the role renders and each unit's secret
  file holds what the role would write (compared by digest: no secret is sent or returned);
- systemd answers for the units, and each is ``active`` (read by each unit's gate; in check mode,
  where no gate is asked, in one ``systemctl show``);
- each model given as a path exists and the service user may read it;
- each pinned model's snapshot is complete, with nothing to prune, and no model the node no longer
  pins has anything to prune;
- with ``probe`` (site.yml, before engine_node's plan), ``current`` names an environment of
  ``candidates`` (one the run keeps), whose digests the unit files must have; a unit whose digest is
  null there (its text names the GPUs this call reads) is left to the caller, who renders it with them
  and compares it with the file's digest (``unit_sha256``, returned for every unit file read);
- each unit passes the steady readiness gate (``_ready.Gate``, judged by a window of this call),
  unless in check mode.

Only when all hold, and not in check mode, is each unit's gate recorded beside the environments
(``<unit>.gate.json``, root's, what the role's gate writes): a record of this run, not a change.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import signal
import stat
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import write_atomic
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import last_lines
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import untrusted_component
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _ready

# The hub's snapshot and cache code (hub._snapshot, hub._cache) is imported where a pinned model is
# looked at: a node that serves models given as paths does not compile it in each hourly look.

SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState")
SYSTEMCTL_TIMEOUT = 30
SHM = "/dev/shm"


def _read_text(path):
    """``(text, problem)``: the file's text, None when there is none, or why it cannot count (not a
    regular file, unreadable, not UTF-8). A link is followed, as systemd and the role's full way
    (``slurp``) follow it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, "%s cannot be read: %s" % (path, exc.strerror)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "%s is not a regular file" % path
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "%s is not UTF-8 text" % path


def parse_show_blocks(text):
    """``{Id: {property: value}}`` from ``systemctl show -p ... unit...`` (one block per unit,
    separated by blank lines, each read as ``_ready.parse_show`` reads one)."""
    out = {}
    for block in re.split(r"\n\s*\n", text or ""):
        props = _ready.parse_show(block)
        if props.get("Id"):
            out[props["Id"]] = props
    return out


CHECK_TIMEOUT = 30


def _may_read_here(path):
    """The child's check, with the user's identity: 0 when ``path`` opens for reading and, a directory,
    may be entered (a name looked up in it), 1 when the kernel says no, 3 when it fails otherwise.

    Operations, not ``access(2)``: access asks with the real uid, which stays root's here (so that the
    user cannot signal the child), and ``faccessat(AT_EACCESS)`` falls back to guessing from the mode
    bits (no ACLs) in C libraries or kernels without ``faccessat2``. Opening and looking up use the
    effective (file system) identity, as the server's own reads will."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        return 1
    except OSError:
        return 3
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.stat(".", dir_fd=fd)  # the lookup needs search (x) on the directory
        return 0
    except PermissionError:
        return 1
    except OSError:
        return 3
    finally:
        os.close(fd)


def user_may_read(user, path, timeout=CHECK_TIMEOUT):
    """``None`` when ``user`` may read ``path`` (and enter it, a directory), else why not.

    The kernel decides, as for the server: a child process takes the user's groups, gid and effective
    uid, and opens the path (``_may_read_here``). Its real and saved uid stay root's, so the user
    cannot signal it (kill(2) needs the sender's uid to be the target's real or saved one) and a
    SIGSTOP cannot hold root's look; a child that still does not answer in ``timeout`` seconds (a
    path on a mount that hangs) is SIGKILLed and the path "cannot be checked". No program and no PAM
    session, unlike ``runuser``; it needs root, as runuser does."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return "cannot be checked: there is no user %s" % user
    groups = os.getgrouplist(user, entry.pw_gid)
    pid = os.fork()
    if pid == 0:  # the child: only os calls, and it always leaves through os._exit
        code = 2
        try:
            os.setgroups(groups)
            os.setresgid(entry.pw_gid, entry.pw_gid, entry.pw_gid)
            # effective (and file system) uid the user's; real and saved root's: not the user's to signal
            os.setresuid(0, entry.pw_uid, 0)
            code = _may_read_here(path)
        finally:
            os._exit(code)
    status = _wait_bounded(pid, timeout)
    if status is None:
        return "cannot be checked as %s: no answer within %s s (the check was killed)" % (user, timeout)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return None
    if code == 1:
        return "may not be read by %s" % user
    if code == 3:
        return "cannot be checked as %s: opening it failed otherwise than by permission" % user
    return "cannot be checked as %s: taking its identity failed (the look runs as root)" % user


def _wait_bounded(pid, timeout):
    """The child's wait status, or None when it did not end within ``timeout`` seconds: it is then
    SIGKILLed and reaped (a child stuck in the kernel is left after a second rather than waited for)."""
    end = time.monotonic() + timeout
    pause = 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        left = end - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 1
    while time.monotonic() < end:
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        time.sleep(0.01)
    return None


def _only_empty_trees(repo_dir):
    """Whether ``repo_dir`` holds nothing but its lock file and ``refs``, ``snapshots`` and ``blobs``
    trees of empty directories: what ``remove_empty_repo`` removes."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import LOCK_NAME

    for name in os.listdir(repo_dir):
        if name == LOCK_NAME:
            continue
        path = os.path.join(repo_dir, name)
        if name not in ("refs", "snapshots", "blobs") or os.path.islink(path) or not os.path.isdir(path):
            return False
        for _top, dirs, files in os.walk(path):
            if files or any(os.path.islink(os.path.join(_top, d)) for d in dirs):
                return False
    return True


def _unlisted_prune_pending(cache_dir, repos, in_use):
    """The unlisted repos (models the node no longer pins) that model_prune would change, sorted: it
    removes what the plan names, and a repo left with nothing kept and nothing it does not know."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import repo_prune_plan, unlisted_repos

    out = []
    for name in unlisted_repos(cache_dir, repos):
        repo_dir = os.path.join(cache_dir, name)
        plan = repo_prune_plan(repo_dir, set(in_use), 0, set())
        if plan["snapshots"] or plan["blobs"] or plan["partials"] or plan["refs"]:
            out.append(name)
        elif not plan["kept"] and not plan["unknown"] and _only_empty_trees(repo_dir):
            out.append(name)
    return out


def gate_figure(unit, env_name, result):
    """One gate record of the steady gate, in the role's shape (``_ready.gate_record``)."""
    return _ready.gate_record(unit, env_name, "steady", result)


def write_record(directory, unit, figure, now=None):
    """``<directory>/<unit>.gate.json``, root's, 0644, replaced atomically (``write_atomic``: a link
    there is replaced, never followed)."""
    record = dict(figure, at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    write_atomic(os.path.join(directory, "%s.gate.json" % unit),
                 (json.dumps(record, indent=4, sort_keys=True) + "\n").encode("utf-8"), 0o644)


class Look:
    """One look at a serving node. ``run`` is a ``_proc.Runner``-like callable; ``client`` an
    ``_http.HttpClient`` (no retries: the gate polls); ``gate_factory`` builds a ``_ready.Gate``
    (tests give their own)."""

    def __init__(self, params, run, systemctl, client, journalctl=None, check_mode=False,
                 gate_factory=_ready.Gate, shm=SHM, may_read=user_may_read, read_node=None):
        self.p = params
        self.read_node = read_node
        self.run = run
        self.systemctl = systemctl
        self.may_read = may_read
        self.journalctl = journalctl
        self.client = client
        self.check_mode = check_mode
        self.gate_factory = gate_factory
        self.shm = shm
        self.reasons = []
        self.result = {"settled": False, "reasons": self.reasons, "states": {}, "gates": [], "orphans": [],
                       "shm_mib": None, "recorded": [],
                       "unit_sha256": {}}

    # -- the parts, cheapest first -------------------------------------------------------------
    def _node(self):
        """With ``probe``: the node read as engine_node's plan reads it (its GPUs, and where ``current``
        points), returned for the plan (``probe``); the environment is then the one ``current`` names, and
        each unit file is compared with the digest ``candidates`` gives for that environment."""
        spec = self.p.get("probe")
        if not spec:
            return
        from ansible_collections.llmfleet.engines.plugins.module_utils.node import _gpu

        try:
            if self.read_node is None:
                probe = _gpu.read_node(self.run, spec.get("nvidia_smi"), spec["link"], spec.get("timeout") or 30)
            else:
                probe = self.read_node(spec)
        except LlmfleetError as exc:
            # the plan reads the node again and says it in its own words
            self.reasons.append("reading the node's GPUs: %s" % (getattr(exc, "msg", None) or exc))
            return
        self.result["probe"] = probe
        if self.p.get("environment"):
            return
        environment = _gpu.link_name(probe.get("link"))
        self.p["environment"] = environment
        self.p["version"] = environment.rsplit("-", 1)[0] if "-" in environment else environment
        candidates = self.p.get("candidates")
        if candidates is None:
            return
        expected = candidates.get(environment)
        if expected is None:
            self.reasons.append("the engine changes: current is %s, not an environment this run keeps (%s)"
                                % (environment or "nothing", ", ".join(sorted(candidates)) or "none"))
            return
        for unit in self.p["units"]:
            # null: the unit's text depends on this read (the GPUs), so the caller compares its digest
            unit["by_caller"] = unit["unit"] in expected and expected[unit["unit"]] is None
            unit["sha256"] = expected.get(unit["unit"])

    def _lock(self):
        if os.path.lexists(self.p["lock"]):
            self.reasons.append("a rollout holds this node's lock (%s)" % self.p["lock"])

    def _orphans(self):
        prefix = self.p["unit_prefix"]
        pattern = re.compile(re.escape(prefix) + r"[a-z0-9][a-z0-9-]*\.service")
        wanted = set(u["unit"] for u in self.p["units"])
        try:
            names = os.listdir(self.p["unit_dir"])
        except FileNotFoundError:
            names = []
        orphans = sorted(n for n in names if pattern.fullmatch(n) and n not in wanted)
        self.result["orphans"] = orphans
        if orphans:
            self.reasons.append("units no model lists any more: %s" % ", ".join(orphans))

    def _files(self):
        for unit in self.p["units"]:
            text, problem = _read_text(os.path.join(self.p["unit_dir"], unit["unit"]))
            if problem:
                self.reasons.append(problem)
            elif text is None:
                self.reasons.append("%s is not on the node" % unit["unit"])
            else:
                digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
                self.result["unit_sha256"][unit["unit"]] = digest
                differs = text != unit["text"] if unit.get("text") is not None else digest != unit.get("sha256")
                if differs and not unit.get("by_caller"):
                    self.reasons.append("%s differs from what the role renders" % unit["unit"])
            secret, problem = _read_text(unit["environment_file"])
            if problem:
                self.reasons.append(problem)
                continue
            digest = hashlib.sha256((secret or "").encode("utf-8")).hexdigest()
            if digest != unit["secret_sha256"]:
                self.reasons.append("the secret file of %s differs from what the role writes" % unit["unit"])

    def _states(self):
        """In check mode (no gate) the units' states are read here, in one call; otherwise each gate
        reads its unit's (``_gates``)."""
        # every unit in check mode; otherwise those no gate reads (a model group's follower has no API)
        names = [u["unit"] for u in self.p["units"] if self.check_mode or not u.get("gate", True)]
        if not names:
            return
        argv = [self.systemctl, "show"]
        for prop in SHOW_PROPERTIES:
            argv += ["-p", prop]
        res = self.run(argv + names, timeout=SYSTEMCTL_TIMEOUT)
        if res.rc != 0 or res.timed_out:
            self.reasons.append("%s did not answer: rc %s, %s" % (" ".join(argv[:2]), res.rc,
                                                                  last_lines(res.output) or "no output"))
            return
        blocks = parse_show_blocks(res.out)
        for name in names:
            state = blocks.get(name, {})
            self.result["states"][name] = {"load": state.get("LoadState"), "active": state.get("ActiveState"),
                                           "sub": state.get("SubState")}
            if state.get("ActiveState") != "active":
                self.reasons.append("%s is %s" % (name, state.get("ActiveState") or "unknown to systemd"))

    def _paths(self):
        for item in self.p["model_paths"]:
            path = item["path"]
            if not os.path.exists(path):
                self.reasons.append("the model %s: %s does not exist" % (item["name"], path))
                continue
            problem = self.may_read(self.p["user"], path)
            if problem:
                self.reasons.append("the model %s: %s %s" % (item["name"], path, problem))

    def _shm(self):
        if not self.p["need_shm"]:
            return
        try:
            st = os.statvfs(self.shm)
        except OSError as exc:
            self.reasons.append("%s cannot be read: %s" % (self.shm, exc.strerror))
            return
        self.result["shm_mib"] = st.f_blocks * st.f_frsize // (1024 * 1024)

    def _snapshots(self):
        cache_dir = self.p["cache_dir"]
        if not self.p["snapshots"]:
            return
        from ansible_collections.llmfleet.engines.plugins.module_utils.hub._snapshot import Snapshot

        for item in self.p["snapshots"]:
            snapshot = Snapshot(item["lock"], cache_dir)
            what = "%s@%s" % (snapshot.repo, snapshot.commit[:12])
            untrusted = untrusted_component(snapshot.repo_dir)
            if untrusted:
                self.reasons.append("%s: its cache cannot be trusted (%s)" % (what, untrusted.describe()))
                continue
            survey = snapshot.survey("size")
            work = snapshot.work(survey)
            if survey["in_the_way"] or work["fetch"] or work["links"] or work["ref"]:
                self.reasons.append("%s is not complete in %s" % (what, snapshot.snapshot_dir))
                continue
            plan = snapshot.prune_plan(self.p["keep"], self.p["in_use"])
            if plan["snapshots"] or plan["blobs"] or plan["partials"] or plan["refs"]:
                self.reasons.append("%s: older snapshots or blobs to prune" % what)
        pending = _unlisted_prune_pending(cache_dir, [i["lock"]["repo"] for i in self.p["snapshots"]],
                                          self.p["in_use"])
        if pending:
            self.reasons.append("models no longer pinned to prune: %s" % ", ".join(pending))

    def _gates(self):
        if self.check_mode:
            return
        for unit in self.p["units"]:
            if not unit.get("gate", True):
                continue
            gate = self.gate_factory(
                self.client, unit["url"], unit["name"], version=self.p["version"] or None,
                unit=_ready.Unit(self.run, unit["unit"], self.systemctl, self.journalctl),
                deadline=self.p["steady_timeout"], wait=self.p["steady_timeout"],
                api_key=unit.get("api_key") or None, from_unit_start=False)
            try:
                res = gate.run()
            except _ready.ReadyError as exc:
                self.reasons.append(exc.msg)
                continue
            if not res.get("ready"):
                self.reasons.append(res.get("msg") or "%s is not ready" % unit["unit"])
                continue
            state = res.get("unit_state") or {}
            self.result["states"][unit["unit"]] = {"active": state.get("ActiveState"), "sub": state.get("SubState")}
            if state.get("ActiveState") != "active":
                # reloading, say: it serves, but the full way tells what systemd is doing with it
                self.reasons.append("%s is %s" % (unit["unit"], state.get("ActiveState") or "unknown to systemd"))
                continue
            self.result["gates"].append(gate_figure(unit["unit"], self.p["environment"], res))

    # -- the look --------------------------------------------------------------------------------
    def look(self):
        """The result dict: ``settled``, ``reasons``, ``states``, ``gates``, ``orphans``, ``shm_mib``,
        ``recorded``, ``unit_sha256``. Stops at the first part that finds a reason: the full way reads the rest."""
        for part in (self._node, self._lock, self._orphans, self._files, self._states, self._paths, self._shm,
                     self._snapshots, self._gates):
            try:
                part()
            except (LlmfleetError, OSError) as exc:
                self.reasons.append(getattr(exc, "msg", None) or str(exc))
            if self.reasons:
                return self.result
        # a rollout that started while the gates ran has the node now
        self._lock()
        if self.reasons:
            return self.result
        self.result["settled"] = True
        if not self.check_mode:
            for figure in self.result["gates"]:
                write_record(self.p["record_dir"], figure["unit"], figure)
                self.result["recorded"].append(figure["unit"])
        return self.result
