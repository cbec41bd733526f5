"""The shared options of the uv and devpi modules: each doc fragment documents what its argument-spec
function declares, and each module's argument_spec agrees with the options ansible-doc shows for it
(its own and its fragments', merged as ansible-doc merges them)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from ansible_collections.llmfleet.engines.plugins.doc_fragments import devpi as devpi_fragment
from ansible_collections.llmfleet.engines.plugins.doc_fragments import uv as uv_fragment
from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpioptions import devpi_argument_spec
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvoptions import uv_argument_spec
from ansible_collections.llmfleet.engines.plugins.modules import (
    devpi_index,
    devpi_warm,
    devpi_wheel,
    uv_engine_env,
    uv_fleet_lock,
)

REPO = pathlib.Path(__file__).resolve().parents[4]
MODULES = {"uv_engine_env": uv_engine_env, "uv_fleet_lock": uv_fleet_lock, "devpi_index": devpi_index,
           "devpi_wheel": devpi_wheel, "devpi_warm": devpi_warm}
FRAGMENTS = {"uv": ("uv_engine_env", "uv_fleet_lock"), "devpi": ("devpi_index", "devpi_wheel", "devpi_warm")}


def disagreements(spec, documented, where):
    """How an argument spec and documented options differ: names, type, required, default, choices,
    elements and aliases, suboptions included, at any depth."""
    problems = []
    for name in sorted(set(spec) ^ set(documented)):
        problems.append("%s.%s is %s" % (where, name, "not documented" if name in spec else "documented but not in the spec"))
    for name in sorted(set(spec) & set(documented)):
        have, doc = spec[name], documented[name]
        pairs = [("type", have.get("type", "str"), doc.get("type", "str")),
                 ("required", bool(have.get("required")), bool(doc.get("required"))),
                 ("default", have.get("default"), doc.get("default")),
                 ("choices", have.get("choices"), doc.get("choices")),
                 ("elements", have.get("elements"), doc.get("elements")),
                 ("aliases", sorted(have.get("aliases") or []), sorted(doc.get("aliases") or []))]
        for key, in_spec, in_doc in pairs:
            if in_spec != in_doc:
                problems.append("%s.%s: %s is %r in the spec, %r in the docs" % (where, name, key, in_spec, in_doc))
        if have.get("options") or doc.get("suboptions"):
            problems.extend(disagreements(have.get("options") or {}, doc.get("suboptions") or {}, "%s.%s" % (where, name)))
    return problems


@pytest.fixture(scope="module")
def rendered():
    """Every module's options as ``ansible-doc --json`` merges them, fragments included (one run)."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=str(REPO / "build" / "collections"))
    binary = str(pathlib.Path(sys.executable).parent / "ansible-doc")
    names = ["llmfleet.engines." + name for name in MODULES]
    result = subprocess.run([binary, "--json", *names], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    docs = json.loads(result.stdout)
    return {name: docs["llmfleet.engines." + name]["doc"]["options"] for name in MODULES}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_argument_spec_agrees_with_its_documented_options(rendered, name):
    assert disagreements(MODULES[name].argument_spec(), rendered[name], name) == []


@pytest.mark.parametrize("fragment, spec", [(uv_fragment, uv_argument_spec()), (devpi_fragment, devpi_argument_spec())])
def test_fragment_documents_what_its_spec_function_declares(fragment, spec):
    documented = yaml.safe_load(fragment.ModuleDocFragment.DOCUMENTATION)["options"]
    assert disagreements(spec, documented, fragment.__name__) == []


@pytest.mark.parametrize("fragment", sorted(FRAGMENTS))
def test_the_modules_of_a_fragment_extend_it_and_take_its_spec(rendered, fragment):
    spec = {"uv": uv_argument_spec, "devpi": devpi_argument_spec}[fragment]()
    for name in FRAGMENTS[fragment]:
        assert "llmfleet.engines." + fragment in MODULES[name].DOCUMENTATION
        module_spec = MODULES[name].argument_spec()
        assert set(spec) <= set(module_spec), name
        assert set(spec) <= set(rendered[name]), name


def test_disagreements_names_what_differs():
    spec = dict(a=dict(type="int", default=1), b=dict(type="dict", options=dict(c=dict(required=True))), d=dict())
    documented = dict(a=dict(type="int", default=2), b=dict(type="dict", suboptions=dict(c=dict(type="str"))),
                      e=dict(type="str"))
    assert disagreements(spec, documented, "m") == [
        "m.d is not documented", "m.e is documented but not in the spec",
        "m.a: default is 1 in the spec, 2 in the docs", "m.b.c: required is True in the spec, False in the docs"]
