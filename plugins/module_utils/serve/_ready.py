# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The readiness gate of a vLLM OpenAI-compatible server (the ``engine_ready`` module): one call
polls for at most ``wait`` seconds and says ready or not yet; past the whole ``deadline``,
counted from the systemd unit's last start, or a failure that waiting cannot mend (the unit
failed, another model or version answering, a refused request), it raises a
:class:`ReadyError` whose ``details`` are the result keys.

Each attempt, in order: the unit's state (``systemctl show``), ``GET /health``, ``GET /version``
(when a version is wanted), ``GET /v1/models`` (the model must be listed) and a one-token
``POST /v1/completions``. No HTTP answer, a 429 or 5xx, or a time-out is "not yet".

With a unit, the gate talks only to the unit's own process (:meth:`Gate._connect_to_unit`): each request goes
over a connection the gate made straight to the URL's host, and before a byte is sent on it the gate finds its
far end (the socket of this node whose own address is the connection's peer and whose peer is the connection,
asked of the kernel's sock_diag, else read in ``/proc/net/tcp*``), and the process holding that socket
(``/proc/*/fd``), which must be the unit's main process or a child of it. Where root may not read another user's
descriptors (root without CAP_SYS_PTRACE: a container's, podman's and docker's default), the socket's owner stands
for its process: it must be the user the unit's main process runs as. Which listener a connection reaches
depends on the address it went to, not on the port number: ``localhost`` may resolve to ``::1`` where vLLM holds
127.0.0.1, and a node's address may be held by another user while vLLM holds the loopback's.

Clocks: systemd's ``*TimestampMonotonic`` values are CLOCK_MONOTONIC microseconds, and so is
Python's ``time.monotonic()`` on Linux (in seconds); the module runs on the unit's node, so the
two compare.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import socket
import struct
import sys
import time
from urllib.parse import urlsplit

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import last_lines
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import (
    SBIN_DIRS, ProgramRefused, resolve_program)

#: The phases, in the order a starting server goes through them.
PHASES = ("starting", "health", "models", "completion", "ready")
#: The properties read with ``systemctl show``.
UNIT_PROPERTIES = ("ActiveState", "SubState", "ActiveEnterTimestampMonotonic",
                   "ExecMainStartTimestampMonotonic", "NRestarts", "Result", "MainPID")
_INT_PROPERTIES = ("ActiveEnterTimestampMonotonic", "ExecMainStartTimestampMonotonic", "NRestarts", "MainPID")
#: Unit states that mean the server is not going to answer.
DEAD_STATES = ("failed", "inactive")
#: How many journal lines a message quotes (all ``journal_lines`` are in the result).
MSG_JOURNAL_LINES = 10
SYSTEMCTL_TIMEOUT = 30
PROMPT = "ping"
#: Seconds a connection's far end may take to show on this node; none after that: not this node's socket.
PEER_GRACE = 1.0
#: Seconds between two looks at whether the far end was accepted.
PEER_POLL = 0.01


class ReadyError(LlmfleetError):
    """Base: the server is not going to be ready; ``details`` are the module's result keys."""


class UnitUnreadable(ReadyError):
    """``systemctl show`` did not answer."""


class UnitDead(ReadyError):
    """The unit is ``failed`` or ``inactive``."""


class ServerRefused(ReadyError):
    """The server answered in a way that waiting will not change (4xx, a certificate, an
    answer that is not the OpenAI API's)."""


class PeerRefused(ServerRefused):
    """The gate's connection was accepted by a process that is not the unit's (or one that cannot be told):
    nothing was sent on it."""


class _PeerRefused(Exception):
    """Internal: raised by the gate's connector, through the HTTP client, to :meth:`Gate._call`."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class VersionMismatch(ReadyError):
    """``/version`` answers another version: another server is the one answering."""


class ModelMissing(ReadyError):
    """``/v1/models`` answers without the model."""


class DeadlinePassed(ReadyError):
    """Not ready within the deadline."""


def version_is(answered, wanted):
    """Whether the server's ``/version`` is ``wanted``: the same, or ``wanted`` with a local label
    (a build from vLLM's GitHub release answers ``0.20.0+cu129`` for the release 0.20.0)."""
    if not isinstance(answered, str):
        return False
    return answered == wanted or ("+" not in wanted and answered.split("+", 1)[0] == wanted)


def gate_record(unit, env_name, stage, result):
    """The figures of one unit's readiness gate (a ``Gate.run`` result, or the engine_ready module's),
    as the role records them: unit, environment, stage, ready, ready_s, health_s, completion_ms, tries."""
    return {"unit": unit, "environment": env_name, "stage": stage, "ready": bool(result.get("ready")),
            "ready_s": result.get("since_start_s"), "health_s": result.get("health_s"),
            "completion_ms": result.get("completion_ms"), "tries": result.get("attempts", 1)}


def parse_show(text):
    """``systemctl show`` output (``Key=Value`` lines) as a dict; the timestamps and NRestarts
    as ints (None where systemd gives no number)."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            values[key.strip()] = value.strip()
    for key in _INT_PROPERTIES:
        if key in values:
            try:
                values[key] = int(values[key])
            except ValueError:
                values[key] = None
    return values


def _proc_address(text):
    """An ``ADDRESS:PORT`` of ``/proc/net/tcp*`` (hex; the address in 32-bit words of the host's byte order)
    as ``(ip_address, port)``, an IPv4-mapped IPv6 address as its IPv4 one (a dual-stack listener's sockets)."""
    host, port = text.split(":")
    raw = b"".join(int(host[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(host), 8))
    return _plain_address(ipaddress.ip_address(raw)), int(port, 16)


def _proc_port(text):
    """The port of an ``ADDRESS:PORT`` of ``/proc/net/tcp*`` (hex)."""
    return int(text.rpartition(":")[2], 16)


def _plain_address(address):
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def socket_address(name):
    """A socket's ``getsockname()``/``getpeername()`` as ``(ip_address, port)``, as :func:`_proc_address` reads one."""
    return _plain_address(ipaddress.ip_address(name[0].split("%", 1)[0])), name[1]


def _tcp_rows(proc):
    """The rows of ``/proc/net/tcp`` and ``/proc/net/tcp6`` (each split into its columns, the header left out, rows
    too short for an inode skipped). Raises OSError when a table that is there cannot be read."""
    for name in ("tcp", "tcp6"):
        path = os.path.join(proc, "net", name)
        if not os.path.exists(path):
            continue
        with open(path) as handle:
            next(handle, None)
            for line in handle:
                fields = line.split()
                if len(fields) > 9:
                    yield fields


def socket_inode(local, remote, proc="/proc"):
    """The inode of this node's TCP socket whose own address is ``local`` and whose other end is ``remote``
    (``(ip_address, port)`` pairs, :func:`socket_address`): None when there is none (``local`` is not an address of
    this node, or not of its network namespace), 0 while it waits in a listener's queue (no process has accepted it
    yet). Asked of the kernel by the socket's four addresses (:func:`_diag_inode`); where that gives no such socket,
    read from ``/proc/net/tcp`` and ``/proc/net/tcp6``. Raises OSError when the tables cannot be read."""
    if proc == "/proc":
        found = _diag_inode(local, remote)
        if found is not None:
            return found
    found = None
    ports = (local[1], remote[1])
    for fields in _tcp_rows(proc):
        try:
            # the ports first: parsing every row's addresses costs the gate more than its requests on a busy node
            if (_proc_port(fields[1]), _proc_port(fields[2])) != ports:
                continue
            if _proc_address(fields[1]) == local and _proc_address(fields[2]) == remote:
                found = max(found or 0, int(fields[9]))
        except ValueError:
            continue
    return found


#: sock_diag (linux/sock_diag.h, linux/inet_diag.h): the request type, "no cookie", the listening state.
_SOCK_DIAG_BY_FAMILY = 20
_NETLINK_SOCK_DIAG = 4
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_TCP_LISTEN = 10
_DIAG_TIMEOUT = 1.0
#: The reply read: a netlink header (16 bytes) and one inet_diag_msg (72), with room to spare.
_DIAG_REPLY_MAX = 4096


def _diag_inode(local, remote):
    """The inode of the TCP socket ``local`` -> ``remote`` as the kernel's sock_diag finds it by those four values
    (one lookup, where ``/proc/net/tcp*`` lists every socket of the namespace and costs milliseconds to read); None
    when it gives no answer to trust: no netlink here, no such socket, or a socket that is not exactly this one (a
    lookup falls back on a listener of that port: only an answer whose own addresses are ``local`` and ``remote``
    counts), so that the caller reads the tables."""
    v6 = local[0].version == 6 or remote[0].version == 6
    family = socket.AF_INET6 if v6 else socket.AF_INET
    width = 16 if v6 else 4

    def packed(address):
        raw = (ipaddress.IPv6Address("::ffff:%s" % address) if v6 and address.version == 4 else address).packed
        return raw[:width].ljust(16, b"\0")

    request = (struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
               + struct.pack("!HH", local[1], remote[1]) + packed(local[0]) + packed(remote[0])
               + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE))
    message = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 1, 0) + request  # NLM_F_REQUEST
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(_DIAG_TIMEOUT)
            diag.send(message)
            reply = diag.recv(_DIAG_REPLY_MAX)
    except (OSError, AttributeError):
        return None  # no netlink (not Linux, a sandbox): the tables answer
    if len(reply) < 16 + 72:
        return None
    _length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", reply)
    if kind == _NLMSG_ERROR:
        return None
    got_family, state = struct.unpack_from("=BB", reply, 16)
    sport, dport = struct.unpack_from("!HH", reply, 20)
    got = 16 if got_family == socket.AF_INET6 else 4
    try:
        src = _plain_address(ipaddress.ip_address(reply[24:24 + got]))
        dst = _plain_address(ipaddress.ip_address(reply[40:40 + got]))
    except ValueError:
        return None
    if state == _TCP_LISTEN or (src, sport) != local or (dst, dport) != remote:
        return None
    return struct.unpack_from("=I", reply, 16 + 68)[0]


def socket_uid(inode, proc="/proc"):
    """The user that owns the TCP socket ``inode`` (the ``uid`` column of ``/proc/net/tcp*``, readable by every
    user); None when it is not there."""
    for fields in _tcp_rows(proc):
        if fields[9] == str(inode):
            try:
                return int(fields[7])
            except ValueError:
                return None
    return None


def process_uid(pid, proc="/proc"):
    """The real user id of process ``pid`` (``/proc/<pid>/status``, readable by every user); None when it is gone."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _readlink(path):
    return os.readlink(path)


def _fd_holds(pid, wanted, proc):
    """Whether process ``pid`` holds ``wanted`` (``socket:[inode]``) among its descriptors; None when they
    cannot be read (another user's process, and this one is not root or lacks CAP_SYS_PTRACE: the directory
    lists, each link is refused) or it is gone."""
    fd_dir = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    for fd in names:
        try:
            if _readlink(os.path.join(fd_dir, fd)) == wanted:
                return True
        except PermissionError:
            return None
        except OSError:
            continue  # closed since the listing
    return False


def socket_holders(inode, pids=None, proc="/proc"):
    """``(holders, unreadable)``: the processes (of ``pids``, else all) that hold the socket ``inode`` among their
    descriptors, and whether some could not be read (not root)."""
    wanted = "socket:[%d]" % inode
    if pids is None:
        pids = [int(entry) for entry in os.listdir(proc) if entry.isdigit()]
    holders, unreadable = set(), False
    for pid in pids:
        held = _fd_holds(pid, wanted, proc)
        if held is None:
            unreadable = unreadable or os.path.exists(os.path.join(proc, str(pid)))
        elif held:
            holders.add(pid)
    return holders, unreadable


def process_tree(pid, proc="/proc"):
    """``pid`` and every process below it (by the parent pid of ``/proc/<pid>/stat``)."""
    children = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat")) as handle:
                text = handle.read()
            parent = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    out, pending = set(), [pid]
    while pending:
        current = pending.pop()
        if current in out:
            continue
        out.add(current)
        pending.extend(children.get(current, []))
    return out


def _process_name(pid, proc="/proc"):
    try:
        with open(os.path.join(proc, str(pid), "comm")) as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def _process_user(pid, proc="/proc"):
    """The name (else the number) of the real user of process ``pid``; ``?`` when it is gone."""
    return user_text(process_uid(pid, proc))


def user_text(uid):
    """The name of user ``uid``, else its number; ``?`` for None."""
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def process_text(pid, proc="/proc"):
    """``1234 (python3, user alice)``: a process as a message names it."""
    return "%d (%s, user %s)" % (pid, _process_name(pid, proc), _process_user(pid, proc))


def systemd_programs(systemctl="systemctl", journalctl="journalctl"):
    """``(systemctl, journalctl)``: the absolute paths to run, as root, for the options of the same names
    (each a path, or a bare name looked up on PATH, then the sbin directories), each judged by the one
    resolver of the programs root runs (``_trust.resolve_program``): ``ProgramRefused`` naming the option,
    the value, the path found and why, when another user could change it. A journalctl that is on none of
    the directories is None (the journal is then left out, as without journalctl); one that is there is
    judged as systemctl. Never the bare names: ``execvp`` would look them up again."""
    found = resolve_program("systemctl", systemctl, "systemd's systemctl, run as root to read the units",
                            extra_dirs=SBIN_DIRS)
    journal = None
    if journalctl:
        try:
            journal = resolve_program("journalctl", journalctl, "systemd's journalctl, run as root to read a "
                                      "unit's journal", extra_dirs=SBIN_DIRS)
        except ProgramRefused as exc:
            if "program" in exc.details:  # found, but not to be run
                raise
    return found, journal


class Unit:
    """A systemd unit read through a ``_proc.Runner``-like callable."""

    def __init__(self, run, name, systemctl, journalctl=None, journal_lines=40):
        self.run = run
        self.name = name
        self.systemctl = systemctl
        self.journalctl = journalctl
        self.journal_lines = journal_lines

    def show_argv(self):
        argv = [self.systemctl, "show"]
        for prop in UNIT_PROPERTIES:
            argv.extend(["-p", prop])
        return argv + [self.name]

    def journal_argv(self):
        return [self.journalctl, "-u", self.name, "-n", str(self.journal_lines), "--no-pager", "-o", "cat"]

    def state(self):
        """The unit's properties (see :func:`parse_show`), or :class:`UnitUnreadable`."""
        res = self.run(self.show_argv(), timeout=SYSTEMCTL_TIMEOUT)
        if res.rc != 0 or res.timed_out:
            why = "did not answer within %d s" % SYSTEMCTL_TIMEOUT if res.timed_out else \
                "exited %s: %s" % (res.rc, last_lines(res.output) or "no output")
            raise UnitUnreadable(
                "reading the state of unit %s failed: %s %s; is it a systemd node, and may this "
                "user read the unit?" % (self.name, " ".join(self.show_argv()), why))
        values = parse_show(res.out)
        return dict((key, values.get(key)) for key in UNIT_PROPERTIES)

    def journal(self):
        """``(lines, problem)``: the journal's last lines, and why there are none (or None)."""
        if not self.journalctl:
            return [], "journalctl was not found"
        res = self.run(self.journal_argv(), timeout=SYSTEMCTL_TIMEOUT)
        if res.rc != 0 or res.timed_out:
            return [], "%s exited %s: %s" % (" ".join(self.journal_argv()), res.rc, last_lines(res.output) or "no output")
        return res.out.splitlines(), None

    def start_monotonic(self, state):
        """When the unit last started, in seconds of CLOCK_MONOTONIC, or None: the main process's
        start, else when the unit last became active (0 means never in systemd)."""
        for key in ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic"):
            value = state.get(key)
            if value:
                return value / 1e6
        return None


class _NotYet(Exception):
    """Internal: this attempt ended in "not yet"; ``phase`` is where it stands."""

    def __init__(self, phase, reason):
        super().__init__(reason)
        self.phase = phase
        self.reason = reason


class Gate:
    """One module call: :meth:`run` polls until ready, ``wait`` used up, or the deadline.

    ``client``: an :class:`_http.HttpClient` (no retries: the gate polls); ``api_key`` is added
    to its secrets. ``unit``: a :class:`Unit` or None. ``clock`` and ``sleep`` are CLOCK_MONOTONIC seconds and a pause.
    """

    def __init__(self, client, url, model, version=None, unit=None, deadline=900, wait=15,
                 interval=1.0, api_key=None, clock=time.monotonic, sleep=time.sleep, from_unit_start=True):
        self.client = client
        self.url = url.rstrip("/")
        self.model = model
        self.version = version
        self.unit = unit
        self.deadline = deadline
        self.wait = wait
        # False: the deadline counts from this call (a unit that has served for days is judged
        # by a window of this run, not by how long ago it started).
        self.from_unit_start = from_unit_start
        self.interval = interval
        self.headers = {}
        if api_key:
            self.headers["Authorization"] = "Bearer %s" % api_key
            if api_key not in client.secrets:
                client.secrets.append(api_key)  # masked in whatever the server sends back
        self.clock = clock
        self.sleep = sleep
        self.called = None
        self.anchor = None
        self.result = dict(ready=False, phase="starting", since_start_s=None, health_s=None,
                           completion_ms=None, version=None, models=None, unit_state=None)

    # -- words -------------------------------------------------------------------------------
    def _what(self):
        """The server, the unit and the model, as every message names them."""
        unit = " (unit %s)" % self.unit.name if self.unit else ""
        return "vLLM at %s%s, model %s" % (self.url, unit, self.model)

    def _since_text(self):
        return "since the unit started" if self._anchored_on_unit() else "since this check began"

    def _anchored_on_unit(self):
        return self.anchor is not None and self.anchor != self.called

    def _restarts_text(self):
        state = self.result["unit_state"] or {}
        count = state.get("NRestarts")
        if count:
            return "; systemd restarted it %d time%s" % (count, "" if count == 1 else "s")
        return ""

    def _with_journal(self, msg):
        """``msg`` with the journal's tail; the result gets ``journal`` (when there is a unit)."""
        if not self.unit:
            return msg
        lines, problem = self.unit.journal()
        self.result["journal"] = lines
        if problem:
            return "%s; no journal: %s" % (msg, problem)
        shown = last_lines("\n".join(lines), MSG_JOURNAL_LINES)
        return "%s; journal of %s (last lines; %d in 'journal'): %s" % (
            msg, self.unit.name, len(lines), shown or "empty")

    def _error(self, cls, msg, journal=False):
        """The error to raise, with the result so far (and the journal) as its details."""
        self.result["since_start_s"] = round(self.clock() - self.anchor, 3)
        if journal:
            msg = self._with_journal(msg)
        return cls(msg, **self.result)

    # -- one attempt -----------------------------------------------------------------------
    def _check_unit(self):
        try:
            state = self.unit.state()
        except UnitUnreadable as exc:
            raise self._error(UnitUnreadable, "%s: %s" % (self._what(), exc.msg))
        self.result["unit_state"] = state
        start = self.unit.start_monotonic(state) if self.from_unit_start else None
        self.anchor = start if start is not None else self.called
        active = state.get("ActiveState")
        # auto-restart: the server exited and systemd waits RestartSec to start it again (its
        # Restart= setting). Each such start would count the deadline afresh, so a server that
        # dies while loading would keep the gate waiting forever: it has failed.
        if active in DEAD_STATES or state.get("SubState") == "auto-restart":
            raise self._error(
                UnitDead,
                "%s: the unit is %s (SubState %s, Result %s), so the server will not answer; see why in "
                "its journal and start it again" % (self._what(), active, state.get("SubState"), state.get("Result")),
                journal=True)

    # -- the process the gate talks to ----------------------------------------------------------
    def _main_pid(self):
        return (self.result["unit_state"] or {}).get("MainPID") or 0

    def _open_checked(self, url, **options):
        """The gate's opener with a unit (:func:`_http.direct_open` over :meth:`_connect_to_unit`): straight to
        the URL's host, never through a proxy (the gate could not tell whose process answers behind one)."""
        options.pop("context", None)
        context = self.client.context_for(url) if urlsplit(url).scheme.lower() == "https" else None
        return _http.direct_open(url, connect=self._connect_to_unit, context=context, **options)

    def _connect_to_unit(self, host, port, timeout):
        """A TCP connection to ``host`` port ``port`` whose other end a process of the unit has accepted (its main
        process or one of its children): the gate's requests (the API key's among them) go over this socket, and
        over no other. Whoever else accepted it (a user that bound the port while vLLM loads, on the address
        the gate reached: ``localhost`` may be ``::1`` where vLLM holds 127.0.0.1) raises :class:`_PeerRefused`
        before a byte is sent; not accepted within ``timeout``, TimeoutError (not yet)."""
        sock = socket.create_connection((host, port), timeout)
        try:
            self._check_peer(sock, host, port, timeout)
        except BaseException:
            sock.close()
            raise
        return sock

    def _check_peer(self, sock, host, port, timeout):
        mine = socket_address(sock.getsockname())
        theirs = socket_address(sock.getpeername())
        where = "%s port %d" % (theirs[0], port) if str(theirs[0]) == host else \
            "%s port %d (%s)" % (host, port, theirs[0])
        if mine == theirs:  # a connect to a free port of the ephemeral range may meet itself
            raise ConnectionRefusedError("%s: nothing listens there" % where)
        started = time.monotonic()
        while True:
            # the far end of this connection is the socket whose own address is our peer and whose peer is us
            try:
                inode = socket_inode(theirs, mine)
            except OSError as exc:
                raise _PeerRefused("%s: which process holds the gate's connection cannot be read (%s), so nothing "
                                   "was sent to it" % (where, exc))
            waited = time.monotonic() - started
            if inode:
                break
            if inode is None and waited >= PEER_GRACE:
                raise _PeerRefused(
                    "the gate's connection to %s does not end at a socket of this node, so which process answers "
                    "cannot be told and nothing was sent to it: the gate asks only the unit's own server, at an "
                    "address of the node it runs on (%s must be an address of this node)" % (where, host))
            if waited >= timeout:
                # queued on a listener, not accepted yet: vLLM holds its port while it loads
                raise TimeoutError("%s: the connection was not accepted within %s s" % (where, timeout))
            time.sleep(PEER_POLL)
        main = self._main_pid()
        if self._held_by_unit(inode, main):
            return
        if self.unit is not None:
            # systemd may have restarted the unit since this attempt read it: judge by its main process now
            try:
                now = self.unit.state().get("MainPID") or 0
            except UnitUnreadable:
                now = main
            if now and now != main and self._held_by_unit(inode, now):
                self.result["unit_state"]["MainPID"] = now
                return
        holders, unreadable = socket_holders(inode)
        if holders:
            others = ", ".join(process_text(pid) for pid in sorted(holders))
            raise _PeerRefused(
                "%s is held by process %s, not by the unit's main process %d or its children: the gate's connection "
                "reached another program there, and nothing was sent to it (the API key was not sent)"
                % (where, others, main))
        if unreadable and main:
            # root may not read other users' descriptors here (no CAP_SYS_PTRACE: a container): the socket's owner
            # stands for its process - the unit's own user, never another one
            owner, unit_user = socket_uid(inode), process_uid(main)
            if owner is not None and owner == unit_user:
                return
            raise _PeerRefused(
                "%s: the gate's connection there (socket %d) belongs to user %s, not to the unit's user %s (which "
                "process holds it cannot be read here: root without CAP_SYS_PTRACE), so nothing was sent to it"
                % (where, inode, user_text(owner), user_text(unit_user)))
        raise _PeerRefused(
            "%s: no process %s holds the gate's connection there (socket %d), so nothing was sent to it%s"
            % (where, "this user can read" if unreadable else "of this node", inode,
               "; reading another user's /proc/<pid>/fd needs root (become)" if unreadable else ""))

    @staticmethod
    def _held_by_unit(inode, main):
        """Whether a process of the unit (``main`` or a child of it) holds the socket ``inode``. Another process
        cannot come to hold a socket the unit accepted, nor the unit one it did not, without the unit's doing
        (a descriptor passed on purpose): one holder of the unit's tree is enough, and the rest of /proc is
        read only to name who holds it otherwise."""
        if not main:
            return False
        # the main process first (vLLM's API server accepts there): the whole of /proc is read only when it does not
        holders, _unreadable = socket_holders(inode, [main])
        if not holders:
            holders, _unreadable = socket_holders(inode, process_tree(main) - {main})
        return bool(holders)

    def _call(self, phase, method, path, payload=None, decode=True, auth=False):
        """One request: ``(data or None, response)``; "not yet" as :class:`_NotYet`, anything
        waiting will not change as :class:`ServerRefused`. The API key goes only with ``auth``."""
        url = self.url + path
        headers = self.headers if auth else {}
        # with a unit, every request (not only those with the API key) goes over a connection that the unit's
        # own process accepted: another program on the port neither gets the key nor passes the gate
        opener = self._open_checked if self.unit else None
        try:
            if method == "POST":
                return self.client.post_json(url, payload, headers, opener=opener)
            if decode:
                return self.client.get_json(url, headers, opener=opener)
            return None, self.client.get(url, headers, opener=opener)
        except _PeerRefused as exc:
            raise self._error(PeerRefused, "%s: %s" % (self._what(), exc.reason))
        except _http.UnreachableError as exc:
            if exc.last_status is None and phase == "health":
                phase = "starting"  # nothing answers yet
            raise _NotYet(phase, "%s %s: %s" % (method, url, exc.reason))
        except _http.HttpStatusError as exc:
            hint = ""
            if exc.status in (401, 403):
                hint = ": give api_key, the server's --api-key" if not self.headers else \
                    ": api_key is not the server's --api-key"
            raise self._error(ServerRefused, "%s: %s %s answered %d%s%s" % (
                self._what(), method, url, exc.status,
                " (%s)" % exc.server_message if exc.server_message else "", hint))
        except _http.HttpError as exc:  # a certificate, a body that is not JSON
            raise self._error(ServerRefused, "%s: %s %s: %s" % (self._what(), method, url, exc.msg))

    def _attempt(self):
        """Ready (True), or :class:`_NotYet`, or a :class:`ReadyError`."""
        if self.unit:
            self._check_unit()
            if not self._main_pid():
                # ExecStartPre runs, say: no process of the unit to answer, so whatever answers is not it
                raise _NotYet("starting", "the unit has no main process yet (MainPID 0); its port is not asked "
                                          "before it has one")
        else:
            self.anchor = self.called
        _data, resp = self._call("health", "GET", "/health", decode=False)
        if resp.status != 200:
            raise _NotYet("health", "GET %s/health answered %d" % (self.url, resp.status))
        if self.result["health_s"] is None:
            self.result["health_s"] = round(self.clock() - self.anchor, 3)
        self.result["phase"] = "models"

        if self.version is not None:
            data, _resp = self._call("models", "GET", "/version")
            answered = data.get("version") if isinstance(data, dict) else None
            self.result["version"] = answered
            if not version_is(answered, self.version):
                raise self._error(
                    VersionMismatch,
                    "%s: %s/version answers %s, not %s: another server (an old one still running, or "
                    "another process on that port) is the one answering"
                    % (self._what(), self.url, answered, self.version))

        data, _resp = self._call("models", "GET", "/v1/models", auth=True)
        listed = data.get("data") if isinstance(data, dict) else None
        if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in listed):
            raise self._error(
                ServerRefused,
                "%s: %s/v1/models did not answer a list of models ({\"data\": [{\"id\": ...}]}): is this an "
                "OpenAI-compatible server?" % (self._what(), self.url))
        self.result["models"] = [m["id"] for m in listed]
        if self.model not in self.result["models"]:
            raise self._error(
                ModelMissing,
                "%s: the server does not serve the model; it serves: %s (the model's name is vLLM's "
                "--served-model-name, else the model path)"
                % (self._what(), ", ".join(self.result["models"]) or "no model"))
        self.result["phase"] = "completion"

        started = self.clock()
        data, _resp = self._call("completion", "POST", "/v1/completions",
                                 {"model": self.model, "prompt": PROMPT, "max_tokens": 1}, auth=True)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or len(choices) != 1:
            got = "%d choices" % len(choices) if isinstance(choices, list) else "no choices"
            raise self._error(
                ServerRefused,
                "%s: POST %s/v1/completions answered 200 with %s instead of one choice" % (self._what(), self.url, got))
        self.result["completion_ms"] = round((self.clock() - started) * 1000, 1)
        self.result["phase"] = "ready"
        return True

    # -- the call ----------------------------------------------------------------------------
    def run(self):
        """The result dict (``ready`` true, or false when ``wait`` is used up), or a ReadyError."""
        self.called = self.clock()
        self.anchor = self.called
        while True:
            try:
                self._attempt()
            except _NotYet as exc:
                self.result["phase"] = exc.phase
                reason = exc.reason
            else:
                self.result["ready"] = True
                self.result["since_start_s"] = round(self.clock() - self.anchor, 3)
                return self.result
            now = self.clock()
            since = now - self.anchor
            self.result["since_start_s"] = round(since, 3)
            if since >= self.deadline:
                raise self._error(
                    DeadlinePassed,
                    "%s: not ready after %d s %s, past the deadline of %d s: phase %s (last: %s)%s" % (
                        self._what(), since, self._since_text(), self.deadline, self.result["phase"], reason,
                        self._restarts_text()),
                    journal=True)
            left = min(self.called + self.wait - now, self.anchor + self.deadline - now)
            if left <= 0:
                self.result["msg"] = "%s: not ready yet after %d s %s (deadline %d s): phase %s (last: %s)%s" % (
                    self._what(), since, self._since_text(), self.deadline, self.result["phase"],
                    reason, self._restarts_text())
                return self.result
            self.sleep(min(self.interval, left))
