"""The engine_service role run for real on this machine against the fake systemd (tests/roles):
a fresh node, a steady re-run, an upgrade with drain hooks, a rollback, the busy-port preflight, a
service user the site made."""

from __future__ import annotations

import pathlib
import pwd
import secrets
import socket
import subprocess

import pytest

from tests.roles.conftest import http_json

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"
STARTING = ("start", "restart", "try-restart", "reload-or-restart", "stop", "kill")


def served_version(port):
    status, body = http_json(port, "/version")
    assert status == 200, body
    return body["version"]


def gate_calls(run, unit):
    """Indexes of the readiness gate's reads of the unit (engine_ready's systemctl show)."""
    return [i for i, call in enumerate(run.calls)
            if call[0] == "systemctl" and "show" in call and unit in call
            and "ExecMainStartTimestampMonotonic" in call]


def test_fresh_node_serves_and_a_second_run_changes_nothing(served):
    # served.first converged the node from nothing
    node, run = served.node, served.first
    model = node.models[0]
    unit = node.unit(model)
    assert run.rc == 0, run.explain()
    assert (node.unit_dir / unit).is_file()
    assert run.verbs("daemon-reload"), run.calls
    assert run.index(lambda c: c[:2] == ["systemctl", "daemon-reload"]) < run.index(
        lambda c: c[0] == "systemctl" and "start" in c and unit in " ".join(c)), run.calls
    assert node.warnings() == [], "the unit file has lines systemd ignores"
    state = node.show(unit, "ActiveState", "SubState", "NeedDaemonReload", "UnitFileState")
    assert state == {"ActiveState": "active", "SubState": "running", "NeedDaemonReload": "no",
                     "UnitFileState": "enabled"}
    pid = node.main_pid(unit)
    assert node.uid_of(pid) == node.user_uid(), "the server does not run as %s" % node.user
    assert served_version(model["port"]) == "0.11.2"
    assert gate_calls(run, unit), "no readiness gate ran"
    assert run.result["current"] == OLD and not run.result["rolled_back"], run.result

    again = node.play()
    assert again.rc == 0, again.explain()
    assert again.changed == {"node": 0}, again.changed_tasks()
    assert again.verbs(*STARTING) == [], again.verbs(*STARTING)
    assert again.verbs("daemon-reload") == []
    assert node.main_pid(unit) == pid


def test_a_port_held_by_another_program_and_a_missing_model_path_stop_nothing(served):
    node = served.node
    serving = node.models[0]
    pid = node.main_pid(node.unit(serving))
    other = node.model("b")
    # a model path that is not on the node (the node's check, not the inventory's: the path is well formed)
    missing = node.model("c", model="/srv/llmfleet-test-nowhere/model")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", other["port"]))
        taken.listen()
        # an upgrade would stop the serving unit: the preflight fails the host before that, naming both problems
        run = node.play(models=[serving, other, missing], pending=NEW, current=OLD, extra_vars=node.hook_vars())
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert 'port %d of "%s" is in use by another program' % (other["port"], other["name"]) in run.output, \
        run.explain()
    assert 'model "/srv/llmfleet-test-nowhere/model" of "%s" does not exist on this node' % missing["name"] in run.output, \
        run.explain()
    assert "Nothing was stopped" in run.output
    assert run.verbs("stop", "start", "restart", "kill") == [], run.calls
    assert not [c for c in run.calls if c[0] == "fake-lb"], "the node was drained"
    assert node.main_pid(node.unit(serving)) == pid and node.current() == OLD


def test_upgrade_drains_stops_switches_starts_gates_and_undrains(served):
    node = served.node
    model = node.models[0]
    unit = node.unit(model)
    old_pid = node.main_pid(unit)

    # check mode with the diff first: it says what would restart and shows the unit to be, and
    # touches neither the service, current, nor the drain hooks (moved here from the serve scenario)
    unit_text = (node.unit_dir / unit).read_text()
    check = node.play(pending=NEW, current=OLD, extra_vars=node.hook_vars(), check=True, diff=True)
    assert check.rc == 0, check.explain()
    assert "node: would drain, stop %s, switch current from %s to %s" % (unit, OLD, NEW) in check.output, \
        check.output
    assert "+Description=vLLM serving %s (%s), managed by llmfleet.engines" % (model["name"], NEW) in check.output, \
        check.output
    assert check.verbs(*STARTING) == [] and check.verbs("daemon-reload") == [], check.calls
    assert not [c for c in check.calls if c[0] == "fake-lb"], check.calls
    assert node.main_pid(unit) == old_pid and node.current() == OLD
    assert (node.unit_dir / unit).read_text() == unit_text

    run = node.play(pending=NEW, current=OLD, extra_vars=node.hook_vars())
    assert run.rc == 0, run.explain()
    drain = run.index(lambda c: c[:2] == ["fake-lb", "drain"])
    stop = run.index(lambda c: c[0] == "systemctl" and "stop" in c and unit in " ".join(c))
    start = run.index(lambda c: c[0] == "systemctl" and "start" in c and unit in " ".join(c))
    gate = [i for i in gate_calls(run, unit) if i > start]
    undrain = run.index(lambda c: c[:2] == ["fake-lb", "undrain"])
    assert gate, "no readiness gate after the start"
    assert drain < stop < start < gate[0] < undrain, run.calls
    assert run.calls[drain][2:] == [unit] and run.calls[undrain][2:] == [unit]
    assert node.marker(unit) == "in-service"

    assert node.current() == NEW
    assert not node.alive(old_pid), "the old server still runs"
    assert served_version(model["port"]) == "0.15.1"
    assert node.uid_of(node.main_pid(unit)) == node.user_uid()
    assert run.result["current"] == NEW and not run.result["rolled_back"], run.result
    assert node.show(unit, "NeedDaemonReload")["NeedDaemonReload"] == "no"
    assert node.envs() == [OLD, NEW], "engine_node_keep 1 keeps the environment just left"


def test_a_version_that_does_not_serve_is_rolled_back(node):
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    model = node.models[0]
    unit = node.unit(model)
    failing = {"engine_service_environment": {"FAKE_VLLM_SERVE_FAIL": "start",
                                              "FAKE_VLLM_SERVE_FAIL_VERSIONS": "0.15.1"}}
    first = node.play(extra_vars=dict(failing, engine_service_api_key="key-before"))
    assert first.rc == 0, first.explain()
    secret = node.secrets_dir / ("%s.env" % unit)
    kept = secret.read_bytes()
    node.make_env(*NEW.split("-"))

    # the upgrade also changes the API key: the rollback puts the secret file back as it was, root-only
    run = node.play(pending=NEW, current=OLD, extra_vars=dict(failing, engine_service_api_key="key-after"))
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert "fake start failure" in run.output, "the failure does not quote the journal"
    assert node.current() == OLD
    assert secret.read_bytes() == kept and b"key-before" in kept
    info = secret.stat()
    assert (info.st_uid, info.st_gid, oct(info.st_mode & 0o7777)) == (0, 0, "0o600"), "the secret file put back is readable"
    assert "key-after" not in run.output and "key-before" not in run.output
    assert run.result["rolled_back"] and run.result["current"] == OLD, run.result
    assert node.show(unit, "ActiveState")["ActiveState"] == "active"
    assert served_version(model["port"]) == "0.11.2"
    assert node.envs() == [OLD, NEW], "nothing is pruned when the new version did not serve"


@pytest.fixture
def site_user():
    """A system user the site made, with a home and shell of its own (name, home, shell); removed after the
    test's node stopped its processes. Not the session's service user: the shared node (conftest's Served)
    runs its engine as that one, and usermod refuses to change a user whose processes run."""
    name = "llmfleet-s%s" % secrets.token_hex(3)
    home, shell = "/var/lib/llmfleet-site-home-%s" % name, "/bin/false"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", home, "--shell", shell, name],
                   check=True, capture_output=True, timeout=60)
    try:
        yield name, home, shell
    finally:
        subprocess.run(["userdel", name], check=True, capture_output=True, timeout=60)
        if subprocess.run(["getent", "group", name], capture_output=True, check=False).returncode == 0:
            subprocess.run(["groupdel", name], check=True, capture_output=True, timeout=60)


def test_a_service_user_the_site_made_is_left_as_it_is(site_user, node):
    """A service user that exists (an account the site provisioned, or one an earlier run made for
    another engine_service_root) keeps its home and shell: the role makes a missing user only (usermod
    would also refuse to move the home of a user whose engine runs)."""
    node.user, home, shell = site_user
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)

    run = node.play()
    assert run.rc == 0, run.explain()
    entry = pwd.getpwnam(node.user)
    assert (entry.pw_dir, entry.pw_shell) == (home, shell)
    # the engine runs as that user, with the HOME its unit sets, not the account's
    pid = node.main_pid(node.unit(node.models[0]))
    assert node.uid_of(pid) == entry.pw_uid
    environ = dict(item.split("=", 1) for item in pathlib.Path("/proc/%d/environ" % pid).read_text().split("\0") if "=" in item)
    assert environ["HOME"] == str(node.root / "serve"), environ.get("HOME")
