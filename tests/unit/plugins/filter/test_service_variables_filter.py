"""engine_service_variable_problems: the role's one check of its variables, which validate.yml (the role's full
way) and the engine_service_look action (site.yml's look, one task) both make, each reading the variables
engine_service_checked_variables names. Its parts have their own tests (engine_service_problems and
engine_service_seconds_problem in test_service_filter.py); here: every variable is read, each problem in the words
validate.yml used, and a bad value of each named variable is refused by validate.yml's own expression."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.unit.plugins.filter._plugins import ROLE_TEMPLAR_PRELUDE, ReadRecorder, filter_error, filter_plugin, plugin_util

REPO = pathlib.Path(__file__).resolve().parents[4]
CHECKS = filter_plugin("engine_service_checks")
# the list the filter engine_service_checked_variables gives (plugins/plugin_utils/_service_checks.py)
VARIABLES = plugin_util("_service_checks").VARIABLES
PROBLEMS = CHECKS.engine_service_variable_problems
DEFAULTS = yaml.safe_load((REPO / "roles" / "engine_service" / "defaults" / "main.yml").read_text())
HOSTS = ["gw1", "n1", "n2"]


def good(**over):
    """The role's defaults (templates resolved by hand) with one model, and what the test changes."""
    values = {name: DEFAULTS[name] for name in VARIABLES}
    values.update(engine_service_models=[{"name": "chat", "model": "org/chat", "port": 8000}],
                  engine_service_root="/opt/llmfleet", engine_service_gateways=["gw1"])
    values.update(over)
    return values


def test_the_defaults_have_no_problem_and_every_variable_is_a_default():
    assert sorted(set(VARIABLES) - set(DEFAULTS)) == []
    assert PROBLEMS(good(), HOSTS) == []


SPEC = yaml.safe_load((REPO / "roles" / "engine_service" / "meta" / "argument_specs.yml").read_text())
OPTIONS = SPEC["argument_specs"]["main"]["options"]
CHECKED = CHECKS.engine_service_checked_variables(OPTIONS)
# a value the check refuses, for each variable it checks (a variable added to the list without one fails below)
BAD = {
    "engine_service_models": "chat", "engine_service_environment": "HOME=/root",
    "engine_service_secret_environment": ["WANDB_API_KEY"], "engine_service_api_key": 5, "engine_service_hf_token": 5,
    "engine_service_root": "opt/llmfleet", "engine_service_user": "Service User", "engine_service_host": "a\nb",
    "engine_service_shutdown_timeout": "soon", "engine_service_ready_timeout": 0, "engine_service_limit_nofile": 10,
    "engine_service_secrets_dir": "secrets", "engine_service_steady_timeout": 0, "engine_service_lock_wait": "soon",
    "engine_service_gateway_drain_timeout": -1, "engine_service_gateways": ["gw9"], "engine_service_lock_stale": 59,
    "engine_service_shm_min_mib": "1G", "engine_service_model_progress_interval": 0,
    "engine_service_model_timeout": 30, "engine_service_model_keep": 0,
    "engine_service_hub_mirror_url": "http://cache:8090/ x", "engine_service_retry_failed": "maybe",
}


def named(problems, name):
    return [p for p in problems if p.startswith("variable %s " % name)]


def test_the_checked_variables_are_options_of_the_roles_spec():
    assert CHECKED == list(VARIABLES) and sorted(CHECKED) == sorted(BAD)
    options = {k: v for k, v in OPTIONS.items() if k != "engine_service_retry_failed"}
    with pytest.raises(filter_error(), match="engine_service_checked_variables: the argument spec has no option"
                                             " engine_service_retry_failed"):
        CHECKS.engine_service_checked_variables(options)
    with pytest.raises(filter_error(), match="the options of the role's argument spec"):
        CHECKS.engine_service_checked_variables(["engine_service_models"])


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_checked_variable_is_refused_in_words_naming_it(name):
    assert named(PROBLEMS(good(**{name: BAD[name]}), HOSTS), name), name


def test_every_variable_the_check_reads_is_in_the_list():
    """The check reads each variable the list names, and no other (the list is what validate.yml and the look pass)."""
    values = ReadRecorder(good())
    PROBLEMS(values, HOSTS)
    assert sorted(values.read) == sorted(CHECKED)


# validate.yml's own expression, rendered by Ansible's templar with the role's defaults, in a process of its own with
# the collection loader: the variables it reads are those the function names (not a list of its own)
_VALIDATE = ROLE_TEMPLAR_PRELUDE + r'''
task = yaml.safe_load((role / "tasks" / "validate.yml").read_text())[0]
for key, value in task["vars"].items():
    base[key] = trust_as_template(value)
out = []
for case in json.loads(sys.stdin.read()):
    names = dict(base, role_path=str(role), groups={"all": ["gw1", "n1"]}, **case)
    out.append(Templar(loader=DataLoader(), variables=names).template(names["__engine_service_problems"]))
print(json.dumps(out))
'''


def test_validate_yml_refuses_a_bad_value_of_each_checked_variable():
    import json
    import subprocess
    import sys

    cases = [{"engine_service_root": "/opt/llmfleet"}] + [
        {"engine_service_root": "/opt/llmfleet", name: value} for name, value in sorted(BAD.items())]
    done = subprocess.run([sys.executable, "-c", _VALIDATE, str(REPO / "build" / "collections"),
                           str(REPO / "roles" / "engine_service")], input=json.dumps(cases), capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out[0] == []
    for name, problems in zip(sorted(BAD), out[1:]):
        assert named(problems, name) == named(PROBLEMS(good(**{name: BAD[name]}), ["gw1", "n1"]), name), name
        assert named(problems, name), name


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
