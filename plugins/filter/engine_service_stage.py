# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's staging of pinned models, as filters: the distinct pins of the fleet's models
(``engine_service_model_pins``), those a play asks the hub for before its looks (``engine_service_hub_pins``),
whether the models a node stages at once fit its disk together
(``engine_service_stage_space``), the locks kept from a look-up (``engine_service_kept_locks``), the commits
the staging step keeps (``engine_service_in_use``) and the downloads it follows (``engine_service_stage_jobs``).

The code is ``plugins/plugin_utils/_service_stage.py``'s, which the engine_service_look action pins with too.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_stage import (
    engine_service_model_pins,
    engine_service_hub_pins,
    engine_service_stage_space,
    engine_service_kept_locks,
    engine_service_in_use,
    engine_service_stage_jobs,
)


class FilterModule:
    """llmfleet.engines filters for the engine_service role's staging of models."""

    def filters(self):
        return {
            "engine_service_model_pins": engine_service_model_pins,
            "engine_service_hub_pins": engine_service_hub_pins,
            "engine_service_stage_space": engine_service_stage_space,
            "engine_service_kept_locks": engine_service_kept_locks,
            "engine_service_in_use": engine_service_in_use,
            "engine_service_stage_jobs": engine_service_stage_jobs,
        }
