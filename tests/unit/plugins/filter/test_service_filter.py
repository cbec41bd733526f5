"""The engine_service role's filters (plugins/filter/service.py): each case pins the exact value."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError

REPO = pathlib.Path(__file__).resolve().parents[4]


def _service_filters():
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        from ansible_collections.llmfleet.engines.plugins.filter import service
    finally:
        _internal.is_controller = before
    return service.FilterModule().filters()


F = _service_filters()
QWEN = {"name": "qwen", "model": "Qwen/Qwen3-8B", "port": 8000}


def test_each_filter_has_its_documentation_file():
    assert sorted(F) == ["engine_service_failure", "engine_service_gate_figures", "engine_service_problems",
                         "engine_service_says", "engine_service_unit_states", "engine_service_units"]
    for name in F:
        doc = yaml.safe_load((REPO / "plugins" / "filter" / (name + ".yml")).read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert "llmfleet.engines." + name in doc["EXAMPLES"]


@pytest.mark.parametrize("models", [[], [QWEN], [QWEN, {"name": "b2", "model": "/srv/m", "port": "8001",
                                                        "args": ["--max-model-len", 8192], "environment": {"A_B": 1}}]])
def test_problems_none(models):
    assert F["engine_service_problems"](models) == []


@pytest.mark.parametrize("models, expected", [
    ("qwen", ['variable engine_service_models is "qwen", allowed: a list of models, each {name, model, port[, args,'
              ' environment]}']),
    ([{"name": "qwen", "model": "m", "port": "http"}],
     ['variable engine_service_models[0].port is "http", allowed: a whole number from 1 to 65535']),
    ([{"name": "qwen", "model": "m", "port": 0}],
     ["variable engine_service_models[0].port is 0, allowed: a whole number from 1 to 65535"]),
    ([{"name": "qwen", "model": "m", "port": True}],
     ["variable engine_service_models[0].port is true, allowed: a whole number from 1 to 65535"]),
    ([{"name": "Qwen 8B", "model": "", "port": 8000, "mdoel": "x"}],
     ["variable engine_service_models[0] has mdoel, allowed keys: name, model, port, args, environment",
      'variable engine_service_models[0].name is "Qwen 8B", allowed: 1-48 of a-z, 0-9 and -, starting with a letter'
      " or digit (it names the unit llmfleet-vllm-<name>.service)",
      'variable engine_service_models[0].model is "", allowed: a model name (org/model) or an absolute path on the node']),
    ([QWEN, dict(QWEN, port=8001), dict(QWEN, name="other")],
     ['variable engine_service_models[1].name is "qwen", already the name of engine_service_models[0]',
      "variable engine_service_models[2].port is 8000, already the port of engine_service_models[0]"]),
    ([dict(QWEN, args=["--port=9000", "--host", "0.0.0.0"])],
     ["variable engine_service_models[0].args sets --host, --port, which the role sets itself: use name, port,"
      " engine_service_host or engine_service_shutdown_timeout"]),
    ([dict(QWEN, args="--x", environment={"1A": "b"})],
     ['variable engine_service_models[0].args is "--x", allowed: a list of command-line arguments (strings)',
      'variable engine_service_models[0].environment is {"1A": "b"}, allowed: a mapping of environment variable'
      " names to values"]),
    (["qwen"], ['variable engine_service_models[0] is "qwen", allowed: a mapping {name, model, port[, args, environment]}']),
])
def test_problems(models, expected):
    assert F["engine_service_problems"](models) == expected


def test_units():
    models = [dict(QWEN, args=["--max-model-len", 8192, "--chat-template", "a b%"], environment={"CUDA_VISIBLE_DEVICES": "1"})]
    (unit,) = F["engine_service_units"](models, "/opt/llmfleet/", "0.20.0-cu13", "0.0.0.0", 45, {"X": "y \"q\""})
    assert unit == {
        "name": "qwen",
        "unit": "llmfleet-vllm-qwen.service",
        "port": 8000,
        "model": "Qwen/Qwen3-8B",
        "url": "http://127.0.0.1:8000",
        "argv": ["/opt/llmfleet/engines/vllm/current/bin/vllm", "serve", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port",
                 "8000", "--served-model-name", "qwen", "--shutdown-timeout", "45", "--max-model-len", "8192",
                 "--chat-template", "a b%"],
        "exec_start": "/opt/llmfleet/engines/vllm/current/bin/vllm serve Qwen/Qwen3-8B --host 0.0.0.0 --port 8000"
                      " --served-model-name qwen --shutdown-timeout 45 --max-model-len 8192 --chat-template \"a b%%\"",
        "environment": ['"CUDA_VISIBLE_DEVICES=1"',
                        '"FLASHINFER_WORKSPACE_BASE=/opt/llmfleet/cache/flashinfer/0.20.0-cu13"',
                        '"HF_HOME=/opt/llmfleet/cache/huggingface"',
                        '"TRITON_CACHE_DIR=/opt/llmfleet/cache/triton/0.20.0-cu13"',
                        '"VLLM_CACHE_ROOT=/opt/llmfleet/cache/vllm/0.20.0-cu13"',
                        '"X=y \\"q\\""',
                        '"XDG_CACHE_HOME=/opt/llmfleet/cache/xdg/0.20.0-cu13"'],
        "cache_dirs": ["/opt/llmfleet/cache/flashinfer/0.20.0-cu13", "/opt/llmfleet/cache/huggingface",
                       "/opt/llmfleet/cache/triton/0.20.0-cu13", "/opt/llmfleet/cache/vllm/0.20.0-cu13",
                       "/opt/llmfleet/cache/xdg/0.20.0-cu13"],
    }


def test_units_refuse_bad_models_and_names():
    with pytest.raises(AnsibleFilterError, match=r"engine_service_units: variable engine_service_models\[0\]\.port is 0"):
        F["engine_service_units"]([dict(QWEN, port=0)], "/opt/llmfleet", "0.20.0-cu13")
    with pytest.raises(AnsibleFilterError, match=r"env_name must be an environment's name, not \"../x\""):
        F["engine_service_units"]([QWEN], "/opt/llmfleet", "../x")
    with pytest.raises(AnsibleFilterError, match=r"root must be an absolute path, not \"opt\""):
        F["engine_service_units"]([QWEN], "opt", "0.20.0-cu13")


def test_unit_states():
    text = ("Id=llmfleet-vllm-a.service\nLoadState=loaded\nActiveState=active\nSubState=running\n\n"
            "Id=llmfleet-vllm-b.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\n")
    assert F["engine_service_unit_states"](text) == {
        "llmfleet-vllm-a.service": {"load": "loaded", "active": "active", "sub": "running"},
        "llmfleet-vllm-b.service": {"load": "not-found", "active": "inactive", "sub": "dead"}}
    assert F["engine_service_unit_states"]("") == {}


def test_says():
    assert F["engine_service_says"](dict(QWEN, model="/srv/m"), "missing") == (
        'variable engine_service_models: model "/srv/m" of "qwen" does not exist on this node (allowed: a model id,'
        " or a path that exists)")
    assert F["engine_service_says"](QWEN, "port_in_use") == (
        'variable engine_service_models: port 8000 of "qwen" is in use by another program on this node'
        " (not llmfleet-vllm-qwen.service)")
    with pytest.raises(AnsibleFilterError, match="unknown problem \"other\""):
        F["engine_service_says"](QWEN, "other")


def test_failure_takes_the_first_failed_item_and_its_journal():
    result = {"failed": True, "msg": "One or more items failed", "results": [
        {"failed": False, "msg": "ok"},
        {"failed": True, "msg": "llmfleet-vllm-qwen.service failed (exit-code)",
         "journal": ["a", "RuntimeError: fake start failure"]}]}
    assert F["engine_service_failure"](result, "Wait until each model serves") == (
        "Wait until each model serves: llmfleet-vllm-qwen.service failed (exit-code) Last journal lines: a |"
        " RuntimeError: fake start failure")
    assert F["engine_service_failure"]({"msg": "drain failed"}) == "drain failed"
    assert F["engine_service_failure"](None, "Stop") == "Stop failed"


def test_gate_figures():
    results = [{"item": {"unit": "llmfleet-vllm-qwen.service"}, "ready": True, "since_start_s": 3.5, "health_s": 3.1,
                "completion_ms": 12.0, "attempts": 2}, {"skipped": True}]
    assert F["engine_service_gate_figures"](results, "0.20.0-cu13", "upgrade") == [
        {"unit": "llmfleet-vllm-qwen.service", "environment": "0.20.0-cu13", "stage": "upgrade", "ready": True,
         "ready_s": 3.5, "health_s": 3.1, "completion_ms": 12.0, "tries": 2}]
