# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

HAProxy's runtime API on its admin socket (a Unix socket, ``stats socket ... level admin`` in the
configuration engine_gateway renders): one command per connection (the socket's non-interactive
mode), the servers read from ``show stat`` (CSV), a server's administrative state set with
``set server <backend>/<server> state ready|drain|maint``, and the servers' state saved with ``show
servers state`` into the file ``load-server-state-from-file`` reads after a reload.

Used by the modules haproxy_server (drain, ready, maint, save) and haproxy_info (read). Nothing here
talks to the network: the socket is on the gateway host, root-only.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import re
import socket
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import write_atomic, write_json_atomic

STATES = ("ready", "drain", "maint")
# HAProxy's proxy and server names: letters, digits and "-_.:" (cfgparse's invalid_char check)
NAME_RE = re.compile(r"[A-Za-z0-9_.:-]+")
# `show stat` type 4: servers only
SHOW_SERVERS = "show stat -1 4 -1"


class HaproxyError(LlmfleetError):
    """The admin socket cannot be reached, or refused a command."""


def command(path, text, timeout=10.0):
    """Send one command to the admin socket at ``path`` and return its whole answer (the socket
    closes the connection after it). Raises HaproxyError naming the socket when it cannot be used."""
    if "\n" in text or "\r" in text or ";" in text:
        raise HaproxyError("haproxy: refusing a command with a newline or ';' (%r)" % text)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall((text + "\n").encode("ascii"))
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (OSError, socket.timeout) as exc:
        raise HaproxyError("haproxy: the admin socket %s did not answer %r: %s (is haproxy running with the "
                           "collection's configuration, and is this run root?)" % (path, text.split(" ")[0], exc),
                           socket=path)
    finally:
        sock.close()
    return b"".join(chunks).decode("utf-8", "replace")


def servers(path, timeout=10.0):
    """Every server of every backend: a list of ``{backend, server, status, current, queued, total,
    check, address, weight}`` (``status`` as HAProxy says it: UP, DOWN, DRAIN, MAINT, "UP 1/2", "no
    check", ...; ``current`` the sessions it holds now, the ones a drain waits for)."""
    text = command(path, SHOW_SERVERS, timeout)
    if not text.startswith("# "):
        raise HaproxyError("haproxy: %s answered %r to %r, not the CSV of show stat" % (path, text[:200], SHOW_SERVERS),
                           socket=path)
    rows = csv.DictReader(io.StringIO(text[2:]))
    out = []
    for row in rows:
        if row.get("svname") in ("FRONTEND", "BACKEND") or not row.get("pxname"):
            continue
        out.append({
            "backend": row["pxname"],
            "server": row["svname"],
            "status": row.get("status", ""),
            "current": _int(row.get("scur")),
            "queued": _int(row.get("qcur")),
            "total": _int(row.get("stot")),
            "check": row.get("check_status", ""),
            "address": row.get("addr", ""),
            "weight": _int(row.get("weight")),
        })
    return out


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def split_name(name):
    """``backend/server`` -> (backend, server), both checked against HAProxy's name characters."""
    backend, sep, server = str(name).partition("/")
    if not sep or not NAME_RE.fullmatch(backend) or not NAME_RE.fullmatch(server):
        raise HaproxyError("haproxy: %r is not <backend>/<server> (letters, digits and -_.: in each)" % name)
    return backend, server


def find(known, names):
    """The rows of ``known`` (servers()) for ``names`` (``backend/server``), in their order; raises naming
    every one the gateway does not have."""
    index = {"%s/%s" % (row["backend"], row["server"]): row for row in known}
    missing = [name for name in names if name not in index]
    if missing:
        raise HaproxyError("haproxy: the gateway has no server %s (it has: %s); run engine_gateway so that its "
                           "configuration lists the fleet's servers" % (
                               ", ".join(missing), ", ".join(sorted(index)) or "none"), missing=missing)
    return [index[name] for name in names]


# srv_admin_state of `show servers state`: the states `set server ... state` forces (SRV_ADMF_FMAINT, _FDRAIN)
FORCED_MAINT = 0x01
FORCED_DRAIN = 0x08


def _servers_state(path, timeout):
    """The answer to ``show servers state`` (its format version on the first line), checked."""
    text = command(path, "show servers state", timeout)
    if not text.splitlines() or not text.splitlines()[0].strip().isdigit():
        raise HaproxyError("haproxy: %s answered %r to show servers state" % (path, text[:200]), socket=path)
    return text


def admin_states(path, timeout=10.0):
    """``{"<backend>/<server>": "maint" | "drain" | "ready"}``: what ``set server ... state`` last asked of each
    server, from the admin bits of ``show servers state``. The status of ``show stat`` cannot tell: a drained
    server whose checks fail shows DOWN, and stays drained when it comes back."""
    text = _servers_state(path, timeout)
    lines = text.splitlines()
    header = None
    out = {}
    for line in lines[1:]:
        if line.startswith("# "):
            header = line[2:].split()
            continue
        fields = line.split()
        if not header or len(fields) < len(header) - 1:
            continue
        row = dict(zip(header, fields))
        bits = _int(row.get("srv_admin_state"))
        state = "maint" if bits & FORCED_MAINT else "drain" if bits & FORCED_DRAIN else "ready"
        out["%s/%s" % (row.get("be_name"), row.get("srv_name"))] = state
    return out


def set_state(path, name, state, timeout=10.0):
    """``set server <backend>/<server> state <state>``; an answer other than empty is HAProxy's refusal."""
    if state not in STATES:
        raise HaproxyError("haproxy: state %r is not one of %s" % (state, ", ".join(STATES)))
    backend, server = split_name(name)
    answer = command(path, "set server %s/%s state %s" % (backend, server, state), timeout).strip()
    if answer:
        raise HaproxyError("haproxy: setting %s/%s to %s was refused: %s" % (backend, server, state, answer),
                           socket=path)


def wait_idle(path, names, seconds, interval=0.5, clock=time.monotonic, sleep=time.sleep):
    """Wait until the servers ``names`` hold no session and have none queued, at most ``seconds``.
    Returns (idle, waited seconds, the rows last read)."""
    start = clock()
    while True:
        rows = find(servers(path), names)
        busy = [row for row in rows if row["current"] or row["queued"]]
        waited = clock() - start
        if not busy or waited >= seconds:
            return not busy, round(waited, 2), rows
        sleep(min(interval, max(seconds - waited, 0)))


def save_state(path, state_file, timeout=10.0):
    """Write ``show servers state`` (every backend) to ``state_file``, root-only, atomically: what
    ``load-server-state-from-file global`` gives the servers back after a reload (a drained server stays
    drained). Returns the number of servers saved."""
    text = _servers_state(path, timeout)
    lines = text.splitlines()
    directory = os.path.dirname(state_file) or "."
    if not os.path.isdir(directory):
        raise HaproxyError("haproxy: the directory of the state file %s does not exist" % state_file)
    write_atomic(state_file, (text if text.endswith("\n") else text + "\n").encode("utf-8"), mode=0o600)
    return len([line for line in lines[1:] if line.strip() and not line.startswith("#")])


# The servers a rollout drained and has not made ready yet (the "mark", a root-only JSON list beside the state
# file): what a later run makes ready after a passing gate. A drain an operator made through the socket is not
# in it, and is left alone.
def read_marks(mark):
    """The server names (``backend/server``) listed in ``mark``; empty when it does not exist."""
    try:
        with open(mark, "rb") as handle:
            data = json.loads(handle.read(1 << 20).decode("utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise HaproxyError("haproxy: the rollout's record of drained servers %s cannot be read: %s" % (mark, exc))
    if not isinstance(data, list) or not all(isinstance(name, str) for name in data):
        raise HaproxyError("haproxy: the rollout's record of drained servers %s is not a list of names" % mark)
    return data


def write_marks(mark, names):
    directory = os.path.dirname(mark) or "."
    if not os.path.isdir(directory):
        raise HaproxyError("haproxy: the directory of the rollout's record %s does not exist" % mark)
    write_json_atomic(mark, sorted(set(names)), mode=0o600)


@contextlib.contextmanager
def held(mark):
    """The gateway's lock (``<mark>.lock``, flock) for the read, decide and set of one change: two nodes'
    drains at once (a batch of the rollout) see each other's, and the record is not written by two at once."""
    if not mark:
        yield
        return
    fd = os.open(mark + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _in_rotation(row, admin):
    name = "%s/%s" % (row["backend"], row["server"])
    return admin.get(name, "ready") == "ready" and str(row["status"]).startswith("UP")


def last_ones(known, admin, names):
    """For a drain of ``names``: ``(alone, last)``, the backends where no other server exists (the model's only
    server: its requests fail while it is out) and those where other servers exist but none of them is in
    rotation (UP and ready) - draining would take the model off the gateway while it is UP elsewhere
    (another node of the same batch drained, a node down). Each ``{backend, servers: {name: status}}``. A backend
    none of whose drained servers is in rotation is neither: the drain takes nothing from the model's clients (a
    new fleet's first rollout, every server DOWN until its engine starts)."""
    alone, last = [], []
    for backend in sorted({split_name(name)[0] for name in names}):
        drained = [row for row in known if row["backend"] == backend and "%s/%s" % (backend, row["server"]) in names]
        if not any(_in_rotation(row, admin) for row in drained):
            continue
        others = [row for row in known if row["backend"] == backend and "%s/%s" % (backend, row["server"]) not in names]
        if not others:
            alone.append({"backend": backend, "servers": {}})
        elif not any(_in_rotation(row, admin) for row in others):
            last.append({"backend": backend, "servers": {
                "%s/%s" % (backend, row["server"]): "%s (%s)" % (row["status"], admin.get(
                    "%s/%s" % (backend, row["server"]), "ready")) for row in others}})
    return alone, last


def plan(known, admin, names, state, marks=None, only_marked=False):
    """What a change of ``names`` to ``state`` does, on what the gateway holds (``known``: servers(),
    ``admin``: admin_states()): ``{set: [names to set], maint: [names left in maintenance], marks: [the record
    after it]}``. A server an operator put in maintenance is left there whatever ``state`` asks (the rollout's
    drain would end the maintenance, its ready put it in rotation); with ``only_marked``, a ready is for the
    servers the record lists (a rollout drained them), never an operator's drain."""
    find(known, names)
    marks = list(marks or [])
    maint = [name for name in names if admin.get(name) == "maint"]
    wanted = [name for name in names if name not in maint]
    if only_marked:
        wanted = [name for name in wanted if name in marks and admin.get(name) == "drain"]
    to_set = [name for name in wanted if state and admin.get(name, "ready") != state]
    if state == "drain":
        marks = sorted(set(marks) | set(wanted))
    elif state == "ready":
        # named servers leave the record: made ready, or left in an operator's maintenance, or no longer drained
        marks = sorted(set(marks) - set(names))
    return {"set": to_set, "maint": maint, "wanted": wanted, "marks": marks}
