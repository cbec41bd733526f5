"""The engine_service role's rollout when something around it fails, run for real against the fake
systemd (tests/roles): a failed undrain after a passing gate, a failed drain, a model taken out,
a second run holding the node's lock, a change noted as failed, a rollback whose old version does
not serve either, and a stale server answering the old version on the port."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import time

from tests.roles import engines
from tests.roles.conftest import HERE, http_json

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"
STARTING = ("start", "restart", "try-restart", "reload-or-restart", "stop", "kill")
FILES = HERE / "files"
# the new version fails at start, the old one serves (FAKE_VLLM_SERVE_FAIL of tests/upstream's fake vllm)
NEW_FAILS = {"FAKE_VLLM_SERVE_FAIL": "start", "FAKE_VLLM_SERVE_FAIL_VERSIONS": "0.15.1"}


def served_version(port):
    status, body = http_json(port, "/version")
    assert status == 200, body
    return body["version"]


def hooks(drain="drain.yml", undrain="undrain.yml"):
    """Drain and undrain task files of tests/roles/files (see drain.yml, drain_fail.yml, ...)."""
    return {"engine_service_drain_tasks": str(FILES / drain), "engine_service_undrain_tasks": str(FILES / undrain)}


def lb_calls(run, verb=None):
    return [c for c in run.calls if c[0] == "fake-lb" and (verb is None or c[1] == verb)]


def port_free(port) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def failure_message(run):
    """The message of the task that failed the host."""
    failed = run.failed_tasks()
    assert failed, run.explain()
    return failed[-1]["result"].get("msg", "")


def start_of(run, unit):
    return run.index(lambda c: c[0] == "systemctl" and "start" in c and unit in " ".join(c))


def kill_node_processes(node):
    """SIGKILL every process whose command line names the node's root (the servers the fake
    systemd no longer tracks, e.g. a detached stale server), and wait until they are gone."""
    needle = str(node.root).encode()
    deadline = time.monotonic() + 10
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            if needle in cmdline and node.alive(int(entry)):
                found.append(int(entry))
        if not found:
            return
        assert time.monotonic() < deadline, "processes of the node still alive: %s" % found
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def serve_old(node, **env_kw):
    """The node serves OLD (a first run); returns the first model and its unit."""
    node.make_env(*OLD.split("-"), **env_kw)
    node.set_current(OLD)
    return node.models[0], node.unit(node.models[0])


def test_a_failed_drain_stops_nothing(served):
    node, model = served.node, served.node.models[0]
    unit = node.unit(model)
    pid = node.main_pid(unit)

    run = node.play(pending=NEW, current=OLD, extra_vars=hooks(drain="drain_fail.yml"))
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    error = run.result["error"] or ""
    assert "draining the node failed" in error and "nothing was stopped" in error, error
    assert "the undrain tasks put it back in rotation" in error, error
    assert run.verbs(*STARTING) == [], run.calls
    assert lb_calls(run, "undrain") == [["fake-lb", "undrain", unit]], run.calls
    assert node.main_pid(unit) == pid and served_version(model["port"]) == "0.11.2"
    assert node.current() == OLD
    assert not run.result["rolled_back"], run.result
    assert run.result["current"] == OLD, "engine_service_result.current is %r; current points at %s" % (
        run.result["current"], OLD)
    assert node.envs() == [OLD, NEW]


def test_a_failed_drain_without_undrain_tasks_leaves_current_where_it_was(served):
    # the prune after a rollout points current at the pending environment: it must not run when the
    # drain failed and nothing was stopped (it did when no undrain tasks were given)
    node, model = served.node, served.node.models[0]
    unit = node.unit(model)
    pid = node.main_pid(unit)

    run = node.play(pending=NEW, current=OLD, extra_vars={"engine_service_drain_tasks": str(FILES / "drain_fail.yml")})
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert "draining the node failed" in (run.result["error"] or ""), run.result
    assert run.verbs(*STARTING) == [], run.calls
    assert node.main_pid(unit) == pid and served_version(model["port"]) == "0.11.2"
    assert node.current() == OLD and node.envs() == [OLD, NEW]


def test_a_drain_that_fails_after_taking_the_node_out_puts_it_back(served):
    node = served.node
    unit = node.unit(node.models[0])
    pid = node.main_pid(unit)

    run = node.play(pending=NEW, current=OLD, extra_vars=hooks(drain="drain_half.yml"))
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    error = run.result["error"] or ""
    assert "nothing was stopped" in error and "put it back in rotation" in error, error
    verbs = [c[1] for c in lb_calls(run)]
    assert verbs == ["drain", "fail", "undrain"], run.calls
    assert node.marker(unit) == "in-service", "the node was left out of rotation"
    assert run.verbs(*STARTING) == [] and node.main_pid(unit) == pid and node.current() == OLD

    # the undrain fails too: said, the node may be out of rotation
    run = node.play(pending=NEW, current=OLD, extra_vars=hooks(drain="drain_half.yml", undrain="drain_fail.yml"))
    assert run.rc != 0
    assert "the undrain tasks failed too" in (run.result["error"] or ""), run.result


def test_a_model_taken_out_is_drained_stopped_and_removed_and_the_others_keep_serving(node):
    kept, kept_unit = serve_old(node)
    gone = node.model("b")
    gone_unit = node.unit(gone)
    first = node.play(models=[kept, gone])
    assert first.rc == 0, first.explain()
    kept_pid, gone_pid = node.main_pid(kept_unit), node.main_pid(gone_unit)
    gone_files = [node.unit_dir / gone_unit, node.secrets_dir / ("%s.env" % gone_unit)]
    assert all(path.is_file() for path in gone_files), gone_files

    run = node.play(models=[kept], extra_vars=hooks())
    assert run.rc == 0, run.explain()
    drain = run.index(lambda c: c[:2] == ["fake-lb", "drain"])
    stop = run.index(lambda c: c[0] == "systemctl" and "stop" in c and gone_unit in c)
    disable = run.index(lambda c: c[0] == "systemctl" and "disable" in c and gone_unit in c)
    undrain = run.index(lambda c: c[:2] == ["fake-lb", "undrain"])
    # (the play's output too: which units compare.yml found changed, where the kept one is drained)
    assert run.calls[drain][2:] == [gone_unit] and run.calls[undrain][2:] == [gone_unit], (run.calls, run.explain())
    assert drain < stop < disable < undrain, run.calls
    assert [path for path in gone_files if path.exists()] == []
    assert node.show(gone_unit, "LoadState")["LoadState"] == "not-found"
    assert not node.alive(gone_pid) and port_free(gone["port"])
    assert run.verbs(*STARTING, unit=kept_unit) == [], run.calls
    assert node.main_pid(kept_unit) == kept_pid and served_version(kept["port"]) == "0.11.2"
    assert run.result["removed"] == [gone_unit], run.result

    # engine_service_models: [] removes every unit the role owns
    empty = node.play(models=[], extra_vars=hooks())
    assert empty.rc == 0, empty.explain()
    assert lb_calls(empty, "drain")[0][2:] == [kept_unit], empty.calls
    assert empty.verbs("disable", unit=kept_unit), empty.calls
    assert [p for p in (node.unit_dir / kept_unit, node.secrets_dir / ("%s.env" % kept_unit)) if p.exists()] == []
    assert node.show(kept_unit, "LoadState")["LoadState"] == "not-found"
    assert not node.alive(kept_pid) and port_free(kept["port"])
    assert empty.result["removed"] == [kept_unit], empty.result


def test_a_run_fails_naming_the_lock_holder_and_takes_over_a_stale_lock(served):
    node, model = served.node, served.node.models[0]
    unit = node.unit(model)
    lock = engines.engines_dir(node.root) / ".engine_service.lock"
    assert served.first.rc == 0 and not lock.exists(), "the first run left its lock"
    pid = node.main_pid(unit)
    # another run holds the lock, as lock.yml leaves it
    lock.mkdir(mode=0o700)
    holder = lock / "holder"
    holder_text = "other-controller pid 4242, since 2026-01-01T00:00:00+00:00\n"
    holder.write_text(holder_text)

    held = node.play(pending=NEW, current=OLD, extra_vars=dict(hooks(), engine_service_lock_wait=0))
    assert held.rc != 0 and held.failures == {"node": 1}, held.explain()
    message = failure_message(held)
    assert "other-controller pid 4242" in message and str(lock) in message, message
    assert held.verbs(*STARTING) == [] and lb_calls(held) == [], held.calls
    assert node.main_pid(unit) == pid and node.current() == OLD
    assert holder.read_text() == holder_text, "the run that waited touched the other run's lock"

    # the same lock, left an hour ago by a run that died
    an_hour_ago = time.time() - 3600
    os.utime(holder, (an_hour_ago, an_hour_ago))
    run = node.play(pending=NEW, current=OLD,
                    extra_vars=dict(hooks(), engine_service_lock_wait=0, engine_service_lock_stale=60))
    assert run.rc == 0, run.explain()
    assert [w for w in run.result["warnings"] if "took over the rollout lock" in w], run.result
    assert node.current() == NEW and served_version(model["port"]) == "0.15.1"
    assert not lock.exists(), "the run left the lock it took over"
    assert not pathlib.Path(str(lock) + ".takeover").exists(), "the run left its take-over lock"

    # a run that died between making the lock and writing its holder: the directory's age counts
    # (back to OLD, still on disk: engine_node_keep 1)
    lock.mkdir(mode=0o700)
    os.utime(lock, (an_hour_ago, an_hour_ago))
    back = node.play(pending=OLD, current=NEW,
                     extra_vars=dict(hooks(), engine_service_lock_wait=0, engine_service_lock_stale=60))
    assert back.rc == 0, back.explain()
    assert [w for w in back.result["warnings"] if "took over the rollout lock" in w], back.result
    assert node.current() == OLD and not lock.exists()


def test_a_failed_undrain_keeps_the_new_version_serving_and_the_old_environment(served):
    node, model = served.node, served.node.models[0]
    unit = node.unit(model)

    # engine_node_keep 0: a prune would remove OLD; it must wait until the node is back in rotation
    run = node.play(pending=NEW, current=OLD, extra_vars=dict(hooks(undrain="undrain_fail.yml"), engine_node_keep=0))
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    error = run.result["error"] or ""
    assert "%s serves, but putting the node back in service failed" % NEW in error, error
    assert "still drained" in error and "Nothing was rolled back" in error, error
    assert start_of(run, unit) < run.index(lambda c: c[:2] == ["fake-lb", "fail"]), run.calls
    assert node.marker(unit) == "drained"
    assert node.current() == NEW
    assert run.result["current"] == NEW and not run.result["rolled_back"], run.result
    assert node.show(unit, "ActiveState")["ActiveState"] == "active"
    assert served_version(model["port"]) == "0.15.1"
    assert node.envs() == [OLD, NEW], "the previous environment was pruned while the node is still drained"


def test_a_change_that_failed_is_noted_and_not_tried_again_unless_asked(node):
    model, unit = serve_old(node)
    failing = {"engine_service_environment": NEW_FAILS}
    first = node.play(extra_vars=failing)
    assert first.rc == 0, first.explain()
    node.make_env(*NEW.split("-"))
    note = engines.engines_dir(node.root) / ("%s.rollout-failed.json" % NEW)

    failed = node.play(pending=NEW, current=OLD, extra_vars=dict(hooks(), **failing))
    assert failed.rc != 0 and failed.result["rolled_back"], failed.explain()
    assert node.current() == OLD and served_version(model["port"]) == "0.11.2"
    assert note.is_file(), "no note of the failed rollout"
    assert json.loads(note.read_text())["environment"] == NEW
    pid = node.main_pid(unit)

    again = node.play(pending=NEW, current=OLD, extra_vars=dict(hooks(), **failing))
    assert again.rc != 0 and again.failures == {"node": 1}, again.explain()
    assert "not tried again" in (again.result["error"] or ""), again.result
    assert again.verbs(*STARTING) == [], again.calls
    assert lb_calls(again) == [], "a change noted as failed drained the node"
    assert node.main_pid(unit) == pid and node.current() == OLD
    skipped_current = again.result["current"]

    retry = node.play(pending=NEW, current=OLD, extra_vars=dict(hooks(), engine_service_retry_failed=True, **failing))
    assert retry.rc != 0 and retry.failures == {"node": 1}, retry.explain()
    assert retry.verbs("stop", unit=unit) and retry.verbs("start", unit=unit), retry.calls
    assert lb_calls(retry, "drain"), retry.calls
    assert retry.result["rolled_back"] and node.current() == OLD, retry.result
    assert served_version(model["port"]) == "0.11.2"
    assert note.is_file()
    assert skipped_current == OLD, "engine_service_result.current of the run not tried again is %r; %s serves" % (
        skipped_current, OLD)


def test_a_rollback_whose_old_version_does_not_serve_either_says_the_services_are_down(node):
    model, unit = serve_old(node, fail_flag=True)
    failing = {"engine_service_environment": NEW_FAILS}
    first = node.play(extra_vars=failing)
    assert first.rc == 0, first.explain()
    node.make_env(*NEW.split("-"))
    # the drain hook makes OLD fail from its next start on: the rollback's start
    flag = engines.engines_dir(node.root) / OLD / "fail-start"

    run = node.play(pending=NEW, current=OLD, extra_vars=dict(
        hooks(drain="drain_touch.yml"), role_test_drain_touch=str(flag), **failing))
    assert flag.exists(), "the drain hook did not run"
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    error = run.result["error"] or ""
    assert "did not serve either" in error and "the services are down" in error, error
    assert "passed the readiness gate again" not in error, error
    # what the new version did, not what the rollback did, is the first failure quoted
    new_failure = error.partition("; the rollback to")[0]
    assert "upgrade of %s" % NEW in new_failure and "rollback of" not in new_failure, error
    assert run.result["rolled_back"] and node.current() == OLD, run.result
    assert lb_calls(run, "undrain") == [], "the node was put back in service with nothing serving"
    assert node.marker(unit) == "drained"


def test_a_stale_server_answering_the_old_version_fails_the_gate(node):
    # OLD's server survives its unit's stop (detach), NEW never binds (hang): the old server answers
    model, unit = serve_old(node, detach=True)
    hanging = {"engine_service_environment": {"FAKE_VLLM_SERVE_FAIL": "hang", "FAKE_VLLM_SERVE_FAIL_VERSIONS": "0.15.1"}}
    try:
        first = node.play(extra_vars=hanging)
        assert first.rc == 0, first.explain()
        node.make_env(*NEW.split("-"))

        run = node.play(pending=NEW, current=OLD, extra_vars=hanging)
        assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
        error = run.result["error"] or ""
        # the old server is no process of the new unit: the gate's connection to it is refused before anything is
        # sent (its /version, which says 0.11.2, is not even asked: test_ready's version test guards that check)
        assert "upgrade of %s: " % NEW in error and " is held by process " in error, error
        assert "not by the unit's main process" in error and "nothing was sent to it" in error, error
        assert run.result["rolled_back"] and node.current() == OLD, run.result
    finally:
        node.systemctl("stop", unit)
        kill_node_processes(node)
