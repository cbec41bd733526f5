# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service_look action (documentation: plugins/modules/engine_service_look.py).

One task per serving node in site.yml's engine play: is the node settled (nothing engine_service would
change, every model serving)? On the controller, the action checks the role's variables (the function
validate.yml calls), pins the models' revisions from the locks kept on the controller
(engine_service_model_lock_dir, read as hf_revision reads them back) and renders the units (the role's
``__engine_service_rendered``, with those locks); the node is read, and its models gated, by the
engine_service_survey module (the node's one module call of this step); the secret files' digests and the
placement of the models on the node's GPUs are worked out here with the role's own filters. A settled node
is summed up here, as the role's last step would sum it up, and takes no further step of the role in this
run; any other node takes the role's full way, which reads everything again under the node's rollout lock
and decides in its own words. A pin the controller does not hold (no lock directory, a refresh, a lock not
written) comes from the play's pinning step (``pinned``: site.yml's look_node.yml pins such models by the hub
once per batch, before the looks); one still not held makes the look before the plan send the node the full
way (which pins it), and the look after it (the role's ``look`` entry point) leave it to the role's pinning
step (``pins_needed``: look.yml pins and looks again).

An option left out is the role's variable of the same meaning (``_ROLE``): the role's look.yml gives only
what differs between its two looks.
"""

from __future__ import annotations

import functools
import hashlib
import os

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import read_kept_lock
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import is_commit
from ansible_collections.llmfleet.engines.plugins.plugin_utils import _service_groups
from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_checks import (
    engine_node_checked_variables,
    engine_node_problems,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_plan import (
    LINK,
    decide,
    engine_node_result,
    engine_node_stats,
    environment_names,
    probe_args,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._role_spec import (
    role_options,
    variable_problems_message,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_checks import (
    engine_service_checked_variables,
    engine_service_variable_problems,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_placement import (
    engine_service_placement_problems,
    engine_service_world_size,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_rollout import engine_service_readiness
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_stage import (
    engine_service_kept_locks,
    engine_service_model_pins,
)
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_units import (
    UNIT_VARIABLES,
    engine_service_secret_file,
    rendered_units,
)

_SURVEY = "llmfleet.engines.engine_service_survey"
_PROBE = "llmfleet.engines.gpu_probe"
# Each option left out of the task, and the role's variable it then is.
_ROLE = {
    "models": "engine_service_models",
    "api_key": "engine_service_api_key",
    "hf_token": "engine_service_hf_token",
    "secret_environment": "engine_service_secret_environment",
    "unit_dir": "engine_service_unit_dir",
    "unit_prefix": "__engine_service_unit_prefix",
    "lock": "__engine_service_lock",
    "record_dir": "__engine_service_dir",
    "user": "engine_service_user",
    "keep": "engine_service_model_keep",
    "steady_timeout": "engine_service_steady_timeout",
    "shm_min_mib": "engine_service_shm_min_mib",
    "limit_nofile": "engine_service_limit_nofile",
    "lock_dir": "engine_service_model_lock_dir",
    "refresh": "engine_service_model_refresh",
}


# Each option of engine_node's plan that ``node`` leaves out, and this host's engine_node variable it then is.
_NODE = {
    "version": "engine_node_version",
    "build": "engine_node_build",
    "package": "engine_node_package",
    "root": "engine_node_root",
    "nvidia_smi": "engine_node_nvidia_smi",
    "switch": "engine_node_switch",
}


def kept_locks(pins, locks, lock_dir, refresh, read, pinned=None):
    """``(locks, reasons)``: ``locks`` with the lock of each of ``pins`` it lacks, read back from ``lock_dir``
    (``read``: the hub's ``read_kept_lock``), or, where the controller keeps none (no lock directory, a refresh),
    taken from ``pinned`` (the locks the play's pinning step got from the hub, by key); and why a pin could not be
    (no lock directory, a refresh asked for, no lock written yet, a lock that cannot be used: the role's pinning
    step says so in its own words)."""
    out, reasons = dict(locks), []
    for pin in pins:
        if pin["key"] in out:
            continue
        if (not lock_dir or refresh) and pin["key"] in (pinned or {}):
            out[pin["key"]] = pinned[pin["key"]]
            continue
        if not lock_dir:
            reasons.append("the revision of %s is pinned by the hub in each run (engine_service_model_lock_dir is"
                           " not set)" % pin["key"])
            continue
        if refresh:
            reasons.append("the revision of %s is pinned again (engine_service_model_refresh)" % pin["key"])
            continue
        revision = pin["revision"]
        if is_commit(revision):
            revision = revision.lower()  # as hf_revision reads a commit
        path = os.path.join(lock_dir, pin["file"])
        try:
            lock = read(path, pin["repo"], revision)
        except ValueError as exc:
            reasons.append(str(exc))
            continue
        if lock is None:
            reasons.append("no lock of %s is kept in %s yet" % (pin["key"], lock_dir))
            continue
        out[pin["key"]] = lock
    return out, reasons


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
                      "api_key": model.get("api_key") or api_key or None,
                      # a model group's follower has no API: its unit's state stands for it, the leader's gate for the group
                      "gate": (unit.get("group") or {}).get("role") != "follower"})
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
    if args.get("systemctl"):
        # the role's absolute path, judged again by the module before it runs it (_trust)
        out["systemctl"] = args["systemctl"]
    return out


def gateway_reasons(host, reads):
    """Why a node is not settled on the gateways: each server of ``host`` that a gateway still holds drained by a
    rollout (``reads``: the results of site.yml's haproxy_info, once per gateway, each with its ``item.gateway``
    and ``marked``). A gateway that could not be read says nothing here (engine_gateway's play fails it)."""
    out = []
    for read in reads or []:
        if not isinstance(read, dict):
            continue
        mine = [str(name) for name in read.get("marked") or [] if str(name).rpartition("/")[2] == host]
        if mine:
            gateway = (read.get("item") or {}).get("gateway") or "a gateway"
            out.append("the gateway %s holds %s drained since a rollout that did not make it ready (made ready after"
                       " a passing gate)" % (gateway, ", ".join(mine)))
    return out


def placed_models(models):
    """The names of the models placed on GPUs (``gpus`` given): their units name the node's GPUs."""
    return [m.get("name") for m in models or [] if isinstance(m, dict) and "gpus" in m]


def unplaced(variables):
    """``variables`` with each model's ``gpus`` left out: the units rendered from them have the names, URLs, secret
    files and commits of the role's (none of which depends on the GPUs), not their text."""
    models = [{k: v for k, v in m.items() if k != "gpus"} if isinstance(m, dict) else m
              for m in variables["engine_service_models"]]
    return dict(variables, engine_service_models=models)


def differing_units(rendered, digests, names):
    """Why the unit files of the models ``names`` are not what the role renders (``rendered``, with the node's GPUs),
    by the digests the node returned (the survey's ``unit_sha256``; a file it did not read has none)."""
    out = []
    for unit in rendered:
        if unit["name"] in names and digests.get(unit["unit"]) != hashlib.sha256(
                unit["text"].encode("utf-8")).hexdigest():
            out.append("%s differs from what the role renders" % unit["unit"])
    return out


def summary(host, environment, units, gates):
    """engine_service_result of a settled node: what the role's last step (report.yml) sets."""
    return {"host": host, "current": environment, "mode": "steady", "rolled_back": False, "error": None,
            "warnings": [], "units": units, "removed": [], "gates": gates, "settled": True}


# The key under which a look keeps its model groups' problems among the variables it templated (no variable's name).
_GROUP_PROBLEMS = ("model group problems",)


class ActionModule(ActionBase):
    """Survey a serving node, check the placement, and sum up a settled node, in one task."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("node", "environment", "models", "units", "pins", "locks", "pinned", "gpus", "api_key",
                             "hf_token", "secret_environment", "unit_dir", "unit_prefix", "lock", "record_dir", "user",
                             "cache_dir", "keep", "steady_timeout", "shm_min_mib", "limit_nofile", "validate",
                             "lock_dir", "refresh", "gateway_read", "systemctl"))

    def _variable(self, name, task_vars, known=None):
        """The role's variable ``name``, templated (KeyError when it is not set); ``known``, a dict, keeps each
        variable templated once for the whole look (the check's, the options', the units')."""
        if known is not None and name in known:
            return known[name]
        if name not in task_vars:
            raise KeyError(name)
        value = self._templar.template(task_vars[name])
        if known is not None:
            known[name] = value
        return value

    def _groups(self, task_vars, known):
        """engine_service_model_groups ([] when the role's variables are not there)."""
        try:
            return self._variable("engine_service_model_groups", task_vars, known) or []
        except KeyError:
            return []

    def _group_problems(self, host, task_vars, known):
        """What is wrong with the model groups, read across the members (as validate.yml checks it); read once per
        look (kept in ``known`` beside the templated variables: the check and the units' rendering both ask)."""
        if _GROUP_PROBLEMS not in known:
            groups = self._groups(task_vars, known)
            known[_GROUP_PROBLEMS] = _service_groups.group_problems(groups) + _service_groups.member_problems(
                groups, host, task_vars.get("hostvars") or {}) if groups else []
        return known[_GROUP_PROBLEMS]

    def _group(self, host, task_vars, known):
        """This host's place in its model group (the role's ``__engine_service_group``), or None."""
        groups = self._groups(task_vars, known)
        if not groups or self._group_problems(host, task_vars, known):
            return None
        return _service_groups.member(groups, host, task_vars.get("hostvars") or {})

    def _options(self, task_vars, known):
        """The task's arguments, each one left out taken from the role's variable (``_ROLE``), templated once
        (``known``)."""
        args = dict(self._task.args)
        for option, variable in _ROLE.items():
            if option not in args:
                args[option] = self._variable(variable, task_vars, known)
        if "cache_dir" not in args:
            args["cache_dir"] = "%s/models" % self._variable("engine_service_root", task_vars, known)
        if "systemctl" not in args and "engine_service_systemctl" in task_vars:
            # the role's absolute path; outside the role the module finds systemctl on PATH (and judges it)
            args["systemctl"] = self._variable("engine_service_systemctl", task_vars, known)
        return args

    def _node_options(self, node, task_vars, known):
        """The plan's options (``node``), each one it leaves out taken from this host's engine_node variable
        (``_NODE``) where the play holds it: ``{}`` is the host's own engine_node variables, templated once here
        (``known``) rather than wrapped in a template each (site.yml gives nothing else)."""
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for option, variable in _NODE.items():
            if option not in out and variable in task_vars:
                out[option] = self._variable(variable, task_vars, known)
        return out

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        result["asked_node"] = False
        host = task_vars.get("inventory_hostname", "")
        values = {}
        node = self._node_options(self._task.args.get("node"), task_vars, values)
        if node is not None and not self._serves(task_vars, values):
            return self._plan_only(result, host, node, task_vars)
        try:
            if boolean(self._task.args.get("validate", False), strict=False):
                role = getattr(self._task, "_role", None)
                if role is None:
                    result.update(failed=True, msg="host %s: engine_service_look validates in the"
                                                   " llmfleet.engines.engine_service role only (validate: true reads"
                                                   " its argument spec)" % host)
                    return result
                # the variables validate.yml checks, named by the same function
                for name in engine_service_checked_variables(role_options(role._role_path)):
                    self._variable(name, task_vars, values)
                problems = engine_service_variable_problems(values, (task_vars.get("groups") or {}).get("all") or [])
                problems += self._group_problems(host, task_vars, values)
                if problems:
                    result.update(failed=True, msg=variable_problems_message(host, problems))
                    return result
            args = self._options(task_vars, values)
        except KeyError as exc:
            result.update(failed=True, msg="host %s: engine_service_look reads the variable %s of the"
                                           " llmfleet.engines.engine_service role, which is not set: run it from"
                                           " the role (its look entry point)" % (host, exc.args[0]))
            return result
        if "pins" not in args:
            args["pins"] = engine_service_model_pins(list(args.get("models") or []))
        # the locks the role holds already, and those kept on the controller
        args["locks"], reasons = kept_locks(args["pins"], args.get("locks") or {}, args.get("lock_dir") or "",
                                            boolean(args.get("refresh", False), strict=False), read_kept_lock,
                                            engine_service_kept_locks({}, list(args.get("pinned") or [])))
        if node is not None:
            return self._before_plan(result, host, args, node, reasons, task_vars, values)
        if args.get("gpus") is None and placed_models(args.get("models")):
            reasons.append("the node's GPUs are read with the pins (a model is placed on them)")
        if reasons:
            result.update(changed=False, settled=False, pins_needed=True, reasons=reasons,
                          msg="%s: its models are pinned first (%s)" % (host, "; ".join(reasons)))
            return result
        if "units" not in args:
            try:
                variables = {name: self._variable(name, task_vars, values) for name in UNIT_VARIABLES}
                if "engine_node_package" in task_vars:
                    variables["engine_node_package"] = self._variable("engine_node_package", task_vars, values)
                variables["group"] = self._group(host, task_vars, values)
            except KeyError as exc:
                result.update(failed=True, msg="host %s: engine_service_look renders the units from the variable %s"
                                               " of the llmfleet.engines.engine_service role, which is not set: run"
                                               " it from the role (its look entry point), or give units"
                                               % (host, exc.args[0]))
                return result
            try:
                args["units"] = rendered_units(variables, str(args["environment"]), args["locks"], args.get("gpus"))
            except AnsibleFilterError as exc:
                result.update(failed=True, msg="host %s: %s" % (host, exc.message))
                return result
        module_args = survey_args(args)
        survey = self._survey(result, host, module_args, task_vars)
        if survey is None:
            return result
        return self._verdict(result, host, args, module_args, survey)

    def _survey(self, result, host, module_args, task_vars):
        """The node's answer (engine_service_survey), or None with ``result`` failed."""
        result["asked_node"] = True
        survey = self._execute_module(module_name=_SURVEY, module_args=module_args, task_vars=task_vars)
        if survey.get("failed"):
            result.update(failed=True, msg="host %s: reading the node's services failed: %s"
                          % (host, survey.get("msg", "no message")))
            return None
        for key in ("invocation", "deprecations", "changed"):
            survey.pop(key, None)
        result["warnings"] = survey.pop("warnings", [])
        return survey

    def _verdict(self, result, host, args, module_args, survey, reasons=(), placed=None):
        """Sum up a settled node, or say why it takes the full way. ``placed``: the units of the models placed on GPUs,
        rendered with the GPUs the survey read (a callable, called once all else holds), for the node's digests."""
        reasons = list(reasons) + list(survey.get("reasons") or []) + gateway_reasons(host, args.get("gateway_read"))
        if survey.get("settled") and not reasons:
            models = list(args.get("models") or [])
            need_shm = module_args["need_shm"]
            reasons = engine_service_placement_problems(
                models, args.get("gpus"), locks=args.get("locks") or {},
                shm_mib=survey.get("shm_mib") if need_shm else None,
                shm_min_mib=int(args.get("shm_min_mib") or 1024), limit_nofile=args.get("limit_nofile"))
        if placed is not None and survey.get("settled") and not reasons:
            try:
                rendered = placed()
            except AnsibleFilterError as exc:
                result.update(failed=True, msg="host %s: %s" % (host, exc.message))
                return result
            reasons = differing_units(rendered, survey.get("unit_sha256") or {}, placed_models(args.get("models")))
        result["changed"] = False
        result["pins_needed"] = False
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
        # an "ok", its line shown with -v (as engine_node_plan's for a node with nothing to do)
        return result

    def _serves(self, task_vars, values):
        """Whether the host serves models (the option, or the role's variable; none set: it serves nothing)."""
        if "models" in self._task.args:
            return bool(self._task.args["models"])
        try:
            return bool(self._variable("engine_service_models", task_vars, values))
        except KeyError:
            return False

    def _plan_only(self, result, host, node, task_vars):
        """A node that serves no model, before engine_node's plan (``node``: the plan's options): the plan itself
        (the engine_node_plan action, run here as the role's plan task runs it, engine_node's variables checked
        first), so that such a node takes one task in site.yml's engine play. Its result is the look's
        ``engine_node``; the node is not settled (it has no models to look at)."""
        result.update(changed=False, settled=False, pins_needed=False, deferred=False,
                      reasons=["%s serves no model" % host])
        if self._node_refused(result, host, node, task_vars):
            return result
        task = self._task.copy()
        task.args = {key: node[key] for key in ("version", "build", "package", "root", "nvidia_smi", "switch")
                     if node.get(key) not in (None, "")}
        task.args["validate"] = False  # checked above, against engine_node's argument spec
        if str(node.get("build") or "auto") != "none":
            # the plan's read, made here and handed to it (and to a plan task after this one: engine_node_probe)
            link = "%s/%s" % (node["root"], LINK)
            nvidia_smi = str(node.get("nvidia_smi") or "")
            result["asked_node"] = True
            probe = self._execute_module(module_name=_PROBE, module_args=probe_args(link, nvidia_smi),
                                         task_vars=task_vars)
            if probe.get("failed"):
                result.update(probe)
                return result
            for key in ("invocation", "deprecations", "changed"):
                probe.pop(key, None)
            result["warnings"] = probe.pop("warnings", [])
            result["probe"] = task.args["probe"] = dict(probe, read_with={"link": link, "nvidia_smi": nvidia_smi or None})
        plan = self._shared_loader_obj.action_loader.get(
            "llmfleet.engines.engine_node_plan", task=task, connection=self._connection,
            play_context=self._play_context, loader=self._loader, templar=self._templar,
            shared_loader_obj=self._shared_loader_obj)
        planned = plan.run(task_vars=task_vars)
        for key in ("failed", "msg", "ansible_stats", "_ansible_verbose_always"):
            if key in planned:
                result[key] = planned[key]
        result["warnings"] = result.get("warnings", []) + list(planned.get("warnings") or [])
        result["engine_node"] = {k: v for k, v in planned.items()
                                 if k not in ("ansible_stats", "_ansible_verbose_always", "warnings", "invocation",
                                              "asked_node")}
        return result

    def _node_refused(self, result, host, node, task_vars):
        """Whether the look before the plan stops here, with ``result`` failed: ``node`` lacks the plan's options, or
        (``validate``) this host's engine_node variables have a problem, said in engine_node_plan's words (a node that
        ends after the look takes no plan task to say them)."""
        if not isinstance(node, dict) or any(k not in node for k in ("version", "build", "package", "root")):
            result.update(failed=True, msg="host %s: engine_service_look: node must give the engine_node plan's"
                                           " version, build, package and root (or the play engine_node's variables"
                                           " of those names), not %r" % (host, node))
            return True
        if not boolean(self._task.args.get("validate", False), strict=False):
            return False
        problems = self._node_problems(task_vars)
        if problems:
            result.update(failed=True, msg=variable_problems_message(host, problems))
        return bool(problems)

    def _node_problems(self, task_vars):
        """What engine_node_plan's check finds wrong with this host's engine_node variables (the look before the plan
        stands for the plan on a settled node, which takes no further task): engine_node's argument spec, the role
        beside this one. Nothing where the play does not hold engine_node's variables (its look_node entry point run
        without engine_node: the plan, wherever it runs, checks them)."""
        role = getattr(self._task, "_role", None)
        if role is None or "engine_node_version" not in task_vars:  # set by engine_node's defaults
            return []
        options = role_options(os.path.join(os.path.dirname(role._role_path), "engine_node"))
        names = engine_node_checked_variables(options)
        return engine_node_problems(options, {name: self._templar.template(task_vars[name]) for name in names
                                              if name in task_vars})

    def _before_plan(self, result, host, args, node, reasons, task_vars, values):
        """The look before engine_node's plan (``node``: the plan's options): the node is read for the plan in
        the same module call (``probe``, which site.yml hands the plan), the units are compared with what the
        role renders for each environment the plan may keep (``candidates``), and the plan's own decision says
        whether the engine stays. The unit of a model placed on GPUs names them: the node returns its file's digest,
        and it is rendered here with the GPUs that call read. A pin the controller does not hold (``reasons``) makes
        the node take the full way, which pins it; the node is not asked (the plan reads it)."""
        result.update(changed=False, settled=False, pins_needed=False, deferred=False)
        if self._node_refused(result, host, node, task_vars):
            return result
        version, build = str(node["version"]), str(node.get("build") or "auto")
        package, root = str(node.get("package") or "vllm"), str(node["root"])
        nvidia_smi = str(node.get("nvidia_smi") or "")
        names = environment_names(version, build)
        if not reasons and not names:
            reasons = ["engine_node_build is none: no engine to keep"]
        if reasons:
            result.update(reasons=reasons, msg="%s: takes the full way of engine_service (%s)"
                          % (host, "; ".join(reasons)))
            return result
        try:
            variables = {name: self._variable(name, task_vars, values) for name in UNIT_VARIABLES}
            if "engine_node_package" in task_vars:
                variables["engine_node_package"] = self._variable("engine_node_package", task_vars, values)
            variables["group"] = self._group(host, task_vars, values)
            service_smi = str(self._variable("engine_service_nvidia_smi", task_vars, values) or "")
        except KeyError as exc:
            result.update(failed=True, msg="host %s: engine_service_look renders the units from the variable %s"
                                           " of the llmfleet.engines.engine_service role, which is not set: run"
                                           " it from the role (its look_node entry point)" % (host, exc.args[0]))
            return result
        placed = placed_models(args.get("models"))
        candidates, units = {}, None
        try:
            for name in names:
                rendered = rendered_units(unplaced(variables) if placed else variables, name, args["locks"], None)
                candidates[name] = {u["unit"]: None if u["name"] in placed else
                                    hashlib.sha256(u["text"].encode("utf-8")).hexdigest() for u in rendered}
                # the units' names, URLs and secret files do not depend on the environment
                units = units if units is not None else [dict(u, text=None) for u in rendered]
        except AnsibleFilterError as exc:
            result.update(failed=True, msg="host %s: %s" % (host, exc.message))
            return result
        link = "%s/%s" % (root, LINK)
        args = dict(args, units=units, environment="")
        module_args = survey_args(args)
        module_args.update(environment="", version="", candidates=candidates,
                           probe={"link": link, "nvidia_smi": nvidia_smi or None})
        for unit in module_args["units"]:
            unit.pop("text", None)
        survey = self._survey(result, host, module_args, task_vars)
        if survey is None:
            return result
        probe = survey.pop("probe", None)
        render, decision = None, None
        if probe is not None:
            result["probe"] = dict(probe, read_with={"link": link, "nvidia_smi": nvidia_smi or None})
            try:
                decision = decide(probe, version, build, package, root)
            except AnsibleFilterError as exc:
                decision = None
                reasons.append(exc.message)
            if decision is not None and decision["__engine_node_action"] != "unchanged":
                reasons.append("engine_node changes the engine (from %s to %s)"
                               % (decision["__engine_node_was"] or "nothing", decision["__engine_node_want"]))
            if decision is not None and not reasons:
                want = decision["__engine_node_want"]
                module_args = dict(module_args, environment=want)
                if service_smi == nvidia_smi:
                    args["gpus"] = gpus = probe.get("gpus") or []
                    render = functools.partial(rendered_units, variables, want, args["locks"], gpus) if placed else None
                elif placed:
                    # the role reads the GPUs with its own nvidia-smi: its full way reads them
                    reasons.append("a model is placed on GPUs, which the role reads with engine_service_nvidia_smi"
                                   " (%s), not engine_node_nvidia_smi (%s)"
                                   % (service_smi or "the one on PATH", nvidia_smi or "the one on PATH"))
        result = self._verdict(result, host, args, module_args, survey, reasons, render)
        if result.get("settled") and decision is not None:
            # the plan's summary of a node whose engine stays (site.yml ends a settled node before the plan task)
            summed = engine_node_result(host, decision["__engine_node_plan"], build, "unchanged",
                                        decision["__engine_node_want"], decision["__engine_node_was"],
                                        decision["__engine_node_dir"], switch=node.get("switch", True),
                                        check_mode=self._play_context.check_mode)
            result["engine_node"] = summed
            result["ansible_stats"]["data"]["engine_node"] = engine_node_stats(summed)
        return result
