# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM build table and build policy, as filters for the engine_node role.

The table and the policy live in ``plugins/module_utils/node/_builds.py``, which the ``gpu_probe`` module uses
too, so the role's ``auto`` and the module's agree; the filters are ``plugins/plugin_utils/_node_plan.py``'s,
which the engine_node_plan action decides with. Documentation: ``engine_build_plan.yml`` and ``engine_builds.yml``
beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_plan import (
    engine_build_plan,
    engine_builds,
)


class FilterModule:
    """llmfleet.engines build filters."""

    def filters(self):
        return {
            "engine_build_plan": engine_build_plan,
            "engine_builds": engine_builds,
        }
