"""The serving nodes of bench/fleet.py: a share of the simulated nodes serve one pinned model each
through ``llmfleet.engines.engine_service``, under the role tests' fake systemd.

All hosts are local connections of one ansible-playbook process, so each serving host gets its own
fake systemd through its interpreter: ``ansible_python_interpreter`` is a small wrapper under the
host's bench directory (``<work>/hosts/<name>/python``) that exports ``FAKE_SYSTEMD_STATE``,
``FAKE_SYSTEMD_UNIT_DIR`` (that host's), puts ``tests/roles/fakebin`` (``systemctl``,
``journalctl``) first on ``PATH``, keeps the loopback out of any proxy, and execs the controller's
Python. The modules' children (``command``'s and ``systemd_service``'s ``systemctl``) inherit it.
The engines are the fake upstream's vllm wheels, whose ``vllm serve`` is a fake OpenAI-compatible
server (``tests/upstream/pkgsrc/vllm/fake_server.py``), started by the fake systemd as real
processes, as the host's service user; every pid it starts is in ``<state>/pids.log``, whence
``_fakesystemd.kill_recorded`` kills them.
The model is the fake hub's ``llmfleet-test/tiny-chat`` pinned to the commit of its tag v1, staged
from the fake hub (``<upstream>/hub``) and served offline; its lock is kept in a directory of the
controller (``engine_service_model_lock_dir``), so that a converged run asks the hub nothing.

Each serving host has a service user of its own (``llmfleet-bench<NNN>``, NNN its node number):
engine_service gives the user the home ``<engine_service_root>/serve``, and all the simulated nodes
share this machine's user database, so one user for all would have its home moved by every node's
rollout (``usermod`` refuses while another node's engine runs as that user). A user that exists is
used as it is; a missing one is made by the rollout (engine_service's user task), and removed at the
end (``userdel``, then its group), as tests/roles/conftest.py's ``service_user`` does.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import pwd
import shlex
import socket
import subprocess
import sys

from bench.common import REPO, http_json
from tests.roles.fakebin import _fakesystemd

FAKEBIN = REPO / "tests" / "roles" / "fakebin"
MODEL = "llmfleet-test/tiny-chat"
MODEL_TAG = "v1"
USER_PREFIX = "llmfleet-bench"
UNIT_PREFIX = "llmfleet-vllm-"
REAL_UNIT_DIR = pathlib.Path("/etc/systemd/system")


def pinned_commit(upstream_url: str, repo: str = MODEL, tag: str = MODEL_TAG) -> str:
    """The 40-hex commit the fake hub's tag points at (asked through its control API, never logged)."""
    return http_json(upstream_url + "/_control/hub_catalog")["repos"][repo]["tags"][tag]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports of 127.0.0.1 (all held open while they are picked)."""
    socks = []
    try:
        for _index in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


class Host:
    """One serving host's bench directory: its interpreter wrapper and its fake systemd's dirs."""

    def __init__(self, base: pathlib.Path, name: str, index: int, port: int):
        self.name = name
        self.base = base
        self.python = base / "python"
        self.state = base / "systemd-state"
        self.unit_dir = base / "units"
        self.secrets_dir = base / "secrets"
        self.model_name = "m%03d" % index
        self.user = "%s%03d" % (USER_PREFIX, index)
        self.unit = "%s%s.service" % (UNIT_PREFIX, self.model_name)
        self.port = port

    def make(self) -> Host:
        for folder in (self.base, self.state, self.unit_dir):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o755)
        self.python.write_text("\n".join([
            "#!/bin/sh",
            "# %s's interpreter (bench/serving.py): its own fake systemd, then the controller's Python" % self.name,
            "export FAKE_SYSTEMD_STATE=%s" % shlex.quote(str(self.state)),
            "export FAKE_SYSTEMD_UNIT_DIR=%s" % shlex.quote(str(self.unit_dir)),
            'export PATH=%s:"$PATH"' % shlex.quote(str(FAKEBIN)),
            "export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost",
            'exec %s "$@"' % shlex.quote(sys.executable),
            ""]))
        self.python.chmod(0o755)
        return self

    def hostvars(self, revision: str) -> dict:
        return {
            "ansible_python_interpreter": str(self.python),
            "engine_service_models": [{"name": self.model_name, "model": MODEL, "revision": revision,
                                       "port": self.port}],
            "engine_service_unit_dir": str(self.unit_dir),
            "engine_service_secrets_dir": str(self.secrets_dir),
            "engine_service_user": self.user,
            # the role runs the systemctl it is given, by its absolute path (never one found on PATH)
            "engine_service_systemctl": str(FAKEBIN / "systemctl"),
        }

    def env(self) -> dict:
        env = dict(os.environ, FAKE_SYSTEMD_STATE=str(self.state), FAKE_SYSTEMD_UNIT_DIR=str(self.unit_dir),
                   FAKE_SYSTEMD_UNLOGGED="1", no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
        env["PATH"] = "%s%s%s" % (FAKEBIN, os.pathsep, env.get("PATH", ""))
        return env

    def calls(self) -> list[list[str]]:
        path = self.state / "calls.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def show(self, *props: str) -> dict:
        """``systemctl show`` of this host's unit, as its fake systemd answers (not logged)."""
        argv = [str(FAKEBIN / "systemctl"), "show", self.unit] + [w for p in props for w in ("-p", p)]
        out = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=60, check=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def crossing_problem(path: pathlib.Path) -> str | None:
    """Why a service user could not reach ``path`` (a directory on the way closed to others), or None.
    The engines run as service users from the nodes' roots under the bench's work directory."""
    for folder in [path, *path.parents]:
        if folder.exists() and not folder.stat().st_mode & 0o001:
            return ("serving nodes need a work directory their service users can cross, and %s is closed to"
                    " others (mode %o): use --work under a directory open to others, or --serving 0"
                    % (folder, folder.stat().st_mode & 0o777))
    return None


def group_vars(upstream_url: str, lock_dir: pathlib.Path, ready_timeout: int = 60) -> dict:
    """What engine_service needs on this machine, the same for every serving host."""
    return {
        "engine_service_ready_timeout": ready_timeout,
        # the fake vLLM, like vLLM 0.32.0, takes the whole --shutdown-timeout on every stop
        "engine_service_shutdown_timeout": 1,
        "engine_service_hf_endpoint": upstream_url + "/hub",
        # the pinned model's lock (read back by every later run: the hub is not asked again)
        "engine_service_model_lock_dir": str(lock_dir),
        "engine_service_environment": {"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_LOAD_SECONDS": "0.2"},
    }


def _get(port: int, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def check_serving(hosts: list[Host]) -> list[dict]:
    """Each serving host's model answers on its port (/health 200, /v1/models lists it), its unit is
    in its own unit directory only, and its fake systemd got the modules' systemctl calls (each naming
    only its own unit). Raises RuntimeError naming every host that does not."""
    problems, out = [], []
    for host in hosts:
        why = []
        try:
            health, _body = _get(host.port, "/health")
            status, body = _get(host.port, "/v1/models")
            ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])] if status == 200 else []
        except (OSError, ValueError) as exc:
            health, status, ids = None, None, []
            why.append("port %s: %s" % (host.port, exc))
        if health != 200:
            why.append("/health answered %s" % health)
        if host.model_name not in ids:
            why.append("/v1/models lists %s, not %s" % (ids, host.model_name))
        units = sorted(p.name for p in host.unit_dir.glob(UNIT_PREFIX + "*.service"))
        if units != [host.unit]:
            why.append("its unit directory holds %s" % units)
        calls = [c for c in host.calls() if c and c[0] == "systemctl"]
        named = {w for c in calls for w in c[1:] if w.startswith(UNIT_PREFIX)}
        if not calls or named - {host.unit}:
            why.append("its fake systemd saw %d systemctl calls, naming %s" % (len(calls), sorted(named)))
        main_pid = host.show("MainPID", "ActiveState")
        if main_pid.get("ActiveState") != "active":
            why.append("%s is %s" % (host.unit, main_pid.get("ActiveState")))
        if (REAL_UNIT_DIR / host.unit).exists():
            why.append("%s landed in %s" % (host.unit, REAL_UNIT_DIR))
        out.append({"host": host.name, "port": host.port, "health": health, "models": ids,
                    "main_pid": int(main_pid.get("MainPID") or 0), "systemctl_calls": len(calls)})
        if why:
            problems.append("%s: %s" % (host.name, "; ".join(why)))
    if problems:
        raise RuntimeError("serving nodes that do not serve as they should:\n  " + "\n  ".join(problems))
    return out


# --------------------------------------------------------------------------------------------
# Processes and the service user.


def stop_all(states) -> int:
    """Kill what the fake systemd of each of ``states`` started; returns how many processes were
    recorded in all. Raises RuntimeError when some are still alive."""
    left, recorded = [], 0
    for state in states:
        path = pathlib.Path(state) / "pids.log"
        recorded += len(path.read_text().splitlines()) if path.exists() else 0
        left += _fakesystemd.kill_recorded(state)
    if left:
        raise RuntimeError("processes still alive after SIGKILL: %s" % left)
    return recorded


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def remove_user(name: str) -> None:
    """userdel the service user the bench's rollout made, and its group of the same name."""
    if user_exists(name):
        subprocess.run(["userdel", name], check=True, capture_output=True, timeout=60)
    if subprocess.run(["getent", "group", name], capture_output=True, check=False).returncode == 0:
        subprocess.run(["groupdel", name], check=True, capture_output=True, timeout=60)
