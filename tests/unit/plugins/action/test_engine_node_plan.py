"""engine_node_plan: the engine_node role's first step in one task. The action checks the host's
variables against the role's argument spec, runs gpu_probe (here a stand-in answer: the module's own
tests run it), decides as the engine_build_plan filter does, and sums up a node with nothing to do:
its result, the play's stats and the line it shows."""

from __future__ import annotations

import pathlib
from unittest import mock

import pytest

from ansible.module_utils import _internal

_before = _internal.is_controller
try:
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task
    from ansible.template import Templar
    from ansible.parsing.dataloader import DataLoader

    from ansible_collections.llmfleet.engines.plugins.action import engine_node_plan
    from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_plan import link_name
finally:
    _internal.is_controller = _before

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "engine_node"
H100 = {"driver_version": "580.65.06", "cuda_version": "13.0", "driver_error": None, "glibc": "2.39",
        "architecture": "x86_64",
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "compute_capability": "9.0",
                  "memory_mib": 81559}]}


def _vars(**over):
    values = {"inventory_hostname": "n1", "engine_node_version": "0.20.0", "engine_node_build": "auto",
              "engine_node_keep": 1, "engine_node_root": "/opt/llmfleet", "engine_node_services": [],
              "engine_node_package": "vllm", "engine_node_python_preference": "only-managed",
              "engine_node_cache_url": "", "engine_node_fleet_lock_dir": "", "engine_node_omit_packages": []}
    import yaml

    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for name, option in spec.items():
        if "choices" in option and name not in values:
            values[name] = option.get("default", option["choices"][0])
    values.update(over)
    return values


def _run(args, task_vars, link=None, check_mode=False, probe=None):
    task = Task()
    task.args = args
    task.action = "llmfleet.engines.engine_node_plan"
    task._role = mock.Mock(_role_path=str(ROLE))
    context = PlayContext()
    context.check_mode = check_mode
    action = engine_node_plan.ActionModule(task, mock.Mock(), context, DataLoader(), Templar(loader=DataLoader()), None)
    answer = dict(probe or H100, link=link or {"is_link": False})
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append((module_name, module_args))
        return dict(answer, changed=False, invocation={"module_args": module_args})

    action._execute_module = execute
    return action.run(task_vars=task_vars), calls


ARGS = {"version": "0.20.0", "build": "auto", "package": "vllm", "root": "/opt/llmfleet", "switch": True}


def test_a_converged_node_is_one_module_call_and_summed_up():
    link = {"is_link": True, "target": "/opt/llmfleet/engines/vllm/0.20.0-cu13", "target_exists": True}
    res, calls = _run(dict(ARGS), _vars(), link=link)
    # no nvidia-smi -q -x: the plan reads the driver and the GPUs, not the CUDA version
    assert calls == [("llmfleet.engines.gpu_probe", {"link": "/opt/llmfleet/engines/vllm/current", "cuda": False})]
    assert (res["action"], res["current"], res["wanted"], res["pending"]) == ("unchanged", "0.20.0-cu13", "cu13", "")
    assert res["msg"] == "n1: vllm 0.20.0 cu13 is current (/opt/llmfleet/engines/vllm/0.20.0-cu13); nothing to do."
    assert res["ansible_stats"]["data"]["engine_node"]["n1"]["action"] == "unchanged"
    assert res["ansible_stats"]["per_host"] is False and res["ansible_stats"]["aggregate"] is True
    assert "invocation" not in res["plan"]["__engine_node_facts"]
    assert not res.get("failed")
    # an "ok" like any module's, its line with -v: nothing to read in each hourly run
    assert "_ansible_verbose_always" not in res
    # the GPUs the probe read, for engine_service's look in the same run
    assert res["gpus"] == H100["gpus"]


def test_a_node_that_must_change_is_left_to_the_next_step_with_the_decision():
    res, _calls = _run(dict(ARGS, switch=False), _vars())
    assert res["action"] == "look" and "ansible_stats" not in res and "current" not in res
    plan = res["plan"]
    assert (plan["__engine_node_want"], plan["__engine_node_was"], plan["__engine_node_dir"]) == (
        "0.20.0-cu13", "", "/opt/llmfleet/engines/vllm")
    assert plan["__engine_node_plan"]["build"] == "cu13"


def test_build_none_reads_nothing_on_the_node():
    res, calls = _run(dict(ARGS, build="none"), _vars(engine_node_build="none"))
    assert calls == [] and res["action"] == "none" and "gpus" not in res
    assert res["msg"].startswith("n1: engine_node_build is none: no engine is installed on this node")
    assert "_ansible_verbose_always" not in res  # what the inventory asked for


def test_a_node_no_build_can_run_on_says_why_without_v():
    probe = dict(H100, driver_version="470.82.01", cuda_version="11.4",
                 gpus=[{"index": 0, "name": "Tesla K80", "uuid": "GPU-k", "compute_capability": "3.7",
                        "memory_mib": 11441}])
    res, _calls = _run(dict(ARGS), _vars(), probe=probe)
    assert res["action"] == "none" and not res.get("failed")
    assert res["msg"].startswith("n1: no engine is installed on this node: ")
    assert res["_ansible_verbose_always"] is True  # a line worth reading in each run, until the node changes


def test_a_bad_variable_fails_the_host_naming_it_before_the_node_is_read():
    res, calls = _run(dict(ARGS, build="cu12.9"), _vars(engine_node_build="cu12.9"))
    assert calls == [] and res["failed"]
    assert res["msg"].startswith('host n1: variable engine_node_build is "cu12.9", allowed: auto, cu13, cu129, cpu, none')
    assert "Fix it in the inventory (host_vars/n1.yml" in res["msg"]
    skipped, calls = _run(dict(ARGS, build="none", validate=False), _vars(engine_node_keep="many"))
    assert not skipped.get("failed") and calls == []


from tests.unit.plugins.filter.test_node_report_filter import BAD, CHECKED, WITH_CACHE  # noqa: E402


@pytest.mark.parametrize("name", CHECKED)
def test_each_variable_validate_yml_checks_is_checked_by_the_action(name):
    """The action reads the list validate.yml reads (engine_node_checked_variables): a bad value of any of them
    fails the host before the node is read."""
    res, calls = _run(dict(ARGS), _vars(**dict(WITH_CACHE, **{name: BAD[name]})))
    assert calls == [] and res["failed"], res
    assert res["msg"].startswith("host n1: variable ") and name in res["msg"]


def test_a_build_the_node_cannot_take_fails_before_any_look_up_unless_it_is_current():
    old = dict(H100, glibc="2.31")
    res, _calls = _run(dict(ARGS, build="cu13"), _vars(engine_node_build="cu13"), probe=old)
    assert res["failed"] and res["msg"].startswith("n1: vLLM 0.20.0 build cu13 cannot be installed on this node")
    link = {"is_link": True, "target": "/opt/llmfleet/engines/vllm/0.20.0-cu13", "target_exists": True}
    res, _calls = _run(dict(ARGS, build="cu13"), _vars(engine_node_build="cu13"), probe=old, link=link)
    assert not res.get("failed") and res["action"] == "unchanged"


@pytest.mark.parametrize("link, name", [
    ({"is_link": True, "target": "/r/0.20.0-cu13", "target_exists": True}, "0.20.0-cu13"),
    ({"is_link": True, "target": "/r/0.20.0-cu13", "target_exists": False}, ""),
    ({"is_link": False}, ""),
    (None, ""),
])
def test_current_is_read_only_from_a_link_that_does_not_dangle(link, name):
    assert link_name(link) == name


CURRENT = {"path": "/opt/llmfleet/engines/vllm/current", "exists": True, "is_link": True,
           "target": "/opt/llmfleet/engines/vllm/0.20.0-cu13", "target_exists": True}
READ_WITH = {"link": "/opt/llmfleet/engines/vllm/current", "nvidia_smi": None}


def test_a_node_read_in_this_run_as_the_plan_reads_it_is_not_read_again():
    given = dict(H100, link=CURRENT, read_with=READ_WITH)
    res, calls = _run(dict(ARGS, probe=given), _vars())
    assert calls == [] and res["asked_node"] is False
    assert (res["action"], res["current"], res["pending"]) == ("unchanged", "0.20.0-cu13", "")
    assert res["gpus"] == H100["gpus"]
    assert "read_with" not in res["plan"]["__engine_node_facts"]
    # the same decision as from its own read
    own, own_calls = _run(dict(ARGS), _vars(), link=CURRENT)
    assert len(own_calls) == 1 and own["asked_node"] is True
    assert {k: v for k, v in own["plan"].items() if k != "__engine_node_facts"} == {
        k: v for k, v in res["plan"].items() if k != "__engine_node_facts"}


@pytest.mark.parametrize("given", [
    # read at another link (another engine_node_root), or with another nvidia-smi
    dict(H100, link=CURRENT, read_with=dict(READ_WITH, link="/srv/engines/vllm/current")),
    dict(H100, link=CURRENT, read_with=dict(READ_WITH, nvidia_smi="/opt/nvidia/bin/nvidia-smi")),
    # without saying how it was read; a failed read; no link read; not a read at all
    dict(H100, link=CURRENT),
    dict(H100, link=CURRENT, read_with=READ_WITH, failed=True),
    dict(H100, read_with=READ_WITH),
    None, "", [],
])
def test_a_read_that_cannot_stand_for_the_plans_own_is_not_used(given):
    res, calls = _run(dict(ARGS, probe=given), _vars(), link={"is_link": False})
    assert [name for name, _args in calls] == ["llmfleet.engines.gpu_probe"] and res["asked_node"] is True
    assert res["action"] == "look"  # from its own read (no current), not from the given one


def test_a_read_with_the_same_nvidia_smi_is_used():
    smi = "/opt/nvidia/bin/nvidia-smi"
    given = dict(H100, link=CURRENT, read_with=dict(READ_WITH, nvidia_smi=smi))
    res, calls = _run(dict(ARGS, probe=given, nvidia_smi=smi), _vars())
    assert calls == [] and res["action"] == "unchanged"
