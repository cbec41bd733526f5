# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The options of a role's argument spec, read on the controller by the actions that check a role's variables
(engine_node_plan, engine_service_look) as the role's validate.yml reads them: the spec names the variables once.
"""

from __future__ import annotations

import os

import yaml

# libyaml's loader where PyYAML has it: the spec is read once per host and task, and the pure-Python
# loader takes about 8 times as long for it
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def role_options(role_path, entry_point="main"):
    """The options of ``entry_point`` in ``<role_path>/meta/argument_specs.yml``."""
    with open(os.path.join(role_path, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_LOADER)["argument_specs"][entry_point]["options"]


def variable_problems_message(host, problems):
    """The failure message of a host whose role variables have ``problems`` (one text each), as the actions that
    check them (engine_node_plan, engine_service_look) say it."""
    return ("host %s: %s. Fix it in the inventory (host_vars/%s.yml or its group's variables)."
            % (host, "; ".join(problems), host))
