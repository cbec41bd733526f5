"""The engine_service role's filters (plugins/filter/engine_service_*.py): each case pins the exact value.

Unit files are data: every control character in every field is refused with the variable's path,
every other character is escaped by systemd's rules (what systemd itself reads back is proven in
test_service_units_systemd.py), and no secret reaches what engine_service_units returns.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
import threading
import time

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError

REPO = pathlib.Path(__file__).resolve().parents[4]


# the filters this file tests, from engine_service_checks.py, engine_service_units.py, engine_service_stage.py,
# engine_service_status.py and engine_service_rollout.py; the others of those files have tests of their own
# (test_rollout_filter.py, test_model_stage_filter.py, test_serving_filter.py, test_rollout_state_filter.py)
F = {}
for _plugin in ("engine_service_checks", "engine_service_units", "engine_service_stage", "engine_service_status",
                "engine_service_rollout"):
    F.update(filter_plugin(_plugin).FilterModule().filters())
for _elsewhere in ("engine_service_seconds_problem", "engine_service_stage_space",
                   "engine_service_state", "engine_service_saved_units", "engine_service_changed_units", "engine_service_stage_jobs",
                   "engine_service_kept_locks", "engine_service_in_use", "engine_service_readiness",
                   "engine_service_rollout_may", "engine_service_checked_variables", "engine_service_group_problems",
                   "engine_service_group_member", "engine_service_rollout_batches", "engine_service_group_settled"):
    del F[_elsewhere]
QWEN = {"name": "qwen", "model": "Qwen/Qwen3-8B", "port": 8000}
ENV = "0.20.0-cu13"
CONTROL = ("text without control characters (newline, carriage return, tab, NUL, DEL: they would end the unit"
           " file's line and start directives of their own)")
PATHS = ("an absolute path of letters, digits, '.', '_', '+', '@', '-' and '/', without '.' or '..' parts, not / and"
         " not under /home, /root or /run/user (ProtectHome=yes hides them)")


def units(models, **kwargs):
    return F["engine_service_units"](models, kwargs.pop("root", "/opt/llmfleet"), kwargs.pop("env_name", ENV), **kwargs)


def directives(text, section="Service"):
    """The ``(key, value)`` directives of one section of a unit's text, comments left out."""
    out, current = [], None
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.append((key, value))
    return out


def test_each_filter_has_its_documentation_file():
    assert sorted(F) == ["engine_service_failure", "engine_service_gate_figures", "engine_service_hub_pins",
                         "engine_service_model_pins",
                         "engine_service_problems", "engine_service_says", "engine_service_secret_file", "engine_service_unit_states",
                         "engine_service_units", "engine_service_variable_problems"]
    for name in F:
        doc = yaml.safe_load((REPO / "plugins" / "filter" / (name + ".yml")).read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert "llmfleet.engines." + name in doc["EXAMPLES"]


@pytest.mark.parametrize("models", [[], [QWEN], [QWEN, {"name": "b2", "model": "/srv/m", "port": "8001",
                                                        "args": ["--max-model-len", 8192], "environment": {"A_B": 1},
                                                        "api_key": "k"}]])
def test_problems_none(models):
    assert F["engine_service_problems"](models) == []
    assert F["engine_service_problems"](models, environment={"X": "a b"}, secret_environment={"S3_KEY": "s"},
                                        api_key="g", hf_token="h", root="/opt/llmfleet", user="llmfleet-vllm",
                                        host="0.0.0.0", shutdown_timeout=30, ready_timeout="900", limit_nofile=65536,
                                        secrets_dir="/etc/llmfleet/engine_service") == []


@pytest.mark.parametrize("models, expected", [
    ("qwen", ['variable engine_service_models is "qwen", allowed: a list of models, each {name, model, port[, args,'
              ' environment, api_key, revision, gpus, internal_port]}']),
    ([{"name": "qwen", "model": "m", "port": "http"}],
     ['variable engine_service_models[0].port is "http", allowed: a whole number from 1024 to 65535']),
    ([{"name": "qwen", "model": "m", "port": 0}],
     ["variable engine_service_models[0].port is 0, allowed: a whole number from 1024 to 65535"]),
    ([{"name": "qwen", "model": "m", "port": True}],
     ["variable engine_service_models[0].port is true, allowed: a whole number from 1024 to 65535"]),
    ([{"name": "Qwen 8B", "model": "", "port": 8000, "mdoel": "x"}],
     ["variable engine_service_models[0] has mdoel, allowed keys: name, model, port, args, environment, api_key, revision, gpus, internal_port",
      'variable engine_service_models[0].name is "Qwen 8B", allowed: 1-48 of a-z, 0-9 and -, starting with a letter'
      " or digit (it names the unit llmfleet-vllm-<name>.service)",
      'variable engine_service_models[0].model is "", allowed: a model name (org/model) or an absolute path on the node']),
    ([dict(QWEN, model="--trust-remote-code")],
     ['variable engine_service_models[0].model is "--trust-remote-code", allowed: a model name (org/model) or an'
      " absolute path on the node"]),
    ([QWEN, dict(QWEN, port=8001), dict(QWEN, name="other")],
     ['variable engine_service_models[1].name is "qwen", already the name of engine_service_models[0]',
      "variable engine_service_models[2].port is 8000, already the port of engine_service_models[0]"]),
    ([dict(QWEN, args=["--port=9000", "--host", "0.0.0.0", "--served-model", "x"])],
     ["variable engine_service_models[0].args sets --host, --port, --served-model-name, which the role sets itself:"
      " use name, port, engine_service_host or engine_service_shutdown_timeout"]),
    ([dict(QWEN, args="--x", environment={"1A": "b"})],
     ['variable engine_service_models[0].args is "--x", allowed: a list of command-line arguments (strings)',
      'variable engine_service_models[0].environment has the name "1A", allowed: names of letters, digits and _, not'
      " starting with a digit"]),
    ([dict(QWEN, environment=["A=b"])],
     ['variable engine_service_models[0].environment is ["A=b"], allowed: a mapping of environment variable names to'
      " values"]),
    ([dict(QWEN, environment={"A": None, "B": {"c": 1}})],
     ["variable engine_service_models[0].environment.A is null, allowed: a string or a number",
      'variable engine_service_models[0].environment.B is {"c": 1}, allowed: a string or a number']),
    ([dict(QWEN, environment={"HF_HOME": "data/hf", "XDG_CACHE_HOME": "/home/svc/.cache", "HOME": "/srv/../etc"})],
     ['variable engine_service_models[0].environment.HF_HOME is "data/hf", allowed: %s (the service writes there:'
      " ReadWritePaths=)" % PATHS,
      'variable engine_service_models[0].environment.XDG_CACHE_HOME is "/home/svc/.cache", allowed: %s (the service'
      " writes there: ReadWritePaths=)" % PATHS,
      'variable engine_service_models[0].environment.HOME is "/srv/../etc", allowed: %s (the service writes there:'
      " ReadWritePaths=)" % PATHS]),
    (["qwen"], ['variable engine_service_models[0] is "qwen", allowed: a mapping {name, model, port[, args,'
                ' environment, api_key, revision, gpus, internal_port]}']),
])
def test_problems(models, expected):
    assert F["engine_service_problems"](models) == expected


@pytest.mark.parametrize("kwargs, expected", [
    ({"root": "opt"}, ['variable engine_service_root is "opt", allowed: ' + PATHS]),
    ({"root": "/"}, ['variable engine_service_root is "/", allowed: ' + PATHS]),
    ({"root": "/home/me/llmfleet"}, ['variable engine_service_root is "/home/me/llmfleet", allowed: ' + PATHS]),
    ({"root": "/opt/llm fleet"}, ['variable engine_service_root is "/opt/llm fleet", allowed: ' + PATHS]),
    ({"root": "/opt/%h"}, ['variable engine_service_root is "/opt/%h", allowed: ' + PATHS]),
    ({"secrets_dir": "/etc/a/../b"}, ['variable engine_service_secrets_dir is "/etc/a/../b", allowed: ' + PATHS]),
    ({"user": "root user"}, ['variable engine_service_user is "root user", allowed: a system user name (1-32 of a-z,'
                             " 0-9, _ and -, starting with a letter or _)"]),
    ({"host": 5}, ["variable engine_service_host is 5, allowed: an address (%s)" % CONTROL]),
    ({"shutdown_timeout": "-1"}, ['variable engine_service_shutdown_timeout is "-1", allowed: a whole number of'
                                  " seconds"]),
    ({"ready_timeout": 0}, ["variable engine_service_ready_timeout is 0, allowed: a whole number of seconds, 1 or"
                            " more"]),
    ({"limit_nofile": 512}, ["variable engine_service_limit_nofile is 512, allowed: a whole number, 1024 or more"]),
    ({"limit_nofile": "lots"}, ['variable engine_service_limit_nofile is "lots", allowed: a whole number, 1024 or'
                                " more"]),
    ({"secret_environment": {"VLLM_API_KEY": "s", "HF_TOKEN": "s", "HF_HOME": "/x", "N": None}},
     ["variable engine_service_secret_environment sets VLLM_API_KEY, which api_key (of the model) or"
      " engine_service_api_key sets: use that",
      "variable engine_service_secret_environment sets HF_TOKEN, which engine_service_hf_token sets: use that",
      "variable engine_service_secret_environment sets HF_HOME, which the role sets in the unit: use"
      " engine_service_environment",
      "variable engine_service_secret_environment.N is a NoneType (a secret, not shown), allowed: a string"]),
    ({"secret_environment": {"S3_KEY": "s"}, "environment": {"S3_KEY": "t"}},
     ["variable engine_service_secret_environment sets S3_KEY, which engine_service_environment sets too: set it in"
      " one of them"]),
    ({"api_key": 12345}, ["variable engine_service_api_key is a int (a secret, not shown), allowed: a string (quote"
                          " it)"]),
])
def test_problems_of_role_variables(kwargs, expected):
    assert F["engine_service_problems"]([QWEN], **kwargs) == expected


# Every C0 control character, DEL, C1 controls, and a lone surrogate (what undecodable bytes become).
CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f", "\x80", "\x85", "\x9f", "\udc80"]
M1 = "variable engine_service_models[1]"
# field, how the value goes in (models, kwargs), the problem expected (``{v}``: the value as JSON)
FIELDS = [
    ("name", lambda v: ([QWEN, dict(QWEN, name=v, port=8001)], {}),
     M1 + ".name is {v}, allowed: 1-48 of a-z, 0-9 and -, starting with a letter or digit (it names the unit"
          " llmfleet-vllm-<name>.service)"),
    ("model", lambda v: ([QWEN, dict(QWEN, name="b", port=8001, model=v)], {}), M1 + ".model is {v}, allowed: " + CONTROL),
    ("args", lambda v: ([QWEN, dict(QWEN, name="b", port=8001, args=["--a", "1", v])], {}),
     M1 + ".args[2] is {v}, allowed: " + CONTROL),
    ("environment value", lambda v: ([QWEN, dict(QWEN, name="b", port=8001, environment={"A": v})], {}),
     M1 + ".environment.A is {v}, allowed: " + CONTROL),
    ("environment name", lambda v: ([QWEN, dict(QWEN, name="b", port=8001, environment={v: "a"})], {}),
     M1 + ".environment has the name {v}, allowed: names of letters, digits and _, not starting with a digit"),
    ("api_key", lambda v: ([QWEN, dict(QWEN, name="b", port=8001, api_key=v)], {}),
     M1 + ".api_key has a control character (a secret, not shown), allowed: " + CONTROL),
    ("engine_service_environment", lambda v: ([QWEN], {"environment": {"A": v}}),
     "variable engine_service_environment.A is {v}, allowed: " + CONTROL),
    ("engine_service_secret_environment", lambda v: ([QWEN], {"secret_environment": {"S": v}}),
     "variable engine_service_secret_environment.S has a control character (a secret, not shown), allowed: " + CONTROL),
    ("engine_service_api_key", lambda v: ([QWEN], {"api_key": v}),
     "variable engine_service_api_key has a control character (a secret, not shown), allowed: " + CONTROL),
    ("engine_service_hf_token", lambda v: ([QWEN], {"hf_token": v}),
     "variable engine_service_hf_token has a control character (a secret, not shown), allowed: " + CONTROL),
    ("engine_service_host", lambda v: ([QWEN], {"host": v}),
     "variable engine_service_host is {v}, allowed: an address (" + CONTROL + ")"),
    ("engine_service_root", lambda v: ([QWEN], {"root": v}), "variable engine_service_root is {v}, allowed: " + PATHS),
    ("engine_service_secrets_dir", lambda v: ([QWEN], {"secrets_dir": v}),
     "variable engine_service_secrets_dir is {v}, allowed: " + PATHS),
    ("engine_service_user", lambda v: ([QWEN], {"user": v}),
     "variable engine_service_user is {v}, allowed: a system user name (1-32 of a-z, 0-9, _ and -, starting with a"
     " letter or _)"),
]
# A valid value of each field, with the control character in the middle or at the end.
SAMPLES = {"name": "qw{c}en", "model": "Qwen/Q{c}", "args": "x{c}y", "environment value": "x{c}",
           "environment name": "A{c}B", "api_key": "SECRET{c}1", "engine_service_environment": "{c}x",
           "engine_service_secret_environment": "SECRET{c}", "engine_service_api_key": "SECRET{c}",
           "engine_service_hf_token": "SECRET{c}", "engine_service_host": "127.0.0.1{c}",
           "engine_service_root": "/opt/llm{c}fleet", "engine_service_secrets_dir": "/etc/x{c}",
           "engine_service_user": "llmfleet{c}"}


@pytest.mark.parametrize("char", CONTROLS, ids=["U+%04X" % ord(c) for c in CONTROLS])
@pytest.mark.parametrize("field, build, expected", FIELDS, ids=[f[0] for f in FIELDS])
def test_every_control_character_in_every_field_is_refused(field, build, expected, char):
    value = SAMPLES[field].format(c=char)
    models, kwargs = build(value)
    problems = F["engine_service_problems"](models, **kwargs)
    assert problems == [expected.format(v=json.dumps(value))]
    assert not any("SECRET" in p for p in problems), "a secret's value is in the message"


@pytest.mark.parametrize("field, build, expected", FIELDS, ids=[f[0] for f in FIELDS])
def test_a_trailing_newline_is_refused(field, build, expected):
    """``re.match(r"^...$")`` lets "qwen\\n" through (``$`` matches before a final newline)."""
    value = SAMPLES[field].format(c="") + "\n"
    models, kwargs = build(value)
    assert F["engine_service_problems"](models, **kwargs) == [expected.format(v=json.dumps(value))]


def test_units_and_secret_file_refuse_what_problems_finds():
    bad = [QWEN, dict(QWEN, name="b", port=8001, args=["a\nExecStartPre=/bin/sh -c id"])]
    with pytest.raises(AnsibleFilterError, match=r"^engine_service_units: variable engine_service_models\[1\]\.args\[0\]"
                                                 r" is \"a\\nExecStartPre=/bin/sh -c id\", allowed: text without"):
        units(bad)
    with pytest.raises(AnsibleFilterError, match=r"^engine_service_secret_file: variable engine_service_hf_token has a"
                                                 r" control character \(a secret, not shown\)"):
        F["engine_service_secret_file"](QWEN, "", "tok\nX=1")
    with pytest.raises(AnsibleFilterError, match=r"env_name must be an environment's name, not \"0.20.0-cu13\\n\""):
        units([QWEN], env_name=ENV + "\n")
    for env_name in ("..", ".", "../x", "a/b", "a b"):
        with pytest.raises(AnsibleFilterError, match=r"env_name must be an environment's name"):
            units([QWEN], env_name=env_name)
    with pytest.raises(AnsibleFilterError, match=r"^engine_service_secret_file: variable engine_service_models \(the"
                                                 r" model \"qwen\"\)\.api_key has a control character \(a secret, not"
                                                 r" shown\)"):
        F["engine_service_secret_file"](dict(QWEN, api_key="SECRET\n"))
    with pytest.raises(AnsibleFilterError, match=r"^engine_service_secret_file: the input must be a model of"
                                                 r" engine_service_models \(a dict\), not a list"):
        F["engine_service_secret_file"]([QWEN])


@pytest.mark.parametrize("args, message", [
    (["--api-key", "sk-1"], "sets --api-key"),
    (["--api-key=sk-1"], "sets --api-key"),
    (["--api-k", "sk-1"], "sets --api-key"),  # argparse takes an unambiguous prefix
    (["--hf-token", "hf_1"], "sets --hf-token"),
])
def test_secret_options_are_refused(args, message):
    (problem,) = F["engine_service_problems"]([dict(QWEN, args=args)])
    use = "engine_service_hf_token" if "hf" in message else "api_key (of the model) or engine_service_api_key"
    assert problem == ("variable engine_service_models[0].args %s, which would put a secret in the world-readable unit"
                       " and in argv: use %s (a root-only EnvironmentFile)" % (message, use))


@pytest.mark.parametrize("name, use", [("VLLM_API_KEY", "api_key (of the model) or engine_service_api_key"),
                                       ("HF_TOKEN", "engine_service_hf_token"),
                                       ("HUGGING_FACE_HUB_TOKEN", "engine_service_hf_token")])
def test_secret_names_are_refused_in_the_unit_environment(name, use):
    assert F["engine_service_problems"]([dict(QWEN, environment={name: "SECRET"})]) == [
        "variable engine_service_models[0].environment sets %s, a secret, in the world-readable unit file: use %s"
        " (a root-only EnvironmentFile)" % (name, use)]
    assert F["engine_service_problems"]([QWEN], environment={name: "SECRET"}) == [
        "variable engine_service_environment sets %s, a secret, in the world-readable unit file: use %s (a root-only"
        " EnvironmentFile)" % (name, use)]
    with pytest.raises(AnsibleFilterError, match="sets %s, a secret" % name):
        units([QWEN], environment={name: "SECRET"})


def test_an_empty_model_key_is_refused():
    assert F["engine_service_problems"]([dict(QWEN, api_key="")]) == [
        "variable engine_service_models[0].api_key is empty, allowed: the model's API key (leave api_key out for"
        " engine_service_api_key)"]


# An argument -> its ExecStart= word; an environment value -> its Environment= word (value of A).
EXEC_WORDS = [
    ("plain/path-1.2_x:y,z@w+v=u", "plain/path-1.2_x:y,z@w+v=u"),
    ("a b", '"a b"'),
    ("", '""'),
    ("$HOME", '"$$HOME"'),
    ("${HOME}", '"$${HOME}"'),
    ("$$", '"$$$$"'),
    ("100%", "100%%"),
    ("%h", "%%h"),
    ("%%", "%%%%"),
    ("a\\b", '"a\\\\b"'),
    ("trailing\\", '"trailing\\\\"'),
    ("\\;", '"\\\\;"'),
    (";", '";"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("it's", '"it\'s"'),
    ("'", '"\'"'),
    ("é", '"é"'),
    ('{"a": "$x %y"}', '"{\\"a\\": \\"$$x %%y\\"}"'),
]
ENV_WORDS = [
    ("plain", '"A=plain"'),
    ("a b", '"A=a b"'),
    ("", '"A="'),
    ("$HOME ${X}", '"A=$HOME ${X}"'),  # Environment= expands no variables
    ("100%", '"A=100%%"'),
    ("a\\b", '"A=a\\\\b"'),
    ("trailing\\", '"A=trailing\\\\"'),
    ('say "hi"', '"A=say \\"hi\\""'),
    ("it's", '"A=it\'s"'),
    ("é", '"A=é"'),
]


@pytest.mark.parametrize("arg, word", EXEC_WORDS)
def test_exec_start_words_are_escaped(arg, word):
    (unit,) = units([dict(QWEN, args=["--x", arg])])
    assert unit["argv"][-1] == arg
    assert unit["exec_start"].endswith(" --x " + word)
    assert "\nExecStart=%s\n" % unit["exec_start"] in unit["text"]


@pytest.mark.parametrize("value, word", ENV_WORDS)
def test_environment_words_are_escaped(value, word):
    (unit,) = units([dict(QWEN, environment={"A": value})])
    assert unit["environment"][0] == word
    assert "\nEnvironment=%s\n" % word in unit["text"]
    (unit,) = units([QWEN], environment={"A": value})
    assert unit["environment"][0] == word


def test_units():
    models = [dict(QWEN, args=["--max-model-len", 8192, "--chat-template", "a b%"], environment={"CUDA_VISIBLE_DEVICES": "1"})]
    (unit,) = F["engine_service_units"](models, "/opt/llmfleet/", ENV, "0.0.0.0", 45, {"X": "y \"q\""})
    text = unit.pop("text")
    assert unit == {
        "name": "qwen",
        "unit": "llmfleet-vllm-qwen.service",
        "port": 8000,
        "model": "Qwen/Qwen3-8B",
        "url": "http://127.0.0.1:8000",
        "argv": ["/opt/llmfleet/engines/vllm/current/bin/vllm", "serve", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port",
                 "8000", "--served-model-name", "qwen", "--shutdown-timeout", "45", "--disable-uvicorn-access-log",
                 "--max-model-len", "8192", "--chat-template", "a b%"],
        "exec_start": "/opt/llmfleet/engines/vllm/current/bin/vllm serve Qwen/Qwen3-8B --host 0.0.0.0 --port 8000"
                      " --served-model-name qwen --shutdown-timeout 45 --disable-uvicorn-access-log --max-model-len 8192"
                      " --chat-template \"a b%%\"",
        "environment": ['"CUDA_VISIBLE_DEVICES=1"',
                        '"FLASHINFER_WORKSPACE_BASE=/opt/llmfleet/cache/flashinfer/0.20.0-cu13"',
                        '"HF_HOME=/opt/llmfleet/cache/huggingface"',
                        '"HOME=/opt/llmfleet/serve"',
                        '"TRITON_CACHE_DIR=/opt/llmfleet/cache/triton/0.20.0-cu13"',
                        '"VLLM_CACHE_ROOT=/opt/llmfleet/cache/vllm/0.20.0-cu13"',
                        '"VLLM_PORT=20000"',
                        '"X=y \\"q\\""',
                        '"XDG_CACHE_HOME=/opt/llmfleet/cache/xdg/0.20.0-cu13"'],
        "cache_dirs": ["/opt/llmfleet/cache/flashinfer/0.20.0-cu13", "/opt/llmfleet/cache/huggingface",
                       "/opt/llmfleet/cache/triton/0.20.0-cu13", "/opt/llmfleet/cache/vllm/0.20.0-cu13",
                       "/opt/llmfleet/cache/xdg/0.20.0-cu13"],
        "working_directory": "/opt/llmfleet/serve/qwen",
        "writable_dirs": ["/opt/llmfleet/serve", "/opt/llmfleet/cache/flashinfer/0.20.0-cu13",
                          "/opt/llmfleet/cache/huggingface", "/opt/llmfleet/cache/triton/0.20.0-cu13",
                          "/opt/llmfleet/cache/vllm/0.20.0-cu13", "/opt/llmfleet/cache/xdg/0.20.0-cu13"],
        "environment_file": "/etc/llmfleet/engine_service/llmfleet-vllm-qwen.service.env",
        "api_key_from": "none",
        "revision": None,
        "commit": None,
        "gpus": None,
        "vllm_port": 20000,
        "tensor_parallel_size": 1,
        "group": None,
    }
    assert directives(text) == [
        ("Type", "exec"),
        ("User", "llmfleet-vllm"),
        ("Group", "llmfleet-vllm"),
        ("WorkingDirectory", "/opt/llmfleet/serve/qwen"),
    ] + [("Environment", word) for word in unit["environment"]] + [
        ("EnvironmentFile", "/etc/llmfleet/engine_service/llmfleet-vllm-qwen.service.env"),
        ("ExecStart", unit["exec_start"]),
        ("Restart", "on-failure"),
        ("RestartSec", "5"),
        ("TimeoutStartSec", "900"),
        ("KillSignal", "SIGTERM"),
        ("ExecStop", STOP_MAIN_FIRST),
        ("KillMode", "control-group"),
        ("TimeoutStopSec", "75"),
        ("RemoveIPC", "yes"),
        ("LimitNOFILE", "65536"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", " ".join(unit["writable_dirs"])),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
    ]
    assert directives(text, "Unit") == [
        ("Description", "vLLM serving qwen (0.20.0-cu13), managed by llmfleet.engines"),
        ("After", "network-online.target"), ("Wants", "network-online.target")]
    assert directives(text, "Install") == [("WantedBy", "multi-user.target")]
    assert text.endswith("\n") and "\\\n" not in text


def test_unit_settings_from_the_role_variables():
    (unit,) = units([QWEN], user="svc_ai", ready_timeout="1200", limit_nofile="1048576", secrets_dir="/etc/x/",
                    root="/srv/ai+1", env_name="0.11.0+cu129")
    settings = dict(directives(unit["text"]))
    assert (settings["User"], settings["Group"], settings["TimeoutStartSec"], settings["LimitNOFILE"]) == (
        "svc_ai", "svc_ai", "1200", "1048576")
    assert settings["EnvironmentFile"] == unit["environment_file"] == "/etc/x/llmfleet-vllm-qwen.service.env"
    assert settings["ReadWritePaths"].split() == unit["writable_dirs"] == [
        "/srv/ai+1/serve", "/srv/ai+1/cache/flashinfer/0.11.0+cu129", "/srv/ai+1/cache/huggingface",
        "/srv/ai+1/cache/triton/0.11.0+cu129", "/srv/ai+1/cache/vllm/0.11.0+cu129", "/srv/ai+1/cache/xdg/0.11.0+cu129"]


def test_a_cache_moved_by_the_environment_is_writable_and_made():
    (unit,) = units([dict(QWEN, environment={"HF_HOME": "/opt/llmfleet/cache/hf/"})],
                    environment={"HOME": "/opt/llmfleet/serve/home"})
    assert '"HF_HOME=/opt/llmfleet/cache/hf/"' in unit["environment"]
    assert '"HOME=/opt/llmfleet/serve/home"' in unit["environment"]
    assert unit["writable_dirs"] == ["/opt/llmfleet/serve", "/opt/llmfleet/cache/flashinfer/0.20.0-cu13",
                                     "/opt/llmfleet/cache/hf", "/opt/llmfleet/cache/triton/0.20.0-cu13",
                                     "/opt/llmfleet/cache/vllm/0.20.0-cu13", "/opt/llmfleet/cache/xdg/0.20.0-cu13",
                                     "/opt/llmfleet/serve/home"]
    assert "/opt/llmfleet/cache/hf" in unit["cache_dirs"]


# Root hands the service user only directories in its own trees (<root>/serve, <root>/cache/<name>):
# a path value naming one of root's directories, or one outside <root>, is refused before anything runs.
@pytest.mark.parametrize("key, value", [
    ("HOME", "/opt/llmfleet/cache"), ("HOME", "/opt/llmfleet"), ("HF_HOME", "/opt/llmfleet/engines/vllm"),
    ("XDG_CACHE_HOME", "/etc/systemd/system"), ("VLLM_CACHE_ROOT", "/opt/llmfleet/cache/uv"),
    ("TRITON_CACHE_DIR", "/opt/llmfleet/cache/uv/sub"), ("HF_HOME", "/data/hf"), ("HOME", "/opt/llmfleet/models"),
])
def test_a_path_value_outside_the_service_trees_is_refused(key, value):
    for where, kwargs in (("variable engine_service_environment", {"environment": {key: value}}),
                          ("variable engine_service_models[0].environment", {})):
        models = [dict(QWEN, environment={key: value})] if not kwargs else [QWEN]
        found = F["engine_service_problems"](models, root="/opt/llmfleet", **kwargs)
        assert found == ['%s.%s is "%s", allowed: a directory in /opt/llmfleet/serve or /opt/llmfleet/cache/<name>'
                         ' (not /opt/llmfleet/cache/uv, root\'s): the service user owns what it writes, and root makes'
                         ' those directories for it only there' % (where, key, value)], found


@pytest.mark.parametrize("secrets_dir", ["/opt/llmfleet/serve/secrets", "/opt/llmfleet/cache/x", "/opt/llmfleet"])
def test_a_secrets_dir_in_the_service_users_trees_is_refused(secrets_dir):
    found = F["engine_service_problems"]([QWEN], root="/opt/llmfleet", secrets_dir=secrets_dir)
    assert found == ['variable engine_service_secrets_dir is "%s", allowed: a directory outside /opt/llmfleet/serve'
                     ' and /opt/llmfleet/cache (the service user\'s trees: it could read or replace the secret files'
                     ' there)' % secrets_dir], found
    assert F["engine_service_problems"]([QWEN], root="/opt/llmfleet", secrets_dir="/opt/llmfleet/secrets") == []


@pytest.mark.parametrize("shutdown_timeout", [0, 1, 30, "45", 600, 3600])
def test_systemd_waits_longer_than_vllm_drains(shutdown_timeout):
    """TimeoutStopSec= above --shutdown-timeout: else systemd kills vLLM while in-flight requests finish."""
    (unit,) = units([QWEN], shutdown_timeout=shutdown_timeout)
    settings = dict(directives(unit["text"]))
    given = int(unit["argv"][unit["argv"].index("--shutdown-timeout") + 1])
    assert given == int(shutdown_timeout)
    assert int(settings["TimeoutStopSec"]) > given
    assert int(settings["TimeoutStopSec"]) == given + 30  # as docs/engine-service.md and the argument specs say


# The hardening vLLM tolerates, and what is known to break it (GPUs, Triton's JIT, NCCL, downloads).
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes", "ProtectHome": "yes",
             "ProtectKernelModules": "yes", "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes",
             "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "RestrictRealtime": "yes"}
BREAKS_VLLM = ("RestrictAddressFamilies", "IPAddressDeny", "ProtectClock", "PrivateDevices", "MemoryDenyWriteExecute",
               "SystemCallFilter")


def test_hardening_present_and_absent():
    (unit,) = units([QWEN])
    settings = directives(unit["text"])
    keys = [key for key, _value in settings]
    assert {key: value for key, value in settings if key in HARDENING} == HARDENING
    assert [key for key in keys if key in BREAKS_VLLM] == []
    assert sorted(key for key in set(keys) if keys.count(key) > 1) == ["Environment"]  # each setting once
    comments = [line for line in unit["text"].splitlines() if line.startswith("#")]
    for key in BREAKS_VLLM:  # each left out with its reason
        assert [line for line in comments if line.startswith("# %s= " % key)], key
    for key in HARDENING:  # each with a comment line just above it
        lines = unit["text"].splitlines()
        assert lines[lines.index("%s=%s" % (key, HARDENING[key])) - 1].startswith("#"), key
    assert dict(settings)["ReadWritePaths"].split() == unit["writable_dirs"]
    assert dict(settings)["LimitNOFILE"] == "65536"
    assert '"HOME=/opt/llmfleet/serve"' in unit["environment"]


def test_api_key_from():
    models = [QWEN, dict(QWEN, name="own", port=8001, api_key="PLANTED-1")]
    assert [u["api_key_from"] for u in units(models)] == ["none", "model"]
    assert [u["api_key_from"] for u in units(models, api_key="PLANTED-2")] == ["global", "model"]
    # what the role passes: whether engine_service_api_key is set, not the key
    assert [u["api_key_from"] for u in units(models, api_key=True)] == ["global", "model"]
    assert [u["api_key_from"] for u in units(models, api_key=False)] == ["none", "model"]


def test_no_secret_in_what_units_returns():
    secrets = ["PLANTED-model-key", "PLANTED-global-key"]
    models = [dict(QWEN, api_key=secrets[0]), dict(QWEN, name="b", port=8001)]
    out = json.dumps(units(models, api_key=secrets[1], environment={"X": "1"}))
    assert [s for s in secrets if s in out] == []
    # ... and the secrets do exist, in the secrets' file
    assert secrets[0] in F["engine_service_secret_file"](models[0], secrets[1])
    assert secrets[1] in F["engine_service_secret_file"](models[1], secrets[1])


def read_environment_file(text):
    """systemd's EnvironmentFile= parser (systemd.exec(5), src/basic/env-file.c), for what this role writes:
    ``KEY=`` then an unquoted, '-quoted or "-quoted value."""
    out = {}
    for line in text.split("\n"):
        if not line.strip() or line.lstrip()[0] in "#;":
            continue
        key, rest = line.split("=", 1)
        value, index = [], 0
        while index < len(rest):
            char = rest[index]
            if char == "'":
                end = rest.index("'", index + 1)
                value.append(rest[index + 1:end])
                index = end + 1
            elif char == '"':
                index += 1
                while rest[index] != '"':
                    if rest[index] == "\\" and rest[index + 1] in '"\\`$':
                        index += 1
                    elif rest[index] == "\\":
                        value.append("\\")
                        index += 1
                    value.append(rest[index])
                    index += 1
                index += 1
            elif char == "\\":
                value.append(rest[index + 1])
                index += 2
            else:
                value.append(char)
                index += 1
        out[key.strip()] = "".join(value)
    return out


NASTY = ["plain", "a b", " lead and trail ", 'q"uote', "back\\slash", "trailing\\", "$HOME ${X} $(id)", "`id`",
         "100% %h %%", "it's", "#not a comment", ";", "é ü", "=", "a=b"]


def test_secret_file():
    models = [dict(QWEN, api_key="own key"), dict(QWEN, name="b", port=8001)]
    assert F["engine_service_secret_file"](models[0], "g", "hf$x", {"S3_SECRET": 'a"b`c\\d'}) == (
        "# Secrets of llmfleet-vllm-qwen.service (llmfleet.engines.engine_service), read by systemd: keep it root-only,"
        " 0600.\n"
        'HF_TOKEN="hf\\$x"\n'
        'S3_SECRET="a\\"b\\`c\\\\d"\n'
        'VLLM_API_KEY="own key"\n')
    assert F["engine_service_secret_file"](models[1], "g") == (
        "# Secrets of llmfleet-vllm-b.service (llmfleet.engines.engine_service), read by systemd: keep it root-only,"
        " 0600.\n"
        'VLLM_API_KEY="g"\n')
    # nothing to keep: the file is still written (the unit requires it), with its comment only
    assert read_environment_file(F["engine_service_secret_file"](models[1])) == {}


@pytest.mark.parametrize("value", NASTY)
def test_secret_file_values_read_back(value):
    text = F["engine_service_secret_file"](dict(QWEN, api_key=value), "", value, {"OTHER": value})
    assert read_environment_file(text) == {"VLLM_API_KEY": value, "HF_TOKEN": value, "OTHER": value}
    assert len(text.splitlines()) == 4


# The unit's ExecStop= (issue 44, item 6d): SIGTERM to vLLM's main process alone, waiting for it to exit; with
# KillMode=control-group, systemd then sends SIGTERM to what is left and SIGKILL only after TimeoutStopSec=.
STOP_MAIN_FIRST = ("/bin/sh -c 'if [ -n \"$$MAINPID\" ] && kill -TERM \"$$MAINPID\"; then while kill -0 \"$$MAINPID\""
                   " 2>/dev/null; do sleep 0.2; done; fi'")


def _stop_command(text):
    """The ExecStop= of a unit's text as the program gets it: systemd reads ``$$`` as ``$`` and splits the
    words (here one single-quoted word after ``-c``)."""
    (value,) = [v for k, v in directives(text) if k == "ExecStop"]
    return shlex.split(value.replace("$$", "$"))


def test_the_stop_command_waits_for_the_main_process_and_signals_it_alone(tmp_path):
    """Issue 44, item 6d: stopping sends SIGTERM to vLLM's main process only, and returns when it has exited
    (vLLM lets in-flight requests finish, then stops its engine core and workers itself); a process beside
    it (an engine core) gets nothing from it: what is left afterwards is systemd's (KillMode=control-group:
    SIGTERM, then SIGKILL after TimeoutStopSec=). With the main process gone (MAINPID unset), it returns at
    once."""
    argv = _stop_command(units([QWEN])[0]["text"])
    marks = tmp_path / "marks"
    program = ("import os, signal, sys, time\n"
               "def term(*_):\n"
               "    open(%r, 'a').write(sys.argv[1] + ' TERM\\n')\n"
               "    time.sleep(float(sys.argv[2]))\n"
               "    sys.exit(0)\n"
               "signal.signal(signal.SIGTERM, term)\n"
               "print('ready', flush=True)\n"
               "while True:\n"
               "    time.sleep(1)\n") % str(marks)
    main = subprocess.Popen([sys.executable, "-c", program, "main", "1.0"], stdout=subprocess.PIPE, text=True)
    core = subprocess.Popen([sys.executable, "-c", program, "core", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert main.stdout.readline() == "ready\n" and core.stdout.readline() == "ready\n"
        reaper = threading.Thread(target=main.wait)  # PID 1 reaps the main process as soon as it exits
        reaper.start()
        started = time.monotonic()
        done = subprocess.run(argv, env=dict(os.environ, MAINPID=str(main.pid)), timeout=20, check=False)
        took = time.monotonic() - started
        reaper.join(5)
        assert done.returncode == 0
        assert main.returncode == 0 and took >= 1.0, "the stop command returned before the main process exited"
        assert marks.read_text() == "main TERM\n" and core.poll() is None, "a process beside the main one got a signal"
        started = time.monotonic()
        env = {k: v for k, v in os.environ.items() if k != "MAINPID"}
        assert subprocess.run(argv, env=env, timeout=20, check=False).returncode == 0
        assert time.monotonic() - started < 2
    finally:
        for proc in (main, core):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


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


@pytest.mark.parametrize("model, port, problem", [
    ("./models/qwen", 8000, 'variable engine_service_models[0].model is "./models/qwen", a relative path; allowed: a model'
                            ' name (org/model) or an absolute path on the node'),
    ("~/qwen", 8000, 'variable engine_service_models[0].model is "~/qwen", a relative path; allowed: a model'
                     ' name (org/model) or an absolute path on the node'),
    ("Qwen/Qwen3-8B", 80, "variable engine_service_models[0].port is 80, allowed: a whole number from 1024 to 65535 (the"
                          " service user cannot bind a port below 1024; put a proxy in front for one)"),
])
def test_relative_model_paths_and_privileged_ports_are_refused(model, port, problem):
    """Issue 17, item 13: a relative path is read from the unit's working directory, not the one
    Ansible checked; the service user cannot bind a port below 1024."""
    assert F["engine_service_problems"]([{"name": "m", "model": model, "port": port}]) == [problem]


def test_the_unreadable_message_names_the_model_and_the_service_user():
    assert F["engine_service_says"]({"name": "m", "model": "/srv/m"}, "unreadable", "llmfleet-vllm") == (
        'variable engine_service_models: model "/srv/m" of "m" cannot be read by the service user "llmfleet-vllm" on'
        " this node (vLLM runs as that user; allowed: a path it can read and enter)")


def test_the_unchecked_message_says_the_check_was_killed_at_its_deadline():
    """Issue 44, item 2: the preflight's check as the user was SIGKILLed at its deadline (rc 137 or 124)."""
    assert F["engine_service_says"]({"name": "m", "model": "/srv/m"}, "unchecked", "llmfleet-vllm") == (
        'variable engine_service_models: model "/srv/m" of "m" could not be checked as the service user "llmfleet-vllm"'
        " on this node: no answer within 30 s, and the check was killed (a mount that does not answer, or a check the"
        " user stopped)")


# -- pinned models (revision) --------------------------------------------------------------------
PINNED = dict(QWEN, revision="v1")
LOCKS = {"Qwen/Qwen3-8B@v1": {"commit": "0123456789abcdef0123456789abcdef01234567"}}


def test_a_pinned_model_serves_offline_at_its_commit():
    unit = units([PINNED], locks=LOCKS)[0]
    commit = LOCKS["Qwen/Qwen3-8B@v1"]["commit"]
    assert unit["argv"][unit["argv"].index("--revision") + 1] == commit
    assert unit["argv"][unit["argv"].index("--tokenizer-revision") + 1] == commit
    assert (unit["revision"], unit["commit"]) == ("v1", commit)
    env = dict(value.strip('"').split("=", 1) for key, value in directives(unit["text"]) if key == "Environment")
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == "/opt/llmfleet/models"
    # the weights are read-only to the service: not among the paths it may write
    assert not any(d.startswith("/opt/llmfleet/models") for d in unit["writable_dirs"])
    plain = units([QWEN], locks=LOCKS)[0]
    assert "--revision" not in plain["argv"] and plain["commit"] is None
    assert "HF_HUB_OFFLINE" not in plain["text"]


def test_a_pinned_model_pins_over_the_common_environment():
    unit = units([PINNED], locks=LOCKS, environment={"HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": "/srv/hub"})[0]
    assert '"HF_HUB_OFFLINE=1"' in unit["environment"] and '"HF_HUB_CACHE=/opt/llmfleet/models"' in unit["environment"]


@pytest.mark.parametrize("locks", [None, {}, {"Qwen/Qwen3-8B@v2": LOCKS["Qwen/Qwen3-8B@v1"]},
                                   {"Qwen/Qwen3-8B@v1": {"commit": "v1"}}])
def test_a_pinned_model_without_its_lock_is_not_rendered(locks):
    with pytest.raises(AnsibleFilterError, match=r'no lock \(a commit\) for the model "Qwen/Qwen3-8B" at revision "v1"'):
        units([PINNED], locks=locks)


@pytest.mark.parametrize("entry, problem", [
    (dict(PINNED, revision=""), 'engine_service_models[0].revision is ""'),
    (dict(PINNED, revision="a..b"), 'revision is "a..b"'),
    (dict(PINNED, revision="-x"), 'revision is "-x"'),
    (dict(PINNED, revision=7), "revision is 7"),
    (dict(PINNED, revision="main\n"), 'revision is "main\\n"'),
    (dict(PINNED, model="/srv/models/qwen"), 'model is "/srv/models/qwen" with a revision'),
    (dict(PINNED, model="a--b/c"), 'model is "a--b/c" with a revision'),
    (dict(PINNED, args=["--revision=main"]), "args sets --revision, which the role sets to the pinned commit"),
    (dict(PINNED, args=["--tokenizer-rev", "x"]), "args sets --tokenizer-revision"),
    (dict(PINNED, environment={"HF_HUB_OFFLINE": "0"}), "environment sets HF_HUB_OFFLINE, which the role sets"),
    (dict(PINNED, environment={"HF_ENDPOINT": "http://x"}), "environment sets HF_ENDPOINT"),
])
def test_pinned_model_problems(entry, problem):
    problems = F["engine_service_problems"]([entry])
    assert any(problem in p for p in problems), problems


def test_unpinned_models_keep_their_args_and_environment():
    assert F["engine_service_problems"]([dict(QWEN, args=["--revision", "main"], environment={"HF_HUB_OFFLINE": "1"})]) == []


def test_model_pins_are_distinct_and_sorted():
    hosts = [[PINNED, dict(QWEN, name="b", port=8001, revision="main")],
             [dict(PINNED, name="c"), QWEN, dict(QWEN, model="org/x", revision="refs/pr/1")],
             [dict(PINNED, revision="..")]]
    pins = F["engine_service_model_pins"](hosts)
    assert [p["key"] for p in pins] == ["Qwen/Qwen3-8B@main", "Qwen/Qwen3-8B@v1", "org/x@refs/pr/1"]
    assert pins[2] == {"repo": "org/x", "revision": "refs/pr/1", "key": "org/x@refs/pr/1",
                       "file": "org--x@refs--pr--1.json"}
    assert F["engine_service_model_pins"]([QWEN]) == []
    with pytest.raises(AnsibleFilterError):
        F["engine_service_model_pins"]("Qwen/Qwen3-8B")


def test_the_hub_pins_are_those_of_the_hosts_that_keep_no_lock_or_refresh_once_each():
    """site.yml pins them once for the batch before the looks: a host that keeps its locks on the controller (and
    does not refresh) asks the hub nothing; a pin asked for twice is asked once, with the first host's settings."""
    pinned = dict(QWEN, revision="main")
    hostvars = {
        "kept": {"engine_service_models": [dict(pinned, model="org/kept")], "engine_service_model_lock_dir": "/l"},
        "plain": {"engine_service_models": [pinned, dict(QWEN, name="b", port=8001)],
                  "engine_service_hf_endpoint": "https://hub.internal", "engine_service_hf_token": "hf_NEVER"},
        "again": {"engine_service_models": [pinned, dict(pinned, model="org/new")],
                  "engine_service_model_lock_dir": "/locks/", "engine_service_model_refresh": "true",
                  "engine_service_hf_allow_plain_http": True},
        "serves-nothing": {},
        "not-in-the-batch": {"engine_service_models": [dict(pinned, model="org/other")]},
    }
    pins = F["engine_service_hub_pins"](hostvars, ["kept", "plain", "again", "serves-nothing"])
    assert pins == [
        {"repo": "Qwen/Qwen3-8B", "revision": "main", "key": "Qwen/Qwen3-8B@main", "file": "Qwen--Qwen3-8B@main.json",
         "host": "plain", "endpoint": "https://hub.internal", "allow_plain_http": False, "lock_file": None,
         "refresh": False},
        {"repo": "org/new", "revision": "main", "key": "org/new@main", "file": "org--new@main.json", "host": "again",
         "endpoint": "", "allow_plain_http": True, "lock_file": "/locks/org--new@main.json", "refresh": True}]
    # the token stays the host's (the task reads it from hostvars): never in the items, which are registered
    assert "hf_NEVER" not in json.dumps(pins)
    assert F["engine_service_hub_pins"](hostvars, ["kept", "serves-nothing"]) == []
    with pytest.raises(AnsibleFilterError):
        F["engine_service_hub_pins"](hostvars, "kept")


def test_the_hub_token_reaches_only_the_units_that_fetch_from_the_hub():
    """A pinned model is staged by the role and served offline: its unit's environment (and so vLLM,
    remote code, /proc/<pid>/environ) holds no hub token. An unpinned one fetches at start: it has it."""
    pinned = dict(QWEN, revision="main")
    assert "HF_TOKEN" not in F["engine_service_secret_file"](pinned, "key", "hf_PLANTED")
    assert "hf_PLANTED" not in F["engine_service_secret_file"](pinned, "key", "hf_PLANTED")
    assert 'HF_TOKEN="hf_PLANTED"' in F["engine_service_secret_file"](QWEN, "key", "hf_PLANTED")
    assert 'VLLM_API_KEY="key"' in F["engine_service_secret_file"](pinned, "key", "hf_PLANTED")
