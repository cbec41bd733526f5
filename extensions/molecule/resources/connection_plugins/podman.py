# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The molecule scenarios' connection to their podman containers: containers.podman's, with pipelining.

Test tooling, not part of the collection (``extensions/`` is left out of its build). molecule's podman driver
names the short connection ``podman``, which a directory on ``ANSIBLE_CONNECTION_PLUGINS`` answers before Ansible's
redirect to containers.podman; tools/molecule.sh sets it to this directory and turns ``ANSIBLE_PIPELINING`` on.

Why: containers.podman's connection runs a ``podman`` process for every step of a module call (mount the
container, make the temporary directory, run the module, remove the directory): four ``podman`` CLI starts,
each with its conmon and runc, per task and node. Measured with process accounting over ``make test``, they were
the largest CPU cost of the molecule lane after the engines themselves. Here a module goes to the container's
Python on the standard input of one ``podman exec --interactive`` (Ansible's pipelining), and the container is
mounted only when a file is copied in or out (put_file, fetch_file: ``copy``, ``template``, ``fetch``, and modules
Ansible does not pipeline, such as async ones).

Its upstream disables pipelining because ``podman exec`` without ``--interactive`` gives the command no
standard input; with it, the module reads its payload as over SSH.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
name: podman
short_description: Run the molecule scenarios' tasks in their podman containers, pipelined
description:
  - containers.podman.podman's connection with pipelining on (a module is written to the standard input of one
    C(podman exec --interactive)) and the container mounted only to copy a file.
author: llmfleet maintainers
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: The user, by name or UID, that runs the commands in the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Arguments put after C(podman) on each of its command lines.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
    vars:
      - name: ansible_podman_extra_args
  podman_executable:
    description: The podman program.
    default: podman
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
    vars:
      - name: ansible_podman_executable
extends_documentation_fragment:
  - connection_pipelining
"""


class Connection(PodmanConnection):
    """containers.podman.podman, pipelining, mounting the container only to copy a file."""

    has_pipelining = True
    _mount_tried = False

    def _connect(self):
        # no `podman mount` for every task: put_file and fetch_file mount when they need to
        ConnectionBase._connect(self)  # pylint: disable=protected-access
        self._connected = True
        return self

    def _mount_once(self):
        """containers.podman's connect (`podman mount`) the first time a file is copied; a mount that failed leaves
        ``_mount_point`` None, and its put_file and fetch_file then use `podman cp`."""
        if not self._mount_tried:
            self._mount_tried = True
            PodmanConnection._connect(self)  # pylint: disable=protected-access

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec"]
        if in_data is not None:
            args.append("--interactive")
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)

    def put_file(self, in_path, out_path):
        self._mount_once()
        super().put_file(in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mount_once()
        super().fetch_file(in_path, out_path)
