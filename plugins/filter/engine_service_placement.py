# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's placement of models on a node's GPUs, as filters: whether the models fit the GPUs
``gpu_probe`` reports (``engine_service_placement_problems``, the preflight, before anything stops), how many
GPUs a model runs on at once (``engine_service_world_size``) and its tensor-parallel size
(``engine_service_tensor_parallel``).

The code is ``plugins/plugin_utils/_service_placement.py``'s (over ``module_utils/serve/_placement.py``, which
the units are rendered from), which the engine_service_look action calls too. Documentation: one
``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_placement import (
    engine_service_placement_problems,
    engine_service_world_size,
    engine_service_tensor_parallel,
)


class FilterModule:
    """llmfleet.engines filters for the engine_service role's placement."""

    def filters(self):
        return {
            "engine_service_placement_problems": engine_service_placement_problems,
            "engine_service_world_size": engine_service_world_size,
            "engine_service_tensor_parallel": engine_service_tensor_parallel,
        }
