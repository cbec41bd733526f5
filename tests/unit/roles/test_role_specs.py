"""Each role: meta/argument_specs.yml and defaults/main.yml describe the same variables.

Same names, same defaults (compared as loaded YAML, so types count: "0.20.0" is not 0.2), every
option typed and described, every choice-bearing default among its choices, and the argument
spec's type accepting the default. A variable added to one file and not the other fails here.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
ROLE_NAMES = ("engine_cache", "engine_gateway", "engine_node", "engine_service", "engine_uv")


def _load(role, relative):
    with open(ROLES / role / relative, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


DEFAULTS = {role: _load(role, "defaults/main.yml") for role in ROLE_NAMES}
OPTIONS = {role: _load(role, "meta/argument_specs.yml")["argument_specs"]["main"]["options"] for role in ROLE_NAMES}
ALL = [(role, name) for role in ROLE_NAMES for name in sorted(OPTIONS[role])]

TYPES = {
    "str": str,
    "path": str,
    "int": int,
    "float": (int, float),
    "bool": bool,
    "list": list,
    "dict": dict,
}


def test_every_role_is_checked():
    assert sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists()) == list(ROLE_NAMES)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_same_variables(role):
    options, defaults = OPTIONS[role], DEFAULTS[role]
    assert sorted(options) == sorted(defaults), (
        "only in argument_specs: %s; only in defaults: %s"
        % (sorted(set(options) - set(defaults)), sorted(set(defaults) - set(options)))
    )


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_variable_is_prefixed_with_the_role_name(role):
    assert [name for name in DEFAULTS[role] if not name.startswith(role + "_")] == []


@pytest.mark.parametrize("role, name", ALL)
def test_same_default(role, name):
    options, defaults = OPTIONS[role], DEFAULTS[role]
    assert "default" in options[name], f"{name} has no default in argument_specs"
    assert options[name]["default"] == defaults.get(name), name
    assert type(options[name]["default"]) is type(defaults.get(name)), name


@pytest.mark.parametrize("role, name", ALL)
def test_typed_described_and_consistent(role, name):
    option = OPTIONS[role][name]
    assert option.get("type") in TYPES, f"{name}: type {option.get('type')!r}"
    assert option.get("description"), f"{name} has no description"
    default = option["default"]
    if not (isinstance(default, str) and "{{" in default):
        assert isinstance(default, TYPES[option["type"]]) and not (
            option["type"] in ("int", "float") and isinstance(default, bool)
        ), f"{name}: default {default!r} is not a {option['type']}"
    if option["type"] == "list":
        assert option.get("elements"), f"{name}: a list needs elements"
    if "choices" in option:
        assert default in option["choices"], f"{name}: default {default!r} not in {option['choices']}"


def test_build_choices_are_the_build_tables_requests():
    from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds

    assert OPTIONS["engine_node"]["engine_node_build"]["choices"] == list(_builds.REQUESTS)
