# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The engine_node role's decisions (the filters of ``plugins/filter/engine_node_layout.py`` and ``builds.py``,
and the engine_node_plan and engine_service_look actions): the build a node runs (``engine_build_plan``), what
it does this run (``decide``), the directories it
makes under ``engine_node_root`` (after the engine_layout module judged them), which environment
``current`` names once the run is over, and the role's result (``engine_node_result``), which the
role's last step and the ``engine_node_plan`` action (a node with nothing to do) both sum up with, and
the environments and fallback notes a node has (``engine_node_environments``, for state.yml).
Documentation: one ``<filter>.yml`` per filter in ``plugins/filter/``."""

from __future__ import annotations

import base64
import json
import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds
from ansible_collections.llmfleet.engines.plugins.module_utils.node._gpu import link_name
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import MARKER_NAME, environment_summary


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
    distribution ``package`` (engine_node_package). The table and the policy are module_utils/node/_builds.py's,
    which the gpu_probe module uses too, so that the role's ``auto`` and the module's agree."""
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


# The role's actions (plan.yml, look.yml): what a node does this run.
ACTIONS = ("none", "unchanged", "look", "switch", "install")
PREFERENCES = ("only-managed", "managed", "system", "only-system")
# The link that names the environment a node runs, below engine_node_root.
LINK = "engines/vllm/current"


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


def probe_args(link, nvidia_smi=None):
    """gpu_probe's arguments for the plan's read of a node (``link``: where `current` is; ``nvidia_smi``: empty or
    None, the one on the node's PATH). The plan needs the driver and the GPUs, not the CUDA version (nvidia-smi
    -q -x, the slow call)."""
    out = {"link": link, "cuda": False}
    if nvidia_smi:
        out["nvidia_smi"] = nvidia_smi
    return out


def decide(probe, version, build, package, root):
    """The decision converge.yml starts from: the plan, the wanted and current environments, the action
    (converge.yml also resets what a change of this run fills in). The engine_node_plan action decides with
    it, and so does engine_service_look, which reads the node before the plan where site.yml composes the two."""
    plan = engine_build_plan(probe, version, build, package)
    want = "%s-%s" % (plan["version"], plan["build"])
    was = link_name(probe.get("link"))
    if plan["build"] == "none":
        action = "none"
    elif was == want:
        action = "unchanged"
    else:
        action = "look"
    return {
        "__engine_node_facts": probe,
        "__engine_node_plan": plan,
        "__engine_node_dir": "%s/engines/vllm" % root,
        "__engine_node_want": want,
        "__engine_node_was": was,
        "__engine_node_action": action,
    }


def environment_names(version, build):
    """The environments a node may be told to run for ``version`` and the request ``build``
    (engine_node_build): ``<version>-<build>`` for each build ``auto`` may pick, or for the one asked
    for; none for ``none``. ``decide``'s ``__engine_node_want`` is one of them."""
    version = str(version).strip().lstrip("v")
    build = str(build or "auto")
    if build == "none":
        return []
    return ["%s-%s" % (version, b) for b in (_builds.BUILDS if build == "auto" else (build,))]


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


def _build_of(name):
    return name.rpartition("-")[2] if name else "none"


def engine_node_result(host, plan, requested, action, want, was, node_dir, switch=True, job=None, failure=None,
                       installed=False, check_mode=False, retry=False, first_job=None, first_failure=None,
                       other="", kept=None, fleet_lock=None, error=None):
    """engine_node_result: what the role did on ``host`` and what the node runs after it.

    ``action``: the node's action (``ACTIONS``); ``want``/``was``: the environment it should run and
    the one ``current`` named before; ``switch``: whether this run moves ``current`` (false where
    engine_service switches it after draining); ``failure``: the install's failure or None;
    ``error``: that failure in words (``engine_node_error``); ``kept``: auto's fallback note while it
    holds; ``retry``/``first_job``/``first_failure``/``other``: auto's second try this run."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("engine_node_result: plan must be the build plan (a dict), not %r" % (plan,))
    switch, installed, check_mode, retry = (boolean(v, strict=False) for v in (switch, installed, check_mode, retry))
    ok = failure is None
    now = engine_node_now(action, want, was, job=job, ok=ok, installed=installed, check_mode=check_mode)
    if action in ("none", "unchanged"):
        did = action
    elif not ok:
        did = "failed"
    else:
        did = ("would " if check_mode else "") + ("switched" if action == "switch" else "installed")
    if retry:
        fallback = {"from": (first_job or {}).get("build"), "to": other,
                    "reason": (first_failure or {}).get("classification"), "since": "this run"}
    elif kept:
        fallback = {"from": kept.get("from"), "to": kept.get("to"), "reason": kept.get("classification"),
                    "since": kept.get("at")}
    else:
        fallback = None
    lock = None
    if action == "install" and isinstance(fleet_lock, dict) and fleet_lock.get("lock_sha256"):
        lock = {"path": fleet_lock.get("path"), "sha256": fleet_lock["lock_sha256"]}
    return {
        "host": host,
        "version": plan.get("version"),
        "requested": requested,
        "wanted": plan.get("build"),
        "effective": _build_of(now),
        "current": now if switch else was,
        # a proven environment left for engine_service to switch to (switch false)
        "pending": "" if switch or now == was else now,
        "path": "%s/%s" % (node_dir, now) if now else "",
        "action": did,
        "fallback": fallback,
        "error": error,
        # the group's lock this run installed from (engine_node_fleet_lock_dir), or null
        "fleet_lock": lock,
        "why": plan.get("why"),
        "check_mode": check_mode,
    }


def engine_node_stats(result):
    """What the role adds to the play's stats for a node (AWX's artifacts): its result, less the
    words a person reads on the console."""
    return {result["host"]: {k: v for k, v in result.items() if k not in ("why", "check_mode")}}


# auto's note that a build failed its GPU check on a node (change.yml writes it beside the environments)
NOTE_SUFFIX = ".gpu-check-failed.json"


def engine_node_environments(reads, current, pattern):
    """The environments under ``<root>/engines/vllm`` and auto's fallback notes, from the files state.yml
    read (``reads``: slurp's loop results, each ``item`` a path and ``content`` its base64 text):
    ``{environments, notes}``. An environment is a directory whose name matches ``pattern`` holding a
    marker (read by ``_envdir``, which owns its format), sorted by name; ``current`` is the name the
    ``current`` link gives. A note is kept as it was written, in the order read."""
    if not isinstance(reads, list):
        raise AnsibleFilterError("engine_node_environments: the input must be slurp's loop results (a list), not %r"
                                 % (reads,))
    environments, notes = [], []
    for read in reads:
        if not isinstance(read, dict) or not isinstance(read.get("item"), str) or "content" not in read:
            raise AnsibleFilterError("engine_node_environments: each result needs item (the path) and content, not %r"
                                     % (read,))
        path = read["item"]
        is_marker = path.endswith("/" + MARKER_NAME)
        name = posixpath.basename(posixpath.dirname(path))
        if not (path.endswith(NOTE_SUFFIX) or (is_marker and re.match(pattern, name))):
            continue
        try:
            data = json.loads(base64.b64decode(read["content"]).decode("utf-8"))
            if is_marker:
                environments.append(environment_summary(name, data, current))
            else:
                notes.append(data)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError("engine_node_environments: %s cannot be read as JSON (%s)" % (path, exc))
    # sorted as Jinja's sort filter did before (without regard to case)
    return {"environments": sorted(environments, key=lambda env: env["name"].lower()), "notes": notes}
