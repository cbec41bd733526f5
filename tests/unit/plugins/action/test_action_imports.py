"""The actions' controller-side code is plugins/plugin_utils' (issue 45): an action imports no filter module, where
two of them imported eight as a library. The filters are thin wrappers over the same functions."""

from __future__ import annotations

import ast
import pathlib

PLUGINS = pathlib.Path(__file__).resolve().parents[4] / "plugins"
FILTER = "ansible_collections.llmfleet.engines.plugins.filter."
STILL_FILTERS = set()


def _imports(path):
    tree = ast.parse(path.read_text())
    return [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]


def test_the_actions_import_plugin_utils_not_filters():
    found = {(path.name, module) for path in sorted((PLUGINS / "action").glob("*.py")) for module in _imports(path)
             if module.startswith(FILTER)}
    assert found <= STILL_FILTERS, found - STILL_FILTERS


def test_plugin_utils_is_private_and_holds_no_filter():
    for path in sorted((PLUGINS / "plugin_utils").glob("*.py")):
        assert path.name.startswith("_"), path
        text = path.read_text()
        assert "class FilterModule" not in text, path
        assert not [m for m in _imports(path) if m.startswith(FILTER)], path
