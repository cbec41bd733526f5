"""plugin_utils/_paths.py: the one path grammar behind the checks of the engine_service units, the hub
mirror's nginx configuration and devpi-server's unit. Each refused value below would put something other
than a path into a file the collection renders (a space ends a unit's word, '%' is a systemd specifier,
';' ends an nginx directive, a newline starts a directive of its own, '..' leaves the tree)."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.plugin_utils._paths import (
    ALLOWED,
    path_parts,
    plain_path_problem,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils import _service_checks


@pytest.mark.parametrize("value, parts", [
    ("/opt/llmfleet", ["opt", "llmfleet"]),
    ("/srv/models/", ["srv", "models"]),
    ("/data/a.b_c+d@e-f", ["data", "a.b_c+d@e-f"]),
    ("/home/x", ["home", "x"]),
])
def test_a_plain_path_gives_its_parts(value, parts):
    assert path_parts(value) == parts
    assert plain_path_problem(value) is None


@pytest.mark.parametrize("value", [
    "/", "", "opt/llmfleet", "/opt/llm fleet", "/opt/%h", "/opt/$HOME", "/opt/a;b", "/opt/a\nb", "/opt/../etc",
    "/opt/./x", "/opt//x", "/opt/\"x\"", "/opt/x\\y", None, 5, ["/opt"],
])
def test_anything_else_is_refused_with_what_is_allowed(value):
    assert path_parts(value) is None
    assert plain_path_problem(value) == ALLOWED


@pytest.mark.parametrize("value", ["/home/llm", "/root/models", "/run/user/1000/x"])
def test_the_service_refuses_the_trees_protecthome_hides_on_top_of_the_grammar(value):
    assert plain_path_problem(value) is None
    problem = _service_checks._path_problem(value)  # pylint: disable=protected-access
    assert problem.startswith(ALLOWED) and "ProtectHome=yes" in problem
