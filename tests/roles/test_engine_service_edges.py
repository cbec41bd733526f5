"""The engine_service role at its edges (issue 17), run on this machine against the fake systemd:
secrets that appear nowhere but the root-only file, a change of settings that does not serve and
is put back, a model only root can read, check mode before the service user exists."""

from __future__ import annotations

import json
import os
import stat

from tests.roles.conftest import http_json

OLD = "0.11.2-cu129"
SECRET = "llmfleet-planted-secret-%s" % os.urandom(4).hex()


def test_secrets_reach_the_server_and_the_gate_and_appear_nowhere_else(node):
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    model = node.models[0]
    unit = node.unit(model)
    secrets = {"engine_service_api_key": SECRET, "engine_service_hf_token": SECRET + "-hf",
               "engine_service_secret_environment": {"MY_SECRET": SECRET + "-more"}}

    run = node.play(extra_vars=secrets)
    # the fake server requires the key (VLLM_API_KEY) on /v1: the gate passed, so it sent it
    assert run.rc == 0, run.explain()
    status, _body = http_json(model["port"], "/v1/models")
    assert status == 401, "the server serves without its API key"
    status, body = http_json(model["port"], "/v1/models", headers={"Authorization": "Bearer " + SECRET})
    assert status == 200 and body["data"][0]["id"] == model["name"], body

    env_file = node.secrets_dir / (unit + ".env")
    mode = os.stat(env_file)
    assert (stat.S_IMODE(mode.st_mode), mode.st_uid) == (0o600, 0)
    assert stat.S_IMODE(os.stat(node.secrets_dir).st_mode) == 0o700
    assert SECRET in env_file.read_text()
    # nowhere else: the unit, the calls (argv) of systemctl, the process's command line, the
    # journal, the play's output and its recorded results
    pid = node.main_pid(unit)
    with open("/proc/%d/cmdline" % pid, "rb") as handle:
        cmdline = handle.read().decode(errors="replace")
    places = {
        "unit file": (node.unit_dir / unit).read_text(),
        "systemctl calls": json.dumps(node.calls()),
        "command line": cmdline,
        "journal": node.journal(unit),
        "play output": run.output + run.log.read_text(),
        "recorded results": json.dumps(run.record, default=str),
    }
    assert [where for where, text in places.items() if SECRET in text] == []

    # a second run changes nothing; a new key restarts the unit with it (a change of settings)
    again = node.play(extra_vars=secrets)
    assert again.rc == 0 and again.changed == {"node": 0}, again.changed_tasks()
    rotated = dict(secrets, engine_service_api_key=SECRET + "-new")
    rotation = node.play(extra_vars=rotated)
    assert rotation.rc == 0, rotation.explain()
    assert node.main_pid(unit) != pid
    status, _body = http_json(model["port"], "/v1/models", headers={"Authorization": "Bearer " + SECRET + "-new"})
    assert status == 200
    assert SECRET not in rotation.output + rotation.log.read_text()


def test_a_change_of_settings_that_does_not_serve_is_put_back(node):
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    model, other = node.models[0], node.model("o")
    unit, other_unit = node.unit(model), node.unit(other)
    first = node.play(models=[model, other], extra_vars=node.hook_vars())
    assert first.rc == 0, first.explain()
    before = (node.unit_dir / unit).read_text()
    pid, other_pid = node.main_pid(unit), node.main_pid(other_unit)

    broken = dict(model, args=["--no-such-option"])
    run = node.play(models=[broken, other], extra_vars=node.hook_vars())
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert "the changed settings of %s did not serve" % unit in run.output, run.explain()
    assert "unrecognized arguments: --no-such-option" in run.output
    assert "the previous units and %s are back and passed the readiness gate again" % OLD in run.output
    # drained (only the unit that changes), restored, gated again, undrained
    drains = [c for c in run.calls if c[:2] == ["fake-lb", "drain"]]
    assert drains == [["fake-lb", "drain", unit]], run.calls
    assert node.marker(unit) == "in-service"
    assert (node.unit_dir / unit).read_text() == before
    assert node.show(unit, "ActiveState", "NeedDaemonReload") == {"ActiveState": "active", "NeedDaemonReload": "no"}
    assert node.main_pid(unit) != pid
    status, body = http_json(model["port"], "/version")
    assert (status, body["version"]) == (200, "0.11.2")
    # the other model was not touched
    assert node.main_pid(other_unit) == other_pid
    assert [c for c in run.calls if c[0] == "systemctl" and other_unit in c
            and set(c) & {"stop", "start", "restart"}] == []
    assert run.result["rolled_back"] and run.result["current"] == OLD, run.result


def test_a_model_only_root_can_read_is_refused_before_anything_stops(served):
    node = served.node
    pid = node.main_pid(node.unit(node.models[0]))
    weights = node.base / "weights"
    weights.mkdir(mode=0o700)
    weights.chmod(0o700)  # root's alone: a check made as root would pass
    private = node.model("p", model=str(weights))

    run = node.play(models=[node.models[0], private])
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert ('model "%s" of "%s" cannot be read by the service user "%s"' % (weights, private["name"], node.user)
            in run.output), run.explain()
    assert "Nothing was stopped" in run.output
    assert run.verbs("stop", "start", "restart", "kill") == [], run.calls
    assert node.main_pid(node.unit(node.models[0])) == pid

    weights.chmod(0o755)
    readable = node.play(models=[node.models[0], private])
    assert readable.rc == 0, readable.explain()


def test_check_mode_on_a_host_without_the_service_user_says_what_it_would_do(node):
    """Issue 17, item 10: the role added to a host for the first time, in check mode."""
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    user = "llmfleet-nouser-%s" % node.tag
    run = node.play(check=True, extra_vars={"engine_service_user": user})
    assert run.rc == 0, run.explain()
    unit = node.unit(node.models[0])
    assert "would drain, stop nothing, write and start %s, and gate them on readiness" % unit in run.output, \
        run.explain()
    assert not (node.unit_dir / unit).exists() and not node.secrets_dir.exists()
    assert run.verbs("start", "stop", "restart", "daemon-reload", "enable") == [], run.calls
    assert not (node.root / "serve").exists()


def test_tensor_parallelism_on_a_small_dev_shm_is_refused_before_anything_stops(node):
    """Issue 17, item 14: NCCL needs /dev/shm; a container's 64 MiB makes the start fail or hang."""
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    parallel = dict(node.models[0], args=["--tensor-parallel-size", "2"])
    with open("/proc/mounts", encoding="utf-8") as mounts:
        assert any(line.split()[1] == "/dev/shm" for line in mounts), "this machine has no /dev/shm"
    small = node.play(models=[parallel], extra_vars={"engine_service_shm_min_mib": 10 ** 9})
    assert small.rc != 0 and small.failures == {"node": 1}, small.explain()
    assert "runs on 2 GPUs at once (tensor parallelism), allowed: at least engine_service_shm_min_mib" \
        in small.output, small.explain()
    assert small.verbs("stop", "start", "restart") == [] and not (node.unit_dir / node.unit(parallel)).exists()
    # the same model with enough /dev/shm passes the preflight and serves (on a node with two GPUs: the fake
    # `vllm serve`, like vLLM, does not start on fewer GPUs than its tensor-parallel size)
    two_gpus = {"FAKE_TORCH_GPUS": "NVIDIA H100 80GB HBM3=9.0;NVIDIA H100 80GB HBM3=9.0"}
    enough = node.play(models=[parallel], extra_vars={"engine_service_shm_min_mib": 1,
                                                      "engine_service_environment": two_gpus})
    assert enough.rc == 0, enough.explain()
