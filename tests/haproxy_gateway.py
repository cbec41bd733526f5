"""A real haproxy (Debian's package) started by a test, with the configuration the engine_gateway role
renders (``engine_gateway_haproxy_cfg``, plugins/filter/engine_gateway.py), on 127.0.0.1 and free ports, in
front of ``servers`` ({inventory name: port}) serving one model. Master-worker mode (``-W``, foreground) in
its own process group, stopped by its PID; read through the runtime API as the modules read it
(module_utils/serve/_haproxy). Used by tests/system/test_gateway_haproxy.py,
tests/roles/test_engine_service_gateway.py and bench/gateway.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _haproxy
from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.vllm_fakes import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
FILTERS = filter_plugin("engine_gateway")


class Gateway:
    """haproxy before ``servers`` for ``model`` in the directory ``root`` (made if missing); ``values``
    override the gateway's settings (engine_gateway_problems' keys)."""

    def __init__(self, root, servers, model="tiny", **values):
        assert os.path.exists(HAPROXY), "haproxy is not installed (requirements/system.txt; make test installs it)"
        self.root = self.dir = root
        root.mkdir(parents=True, exist_ok=True)
        self.socket = str(root / "admin.sock")
        self.state_file = str(root / "servers.state")
        self.port = free_port()
        self.backend = FILTERS.BACKEND_PREFIX + model
        hostvars = {host: {"engine_service_models": [{"name": model, "model": "x/" + model, "port": port}],
                           "engine_gateway_address": "127.0.0.1"} for host, port in servers.items()}
        fleet = FILTERS.engine_gateway_fleet(hostvars, list(servers))
        settings = {"models": [{"name": model, "port": self.port}], "bind": "127.0.0.1", "socket": self.socket,
                    "state_file": self.state_file, "metrics_port": free_port(), "check_interval": 1}
        settings.update(values)
        text = FILTERS.engine_gateway_haproxy_cfg(settings, fleet, "gateway")
        if os.geteuid() != 0:
            # Not root (CI runs these as root): haproxy cannot chroot nor change its user; the rest is the same.
            text = "\n".join(line for line in text.splitlines()
                             if line.strip().split(" ")[0] not in ("chroot", "user", "group")) + "\n"
        self.text = text
        self.cfg = root / "haproxy.cfg"
        self.cfg.write_text(text)
        self.log = open(root / "haproxy.log", "wb")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen([HAPROXY, "-W", "-f", str(self.cfg), "-p", str(root / "haproxy.pid")],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.worker = self.wait_worker(None)
        except BaseException:
            self.stop()
            raise

    def output(self):
        return (self.root / "haproxy.log").read_text(errors="replace")

    def wait_worker(self, old, seconds=15):
        """The PID of the worker answering on the admin socket, once it is another than ``old``."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                info = _haproxy.command(self.socket, "show info", timeout=2)
                pid = int([line.split(":", 1)[1] for line in info.splitlines() if line.startswith("Pid:")][0])
                if pid != old:
                    return pid
            except (_haproxy.HaproxyError, IndexError, ValueError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("no haproxy worker (other than %s) answers on %s: %s"
                                     % (old, self.socket, self.output()))
            time.sleep(0.05)

    def statuses(self):
        """{server: (status, total sessions)} of the model's backend, as the modules read them."""
        return {row["server"]: (row["status"], row["total"]) for row in _haproxy.servers(self.socket)
                if row["backend"] == self.backend}

    def status(self, host):
        return self.statuses()[host][0]

    def wait_status(self, host, prefix, seconds=20):
        """Seconds until haproxy reports ``host``'s status starting with ``prefix`` (polled every 0.05 s); "UP"
        is fully up, not "UP 1/2" (a server haproxy has not checked yet, or whose last check failed)."""
        start = time.monotonic()
        while not (self.status(host) == prefix if prefix == "UP" else self.status(host).startswith(prefix)):
            if time.monotonic() - start > seconds:
                raise AssertionError("%s is still %s after %d s, not %s" % (host, self.status(host), seconds, prefix))
            time.sleep(0.05)
        return time.monotonic() - start

    def wait_up(self, *hosts, seconds=30):
        for host in hosts:
            self.wait_status(host, "UP", seconds)

    def backend_stat(self, field):
        """A counter of the backend's line of ``show stat`` (wretr: retries, wredis: redispatches)."""
        text = _haproxy.command(self.socket, "show stat")
        header = text[2:].splitlines()[0].split(",")
        for line in text.splitlines()[1:]:
            cells = line.split(",")
            if cells[:2] == [self.backend, "BACKEND"]:
                return int(cells[header.index(field)] or 0)
        raise AssertionError("no backend %s in show stat: %s" % (self.backend, text))

    def reload(self):
        """SIGUSR2 to the master; returns once a new worker answers on the admin socket."""
        old = self.worker
        os.kill(self.proc.pid, signal.SIGUSR2)
        self.worker = self.wait_worker(old)
        return self.worker

    def stop(self):
        """The master and its workers (its process group), by the master's PID."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.log.close()
