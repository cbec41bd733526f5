# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_node role's decisions about its layout on a node, as filters: the directories it makes under
``engine_node_root`` (``engine_node_layout_dirs``), which environment ``current`` names once the run is over
(``engine_node_now``), the role's result and what it adds to the play's stats (``engine_node_result``,
``engine_node_stats``) and the environments and fallback notes a node has (``engine_node_environments``).

The code is ``plugins/plugin_utils/_node_plan.py``'s, which the engine_node_plan and engine_service_look actions
call too. Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_plan import (
    engine_node_layout_dirs,
    engine_node_now,
    engine_node_result,
    engine_node_stats,
    engine_node_environments,
)


class FilterModule:
    """llmfleet.engines filters for the engine_node role's layout on a node."""

    def filters(self):
        return {
            "engine_node_layout_dirs": engine_node_layout_dirs,
            "engine_node_now": engine_node_now,
            "engine_node_result": engine_node_result,
            "engine_node_stats": engine_node_stats,
            "engine_node_environments": engine_node_environments,
        }
