# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_node_plan action (documentation: plugins/modules/engine_node_plan.py).

One task per node for the engine_node role's first step: check the host's variables, read the node
(the gpu_probe module, the node's one module call), decide what it runs, and, where nothing is to be
done, sum the node up and say so. What used to be six tasks per node (an assert, the probe, a
set_fact of the decision, a set_fact of the result, set_stats and the closing assert) is one: on a
fleet's hourly run each task costs the controller a worker per host, module or not.

The decisions are the role's filters' (``engine_build_plan``, ``engine_node_problems``,
``engine_node_result``, ``engine_node_summary``), called here as the functions of plugins/plugin_utils that
the filters wrap: one place for each.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_checks import (
    engine_node_checked_variables, engine_node_problems, engine_node_summary,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_plan import (
    LINK, decide, engine_node_result, engine_node_stats, probe_args,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._role_spec import (
    role_options,
    variable_problems_message,
)


def read_in_this_run(probe, link, nvidia_smi):
    """``probe`` (the option: what another step of this run read on the node, as gpu_probe returns it, with
    ``read_with``: the link and nvidia-smi it was read with) when it can stand for this step's own read: read
    without error at ``link`` with the same ``nvidia_smi`` (None: the one on the node's PATH). Else None, and
    the step reads the node itself."""
    if not isinstance(probe, dict) or probe.get("failed") or not isinstance(probe.get("link"), dict):
        return None
    read_with = probe.get("read_with")
    if read_with != {"link": link, "nvidia_smi": nvidia_smi or None}:
        return None
    return {k: v for k, v in probe.items() if k != "read_with"}


class ActionModule(ActionBase):
    """Check, probe, decide and (on a node with nothing to do) sum up, in one task."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("version", "build", "package", "root", "nvidia_smi", "switch", "validate", "probe"))

    def _problems(self, task_vars):
        role = getattr(self._task, "_role", None)
        if role is None:
            return ["engine_node_plan runs in the engine_node role only (validate: true reads its argument spec)"]
        options = role_options(role._role_path)
        names = engine_node_checked_variables(options)
        values = {name: self._templar.template(task_vars[name]) for name in names if name in task_vars}
        return engine_node_problems(options, values)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        host = task_vars.get("inventory_hostname", "")
        if boolean(args.get("validate", True), strict=False):
            problems = self._problems(task_vars)
            if problems:
                result.update(failed=True, msg=variable_problems_message(host, problems))
                return result
        version, build = str(args["version"]), str(args.get("build") or "auto")
        package, root = str(args.get("package") or "vllm"), str(args["root"])
        probe = {}
        link = "%s/%s" % (root, LINK)
        given = read_in_this_run(args.get("probe"), link, args.get("nvidia_smi"))
        result["asked_node"] = build != "none" and given is None
        if build != "none" and given is not None:
            # the node was read in this run by a step before this one, as this step reads it (site.yml:
            # engine_service's look reads a serving node's GPUs and link in its one module call)
            probe = given
            result["gpus"] = probe.get("gpus") or []
        elif build != "none":
            probe = self._execute_module(module_name="llmfleet.engines.gpu_probe",
                                         module_args=probe_args(link, args.get("nvidia_smi")), task_vars=task_vars)
            if probe.get("failed"):
                result.update(probe)
                return result
            result["warnings"] = probe.pop("warnings", [])
            probe.pop("invocation", None)
            probe.pop("deprecations", None)
            result["gpus"] = probe.get("gpus") or []
        facts = decide(probe, version, build, package, root)
        plan, action = facts["__engine_node_plan"], facts["__engine_node_action"]
        # the decision, which the role's apply step starts from on a node that changes
        result["plan"] = facts
        result["action"] = action
        if action == "look" and plan.get("blocked") is not None:
            # a build asked for by name whose wheel the node cannot take: stop before any look-up
            result.update(failed=True, msg="%s: %s" % (host, plan["blocked"]))
            return result
        if action in ("none", "unchanged"):
            summed = engine_node_result(host, plan, build, action, facts["__engine_node_want"],
                                        facts["__engine_node_was"], facts["__engine_node_dir"],
                                        switch=args.get("switch", True), check_mode=self._play_context.check_mode)
            result.update(summed)
            result["ansible_stats"] = {"data": {"engine_node": engine_node_stats(summed)}, "per_host": False,
                                       "aggregate": True}
            result["msg"] = engine_node_summary(summed, None, root)
            if summed.get("fallback") or (action == "none" and summed.get("requested") != "none"):
                # a line worth reading (no engine here, and why; auto keeping a build after a failed GPU
                # check) shows without -v. A node with nothing to do is an "ok", its line shown with -v:
                # the whole result of every node, printed in each run, cost the controller more than the
                # node's module call, and told nothing new.
                result["_ansible_verbose_always"] = True
        return result
