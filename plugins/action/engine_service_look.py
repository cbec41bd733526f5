# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service_look action (documentation: plugins/modules/engine_service_look.py).

One task per serving node in site.yml's engine play: is the node settled (nothing engine_service would
change, every model serving)? The node is read, and its models gated, by the engine_service_survey
module (the node's one module call of this step); what needs the controller (the secret files' text,
the placement of the models on the node's GPUs) is worked out here with the role's own filters. A
settled node is summed up here, as the role's last step would sum it up, and takes no further step of
the role in this run; any other node takes the role's full way, which reads everything again under the
node's rollout lock and decides in its own words.
"""

from __future__ import annotations

import hashlib

from ansible.plugins.action import ActionBase

from ansible_collections.llmfleet.engines.plugins.filter.engine_service_placement import (
    engine_service_placement_problems,
    engine_service_world_size,
)
from ansible_collections.llmfleet.engines.plugins.filter.engine_service_rollout import engine_service_readiness
from ansible_collections.llmfleet.engines.plugins.filter.engine_service_units import engine_service_secret_file

_SURVEY = "llmfleet.engines.engine_service_survey"


def survey_args(args):
    """The engine_service_survey arguments for the action's ``args`` (the role's variables)."""
    models = {m["name"]: m for m in args.get("models") or []}
    api_key = args.get("api_key") or ""
    hf_token = args.get("hf_token") or ""
    secret_environment = args.get("secret_environment") or {}
    locks = args.get("locks") or {}
    environment = str(args["environment"])
    units = []
    for unit in args.get("units") or []:
        model = models[unit["name"]]
        text = engine_service_secret_file(model, api_key, hf_token, secret_environment)
        units.append({"unit": unit["unit"], "name": unit["name"], "text": unit["text"], "url": unit["url"],
                      "environment_file": unit["environment_file"],
                      "secret_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                      "api_key": model.get("api_key") or api_key or None})
    snapshots = [{"lock": locks[pin["key"]]} for pin in args.get("pins") or []]
    in_use = sorted(set([s["lock"]["commit"] for s in snapshots]
                        + [u["commit"] for u in args.get("units") or [] if u.get("commit")]))
    out = {
        "units": units,
        "unit_dir": args["unit_dir"],
        "unit_prefix": args["unit_prefix"],
        "lock": args["lock"],
        "record_dir": args["record_dir"],
        "environment": environment,
        # the release the environment was built from (its name less the build)
        "version": environment.rsplit("-", 1)[0] if "-" in environment else environment,
        "steady_timeout": int(args.get("steady_timeout") or 120),
        "user": args["user"],
        "model_paths": [{"name": m["name"], "path": m["model"]} for m in models.values()
                        if str(m.get("model", "")).startswith("/")],
        "need_shm": max([engine_service_world_size(m) for m in models.values()] + [1]) > 1,
        "snapshots": snapshots,
        "keep": int(args.get("keep") or 2),
        "in_use": in_use,
    }
    if snapshots:
        out["cache_dir"] = args["cache_dir"]
    return out


def summary(host, environment, units, gates):
    """engine_service_result of a settled node: what the role's last step (report.yml) sets."""
    return {"host": host, "current": environment, "mode": "steady", "rolled_back": False, "error": None,
            "warnings": [], "units": units, "removed": [], "gates": gates, "settled": True}


class ActionModule(ActionBase):
    """Survey a serving node, check the placement, and sum up a settled node, in one task."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("environment", "models", "units", "pins", "locks", "gpus", "api_key", "hf_token",
                             "secret_environment", "unit_dir", "unit_prefix", "lock", "record_dir", "user",
                             "cache_dir", "keep", "steady_timeout", "shm_min_mib", "limit_nofile"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        host = task_vars.get("inventory_hostname", "")
        module_args = survey_args(args)
        survey = self._execute_module(module_name=_SURVEY, module_args=module_args, task_vars=task_vars)
        if survey.get("failed"):
            result.update(failed=True, msg="host %s: reading the node's services failed: %s"
                          % (host, survey.get("msg", "no message")))
            return result
        for key in ("invocation", "deprecations", "changed"):
            survey.pop(key, None)
        result["warnings"] = survey.pop("warnings", [])
        reasons = list(survey.get("reasons") or [])
        if survey.get("settled"):
            models = list(args.get("models") or [])
            need_shm = module_args["need_shm"]
            reasons = engine_service_placement_problems(
                models, args.get("gpus"), locks=args.get("locks") or {},
                shm_mib=survey.get("shm_mib") if need_shm else None,
                shm_min_mib=int(args.get("shm_min_mib") or 1024), limit_nofile=args.get("limit_nofile"))
        result["changed"] = False
        if reasons:
            # what the node answered, for -v (a settled node's result stays what the role's last step sums up)
            result["survey"] = survey
            result["settled"] = False
            result["reasons"] = reasons
            result["msg"] = "%s: takes the full way of engine_service (%s)" % (host, "; ".join(reasons))
            return result
        units = [u["unit"] for u in module_args["units"]]
        summed = summary(host, module_args["environment"], units, survey.get("gates") or [])
        result.update(summed)
        result["settled"] = True
        result["reasons"] = []
        result["ansible_stats"] = {"data": {"engine_service": {host: summed}}, "per_host": False, "aggregate": True}
        result["msg"] = (engine_service_readiness(summed["gates"], host) if summed["gates"] else
                         "%s: settled, serving %s (check mode: no gate asked)" % (host, ", ".join(units)))
        result["_ansible_verbose_always"] = True
        return result
