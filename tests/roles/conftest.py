"""Fixtures of the fast role tests: the engine_service role run by ansible-playbook on this machine
(connection local) against a fake systemd (tests/roles/fakebin), fake engine environments
(tests/roles/engines.py) and the fake ``vllm serve`` started as real processes.

``node`` gives one node: its root (engines, serve and cache directories), the fake systemd's state,
unit and secrets directories, and ``node.play(...)``. See tests/roles/README.md.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import pathlib
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _trust
from tests.roles import engines
from tests.roles.fakebin import _fakesystemd
from tests.unit.plugins.vllm_fakes import free_port

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
FAKEBIN = HERE / "fakebin"
# LLMFLEET_ROLE_TESTS_COLLECTIONS: run the layer against another copy of the collection
COLLECTIONS = pathlib.Path(os.environ.get("LLMFLEET_ROLE_TESTS_COLLECTIONS") or REPO / "build" / "collections")
PYTHON = sys.executable
ANSIBLE_PLAYBOOK = pathlib.Path(PYTHON).parent / "ansible-playbook"
# The node roots: a directory the role's own privilege rule (module_utils/common/_trust.py) trusts, which
# the service user can also cross (every directory above it searchable by others). The clone's
# build/role-tests when its path is so; else (a clone in a 0700 home, or under a directory others
# can write) a fresh directory of this run in /var/tmp or /tmp: there a root-owned entry of the
# sticky, root-owned directory is as closed as the rule needs, and its random name cannot be taken
# first. LLMFLEET_ROLE_TESTS_DIR overrides the choice (it must pass the same check).
_MADE_ROOTS = []


def _roots_problem(path: pathlib.Path):
    """Why ``path`` cannot hold the node roots (None: it can)."""
    problem = _trust.untrusted_component(str(path))
    if problem:
        return problem
    for folder in [path] + list(path.parents):
        if folder.exists() and not folder.stat().st_mode & stat.S_IXOTH:
            return "%s is %s: the service user cannot cross it" % (folder, stat.filemode(folder.stat().st_mode))
    return None


def _pick_roots() -> pathlib.Path:
    chosen = os.environ.get("LLMFLEET_ROLE_TESTS_DIR")
    if chosen:
        path = pathlib.Path(chosen)
        path.mkdir(parents=True, exist_ok=True)
        problem = _roots_problem(path)
        if problem:
            raise RuntimeError("LLMFLEET_ROLE_TESTS_DIR=%s cannot hold the role tests' node roots: %s" % (chosen, problem))
        return path
    tried = []
    in_clone = REPO / "build" / "role-tests"
    problem = _roots_problem(in_clone)
    if problem is None:
        in_clone.mkdir(parents=True, exist_ok=True)
        in_clone.chmod(0o755)
        if _roots_problem(in_clone) is None:
            return in_clone
    tried.append("%s (%s)" % (in_clone, problem))
    for top in ("/var/tmp", tempfile.gettempdir()):
        if not os.path.isdir(top):
            continue
        made = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-role-tests-", dir=top))
        made.chmod(0o755)
        problem = _roots_problem(made)
        if problem is None:
            _MADE_ROOTS.append(made)
            return made
        made.rmdir()
        tried.append("%s (%s)" % (made, problem))
    raise RuntimeError("no directory can hold the role tests' node roots (tried %s): set LLMFLEET_ROLE_TESTS_DIR to a "
                       "directory whose every parent is root's, closed to others and searchable" % "; ".join(tried))


_ROOTS = []


def roots() -> pathlib.Path:
    """The node roots of this pytest run, chosen once (see _pick_roots)."""
    if not _ROOTS:
        _ROOTS.append(_pick_roots())
    return _ROOTS[0]


@pytest.fixture(scope="session", autouse=True)
def _remove_made_roots():
    yield
    for made in _MADE_ROOTS:
        shutil.rmtree(str(made), ignore_errors=True)


# Where the role's units and secrets go by default: a test checks that nothing of its own landed there.
REAL_UNIT_DIR = pathlib.Path("/etc/systemd/system")
REAL_SECRETS_DIR = pathlib.Path("/etc/llmfleet/engine_service")
UNIT_PREFIX = "llmfleet-vllm-"


def _uid_of(pid: int):
    try:
        with open("/proc/%d/status" % pid, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def http_json(port: int, path: str, method="GET", body=None, headers=None, timeout=10):
    """(status, decoded JSON or None) of one request to 127.0.0.1:port (no proxy)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        head = dict(headers or {})
        if data is not None:
            head["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=head)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)
    finally:
        conn.close()


class Run:
    """One ansible-playbook run: ``rc``, ``output`` (stdout and stderr), ``record`` (every task
    result, the recap and set_stats, from tests/roles/callback_plugins), ``changed`` ({host:
    number of changed tasks}), ``calls`` (the argv lists of systemctl, journalctl and fake-lb during
    this run), ``log`` (the file with the command and the output)."""

    def __init__(self, rc, output, record, calls, log):
        self.rc = rc
        self.output = output
        self.record = record
        self.calls = calls
        self.log = log
        self.stats = record.get("stats", {})
        self.changed = {host: s.get("changed", 0) for host, s in self.stats.items()}
        self.failures = {host: s.get("failures", 0) for host, s in self.stats.items()}
        self.journals = {}

    def __repr__(self):
        return "<Run rc=%s changed=%s log=%s>" % (self.rc, self.changed, self.log)

    @property
    def tasks(self):
        return self.record.get("tasks", [])

    @property
    def result(self):
        """engine_service_result of the node (set_stats), or None."""
        return (self.record.get("custom_stats", {}).get("engine_service") or {}).get("node")

    def task(self, name_part):
        """The results of the tasks whose name contains ``name_part``."""
        return [t for t in self.tasks if name_part in t["task"]]

    def failed_tasks(self):
        return [t for t in self.tasks if t["status"] == "failed" and not t.get("ignore_errors")]

    def changed_tasks(self):
        return [t["task"] for t in self.tasks if t["changed"]]

    def verbs(self, *verbs, unit=None):
        """The systemctl calls whose verb is one of ``verbs`` (and that name ``unit``)."""
        out = []
        for call in self.calls:
            if call[0] != "systemctl":
                continue
            words = [w for w in call[1:] if not w.startswith("-")]
            if words and words[0] in verbs and (unit is None or unit in words[1:]):
                out.append(call)
        return out

    def index(self, predicate, start=0):
        """Index in ``calls`` of the first call from ``start`` on for which ``predicate(call)`` holds."""
        for i in range(start, len(self.calls)):
            if predicate(self.calls[i]):
                return i
        raise AssertionError("no such call in %s" % json.dumps(self.calls[start:], indent=0))

    def explain(self):
        """What to print when an assertion on this run fails."""
        failed = [(t["task"], t["result"].get("msg")) for t in self.failed_tasks()]
        journals = "".join("\n--- journal of %s (last lines):\n%s" % (unit, "\n".join(text.splitlines()[-15:]))
                           for unit, text in self.journals.items())
        return "rc %s, failed tasks %s\nlog: %s%s\n--- output (end):\n%s" % (
            self.rc, json.dumps(failed, indent=1), self.log, journals, self.output[-5000:])


class Node:
    """One fake node for the role tests (see the module's docstring)."""

    def __init__(self, tmp_path: pathlib.Path, user: str):
        self.tmp = tmp_path
        self.user = user
        self.tag = secrets.token_hex(3)
        self.base = pathlib.Path(tempfile.mkdtemp(prefix="node-", dir=str(roots())))
        self.base.chmod(0o755)
        self.root = self.base / "root"
        self.state = self.base / "systemd-state"
        self.unit_dir = self.base / "units"
        self.secrets_dir = self.base / "secrets"
        for folder in (self.root, self.state, self.unit_dir):
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)
        self.runs = 0
        self.models = [self.model()]
        # the units' environment in every play (engine_service_environment); extra_vars add to it
        self.environment = {"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_LOAD_SECONDS": "0.2"}
        self._real = self._real_files()

    # -- the node's contents -------------------------------------------------------------------
    def model(self, prefix="m", **overrides):
        """A model entry with a name unique to this test (so its unit is too) and a free port."""
        entry = {"name": "%s%s" % (prefix, self.tag), "model": "fake-org/tiny-model", "port": free_port()}
        entry.update(overrides)
        return entry

    @staticmethod
    def unit(model) -> str:
        return "%s%s.service" % (UNIT_PREFIX, model["name"] if isinstance(model, dict) else model)

    def make_env(self, version, build="cu129", **kw) -> str:
        return engines.make_env(self.root, version, build, **kw)

    def set_current(self, name):
        engines.set_current(self.root, name)

    def current(self):
        return engines.current(self.root)

    def envs(self):
        return [e["name"] for e in engines.on_disk(self.root)]

    # -- the fake systemd ----------------------------------------------------------------------
    def env(self, **extra):
        env = dict(os.environ)
        env.update({
            "PATH": os.pathsep.join([str(FAKEBIN), str(pathlib.Path(PYTHON).parent), env.get("PATH", "")]),
            "FAKE_SYSTEMD_STATE": str(self.state),
            "FAKE_SYSTEMD_UNIT_DIR": str(self.unit_dir),
            "no_proxy": "127.0.0.1,localhost,::1",
            "NO_PROXY": "127.0.0.1,localhost,::1",
        })
        env.update(extra)
        return env

    def systemctl(self, *args):
        """Run the fake systemctl as a test reads the state (not logged in calls.log)."""
        return subprocess.run([str(FAKEBIN / "systemctl"), *args], env=self.env(FAKE_SYSTEMD_UNLOGGED="1"),
                              capture_output=True, text=True, timeout=60, check=False)

    def show(self, unit, *props):
        args = ["show", unit]
        for prop in props:
            args += ["-p", prop]
        res = self.systemctl(*args)
        assert res.returncode == 0, res.stderr
        return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)

    def main_pid(self, unit) -> int:
        return int(self.show(unit, "MainPID")["MainPID"])

    def journal(self, unit) -> str:
        path = self.state / ("%s.journal" % unit)
        return path.read_text(errors="replace") if path.exists() else ""

    def calls(self):
        path = self.state / "calls.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def warnings(self):
        path = self.state / "warnings.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def marker(self, name):
        """What the fake load balancer says of a unit: drained, in-service, or None."""
        path = self.state / "lb" / name
        return path.read_text().strip() if path.exists() else None

    @staticmethod
    def alive(pid) -> bool:
        """Whether process ``pid`` runs (a zombie does not)."""
        return _fakesystemd.proc_start_ticks(pid) is not None

    @staticmethod
    def uid_of(pid) -> int | None:
        return _uid_of(pid)

    def user_uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid

    # -- ansible-playbook ----------------------------------------------------------------------
    def hook_vars(self):
        """engine_service_drain_tasks and engine_service_undrain_tasks that call the fake load balancer."""
        return {"engine_service_drain_tasks": str(HERE / "files" / "drain.yml"),
                "engine_service_undrain_tasks": str(HERE / "files" / "undrain.yml")}

    def _engine_node_facts(self, check, pending, current):
        """What engine_node leaves for engine_service (engine_node_result and its private facts,
        which its switch.yml reads for the prune) when this play ran it with engine_node_switch false."""
        target = pending or current
        version, _sep, build = target.rpartition("-")
        result = {
            "host": "node", "version": version, "requested": build, "wanted": build,
            "effective": current.rpartition("-")[2] if current else "none",
            "current": current or "", "pending": "" if check else (pending or ""),
            "path": "" if check and pending else str(engines.engines_dir(self.root) / target),
            "action": ("would installed" if check else "installed") if pending else "unchanged",
            "fallback": None, "error": None, "fleet_lock": None, "why": "the role tests' pre_tasks",
            "check_mode": check,
        }
        return {"engine_node_result": result, "__engine_node_dir": str(engines.engines_dir(self.root)),
                "__engine_node_was": current or "", "__engine_node_on_disk": engines.on_disk(self.root)}

    def play(self, models=None, extra_vars=None, check=False, pending=None, current=None, timeout=300,
             playbook=None, gateways=None, diff=False) -> Run:
        """Run the engine_service role on this node; see Run.

        ``models``: engine_service_models (default ``self.models``). ``extra_vars``: more variables
        (-e; its engine_service_environment is added to ``self.environment``). ``check``: --check.
        ``pending``/``current``: environment names as engine_node would leave them in
        engine_node_result (``pending`` a proven environment to roll out); neither: no
        engine_node_result, the role reads the ``current`` link itself. ``playbook``: run this playbook
        (e.g. the collection's playbooks/report.yml) against the node instead of the role. ``gateways``:
        ``{name: variables}`` of hosts (local connections) in the group llmfleet_engine_gateway.
        ``diff``: --diff."""
        self.runs += 1
        folder = self.tmp / ("run-%02d" % self.runs)
        folder.mkdir(parents=True)
        extra = dict(extra_vars or {})
        environment = dict(self.environment, **extra.pop("engine_service_environment", {}))
        hostvars = {
            "ansible_connection": "local",
            "ansible_python_interpreter": PYTHON,
            "engine_node_root": str(self.root),
            "engine_node_keep": 1,
            "engine_service_models": self.models if models is None else models,
            "engine_service_unit_dir": str(self.unit_dir),
            # the fake systemd's systemctl, by its absolute path, as the role runs systemctl
            "engine_service_systemctl": str(FAKEBIN / "systemctl"),
            "engine_service_secrets_dir": str(self.secrets_dir),
            "engine_service_user": self.user,
            "engine_service_ready_timeout": 20,
            # the fake vLLM, like vLLM 0.32.0, takes the whole --shutdown-timeout on every stop
            "engine_service_shutdown_timeout": 1,
            "engine_service_environment": environment,
        }
        inventory = {"all": {"hosts": {"node": hostvars}}}
        if gateways:
            inventory["all"]["children"] = {"llmfleet_engine_gateway": {"hosts": {
                name: dict({"ansible_connection": "local", "ansible_python_interpreter": PYTHON}, **variables)
                for name, variables in gateways.items()}}}
        (folder / "inventory.json").write_text(json.dumps(inventory, indent=1))
        play = {"name": "engine_service role test", "hosts": "node", "gather_facts": False,
                "roles": [{"role": "llmfleet.engines.engine_service"}]}
        if pending or current:
            play["pre_tasks"] = [{"name": "Leave what engine_node would leave",
                                  "ansible.builtin.set_fact": self._engine_node_facts(check, pending, current)}]
        site = pathlib.Path(playbook) if playbook else folder / "site.yml"
        if not playbook:
            site.write_text(json.dumps([play], indent=1))
        (folder / "extra.json").write_text(json.dumps(extra))
        record_path = folder / "record.json"
        calls_before = len(self.calls())
        env = self.env(**{
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
            "ANSIBLE_GATHERING": "explicit",
            "ANSIBLE_PIPELINING": "1",
            "ANSIBLE_LOCAL_TEMP": str(folder / "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": str(folder / "ansible-remote"),
            "ANSIBLE_ASYNC_DIR": str(folder / "ansible-async"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_CALLBACK_PLUGINS": str(HERE / "callback_plugins"),
            "ANSIBLE_CALLBACKS_ENABLED": "role_test_record",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_HOST_KEY_CHECKING": "0",
            "ANSIBLE_SHOW_CUSTOM_STATS": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "LLMFLEET_ROLE_RECORD": str(record_path),
        })
        cmd = [str(ANSIBLE_PLAYBOOK), "-i", str(folder / "inventory.json"), str(site),
               "-e", "@%s" % (folder / "extra.json")] + (["--check"] if check else []) + (["--diff"] if diff else [])
        proc = subprocess.run(cmd, env=env, cwd=str(folder), capture_output=True, text=True, timeout=timeout,
                              check=False)
        output = proc.stdout + proc.stderr
        log = folder / "output.log"
        log.write_text(" ".join(cmd) + "\n" + output)
        record = json.loads(record_path.read_text()) if record_path.exists() else {}
        run = Run(proc.returncode, output, record, self.calls()[calls_before:], log)
        run.journals = {path.name[:-len(".journal")]: path.read_text(errors="replace")
                        for path in sorted(self.state.glob("*.journal"))}
        self._check_real_system()
        return run

    # -- the real system ------------------------------------------------------------------------
    def _real_files(self):
        found = set()
        for folder in (REAL_UNIT_DIR, REAL_SECRETS_DIR):
            if folder.is_dir():
                found.update(str(p) for p in folder.iterdir() if self.tag in p.name)
        return found

    def _check_real_system(self):
        """Nothing named after this test's models may appear in the real unit or secrets directory:
        the role must honour engine_service_unit_dir and engine_service_secrets_dir. What did is
        removed (it is ours by its name), and the test fails."""
        leaked = sorted(self._real_files() - self._real)
        for path in leaked:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        assert not leaked, ("the role wrote %s on the real system instead of engine_service_unit_dir / "
                            "engine_service_secrets_dir (removed again)" % ", ".join(leaked))

    def close(self):
        """Kill what the fake systemd started, keep its state with pytest's tmp_path, remove the node."""
        try:
            kill_recorded(self.state)
        finally:
            # what the fake systemd saw stays with pytest's kept tmp_path, for the failing test's reader
            shutil.copytree(str(self.state), str(self.tmp / "systemd-state"), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("locks", "*.lock"))
            shutil.copytree(str(self.unit_dir), str(self.tmp / "units"), dirs_exist_ok=True, symlinks=True)
            shutil.rmtree(str(self.base), ignore_errors=True)


def kill_recorded(state: pathlib.Path):
    """SIGKILL every process the fake systemd recorded in ``state/pids.log`` that still runs
    (``_fakesystemd.kill_recorded``); fails when one outlives it."""
    left = _fakesystemd.kill_recorded(state)
    assert not left, "processes still alive after SIGKILL: %s" % left


@pytest.fixture(scope="session")
def service_user():
    """A service user name for this test session (``llmfleet-t<6 hex>``), created by the role; removed
    with userdel at the end (only that user, and its group of the same name)."""
    if os.geteuid() != 0:
        pytest.fail("the role tests run as root (the role creates a system user and starts services as it)")
    while True:
        name = "llmfleet-t%s" % secrets.token_hex(3)
        try:
            pwd.getpwnam(name)
        except KeyError:
            break
    try:
        yield name
    finally:
        try:
            pwd.getpwnam(name)
        except KeyError:
            pass
        else:
            subprocess.run(["userdel", name], check=True, capture_output=True, timeout=60)
        if subprocess.run(["getent", "group", name], capture_output=True, check=False).returncode == 0:
            subprocess.run(["groupdel", name], check=True, capture_output=True, timeout=60)


@pytest.fixture
def node(tmp_path, service_user):
    """A fake node (see Node); every process it started is killed afterwards, its directories removed."""
    made = Node(tmp_path, service_user)
    try:
        yield made
    finally:
        made.close()


# -- one converged node for the tests that start from it -------------------------------------------
OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def stat_inventory(*tops, leave_out=None, content=file_sha256) -> dict:
    """{path: (type, uid, gid, mode, ``content(path)`` of a file or the target of a link)} of everything below
    each of ``tops`` (None for a top that does not exist); ``leave_out(folder, name)`` names the entries left
    out. The role tests compare two such inventories to say that nothing in a tree changed."""
    out = {}
    for top in map(str, tops):
        if not os.path.lexists(top):
            out[top] = None
            continue
        for folder, dirs, files in os.walk(top):
            for name in [""] + sorted(dirs) + sorted(files):
                if name and leave_out is not None and leave_out(folder, name):
                    continue
                path = os.path.join(folder, name) if name else folder
                info = os.lstat(path)
                extra = None
                if stat.S_ISREG(info.st_mode):
                    extra = content(path)
                elif stat.S_ISLNK(info.st_mode):
                    extra = os.readlink(path)
                out[path] = (stat.S_IFMT(info.st_mode), info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), extra)
    return out


def _setting(path: str):
    """What a file of the served node holds, for its fingerprint. Of a unit's gate record (``<unit>.gate.json``),
    which every run that gates rewrites with its own stage, figures and time (a record of the run, not a
    setting), what it says of the unit: its environment and readiness."""
    if not path.endswith(".gate.json"):
        return file_sha256(path)
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    return [record.get(key) for key in ("unit", "environment", "ready")]


class Served:
    """A node the role converged from nothing (OLD serves the default model; NEW then laid beside it, as an
    upgrade's tests have it), shared by the tests that start from that state: one converge instead of one
    per test. ``first`` is the converging run, ``builds`` how many converges this session made.

    A test gets it only as it was left by the converge: before each test its fingerprint (every file
    under the node's root, units and secrets (see _setting), where ``current`` points, and each unit's main
    process, state and restarts) is compared with the one taken after the converge, and a node that differs in anything
    (a test changed it, or failed half-way) is closed and converged again; only empty directories that a
    refused rollout made are removed first (see _drop_new_empty_directories). So no test sees what another
    did, and a test run alone gets the same node as in the whole run."""

    def __init__(self, tmp_factory, user):
        self.tmp_factory, self.user = tmp_factory, user
        self.node = self.first = self.at_converge = None
        # the node object's models and environment after the converge (JSON), given back to each test
        self.models = self.environment = None
        self.builds = 0

    def fingerprint(self):
        """What the node is now, as far as a test that starts from it can tell."""
        node = self.node
        units = sorted(path.name for path in node.unit_dir.glob(UNIT_PREFIX + "*.service"))
        return {"current": node.current(),
                "files": stat_inventory(node.root, node.unit_dir, node.secrets_dir, content=_setting),
                "units": {unit: node.show(unit, "MainPID", "ActiveState", "SubState", "NRestarts",
                                          "NeedDaemonReload") for unit in units}}

    def build(self):
        self.builds += 1
        self.node = Node(self.tmp_factory.mktemp("served-node"), self.user)
        self.node.make_env(*OLD.split("-"))
        self.node.set_current(OLD)
        self.first = self.node.play()
        assert self.first.rc == 0, self.first.explain()
        self.node.make_env(*NEW.split("-"))
        self.models, self.environment = json.dumps(self.node.models), json.dumps(self.node.environment)
        self.at_converge = self.fingerprint()

    def _drop_new_empty_directories(self):
        """Remove the empty directories that were not there after the converge (deepest first): a rollout
        makes the next environment's cache directories before its drain, so a run refused at the drain
        leaves them behind. Anything else a test left stays, and makes the fingerprints differ."""
        known = self.at_converge["files"]
        for folder in sorted(stat_inventory(self.node.root), key=len, reverse=True):
            if folder not in known and os.path.isdir(folder) and not os.path.islink(folder) \
                    and not os.listdir(folder):
                os.rmdir(folder)

    def take(self):
        """The node as the converge left it (converged again if a test changed it)."""
        if self.node is not None and self.fingerprint() != self.at_converge:
            self._drop_new_empty_directories()
        if self.node is not None and self.fingerprint() != self.at_converge:
            self.close()
        if self.node is None:
            self.build()
        node = self.node
        # what a test sets on the object and the fake load balancer's markers (only a hook writes them)
        node.models, node.environment = json.loads(self.models), json.loads(self.environment)
        shutil.rmtree(str(node.state / "lb"), ignore_errors=True)
        return node

    def close(self):
        if self.node is not None:
            node, self.node = self.node, None
            node.close()


@pytest.fixture(scope="session")
def _served(tmp_path_factory, service_user):
    shared = Served(tmp_path_factory, service_user)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def served(_served):
    """The node the role converged (see Served): ``served.node``, ``served.first``; OLD serves
    ``served.node.models[0]``, NEW is on disk, nothing else ran on it."""
    _served.take()
    return _served
