"""The molecule scenarios' connection (extensions/molecule/resources/connection_plugins/podman.py): the short name
``podman`` that molecule's podman driver writes into its inventory finds it where tools/molecule.sh puts it, it
pipelines (a module on the standard input of one ``podman exec --interactive``) and it mounts the container only
to copy a file. Without it the scenarios pass as well, only with four podman starts per module call."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader

from tests.conftest import REPO

PLUGINS = REPO / "extensions" / "molecule" / "resources" / "connection_plugins"


class Recorded:
    """The connection, loaded by Ansible's plugin loader as a run loads it, with its podman runs recorded instead of
    run; ``mounted`` is what ``podman mount`` answers."""

    def __init__(self, mounted=""):
        connection_loader.add_directory(str(PLUGINS))
        self.conn = connection_loader.get("podman", PlayContext(), None)
        assert self.conn.__class__.__module__.endswith("podman") and "containers" not in self.conn.__class__.__module__
        self.calls = []

        def podman(cmd, cmd_args=None, in_data=None, use_container_id=True):
            self.calls.append(([cmd] if isinstance(cmd, str) else list(cmd), list(cmd_args or []), in_data))
            return 0, (mounted.encode() if cmd == "mount" else b""), b""

        self.conn._podman = podman  # pylint: disable=protected-access


def test_molecules_short_name_finds_this_connection_where_tools_molecule_sh_puts_it():
    script = ("from ansible.plugins.loader import connection_loader\n"
              "print(connection_loader.find_plugin_with_context('podman').plugin_resolved_path)\n")
    env = dict(os.environ, ANSIBLE_CONNECTION_PLUGINS=str(PLUGINS))
    found = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                           check=True)
    assert found.stdout.strip() == str(PLUGINS / "podman.py"), found.stdout + found.stderr
    exports = re.findall(r"^export (\w+)=(\S+)$", (REPO / "tools" / "molecule.sh").read_text(), re.M)
    assert ("ANSIBLE_CONNECTION_PLUGINS", "$repo/extensions/molecule/resources/connection_plugins") in exports
    assert ("ANSIBLE_PIPELINING", "1") in exports


def test_a_pipelined_module_goes_on_the_standard_input_of_one_interactive_exec_and_nothing_is_mounted():
    run = Recorded()
    run.conn.set_options(direct={"pipelining": True})
    assert run.conn.is_pipelining_enabled()
    rc, _out, _err = run.conn.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"payload")
    assert rc == 0
    assert run.calls == [(["exec", "--interactive"], ["/bin/sh", "-c", "/usr/bin/python3 && sleep 0"], b"payload")]


def test_a_command_without_input_gets_no_interactive_exec_and_a_copy_mounts_the_container_once(tmp_path):
    mounted = tmp_path / "mounted"
    (mounted / "tmp").mkdir(parents=True)
    run = Recorded(str(mounted))
    run.conn.exec_command("/bin/sh -c 'echo ~'")
    assert run.calls == [(["exec"], ["/bin/sh", "-c", "echo ~"], None)]
    source = tmp_path / "file"
    source.write_text("x")
    run.calls.clear()
    run.conn.put_file(str(source), "/tmp/file")
    run.conn.put_file(str(source), "/tmp/file")
    assert [call[0] for call in run.calls] == [["mount"]], run.calls
    assert (mounted / "tmp" / "file").read_text() == "x"
