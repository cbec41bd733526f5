# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's staging of pinned models, as filters: whether the models a node
stages at once fit its disk together (``engine_service_stage_space``). Each model's own check
(model_snapshot's) sees the same free space; this one adds them up, per filesystem.
Documentation: one ``<filter>.yml`` per filter beside this file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

_MIB = 1024 * 1024


def _mib(count):
    return "%.1f MiB" % (count / float(_MIB))


def engine_service_stage_space(results, host="this host"):
    """Problems (sentences naming the host, the models, the bytes and the free space) of the models
    that ``results`` (model_snapshot's check-mode looks, one per model) would download at once: for
    each filesystem, the sum of their bytes still to fetch plus the margin must fit its free space."""
    if not isinstance(results, list):
        raise AnsibleFilterError("engine_service_stage_space: the input must be the list of model_snapshot's "
                                 "check-mode results, not %s" % type(results).__name__)
    groups = {}
    for result in results:
        if not isinstance(result, dict) or not result.get("changed") or not isinstance(result.get("space"), dict):
            continue
        space = result["space"]
        try:
            device, free, margin = space["device"], int(space["free_bytes"]), int(space["margin_mib"])
            need = int(result.get("bytes_downloaded") or 0)
        except (KeyError, TypeError, ValueError):
            raise AnsibleFilterError("engine_service_stage_space: a result's space is not model_snapshot's: %r" % (space,))
        group = groups.setdefault(device, {"free": free, "place": space.get("place"), "margin": margin, "models": []})
        group["free"] = min(group["free"], free)
        group["margin"] = max(group["margin"], margin)
        group["models"].append(("%s@%s" % (result.get("repo"), str(result.get("commit") or "")[:12]), need))
    problems = []
    for device in sorted(groups, key=str):
        group = groups[device]
        need = sum(count for _name, count in group["models"])
        if need + group["margin"] * _MIB <= group["free"]:
            continue
        problems.append(
            "host %s: the %d pinned models staged together need %s (%d bytes: %s) plus the margin of %d MiB, and the "
            "filesystem of %s has %s (%d bytes) free. Nothing was fetched: free some space, or pin fewer new "
            "revisions in one run" % (
                host, len(group["models"]), _mib(need), need,
                ", ".join("%s %s" % (name, _mib(count)) for name, count in group["models"]), group["margin"],
                group["place"], _mib(group["free"]), group["free"]))
    return problems


class FilterModule:
    """llmfleet.engines filters for the engine_service role's staging of models."""

    def filters(self):
        return {"engine_service_stage_space": engine_service_stage_space}
