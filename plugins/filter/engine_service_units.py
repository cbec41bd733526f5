# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's units, as filters: the systemd unit of each served model (``engine_service_units``)
and its root-only secrets file (``engine_service_secret_file``), so that the role's task files and its unit
template hold no logic.

The code is ``plugins/plugin_utils/_service_units.py``'s, which the engine_service_look action renders the units
with too. Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_units import (
    engine_service_units,
    engine_service_secret_file,
)


class FilterModule:
    """llmfleet.engines filters for the engine_service role's units."""

    def filters(self):
        return {
            "engine_service_units": engine_service_units,
            "engine_service_secret_file": engine_service_secret_file,
        }
