"""The collection's filter plugins, imported for the unit tests without leaving the process in
controller mode.

Importing controller code (ansible.errors, which every filter plugin imports) sets
ansible.module_utils._internal.is_controller, after which AnsibleModule.warn() no longer puts
warnings into a module's result: that would change what the module tests of this session see,
depending on collection order.
"""

from __future__ import annotations

import importlib


def _import(module):
    """``module`` imported with is_controller put back as it was."""
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        return importlib.import_module(module)
    finally:
        _internal.is_controller = before


def filter_plugin(name):
    """``plugins/filter/<name>.py`` as a module, imported with is_controller put back as it was."""
    return _import("ansible_collections.llmfleet.engines.plugins.filter." + name)


def plugin_util(name):
    """``plugins/plugin_utils/<name>.py`` (the code the filters and actions share) as a module, imported the same
    way."""
    return _import("ansible_collections.llmfleet.engines.plugins.plugin_utils." + name)


class ReadRecorder(dict):
    """A dict that notes in ``read`` each key looked up (``[]`` or ``get``): which variables a check reads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self.read.add(key)
        return dict.get(self, key, default)


# The start of a script run as ``python -c SCRIPT <collections path> <role dir>`` in a process of its own (the
# collection loader and controller mode stay out of the test process): Ansible's templar and ``base``, the role's
# defaults and vars as a play would hold them (strings trusted as templates).
ROLE_TEMPLAR_PRELUDE = r'''
import json, pathlib, sys
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

init_plugin_loader([sys.argv[1]])
role = pathlib.Path(sys.argv[2])
base = {}
for name in ("defaults/main.yml", "vars/main.yml"):
    for key, value in yaml.safe_load((role / name).read_text()).items():
        base[key] = trust_as_template(value) if isinstance(value, str) else value
'''


def filter_error():
    """ansible.errors.AnsibleFilterError, imported the same way."""
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        from ansible.errors import AnsibleFilterError
    finally:
        _internal.is_controller = before
    return AnsibleFilterError
