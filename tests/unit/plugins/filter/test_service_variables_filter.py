"""engine_service_variable_problems: the role's one check of its variables, which validate.yml (the role's full
way) and the engine_service_look action (site.yml's look, one task) both make. Its parts have their own tests
(engine_service_problems and engine_service_seconds_problem in test_service_filter.py); here: every variable is
read, each problem in the words validate.yml used, and validate.yml passes exactly the variables the function
reads."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

REPO = pathlib.Path(__file__).resolve().parents[4]
CHECKS = filter_plugin("engine_service_checks")
PROBLEMS = CHECKS.engine_service_variable_problems
DEFAULTS = yaml.safe_load((REPO / "roles" / "engine_service" / "defaults" / "main.yml").read_text())
HOSTS = ["gw1", "n1", "n2"]


def good(**over):
    """The role's defaults (templates resolved by hand) with one model, and what the test changes."""
    values = {name: DEFAULTS[name] for name in CHECKS.VARIABLES}
    values.update(engine_service_models=[{"name": "chat", "model": "org/chat", "port": 8000}],
                  engine_service_root="/opt/llmfleet", engine_service_gateways=["gw1"])
    values.update(over)
    return values


def test_the_defaults_have_no_problem_and_every_variable_is_a_default():
    assert sorted(set(CHECKS.VARIABLES) - set(DEFAULTS)) == []
    assert PROBLEMS(good(), HOSTS) == []


def test_validate_yml_passes_exactly_the_variables_the_function_reads():
    task = yaml.safe_load((REPO / "roles" / "engine_service" / "tasks" / "validate.yml").read_text())[0]
    expression = task["vars"]["__engine_service_problems"]
    passed = re.findall(r"'(engine_service_[a-z_]+)': (engine_service_[a-z_]+)", expression)
    assert [name for name, _value in passed] == list(CHECKS.VARIABLES)
    assert all(name == value for name, value in passed)
    assert "llmfleet.engines.engine_service_variable_problems(groups['all'])" in expression


def test_a_missing_variable_is_an_error_naming_it():
    values = good()
    del values["engine_service_lock_stale"]
    with pytest.raises(filter_error(), match="lack engine_service_lock_stale"):
        PROBLEMS(values, HOSTS)
    with pytest.raises(filter_error(), match="the role's variables"):
        PROBLEMS(["engine_service_models"], HOSTS)


@pytest.mark.parametrize("name,value,problem", [
    ("engine_service_steady_timeout", 0,
     "variable engine_service_steady_timeout is 0, allowed: a whole number of seconds, 1 or more"),
    ("engine_service_lock_wait", "soon",
     'variable engine_service_lock_wait is "soon", allowed: a whole number of seconds, 0 or more'),
    ("engine_service_gateway_drain_timeout", -1,
     "variable engine_service_gateway_drain_timeout is -1, allowed: a whole number of seconds, 0 or more"),
    ("engine_service_gateways", ["gw9"],
     'variable engine_service_gateways is ["gw9"], allowed: a list of inventory hosts that run'
     " llmfleet.engines.engine_gateway"),
    ("engine_service_gateways", "gw1",
     'variable engine_service_gateways is "gw1", allowed: a list of inventory hosts that run'
     " llmfleet.engines.engine_gateway"),
    ("engine_service_lock_stale", 59,
     "variable engine_service_lock_stale is 59, allowed: a whole number of seconds, 60 or more"),
    ("engine_service_shm_min_mib", "1G",
     'variable engine_service_shm_min_mib is "1G", allowed: a whole number of MiB, 0 or more'),
    ("engine_service_model_progress_interval", 0,
     "variable engine_service_model_progress_interval is 0, allowed: a whole number of seconds, 1 or more"),
    ("engine_service_model_timeout", 30,
     "variable engine_service_model_timeout is 30, allowed: a whole number of seconds, 60 or more"),
    ("engine_service_model_keep", 0,
     "variable engine_service_model_keep is 0, allowed: a whole number of snapshots, 1 or more"),
    ("engine_service_hub_mirror_url", "http://cache:8090/ x",
     'variable engine_service_hub_mirror_url is "http://cache:8090/ x", allowed: a URL (http:// or https://) without'
     ' spaces or control characters, or ""'),
    ("engine_service_hub_mirror_url", None,
     'variable engine_service_hub_mirror_url is null, allowed: a URL (http:// or https://) without spaces or control'
     ' characters, or ""'),
    ("engine_service_retry_failed", "maybe", 'variable engine_service_retry_failed is "maybe", allowed: true or false'),
])
def test_each_variable_is_checked_in_its_words(name, value, problem):
    assert PROBLEMS(good(**{name: value}), HOSTS) == [problem]


@pytest.mark.parametrize("name,value", [("engine_service_retry_failed", True), ("engine_service_retry_failed", "no"),
                                        ("engine_service_gateways", []), ("engine_service_hub_mirror_url", ""),
                                        ("engine_service_model_keep", "3"), ("engine_service_lock_stale", 60)])
def test_allowed_values_pass(name, value):
    assert PROBLEMS(good(**{name: value}), HOSTS) == []


def test_the_models_and_the_unit_variables_are_engine_service_problems():
    values = good(engine_service_models=[{"name": "Chat", "model": "org/chat", "port": 80}],
                  engine_service_limit_nofile=10, engine_service_steady_timeout=0)
    expected = CHECKS.engine_service_problems(
        values["engine_service_models"], environment=values["engine_service_environment"],
        secret_environment=values["engine_service_secret_environment"], api_key="", hf_token="",
        root="/opt/llmfleet", user=values["engine_service_user"], host=values["engine_service_host"],
        shutdown_timeout=values["engine_service_shutdown_timeout"], ready_timeout=values["engine_service_ready_timeout"],
        limit_nofile=10, secrets_dir=values["engine_service_secrets_dir"])
    assert len(expected) == 3
    assert PROBLEMS(values, HOSTS) == expected + [
        "variable engine_service_steady_timeout is 0, allowed: a whole number of seconds, 1 or more"]
