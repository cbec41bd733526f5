# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_node role's decisions about its layout on a node, as filters: the directories it
makes under ``engine_node_root`` (after the engine_layout module judged them), and which environment
``current`` names once the run is over. Documentation: one ``<filter>.yml`` per filter beside this
file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

# The role's actions (plan.yml, look.yml): what a node does this run.
ACTIONS = ("none", "unchanged", "look", "switch", "install")
PREFERENCES = ("only-managed", "managed", "system", "only-system")


def engine_node_layout_dirs(layout, python_preference="only-managed"):
    """The directories under the engine root, in the order they are made, as ``{path, mode}``
    (``path`` below the root, '' for the root itself), with ``<root>/cache/uv`` first removed
    (``state: absent``) when ``layout`` (engine_layout's result) says to drop it. ``<root>/python``
    (uv's managed Pythons) only where uv may use a managed Python."""
    if not isinstance(layout, dict) or "drop_uv_cache" not in layout:
        raise AnsibleFilterError("engine_node_layout_dirs: the input must be engine_layout's result (with "
                                 "drop_uv_cache), not %r" % (layout,))
    if python_preference not in PREFERENCES:
        raise AnsibleFilterError("engine_node_layout_dirs: python_preference is %r, allowed: %s"
                                 % (python_preference, ", ".join(PREFERENCES)))
    dirs = [{"path": "", "mode": "0755"}, {"path": "/cache", "mode": "0755"}]
    if boolean(layout["drop_uv_cache"], strict=False):
        dirs.append({"path": "/cache/uv", "state": "absent"})
    dirs += [{"path": "/cache/uv", "mode": "0700"}, {"path": "/uv", "mode": "0755"}]
    if python_preference != "only-system":
        dirs.append({"path": "/python", "mode": "0755"})
    return dirs + [{"path": "/engines", "mode": "0755"}, {"path": "/engines/vllm", "mode": "0755"}]


def engine_node_now(action, want, was, job=None, ok=True, installed=False, check_mode=False):
    """The environment ``current`` names once this run is over ('' for none); in check mode, the one
    it names now.

    - ``none`` (the node runs no engine): none;
    - ``unchanged`` (``current`` is what the node should run, or auto's kept fallback): ``want``;
    - ``switch`` to an environment on disk: ``want``, unless in check mode;
    - ``install``: the installed environment (``job``'s name) when the install succeeded (``ok``)
      and it was switched in (``installed``);
    - otherwise (a failure, check mode): what ``current`` named before (``was``).
    """
    if action not in ACTIONS:
        raise AnsibleFilterError("engine_node_now: action is %r, allowed: %s" % (action, ", ".join(ACTIONS)))
    ok, installed, check_mode = (boolean(v, strict=False) for v in (ok, installed, check_mode))
    if action == "none":
        return ""
    if action == "unchanged" or (action == "switch" and not check_mode):
        return want
    if action == "install" and ok and installed:
        if not isinstance(job, dict) or not job.get("name"):
            raise AnsibleFilterError("engine_node_now: an install that succeeded needs its job (with its name), "
                                     "not %r" % (job,))
        return job["name"]
    return was


class FilterModule:
    """llmfleet.engines filters for the engine_node role's layout on a node."""

    def filters(self):
        return {
            "engine_node_layout_dirs": engine_node_layout_dirs,
            "engine_node_now": engine_node_now,
        }
