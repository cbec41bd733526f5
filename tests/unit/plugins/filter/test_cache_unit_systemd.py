"""devpi-server's unit as systemd reads it (security review, install side, finding 3).

The role's template (roles/engine_cache/templates/llmfleet-devpi.service.j2) rendered as Ansible renders it,
with the collection's filters; ``systemd-analyze verify`` then loads it: no warning, and the command line
systemd would run is exactly the words given (none split, joined, expanded). ``engine_cache_listen`` with a
newline once rendered an ``ExecStartPre=+...`` line, run as root: validation refuses it
(test_cache_filter.py), and the rendering itself refuses a control character and quotes a space or a ``#``."""

from __future__ import annotations

import pathlib

import jinja2
import pytest

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError
from tests.unit.plugins.filter.test_service_units_systemd import ANALYZE, dump_words, expanded, loaded, run

REPO = pathlib.Path(__file__).resolve().parents[4]
TEMPLATE = REPO / "roles" / "engine_cache" / "templates" / "llmfleet-devpi.service.j2"
UNIT_DIR = "/etc/systemd/system"
F = filter_plugin("engine_cache").FilterModule().filters()


def render(root, listen, port=3141):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    env.filters.update({"llmfleet.engines." + name: f for name, f in F.items()})
    venv = root + "/venv-0123456789ab"
    return env.from_string(TEMPLATE.read_text()).render(
        __engine_cache_venv=venv, __engine_cache_devpi_version="6.20.3", engine_cache_root=root,
        engine_cache_listen=listen, engine_cache_port=port), venv


@pytest.fixture(scope="module")
def analyze():
    if not ANALYZE:
        pytest.fail("systemd-analyze is not installed: install the systemd package (it checks the units the roles render)")
    return ANALYZE


@pytest.mark.parametrize("listen", ["0.0.0.0", "::1", "a b", "#x", "50%", "$HOME"],
                         ids=["ipv4", "ipv6", "space", "hash", "percent", "dollar"])
def test_systemd_reads_back_the_words_given(analyze, tmp_path, listen):
    """The values validate.yml lets through, and some it refuses (space, '#', '%', '$'): even those stay one word."""
    root = str(tmp_path / "srv" / "llmfleet-cache")
    text, venv = render(root, listen)
    scratch = tmp_path / "scratch"
    (scratch / UNIT_DIR.lstrip("/")).mkdir(parents=True)
    (scratch / UNIT_DIR.lstrip("/") / "llmfleet-devpi.service").write_text(text)
    exe = scratch / (venv + "/bin/devpi-server").lstrip("/")
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    result = run(analyze, "verify", "--man=no", "--recursive-errors=no", "--root", str(scratch),
                 UNIT_DIR + "/llmfleet-devpi.service")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), text
    settings = loaded(scratch, "llmfleet-devpi.service")
    (command,) = settings["Command Line"]
    assert [expanded(w) for w in dump_words(command)] == [
        venv + "/bin/devpi-server", "--serverdir", root + "/server", "--host", listen, "--port", "3141",
        "--restrict-modify", "root"], text
    assert not [line for line in text.splitlines() if line.startswith("ExecStartPre")]


@pytest.mark.parametrize("listen", ["0.0.0.0\nExecStartPre=+/bin/sh -c 'id > /tmp/owned'", "0.0.0.0\r", "x\x00"])
def test_a_control_character_is_refused_when_the_unit_is_rendered(listen):
    with pytest.raises(AnsibleFilterError, match="holds a control character"):
        render("/srv/llmfleet-cache", listen)
