"""roles/engine_node: meta/argument_specs.yml and defaults/main.yml describe the same variables.

Same names, same defaults (compared as loaded YAML, so types count: "0.20.0" is not 0.2), every
option typed and described, every choice-bearing default among its choices, and the argument
spec's type accepting the default. A variable added to one file and not the other fails here.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "engine_node"


def _load(relative):
    with open(ROLE / relative, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


DEFAULTS = _load("defaults/main.yml")
SPEC = _load("meta/argument_specs.yml")["argument_specs"]["main"]
OPTIONS = SPEC["options"]

TYPES = {
    "str": str,
    "path": str,
    "int": int,
    "float": (int, float),
    "bool": bool,
    "list": list,
    "dict": dict,
}


def test_same_variables():
    assert sorted(OPTIONS) == sorted(DEFAULTS), (
        "only in argument_specs: %s; only in defaults: %s"
        % (sorted(set(OPTIONS) - set(DEFAULTS)), sorted(set(DEFAULTS) - set(OPTIONS)))
    )


def test_every_variable_is_prefixed_with_the_role_name():
    assert [name for name in DEFAULTS if not name.startswith("engine_node_")] == []


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_same_default(name):
    assert "default" in OPTIONS[name], f"{name} has no default in argument_specs"
    assert OPTIONS[name]["default"] == DEFAULTS.get(name), name
    assert type(OPTIONS[name]["default"]) is type(DEFAULTS.get(name)), name


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_typed_described_and_consistent(name):
    option = OPTIONS[name]
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
    from ansible_collections.llmfleet.engines.plugins.module_utils import _builds

    assert OPTIONS["engine_node_build"]["choices"] == list(_builds.REQUESTS)
