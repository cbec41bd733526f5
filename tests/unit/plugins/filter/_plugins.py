"""The collection's filter plugins, imported for the unit tests without leaving the process in
controller mode.

Importing controller code (ansible.errors, which every filter plugin imports) sets
ansible.module_utils._internal.is_controller, after which AnsibleModule.warn() no longer puts
warnings into a module's result: that would change what the module tests of this session see,
depending on collection order.
"""

from __future__ import annotations

import importlib


def filter_plugin(name):
    """``plugins/filter/<name>.py`` as a module, imported with is_controller put back as it was."""
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        return importlib.import_module("ansible_collections.llmfleet.engines.plugins.filter." + name)
    finally:
        _internal.is_controller = before


def plugin_util(name):
    """``plugins/plugin_utils/<name>.py`` (the code the filters and actions share) as a module, imported the same
    way."""
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        return importlib.import_module("ansible_collections.llmfleet.engines.plugins.plugin_utils." + name)
    finally:
        _internal.is_controller = before


def filter_error():
    """ansible.errors.AnsibleFilterError, imported the same way."""
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        from ansible.errors import AnsibleFilterError
    finally:
        _internal.is_controller = before
    return AnsibleFilterError
