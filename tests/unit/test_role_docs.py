"""docs/roles/<role>.md is generated from the role's argument specs (tools/role_docs.py) and current.

The argument specs are the one place a role variable is documented: a page that differs from what
the generator writes now, a variable of defaults/main.yml that no spec declares, or a spec option
missing from its page fails here, naming the file and the command that fixes it.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import yaml

from tests.conftest import REPO

_SPEC = importlib.util.spec_from_file_location("role_docs", REPO / "tools" / "role_docs.py")
role_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(role_docs)

ROLES = role_docs.roles(REPO)


def test_every_role_has_a_page():
    assert [r.name for r in ROLES] == ["engine_cache", "engine_gateway", "engine_node", "engine_service", "engine_uv"]
    assert sorted(p.name for p in (REPO / "docs" / "roles").glob("*.md")) == sorted(r.name + ".md" for r in ROLES)


@pytest.mark.parametrize("role_dir", ROLES, ids=lambda r: r.name)
def test_page_is_what_the_generator_writes_now(role_dir):
    page = REPO / "docs" / "roles" / (role_dir.name + ".md")
    assert page.read_text(encoding="utf-8") == role_docs.render(role_dir), (
        "docs/roles/%s.md is stale: run %s" % (role_dir.name, role_docs.COMMAND))


@pytest.mark.parametrize("role_dir", ROLES, ids=lambda r: r.name)
def test_every_default_has_an_argument_spec_entry(role_dir):
    assert role_docs.undocumented(role_dir) == []


@pytest.mark.parametrize("role_dir", ROLES, ids=lambda r: r.name)
def test_every_option_of_every_entry_point_is_on_the_page(role_dir):
    specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    text = (REPO / "docs" / "roles" / (role_dir.name + ".md")).read_text()
    for entry, spec in specs.items():
        assert "## Entry point `%s`" % entry in text
        for name, option in ((spec or {}).get("options") or {}).items():
            assert "### `%s`" % name in text, name
            for sub in option.get("options") or {}:
                assert "#### `%s[].%s`" % (name, sub) in text, (name, sub)


def test_the_check_passes_on_the_repository():
    assert role_docs.problems(REPO) == []
    assert role_docs.main(["--check"]) == 0


# The checker itself: each way the pages can drift must be caught.

@pytest.fixture(name="copy")
def _copy(tmp_path):
    """The roles' specs and defaults and the pages, copied to a scratch repository."""
    for role_dir in ROLES:
        for part in ("meta/argument_specs.yml", "defaults/main.yml"):
            target = tmp_path / "roles" / role_dir.name / part
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(role_dir / part, target)
    shutil.copytree(REPO / "docs" / "roles", tmp_path / "docs" / "roles")
    assert role_docs.problems(tmp_path) == []
    return tmp_path


def test_a_changed_description_makes_the_page_stale(copy, capsys):
    spec = copy / "roles" / "engine_node" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("Seconds one environment build may take.", "Seconds a build may take."))
    assert role_docs.problems(copy) == [
        "docs/roles/engine_node.md is stale (roles/engine_node/meta/argument_specs.yml or defaults/main.yml "
        "changed): run .venv/bin/python tools/role_docs.py"]
    assert role_docs.main(["--check", "--repo", str(copy)]) == 1
    assert "docs/roles/engine_node.md is stale" in capsys.readouterr().out
    assert role_docs.main(["--repo", str(copy)]) == 0  # the generator writes it again
    assert "Seconds a build may take." in (copy / "docs" / "roles" / "engine_node.md").read_text()
    assert role_docs.problems(copy) == []


def test_a_variable_only_in_defaults_is_named(copy):
    defaults = copy / "roles" / "engine_uv" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "engine_uv_new_knob: 3\n__engine_uv_private: 1\n")
    assert role_docs.problems(copy) == [
        "roles/engine_uv/defaults/main.yml: engine_uv_new_knob has no entry in meta/argument_specs.yml"]


def test_a_missing_page_and_a_page_of_no_role_are_named(copy):
    (copy / "docs" / "roles" / "engine_cache.md").unlink()
    (copy / "docs" / "roles" / "engine_old.md").write_text("x\n")
    assert role_docs.problems(copy) == [
        "docs/roles/engine_cache.md is missing: run .venv/bin/python tools/role_docs.py",
        "docs/roles/engine_old.md belongs to no role: remove it"]


@pytest.mark.parametrize("text, markdown", [
    ("C(<root>/cache) and V(auto)", "`<root>/cache` and `auto`"),
    ("C(20000 + (port % 100) * 100) (C(port) 8000)", "`20000 + (port % 100) * 100` (`port` 8000)"),
    ("O(engine_node_python) and O(llmfleet.engines.gpu_probe#module:link)",
     "`engine_node_python` and `llmfleet.engines.gpu_probe.link`"),
    ("M(llmfleet.engines.gpu_probe), E(PATH), I(this), B(that)", "`llmfleet.engines.gpu_probe`, `PATH`, *this*, **that**"),
    ("L(the docs, https://example.com/x) and U(https://example.com)", "[the docs](https://example.com/x) and <https://example.com>"),
    ("a (plain) text with C(unclosed", "a (plain) text with C(unclosed"),
])
def test_markup(text, markdown):
    assert role_docs.markup(text) == markdown
