# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``--exclude-newer`` exceptions of one node's resolution, as a filter: which packages uv takes
newer files of than the release's cut-off, and up to when. Documentation: one ``<filter>.yml`` per
filter beside this file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.index._pypi import normalize_name, own_exclude_newer


def _dict(value, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AnsibleFilterError("%s must be a dict, not %s" % (what, type(value).__name__))
    return value


def engine_node_exclude_newer_package(job, release, torch_exclude_newer_package=None, engine="vllm"):
    """``{package: cut-off or false}`` for ``--exclude-newer-package``, for one node's install:

    - a build from the GitHub release: ``torch_exclude_newer_package`` (the torch index dates part of
      its files only); the engine is a direct URL there, which no cut-off filters;
    - a build from the index: the engine's own late wheels of the node's architecture
      (``release.late_files``, pypi_published's answer): ``{engine: the latest one's exclude_newer}``,
      so that uv finds a wheel uploaded after the release's cut-off (an aarch64 wheel added months
      later), while the dependencies still resolve as of the first upload. Empty when no wheel the
      node can install is late.
    """
    job = _dict(job, "engine_node_exclude_newer_package: the input (the job)")
    release = _dict(release, "engine_node_exclude_newer_package: release")
    source = _dict(job.get("source"), "engine_node_exclude_newer_package: the job's source")
    if source.get("origin") == "github":
        return dict(_dict(torch_exclude_newer_package, "engine_node_exclude_newer_package: torch_exclude_newer_package"))
    own = own_exclude_newer(release, str(job.get("arch") or ""))
    return {normalize_name(engine): own} if own else {}


class FilterModule:
    """llmfleet.engines filters for the cut-off of a node's resolution."""

    def filters(self):
        return {"engine_node_exclude_newer_package": engine_node_exclude_newer_package}
