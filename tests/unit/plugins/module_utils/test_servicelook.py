"""serve._servicelook: the one-call look at a serving node (engine_service_survey). Each check of ``Look`` has
a case of its own that finds what it checks, with stand-ins for the commands (a fake runner answering
CommandResults) and for the readiness gate (a factory with Gate's signature), on directories under tmp_path:
the units, their secret files, the rollout lock, the gate records and a small hub cache."""

from __future__ import annotations

import errno
import hashlib
import inspect
import json
import os
import pathlib
import pwd
import re
import select
import shutil
import signal
import stat
import tempfile
import threading
import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import CommandResult
from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _cache
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _ready, _servicelook
from ansible_collections.llmfleet.engines.plugins.module_utils.serve._servicelook import (
    Look,
    gate_figure,
    parse_show_blocks,
    user_may_read,
    write_record,
)
from ansible_collections.llmfleet.engines.plugins.modules import model_prune
from tests.unit.plugins.lookup_fakes import run_module

PREFIX = "llmfleet-vllm-"
ENV = "0.20.0-cu13"
COMMIT = "a" * 40
OLD = "b" * 40
OLDER = "c" * 40
SECRET = "# Secrets of llmfleet-vllm-chat.service\nVLLM_API_KEY=\"sk-unit-test-secret\"\n"
CONFIG = b'{"model_type": "llama"}\n'
WEIGHTS = b"\x00\x01weights\x02" * 64


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unit_text(name):
    return "[Unit]\nDescription=vLLM serving %s\n\n[Service]\nExecStart=/bin/true %s\n" % (name, name)


# -- the stand-ins ------------------------------------------------------------------------------

class FakeRun:
    """A ``_proc.Runner``: records each argv, answers by the program (argv[0]) with ``answers[prog]``,
    a CommandResult or a callable of the argv; 0 with no output by default."""

    def __init__(self, answers=None):
        self.answers = dict(answers or {})
        self.calls = []

    def __call__(self, argv, timeout=None):
        self.calls.append((list(argv), timeout))
        answer = self.answers.get(argv[0])
        if callable(answer):
            return answer(argv)
        return answer or CommandResult(0, "", "")

    def of(self, program):
        return [argv for argv, _timeout in self.calls if argv[0] == program]


class FakeGate:
    def __init__(self, factory, unit, kwargs):
        self.factory = factory
        self.unit = unit
        self.kwargs = kwargs

    def run(self):
        answer = self.factory.answers.get(self.unit.name, self.factory.default)
        if callable(answer):
            answer = answer(self)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


READY = {"ready": True, "phase": "ready", "since_start_s": 0.1, "health_s": 0.01, "completion_ms": 5.0,
         "attempts": 1, "unit_state": {"ActiveState": "active", "SubState": "running"}}


class FakeGates:
    """``gate_factory``: takes Gate's own arguments (bound against ``_ready.Gate``'s signature, so a call the
    real Gate would refuse fails here too), and gives gates answering ``answers[unit name]`` (a result dict,
    an exception to raise, or a callable of the gate), ``default`` otherwise."""

    def __init__(self, answers=None, default=None):
        self.answers = dict(answers or {})
        self.default = READY if default is None else default
        self.calls = []

    def __call__(self, *args, **kwargs):
        bound = inspect.signature(_ready.Gate).bind(*args, **kwargs)
        self.calls.append(bound.arguments)
        return FakeGate(self, bound.arguments["unit"], bound.arguments)


def show_answer(states):
    """``systemctl show -p Id -p LoadState -p ActiveState -p SubState`` of several units: one block each."""
    blocks = []
    for unit, (load, active, sub) in states.items():
        blocks.append("Id=%s\nLoadState=%s\nActiveState=%s\nSubState=%s\n" % (unit, load, active, sub))
    return CommandResult(0, "\n".join(blocks), "")


# -- the node -----------------------------------------------------------------------------------

class Node:
    """A serving node under tmp_path: ``units`` written with their texts and secret files, no lock."""

    def __init__(self, tmp_path, names=("chat", "embed")):
        self.root = tmp_path
        self.unit_dir = tmp_path / "systemd"
        self.secrets = tmp_path / "secrets"
        self.record_dir = tmp_path / "engines"
        self.cache_dir = tmp_path / "models"
        for place in (self.unit_dir, self.secrets, self.record_dir):
            place.mkdir()
        self.lock = self.record_dir / ".engine_service.lock"
        self.units = []
        for port, name in enumerate(names, 8000):
            unit = "%s%s.service" % (PREFIX, name)
            secret = SECRET.replace("chat", name)
            (self.unit_dir / unit).write_text(unit_text(name))
            env_file = self.secrets / (unit + ".env")
            env_file.write_text(secret)
            env_file.chmod(0o600)
            self.units.append({"unit": unit, "name": name, "text": unit_text(name),
                               "url": "http://127.0.0.1:%d" % port, "environment_file": str(env_file),
                               "secret_sha256": sha256_text(secret), "api_key": "sk-unit-test-secret"})

    def params(self, **over):
        params = {"units": self.units, "unit_dir": str(self.unit_dir), "unit_prefix": PREFIX, "lock": str(self.lock),
                  "record_dir": str(self.record_dir), "environment": ENV, "version": "0.20.0", "steady_timeout": 120,
                  "user": "llmfleet-vllm", "model_paths": [], "need_shm": False, "cache_dir": None,
                  "snapshots": [], "keep": 2, "in_use": [], "timeout": 30}
        params.update(over)
        return params

    def records(self):
        return sorted(p.name for p in self.record_dir.iterdir() if p.name != self.lock.name)


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def look(params, run=None, gates=None, check_mode=False, **kwargs):
    run = FakeRun() if run is None else run
    gates = FakeGates() if gates is None else gates
    result = Look(params, run, "/usr/bin/systemctl", object(),
                  journalctl="/usr/bin/journalctl", check_mode=check_mode, gate_factory=gates, **kwargs).look()
    return result, run, gates


def not_settled(result, pattern):
    assert result["settled"] is False
    assert len(result["reasons"]) == 1, result["reasons"]
    assert re.search(pattern, result["reasons"][0]), result["reasons"]
    assert result["recorded"] == []


# -- settled -----------------------------------------------------------------------------------

def test_a_settled_node_gates_each_unit_and_records_each_gate(node):
    before = time.time()
    result, run, gates = look(node.params())
    assert result["settled"] is True and result["reasons"] == []
    assert result["orphans"] == [] and result["shm_mib"] is None
    units = [u["unit"] for u in node.units]
    assert result["recorded"] == units
    assert result["states"] == {u: {"active": "active", "sub": "running"} for u in units}
    assert result["gates"] == [
        {"unit": u, "environment": ENV, "stage": "steady", "ready": True, "ready_s": 0.1, "health_s": 0.01,
         "completion_ms": 5.0, "tries": 1} for u in units]
    # each gate: its unit's url, model and key, the version, a window of this call (not since the unit started)
    assert [(c["url"], c["model"], c["api_key"], c["version"]) for c in gates.calls] == [
        (u["url"], u["name"], "sk-unit-test-secret", "0.20.0") for u in node.units]
    for call, unit in zip(gates.calls, node.units):
        assert call["from_unit_start"] is False and call["deadline"] == 120 and call["wait"] == 120
        assert isinstance(call["unit"], _ready.Unit) and call["unit"].name == unit["unit"]
        assert call["unit"].systemctl == "/usr/bin/systemctl" and call["unit"].journalctl == "/usr/bin/journalctl"
    # not in check mode no systemctl show of its own: the gates read the states
    assert run.calls == []
    # the records: root's JSON, 0644, nothing else left in the directory (no temporary file)
    assert node.records() == sorted(u + ".gate.json" for u in units)
    for figure in result["gates"]:
        path = node.record_dir / (figure["unit"] + ".gate.json")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        record = json.loads(path.read_text())
        at = record.pop("at")
        assert record == figure
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", at)
        assert time.mktime(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone >= int(before) - 1


def test_an_empty_version_asks_no_version_and_no_key_sends_none(node):
    for unit in node.units:
        unit["api_key"] = ""
    result, _run, gates = look(node.params(version=""))
    assert result["settled"] is True
    assert [(c["version"], c["api_key"]) for c in gates.calls] == [(None, None)] * len(node.units)


def test_a_record_replaces_a_link_and_never_follows_it(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("not to be touched")
    (tmp_path / "u.service.gate.json").symlink_to(target)
    figure = gate_figure("u.service", ENV, dict(READY, attempts=3))
    write_record(str(tmp_path), "u.service", figure, now=0)
    path = tmp_path / "u.service.gate.json"
    assert not path.is_symlink() and target.read_text() == "not to be touched"
    assert json.loads(path.read_text()) == dict(figure, at="1970-01-01T00:00:00Z")
    assert figure["tries"] == 3


# -- the lock ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_rollout_lock_stops_the_look_before_anything_else(node, kind):
    if kind == "file":
        node.lock.write_text("pid 4242")
    else:
        node.lock.symlink_to(node.root / "gone")
    (node.unit_dir / (PREFIX + "old.service")).write_text("an orphan too")
    result, run, gates = look(node.params())
    not_settled(result, r"^a rollout holds this node's lock \(%s\)$" % re.escape(str(node.lock)))
    assert result["orphans"] == []  # the first reason ends the look
    assert gates.calls == [] and run.calls == [] and node.records() == []


def test_a_rollout_that_takes_the_lock_while_the_gates_run_leaves_the_node_unsettled(node):
    def take_lock(_gate):
        node.lock.write_text("pid 4242")
        return READY

    result, _run, gates = look(node.params(), gates=FakeGates(default=take_lock))
    not_settled(result, r"^a rollout holds this node's lock")
    assert len(gates.calls) == len(node.units) and node.records() == []


# -- the units -----------------------------------------------------------------------------------

def test_a_unit_of_the_prefix_no_model_lists_is_an_orphan(node):
    (node.unit_dir / (PREFIX + "old.service")).write_text("[Unit]\n")
    (node.unit_dir / "other.service").write_text("[Unit]\n")  # not the role's
    (node.unit_dir / (PREFIX + "chat.service.d")).mkdir()  # a drop-in directory, not a unit
    result, _run, gates = look(node.params())
    not_settled(result, r"^units no model lists any more: llmfleet-vllm-old\.service$")
    assert result["orphans"] == [PREFIX + "old.service"]
    assert gates.calls == []


def test_a_missing_unit_directory_has_no_orphans_but_the_units_are_missing(node):
    for path in node.unit_dir.iterdir():
        path.unlink()
    node.unit_dir.rmdir()
    result, _run, _gates = look(node.params())
    assert result["orphans"] == []
    assert result["reasons"] == ["%s is not on the node" % u["unit"] for u in node.units]


def test_a_unit_file_not_on_the_node(node):
    (node.unit_dir / node.units[1]["unit"]).unlink()
    result, _run, gates = look(node.params())
    not_settled(result, r"^llmfleet-vllm-embed\.service is not on the node$")
    assert gates.calls == []


def test_a_unit_file_with_other_text(node):
    (node.unit_dir / node.units[0]["unit"]).write_text(unit_text("chat") + "Environment=EXTRA=1\n")
    result, _run, gates = look(node.params())
    not_settled(result, r"^llmfleet-vllm-chat\.service differs from what the role renders$")
    assert gates.calls == []


def test_a_unit_file_that_is_a_directory_cannot_count(node):
    path = node.unit_dir / node.units[0]["unit"]
    path.unlink()
    path.mkdir()
    result, _run, _gates = look(node.params())
    not_settled(result, r"is not a regular file$")


def test_a_unit_file_read_through_a_link_counts_as_systemd_reads_it(node):
    path = node.unit_dir / node.units[0]["unit"]
    real = node.root / "real.service"
    real.write_text(path.read_text())
    path.unlink()
    path.symlink_to(real)
    result, _run, _gates = look(node.params())
    assert result["settled"] is True


def test_a_secret_file_with_other_text(node):
    env_file = node.secrets / (node.units[1]["unit"] + ".env")
    env_file.write_text(SECRET.replace("chat", "embed").replace("sk-unit-test-secret", "sk-rotated"))
    result, _run, gates = look(node.params())
    not_settled(result, r"^the secret file of llmfleet-vllm-embed\.service differs from what the role writes$")
    assert "sk-" not in json.dumps(result)
    assert gates.calls == []


def test_a_missing_secret_file_counts_as_empty_text(node):
    os.unlink(node.units[0]["environment_file"])
    # the role would write some text: a missing file differs
    result, _run, _gates = look(node.params())
    not_settled(result, r"^the secret file of llmfleet-vllm-chat\.service differs")
    # the role would write nothing: the digest of "" matches a missing file
    node.units[0]["secret_sha256"] = sha256_text("")
    result, _run, _gates = look(node.params())
    assert result["settled"] is True and result["reasons"] == []


def test_a_secret_file_that_is_not_utf8_cannot_count(node):
    with open(node.units[0]["environment_file"], "wb") as handle:
        handle.write(b"VLLM_API_KEY=\xff\xfe\n")
    result, _run, _gates = look(node.params())
    not_settled(result, r"is not UTF-8 text$")


# -- the states ----------------------------------------------------------------------------------

@pytest.mark.parametrize("state, words", [({"ActiveState": "reloading", "SubState": "reload"}, "is reloading"),
                                          ({}, "is unknown to systemd"), (None, "is unknown to systemd")])
def test_a_gate_that_passes_on_a_unit_that_is_not_active(node, state, words):
    answer = dict(READY, unit_state=state)
    result, _run, _gates = look(node.params(), gates=FakeGates({node.units[0]["unit"]: answer}))
    not_settled(result, r"^llmfleet-vllm-chat\.service %s$" % words)
    assert result["states"][node.units[0]["unit"]] == {"active": (state or {}).get("ActiveState"),
                                                       "sub": (state or {}).get("SubState")}
    assert [g["unit"] for g in result["gates"]] == [node.units[1]["unit"]]
    assert node.records() == []


@pytest.mark.parametrize("error", [_ready.DeadlinePassed, _ready.UnitDead, _ready.VersionMismatch,
                                   _ready.ModelMissing, _ready.ServerRefused, _ready.UnitUnreadable])
def test_a_gate_that_fails(node, error):
    msg = "vLLM at http://127.0.0.1:8001 (unit llmfleet-vllm-embed.service), model embed: %s" % error.__name__
    result, _run, gates = look(node.params(), gates=FakeGates({node.units[1]["unit"]: error(msg, ready=False)}))
    not_settled(result, "^%s$" % re.escape(msg))
    assert len(gates.calls) == 2 and node.records() == []
    assert [g["unit"] for g in result["gates"]] == [node.units[0]["unit"]]


def test_a_gate_not_ready_within_its_window(node):
    msg = "vLLM at http://127.0.0.1:8000, model chat: not ready yet after 120 s"
    answers = {node.units[0]["unit"]: dict(READY, ready=False, msg=msg),
               node.units[1]["unit"]: dict(READY, ready=False)}
    result, _run, _gates = look(node.params(), gates=FakeGates(answers))
    assert result["settled"] is False and result["recorded"] == [] and result["gates"] == []
    assert result["reasons"] == [msg, "llmfleet-vllm-embed.service is not ready"]
    assert node.records() == []


def test_in_check_mode_no_gate_is_asked_nothing_is_recorded_and_one_show_reads_the_states(node):
    units = [u["unit"] for u in node.units]
    run = FakeRun({"/usr/bin/systemctl": show_answer({u: ("loaded", "active", "running") for u in units})})
    result, run, gates = look(node.params(), run=run, check_mode=True)
    assert result["settled"] is True and result["reasons"] == []
    assert gates.calls == [] and result["gates"] == [] and result["recorded"] == [] and node.records() == []
    assert run.calls == [(["/usr/bin/systemctl", "show", "-p", "Id", "-p", "LoadState", "-p", "ActiveState",
                           "-p", "SubState"] + units, _servicelook.SYSTEMCTL_TIMEOUT)]
    assert result["states"] == {u: {"load": "loaded", "active": "active", "sub": "running"} for u in units}


def test_in_check_mode_an_inactive_unit_is_a_reason(node):
    chat, embed = [u["unit"] for u in node.units]
    run = FakeRun({"/usr/bin/systemctl": show_answer({chat: ("loaded", "active", "running"),
                                                      embed: ("loaded", "inactive", "dead")})})
    result, _run, gates = look(node.params(), run=run, check_mode=True)
    not_settled(result, r"^llmfleet-vllm-embed\.service is inactive$")
    assert result["states"][embed] == {"load": "loaded", "active": "inactive", "sub": "dead"}
    assert gates.calls == []


def test_in_check_mode_a_unit_systemd_does_not_name_is_unknown(node):
    chat, embed = [u["unit"] for u in node.units]
    run = FakeRun({"/usr/bin/systemctl": show_answer({chat: ("loaded", "active", "running")})})
    result, _run, _gates = look(node.params(), run=run, check_mode=True)
    not_settled(result, r"^llmfleet-vllm-embed\.service is unknown to systemd$")
    assert result["states"][embed] == {"load": None, "active": None, "sub": None}


@pytest.mark.parametrize("answer, words", [
    (CommandResult(1, "", "System has not been booted with systemd as init system (PID 1). Can't operate."),
     r"^/usr/bin/systemctl show did not answer: rc 1, System has not been booted with systemd"),
    (CommandResult(124, "", "", timed_out=True), r"^/usr/bin/systemctl show did not answer: rc 124, no output$"),
    (CommandResult(0, "Id=x\n", "", timed_out=True), r"^/usr/bin/systemctl show did not answer: rc 0, Id=x$"),
])
def test_in_check_mode_systemctl_that_does_not_answer(node, answer, words):
    run = FakeRun({"/usr/bin/systemctl": answer})
    result, _run, gates = look(node.params(), run=run, check_mode=True)
    not_settled(result, words)
    assert result["states"] == {} and gates.calls == []


# -- the model paths -----------------------------------------------------------------------------

def test_a_model_path_that_does_not_exist(node):
    missing = str(node.root / "no-model")
    result, run, gates = look(node.params(model_paths=[{"name": "chat", "path": missing}]))
    not_settled(result, r"^the model chat: %s does not exist$" % re.escape(missing))
    assert run.calls == [] and gates.calls == []


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="taking another user's identity needs root")


@pytest.fixture
def open_dir():
    """A directory everyone may enter, under one everyone may enter (pytest's own are root's alone)."""
    path = tempfile.mkdtemp(prefix="llmfleet-look-")
    os.chmod(path, 0o755)
    yield pathlib.Path(path)
    shutil.rmtree(path)


def private_model(parent, mode):
    """A model directory root owns with ``mode``."""
    model = parent / "weights"
    model.mkdir()
    model.chmod(mode)
    return model


@as_root
@pytest.mark.parametrize("mode", [0o700, 0o744, 0o711])
def test_a_model_path_the_service_user_may_not_read(node, open_dir, mode):
    """Asked of the kernel as the user: the user nobody may neither list nor enter a directory root keeps to
    itself (0700); it may list but not enter one without x for others (0744), and enter but not list one
    without r (0711). Each is "may not be read"."""
    model = private_model(open_dir, mode)
    params = node.params(model_paths=[{"name": "chat", "path": str(model)}], user="nobody")
    result, run, gates = look(params, may_read=user_may_read)
    not_settled(result, r"^the model chat: %s may not be read by nobody$" % re.escape(str(model)))
    assert run.calls == [] and gates.calls == []


@as_root
def test_a_model_path_the_service_user_reads(node, open_dir):
    model = private_model(open_dir, 0o755)
    result, run, _gates = look(node.params(model_paths=[{"name": "chat", "path": str(model)}], user="nobody"),
                               may_read=user_may_read)
    assert result["settled"] is True and result["reasons"] == []
    assert not any(call[0].endswith("runuser") for call in run.calls)


@as_root
def test_the_check_takes_the_users_group(open_dir):
    """A directory only its group may read: nobody may, when the group is its own (nogroup), and
    may not when it is root's."""
    model = private_model(open_dir, 0o750)
    os.chown(model, 0, 0)
    assert user_may_read("nobody", str(model)) == "may not be read by nobody"
    os.chown(model, 0, pwd.getpwnam("nobody").pw_gid)
    assert user_may_read("nobody", str(model)) is None


class ChildWatch:
    """Stands between ``user_may_read`` and its child, as the service user would: ``os.fork`` is wrapped so
    the test learns the child's pid, and ``os._exit`` (the child's only way out) first says so on a pipe,
    then lingers ``linger`` seconds, the window in which the user acts. ``rescue`` SIGKILLs the child (as
    root) after ``rescue_after`` seconds, so an unguarded parent ends the test instead of hanging it."""

    def __init__(self, monkeypatch, linger, rescue_after=8.0):
        self.real_fork = os.fork
        self.real_exit = os._exit
        self.pids = []
        self.timers = []
        self.read_end, self.write_end = os.pipe()
        self.linger = linger
        self.rescue_after = rescue_after
        monkeypatch.setattr(os, "fork", self._fork)
        monkeypatch.setattr(os, "_exit", self._exit)

    def _fork(self):
        pid = self.real_fork()
        if pid:
            self.pids.append(pid)
            timer = threading.Timer(self.rescue_after, self._rescue, (pid,))
            timer.daemon = True
            timer.start()
            self.timers.append(timer)
        return pid

    def _exit(self, code):
        try:
            os.write(self.write_end, b"x")
            time.sleep(self.linger)
        finally:
            self.real_exit(code)

    def close(self):
        """No rescue left to fire at a pid the system may have given another process; a child not reaped
        yet (still ours) is killed and reaped."""
        for timer in self.timers:
            timer.cancel()
        for pid in self.pids:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            except ChildProcessError:
                pass  # reaped by the code under test
        os.close(self.read_end)
        os.close(self.write_end)

    @staticmethod
    def _rescue(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def child_is_checking(self, timeout=5.0):
        """Waits until the child has made its check (it is in os._exit)."""
        ready, _w, _x = select.select([self.read_end], [], [], timeout)
        assert ready, "the child never reached its check"

    def signal_as(self, user, sig):
        """``kill(child, sig)`` from a process that is ``user`` and nothing more; the errno it met, or 0."""
        entry = pwd.getpwnam(user)
        pid = self.real_fork()
        if pid == 0:
            code = 99
            try:
                os.setgroups([])
                os.setresgid(entry.pw_gid, entry.pw_gid, entry.pw_gid)
                os.setresuid(entry.pw_uid, entry.pw_uid, entry.pw_uid)
                try:
                    os.kill(self.pids[-1], sig)
                    code = 0
                except OSError as exc:
                    code = exc.errno
            finally:
                self.real_exit(code)
        _pid, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)


@pytest.fixture
def child_watch(monkeypatch):
    made = []

    def make(**kwargs):
        made.append(ChildWatch(monkeypatch, **kwargs))
        return made[-1]

    yield make
    for watch in made:
        watch.close()


@as_root
def test_the_service_user_cannot_stop_the_check(open_dir, child_watch):
    """Issue 44, item 2: the child that asks as the service user is not the user's to signal. The user
    SIGSTOPs it while it checks: the kernel refuses (EPERM), and the answer comes as the check left it,
    well before the rescue the test keeps for a parent that would wait for a stopped child forever."""
    model = private_model(open_dir, 0o755)
    watch = child_watch(linger=0.5)
    answer = {}

    def ask():
        answer["said"] = user_may_read("nobody", str(model))

    started = time.monotonic()
    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    watch.child_is_checking()
    assert watch.signal_as("nobody", signal.SIGSTOP) == errno.EPERM
    asker.join(15)
    assert time.monotonic() - started < 4, "the check waited for a child the user had stopped"
    assert answer == {"said": None}


@as_root
def test_a_check_that_does_not_answer_is_killed_at_its_deadline(open_dir, child_watch):
    """A child that does not come back (the path on a mount that hangs, say) is SIGKILLed at the deadline
    and the answer says it could not be checked, in time; the child is gone, not left behind."""
    model = private_model(open_dir, 0o755)
    watch = child_watch(linger=60, rescue_after=20)
    started = time.monotonic()
    said = user_may_read("nobody", str(model), timeout=1)
    assert time.monotonic() - started < 4
    assert said == "cannot be checked as nobody: no answer within 1 s (the check was killed)"
    with pytest.raises(ChildProcessError):
        os.waitpid(watch.pids[-1], os.WNOHANG)


def test_a_model_path_for_a_user_that_does_not_exist(node):
    model = node.root / "weights"
    model.mkdir()
    params = node.params(model_paths=[{"name": "chat", "path": str(model)}], user="llmfleet-no-such-user")
    result, _run, gates = look(params, may_read=user_may_read)
    not_settled(result, r"^the model chat: %s cannot be checked: there is no user llmfleet-no-such-user$"
                % re.escape(str(model)))
    assert gates.calls == []


def test_the_look_asks_the_check_for_each_model_path_as_the_service_user(node):
    asked = []
    paths = []
    for name in ("chat", "embed"):
        path = node.root / name
        path.mkdir()
        paths.append({"name": name, "path": str(path)})
    result, _run, _gates = look(node.params(model_paths=paths),
                                may_read=lambda user, path: asked.append((user, path)))
    assert result["settled"] is True
    assert asked == [("llmfleet-vllm", paths[0]["path"]), ("llmfleet-vllm", paths[1]["path"])]


# -- /dev/shm --------------------------------------------------------------------------------------

def test_the_size_of_shm_is_read_only_when_needed(node):
    result, _run, _gates = look(node.params(need_shm=False), shm=str(node.root / "no-shm"))
    assert result["settled"] is True and result["shm_mib"] is None
    st = os.statvfs(str(node.root))
    result, _run, _gates = look(node.params(need_shm=True), shm=str(node.root))
    assert result["settled"] is True and result["shm_mib"] == st.f_blocks * st.f_frsize // (1024 * 1024)
    result, _run, gates = look(node.params(need_shm=True), shm=str(node.root / "no-shm"))
    not_settled(result, r"no-shm cannot be read: No such file or directory$")
    assert gates.calls == []


# -- the snapshots ---------------------------------------------------------------------------------

def lfs(path, data):
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def git(path, data):
    return {"path": path, "size": len(data), "git_oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}


def make_lock(contents, commit=COMMIT, revision="main", repo="org/chat"):
    files = sorted([git(p, d) if p.endswith(".json") else lfs(p, d) for p, d in contents.items()],
                   key=lambda f: f["path"])
    return {"format": 1, "repo": repo, "revision": revision, "commit": commit, "files": files,
            "size": sum(f["size"] for f in files)}


def stage(cache_dir, lock, contents, leave_out=(), mtime=None):
    """What model_snapshot lays out: blobs, ``snapshots/<commit>/<path>`` links, ``refs/<revision>``; the files
    in ``leave_out`` are neither blobs nor links. 0755 directories, 0644 files."""
    repo = os.path.join(str(cache_dir), _cache.repo_folder(lock["repo"]))
    for entry in lock["files"]:
        if entry["path"] in leave_out:
            continue
        blob = entry.get("sha256") or entry["git_oid"]
        os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
        with open(os.path.join(repo, "blobs", blob), "wb") as handle:
            handle.write(contents[entry["path"]])
        os.chmod(os.path.join(repo, "blobs", blob), 0o644)
        link = os.path.join(repo, "snapshots", lock["commit"], *entry["path"].split("/"))
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(_cache.link_target(entry["path"], blob), link)
    os.makedirs(os.path.join(repo, "snapshots", lock["commit"]), exist_ok=True)
    if lock["revision"] != lock["commit"]:
        os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
        with open(os.path.join(repo, "refs", lock["revision"]), "w", encoding="utf-8") as handle:
            handle.write(lock["commit"])
    if mtime is not None:
        os.utime(os.path.join(repo, "snapshots", lock["commit"]), (mtime, mtime))
    for top, dirs, _files in os.walk(str(cache_dir)):
        os.chmod(top, 0o755)
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o755)
    return repo


CONTENTS = {"config.json": CONFIG, "model.safetensors": WEIGHTS}


@pytest.fixture
def cache(node):
    node.cache_dir.mkdir()
    node.cache_dir.chmod(0o755)
    node.root.chmod(0o755)
    return node.cache_dir


def test_a_complete_snapshot_with_nothing_to_prune_is_settled(node, cache):
    lock = make_lock(CONTENTS)
    stage(cache, lock, CONTENTS)
    result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], in_use=[COMMIT]))
    assert result["settled"] is True and result["reasons"] == []


@pytest.mark.parametrize("harm", ["a file missing", "a blob of another size", "no ref"])
def test_a_snapshot_that_is_not_complete(node, cache, harm):
    lock = make_lock(CONTENTS)
    repo = stage(cache, lock, CONTENTS, leave_out=("model.safetensors",) if harm == "a file missing" else ())
    if harm == "a blob of another size":
        with open(os.path.join(repo, "blobs", lock["files"][1]["sha256"]), "ab") as handle:
            handle.write(b"more")
    elif harm == "no ref":
        os.unlink(os.path.join(repo, "refs", "main"))
    result, _run, gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}]))
    not_settled(result, r"^org/chat@aaaaaaaaaaaa is not complete in %s$"
                % re.escape(os.path.join(repo, "snapshots", COMMIT)))
    assert gates.calls == []


def test_older_snapshots_beyond_keep_are_something_to_prune(node, cache):
    now = time.time()
    lock = make_lock(CONTENTS)
    for commit, age in ((OLD, 100), (OLDER, 200)):
        stage(cache, make_lock({"config.json": CONFIG + commit.encode()}, commit=commit, revision=commit),
              {"config.json": CONFIG + commit.encode()}, mtime=now - age)
    stage(cache, lock, CONTENTS)
    result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], keep=2))
    not_settled(result, r"^org/chat@aaaaaaaaaaaa: older snapshots or blobs to prune$")
    # what the units serve is never pruned: OLDER in use, OLD the newest other kept by keep 2
    result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], keep=2,
                                            in_use=[COMMIT, OLDER]))
    assert result["settled"] is True


def test_a_repo_the_node_no_longer_pins_with_a_snapshot_not_in_use(node, cache):
    lock = make_lock(CONTENTS)
    stage(cache, lock, CONTENTS)
    old = make_lock({"config.json": CONFIG}, commit=OLD, repo="org/retired")
    stage(cache, old, {"config.json": CONFIG})
    params = node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], in_use=[COMMIT])
    result, _run, gates = look(params)
    not_settled(result, r"^models no longer pinned to prune: models--org--retired$")
    assert gates.calls == []
    # a commit a unit still serves is never pruned: nothing to do there then
    result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], in_use=[COMMIT, OLD]))
    assert result["settled"] is True


def test_a_cache_others_may_write_cannot_be_trusted(node, cache):
    lock = make_lock(CONTENTS)
    repo = stage(cache, lock, CONTENTS)
    os.chmod(repo, 0o777)
    try:
        result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}]))
    finally:
        os.chmod(repo, 0o755)
    not_settled(result, r"^org/chat@aaaaaaaaaaaa: its cache cannot be trusted \(.*models--org--chat")


# -- helpers -------------------------------------------------------------------------------------

def test_parse_show_blocks_reads_one_block_per_unit():
    text = ("Id=llmfleet-vllm-chat.service\nLoadState=loaded\nActiveState=active\nSubState=running\n\n"
            "Id=llmfleet-vllm-embed.service\r\nLoadState=loaded \r\nActiveState=failed\r\nSubState=failed\r\n"
            "  \n"
            "Id=llmfleet-vllm-gone.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\n"
            "Description=a = sign in a value\n\n"
            "LoadState=loaded\nActiveState=active\n\n\n")
    blocks = parse_show_blocks(text)
    assert sorted(blocks) == ["llmfleet-vllm-chat.service", "llmfleet-vllm-embed.service",
                              "llmfleet-vllm-gone.service"]
    assert blocks["llmfleet-vllm-chat.service"] == {"Id": "llmfleet-vllm-chat.service", "LoadState": "loaded",
                                                    "ActiveState": "active", "SubState": "running"}
    assert blocks["llmfleet-vllm-embed.service"] == {"Id": "llmfleet-vllm-embed.service", "LoadState": "loaded",
                                                     "ActiveState": "failed", "SubState": "failed"}
    assert blocks["llmfleet-vllm-gone.service"]["LoadState"] == "not-found"
    assert blocks["llmfleet-vllm-gone.service"]["Description"] == "a = sign in a value"
    assert parse_show_blocks("") == {} and parse_show_blocks(None) == {}


def test_gate_figure_is_the_shape_of_the_roles_record():
    assert gate_figure("u.service", ENV, {"ready": 1, "since_start_s": 2.5}) == {
        "unit": "u.service", "environment": ENV, "stage": "steady", "ready": True, "ready_s": 2.5,
        "health_s": None, "completion_ms": None, "tries": 1}


@pytest.mark.parametrize("leftover, pending", [
    ("empty trees", True),          # model_prune removes the repo directory
    ("a file it does not know", False),  # it keeps the repo (unknown), and changes nothing
    ("the hub's .no_exist", False),  # remove_empty_repo leaves a directory with other entries
])
def test_an_unlisted_repo_is_pending_exactly_when_model_prune_would_change_it(node, cache, capsys, leftover, pending):
    lock = make_lock(CONTENTS)
    stage(cache, lock, CONTENTS)
    repo = os.path.join(str(cache), "models--org--old")
    for sub in ("blobs", "snapshots", "refs"):
        os.makedirs(os.path.join(repo, sub))
    if leftover == "a file it does not know":
        with open(os.path.join(repo, "blobs", "notes.txt"), "w", encoding="utf-8") as handle:
            handle.write("kept by someone\n")
    elif leftover == "the hub's .no_exist":
        os.makedirs(os.path.join(repo, ".no_exist", COMMIT))
    for top, dirs, _files in os.walk(repo):
        os.chmod(top, 0o755)
    result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], in_use=[COMMIT]))
    assert (result["settled"] is False) == pending, result["reasons"]
    # the module the full way runs agrees, and runs change nothing after it
    code, pruned, _out = run_module(model_prune.main, {"cache_dir": str(cache), "repos": ["org/chat"],
                                                       "in_use": [COMMIT]}, capsys)
    assert code == 0 and pruned["changed"] is pending, pruned
    result, _run, _gates = look(node.params(cache_dir=str(cache), snapshots=[{"lock": lock}], in_use=[COMMIT]))
    assert result["settled"] is True, result["reasons"]


# -- before engine_node's plan: the node read for the plan, the units compared by digest ----------------------

def probe_of(root, current):
    """What ``read_node`` returns: the GPU facts and the ``current`` link naming ``current`` ('' : no link)."""
    link = {"path": str(root / "current"), "exists": bool(current), "is_link": bool(current),
            "target": str(root / current) if current else None, "target_exists": bool(current)}
    return {"nvidia_smi": None, "driver_version": None, "cuda_version": None, "gpus": [], "gpu_count": 0,
            "driver_error": "no nvidia-smi on this node", "glibc": "2.36", "architecture": "x86_64", "link": link}


def before_plan(node, candidates, **over):
    """The survey's parameters before the plan: no environment, no unit texts, ``probe`` and ``candidates``."""
    units = [{k: v for k, v in u.items() if k != "text"} for u in node.units]
    params = node.params(units=units, environment="", version="", candidates=candidates,
                         probe={"link": str(node.root / "current"), "nvidia_smi": None})
    params.update(over)
    return params


def digests(node, **edits):
    return {u["unit"]: sha256_text(edits.get(u["unit"], u["text"])) for u in node.units}


def test_before_the_plan_the_node_is_read_for_it_and_the_units_are_compared_for_the_environment_current_names(
        node):
    asked = []

    def read_node(spec):
        asked.append(spec)
        return probe_of(node.root, ENV)

    other = {u["unit"]: "0" * 64 for u in node.units}
    result, _run, gates = look(before_plan(node, {ENV: digests(node), "0.20.0-cu129": other}), read_node=read_node)
    assert result["settled"] is True, result["reasons"]
    assert asked == [{"link": str(node.root / "current"), "nvidia_smi": None}]
    assert result["probe"] == probe_of(node.root, ENV)
    # the environment and its release, as the plan names them: recorded with each gate, asked of each engine
    assert [c["version"] for c in gates.calls] == ["0.20.0"] * len(node.units)
    assert {g["environment"] for g in result["gates"]} == {ENV} and len(result["recorded"]) == len(node.units)


def test_before_the_plan_a_unit_file_other_than_the_digest_for_current_is_not_settled(node):
    unit = node.units[0]["unit"]
    edited = digests(node, **{unit: "[Unit]\nDescription=edited\n"})
    result, _run, gates = look(before_plan(node, {ENV: edited}), read_node=lambda spec: probe_of(node.root, ENV))
    not_settled(result, "^%s differs from what the role renders$" % re.escape(unit))
    assert gates.calls == [] and "probe" in result


def test_before_the_plan_a_unit_whose_digest_is_null_is_left_to_the_caller_with_its_files_digest(node):
    """A model placed on GPUs: its unit names the GPUs this call reads, so the caller renders it with them and compares
    the digest returned; the other units are compared here as before."""
    placed, other = node.units[0]["unit"], node.units[1]["unit"]
    edited = "[Unit]\nDescription=placed on the GPUs the caller reads\n"
    (node.unit_dir / placed).write_text(edited)
    result, _run, gates = look(before_plan(node, {ENV: dict(digests(node), **{placed: None})}),
                               read_node=lambda spec: probe_of(node.root, ENV))
    assert result["settled"] is True, result["reasons"]
    assert result["unit_sha256"] == dict(digests(node), **{placed: sha256_text(edited)})
    assert len(gates.calls) == len(node.units)
    # a unit whose digest is given is still compared here, null beside it or not
    (node.unit_dir / other).write_text(edited)
    result, _run, gates = look(before_plan(node, {ENV: dict(digests(node), **{placed: None})}),
                               read_node=lambda spec: probe_of(node.root, ENV))
    not_settled(result, "^%s differs from what the role renders$" % re.escape(other))
    assert gates.calls == []


@pytest.mark.parametrize("current, words", [
    ("0.11.2-cu129", "current is 0.11.2-cu129, not an environment this run keeps (0.20.0-cpu, 0.20.0-cu13)"),
    ("", "current is nothing, not an environment this run keeps (0.20.0-cpu, 0.20.0-cu13)"),
])
def test_before_the_plan_current_naming_no_candidate_is_the_engine_changing(node, current, words):
    result, _run, gates = look(before_plan(node, {ENV: digests(node), "0.20.0-cpu": digests(node)}),
                               read_node=lambda spec: probe_of(node.root, current))
    not_settled(result, "^the engine changes: %s$" % re.escape(words))
    # nothing gated, nothing recorded; the read still goes to the plan
    assert gates.calls == [] and node.records() == [] and result["probe"]["link"]["is_link"] is bool(current)


def test_before_the_plan_a_node_that_cannot_be_read_is_not_settled_and_gives_the_plan_nothing(node):
    from ansible_collections.llmfleet.engines.plugins.module_utils.node._gpu import NvidiaSmiTimeout

    def read_node(spec):
        raise NvidiaSmiTimeout("nvidia-smi did not answer within 30 s")

    result, _run, gates = look(before_plan(node, {ENV: digests(node)}), read_node=read_node)
    not_settled(result, "^reading the node's GPUs: nvidia-smi did not answer within 30 s$")
    assert "probe" not in result and gates.calls == []


def test_the_node_is_read_as_the_plan_reads_it_with_a_program_no_other_user_can_change(node, tmp_path):
    """The real read (no stand-in): nvidia-smi's answer, and the link; a program others may write is not run."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, GPU-1, 9.0, 81559, 580.65.06'\n")
    smi.chmod(0o755)
    (node.root / ENV).mkdir()
    (node.root / "current").symlink_to(node.root / ENV)
    params = before_plan(node, {ENV: digests(node)})
    params["probe"]["nvidia_smi"] = str(smi)
    calls = []

    def run(argv, timeout=None):
        calls.append(argv)
        proc = __import__("subprocess").run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    result, _run, _gates = look(params, run=run)
    assert result["settled"] is True, result["reasons"]
    probe = result["probe"]
    assert (probe["driver_version"], probe["gpu_count"], probe["cuda_version"]) == ("580.65.06", 1, None)
    assert probe["link"]["target"] == str(node.root / ENV) and probe["link"]["target_exists"] is True
    # no -q -x: the plan reads the driver and the GPUs, not the CUDA version
    assert [argv[0] for argv in calls] == [str(smi)] and "-q" not in calls[0]
    if os.geteuid() == 0:
        smi.chmod(0o777)
        result, _run, _gates = look(before_plan(node, {ENV: digests(node)}, probe={
            "link": str(node.root / "current"), "nvidia_smi": str(smi)}), run=run)
        not_settled(result, "^reading the node's GPUs: nvidia_smi %s is not run: " % re.escape(str(smi)))
        assert len(calls) == 1


def test_a_model_groups_follower_is_judged_by_its_units_state_and_asked_no_gate(node):
    """A follower (gate: false) has no API server: no gate asks it; one systemctl show reads its state, and a follower
    that is not active leaves the node unsettled. The other unit is gated as before."""
    chat, embed = [u["unit"] for u in node.units]
    node.units[1]["gate"] = False
    run = FakeRun({"/usr/bin/systemctl": show_answer({embed: ("loaded", "active", "running")})})
    result, run, gates = look(node.params(), run=run)
    assert result["settled"] is True and result["reasons"] == []
    assert [c["unit"].name for c in gates.calls] == [chat]
    assert run.calls == [(["/usr/bin/systemctl", "show", "-p", "Id", "-p", "LoadState", "-p", "ActiveState",
                           "-p", "SubState", embed], _servicelook.SYSTEMCTL_TIMEOUT)]
    assert result["states"][embed] == {"load": "loaded", "active": "active", "sub": "running"}
    run = FakeRun({"/usr/bin/systemctl": show_answer({embed: ("loaded", "failed", "failed")})})
    result, _run, _gates = look(node.params(), run=run)
    not_settled(result, r"^llmfleet-vllm-embed\.service is failed$")
