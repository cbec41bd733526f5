# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM build table and build policy, as filters for the engine_node role.

The table and the policy live in ``plugins/module_utils/node/_builds.py``; the ``gpu_probe`` module
uses the same functions, so the role's ``auto`` and the module's agree. Documentation:
``engine_build_plan.yml`` and ``engine_builds.yml`` beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds


def _plain(value):
    """Template results arrive as Ansible's own str/dict/list subclasses; make plain copies."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def engine_build_plan(facts, version, requested="auto", package="vllm"):
    """The build of vLLM ``version`` for a node with ``facts`` (gpu_probe's result), installing the
    distribution ``package`` (engine_node_package)."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "engine_build_plan: the input must be gpu_probe's result (a dict), not %s" % type(facts).__name__
        )
    try:
        return _builds.choose(_plain(facts), str(version), str(requested), str(package))
    except (_builds.BuildTableError, _builds.BuildRequestError) as exc:
        raise AnsibleFilterError("engine_build_plan: %s" % exc)


def engine_builds(version, arch="x86_64", package="vllm"):
    """Every build vLLM ``version`` publishes and where it comes from."""
    try:
        return {
            "version": str(version).strip().lstrip("v"),
            "default": _builds.default_build(str(version)),
            "builds": _builds.builds(str(version), str(arch), str(package)),
        }
    except _builds.BuildTableError as exc:
        raise AnsibleFilterError("engine_builds: %s" % exc)


class FilterModule:
    """llmfleet.engines build filters."""

    def filters(self):
        return {
            "engine_build_plan": engine_build_plan,
            "engine_builds": engine_builds,
        }
