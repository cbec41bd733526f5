"""A fake HAProxy admin socket for the fast tests where Debian's haproxy is not installed: a Unix socket in
non-interactive mode (one command per connection, then closed, as ``stats socket ... level admin`` answers)
that knows the commands the collection sends (module_utils/serve/_haproxy) and answers them in HAProxy's own
formats and words:

- ``show stat -1 4 -1``: the servers' CSV (``# pxname,svname,...`` header, the columns in HAProxy's order);
- ``show servers state``: format version 1, its ``# be_id be_name ...`` header, one line per server with
  ``srv_admin_state`` as HAProxy's bits (0x01 forced maintenance, 0x08 forced drain, 0x20 maintenance for
  want of an address);
- ``set server <backend>/<server> state ready|drain|maint`` with HAProxy's semantics (cli_parse_set_server:
  ready clears forced maint and drain; drain sets drain and clears forced maint; maint sets maint and clears
  drain), ``No such backend.`` / ``No such server.`` otherwise;
- anything else: HAProxy's ``Unknown command`` answer.

A server's status is what HAProxy's stats show: MAINT / ``MAINT (resolution)`` before DRAIN before the health
(UP or DOWN). Tests set ``health`` and ``current`` (sessions) themselves; every command is logged in
``commands``."""

from __future__ import annotations

import os
import socket
import threading

FMAINT, FDRAIN, RMAINT = 0x01, 0x08, 0x20
STAT_COLUMNS = ("pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,"
                "status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,"
                "type,rate,rate_lim,rate_max,check_status,check_code,check_duration,addr").split(",")
STATE_HEADER = ("be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
                "srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state "
                "srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl "
                "srv_check_port srv_check_addr srv_agent_addr srv_agent_port")


class Server:
    def __init__(self, address, health="UP", admin=0):
        self.address, self.health, self.admin = address, health, admin
        self.current = self.queued = self.total = 0

    def status(self):
        if self.admin & RMAINT:
            return "MAINT (resolution)"
        if self.admin & FMAINT:
            return "MAINT"
        if self.admin & FDRAIN:
            return "DRAIN" if self.health == "UP" else self.health
        return self.health


class FakeHaproxy:
    """``backends``: {backend: {server: "host:port"}}; started at once, stopped by ``stop()``."""

    def __init__(self, path, backends):
        self.path = str(path)
        self.backends = {name: {server: Server(address) for server, address in servers.items()}
                         for name, servers in backends.items()}
        self.commands = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def server(self, name):
        backend, _sep, server = name.partition("/")
        return self.backends[backend][server]

    def admin(self, name):
        bits = self.server(name).admin
        return "maint" if bits & FMAINT else "drain" if bits & FDRAIN else "ready"

    def _serve(self):
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                text = data.decode("ascii", "replace").strip()
                with self.lock:
                    self.commands.append(text)
                    answer = self.answer(text)
                conn.sendall(answer.encode("utf-8"))

    def answer(self, text):
        words = text.split()
        if words == ["show", "stat", "-1", "4", "-1"]:
            return self._stat()
        if words == ["show", "servers", "state"]:
            return self._state()
        if words[:2] == ["set", "server"] and len(words) == 5 and words[3] == "state":
            return self._set(words[2], words[4])
        return "Unknown command: '%s'\n" % (words[0] if words else "")

    def _stat(self):
        lines = ["# " + ",".join(STAT_COLUMNS) + ","]
        for backend, servers in self.backends.items():
            for name, server in servers.items():
                row = dict.fromkeys(STAT_COLUMNS, "")
                row.update(pxname=backend, svname=name, qcur=server.queued, scur=server.current, stot=server.total,
                           status=server.status(), weight=0 if server.admin & (FMAINT | FDRAIN | RMAINT) else 1,
                           type=2, check_status="L7OK" if server.health == "UP" else "L4CON",
                           addr="" if server.admin & RMAINT else server.address)
                lines.append(",".join(str(row[column]) for column in STAT_COLUMNS) + ",")
        return "\n".join(lines) + "\n\n"

    def _state(self):
        lines = ["1", "# " + STATE_HEADER]
        for be_id, (backend, servers) in enumerate(self.backends.items(), start=3):
            for srv_id, (name, server) in enumerate(servers.items(), start=1):
                address, port = server.address.rsplit(":", 1)
                lines.append("%d %s %d %s %s %d %d 1 1 10 6 3 4 6 0 0 0 - %s - 0 0 - - 0" % (
                    be_id, backend, srv_id, name, "0.0.0.0" if server.admin & RMAINT else address,
                    2 if server.health == "UP" else 0, server.admin, port))
        return "\n".join(lines) + "\n\n"

    def _set(self, name, state):
        backend, _sep, server_name = name.partition("/")
        if backend not in self.backends:
            return "No such backend.\n"
        server = self.backends[backend].get(server_name)
        if server is None:
            return "No such server.\n"
        if state == "ready":
            server.admin &= ~(FMAINT | FDRAIN)
        elif state == "drain":
            server.admin = (server.admin | FDRAIN) & ~FMAINT
        elif state == "maint":
            server.admin = (server.admin | FMAINT) & ~FDRAIN
        else:
            return "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n"
        return "\n"

    def stop(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the serving thread
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
