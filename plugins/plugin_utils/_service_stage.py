# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The engine_service role's staging of pinned models (the filters of ``plugins/filter/engine_service_stage.py``,
and the engine_service_look action): the distinct pins of the
fleet's models, each with the name of its lock file (``engine_service_model_pins``), those a play asks the
hub for before its looks (``engine_service_hub_pins``, site.yml), and whether the models
a node stages at once fit its disk together (``engine_service_stage_space``; each model's own check,
model_snapshot's, sees the same free space; this one adds them up, per filesystem), the locks kept
from a look-up (``engine_service_kept_locks``, stage_pin.yml), the commits the staging step keeps
(``engine_service_in_use``, stage_weights.yml), and the downloads it follows (``engine_service_stage_jobs``).

Unit tests: ``tests/unit/plugins/filter/test_service_filter.py``, ``test_model_stage_filter.py``,
``test_engine_service_steps_filter.py``.
Documentation: one ``<filter>.yml`` per filter in ``plugins/filter/``.
"""

from __future__ import annotations

import base64
import binascii
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_checks import _revision_problems


def engine_service_model_pins(models):
    """The distinct (model, revision) pins of lists of models (``engine_service_models`` of several hosts, or
    of one): ``[{repo, revision, key, file}]``, sorted by key. ``key`` (``org/name@revision``) indexes the
    locks; ``file`` is the lock file's name (``org--name@revision.json``, ``/`` of a revision as ``--``).
    Entries that are not valid pins are left out (the validation names them)."""
    if not isinstance(models, list):
        raise AnsibleFilterError("engine_service_model_pins: the input must be a list of models (or of lists of"
                                 " models), not %s" % type(models).__name__)
    flat = []
    for entry in models:
        flat.extend(entry if isinstance(entry, list) else [entry])
    pins = {}
    for entry in flat:
        if not isinstance(entry, dict) or "revision" not in entry:
            continue
        if _revision_problems(entry, "model") or not isinstance(entry.get("model"), str):
            continue
        key = "%s@%s" % (entry["model"], entry["revision"])
        pins[key] = {"repo": entry["model"], "revision": entry["revision"], "key": key,
                     "file": "%s@%s.json" % (entry["model"].replace("/", "--"), entry["revision"].replace("/", "--"))}
    return [pins[k] for k in sorted(pins)]


def engine_service_hub_pins(hostvars, hosts):
    """The pins a play asks the hub for before its looks (site.yml, once for the play): each pin of a host of ``hosts``
    that does not keep its locks on the controller (``engine_service_model_lock_dir`` empty: the hub pins it in each
    run) or asks for them again (``engine_service_model_refresh``), once: ``[{repo, revision, key, file, host,
    endpoint, allow_plain_http, lock_file, refresh}]``, sorted by key, with the hub settings of the first host that
    asks for it and, where it refreshes, the lock file it keeps (else none). ``hostvars``: the hosts' variables; a
    variable a host does not set is the role's default (empty, false)."""
    if not isinstance(hosts, list):
        raise AnsibleFilterError("engine_service_hub_pins: hosts must be a list of inventory hosts, not %s"
                                 % type(hosts).__name__)
    out = {}
    for name in hosts:
        host = hostvars[name]
        models = host.get("engine_service_models")
        if not isinstance(models, list):
            continue
        lock_dir = str(host.get("engine_service_model_lock_dir") or "")
        refresh = boolean(host.get("engine_service_model_refresh") or False, strict=False)
        if lock_dir and not refresh:
            continue
        for pin in engine_service_model_pins(models):
            if pin["key"] not in out:
                out[pin["key"]] = dict(
                    pin, host=name, endpoint=str(host.get("engine_service_hf_endpoint") or ""),
                    allow_plain_http=boolean(host.get("engine_service_hf_allow_plain_http") or False, strict=False),
                    lock_file="%s/%s" % (lock_dir.rstrip("/"), pin["file"]) if lock_dir else None, refresh=refresh)
    return [out[key] for key in sorted(out)]


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


_REVISION = re.compile(r"--revision ([0-9a-f]{40})")


def _field(entry, key, what):
    """``entry[key]``, or an error naming what ``entry`` should be (one of the role's records: a pin,
    a lock, a slurp result, a gate; engine_service_rollout.py uses it too)."""
    if not isinstance(entry, dict) or key not in entry:
        raise AnsibleFilterError("each %s must be a mapping with %r, not %r" % (what, key, entry))
    return entry[key]


def engine_service_kept_locks(locks, results):
    """``locks`` ({model key: lock}) with the locks of a looped ``hf_revision``'s ``results`` added
    (each result's ``item.key``, the result's ``lock``); the results without a lock (skipped) add nothing."""
    if not isinstance(locks, dict):
        raise AnsibleFilterError("the input must be the models' locks (a mapping), not %r" % (locks,))
    if not isinstance(results, list):
        raise AnsibleFilterError("results must be the results of a looped hf_revision (a list), not %r" % (results,))
    kept = dict(locks)
    for result in results:
        if isinstance(result, dict) and "lock" in result:
            kept[_field(_field(result, "item", "hf_revision result"), "key", "hf_revision item")] = result["lock"]
    return kept


def engine_service_in_use(pins, locks, unit_reads):
    """The commits a node keeps while staging, sorted and without repeats: each pinned model's locked
    commit (``pins``' keys in ``locks``) and every ``--revision <commit>`` of the unit files read
    (``unit_reads``: the results of a looped ``slurp``)."""
    if not isinstance(pins, list) or not isinstance(locks, dict) or not isinstance(unit_reads, list):
        raise AnsibleFilterError("engine_service_in_use takes the pins (a list), the locks (a mapping) and the "
                                 "results of a looped slurp (a list), not %r, %r, %r" % (pins, locks, unit_reads))
    commits = []
    for pin in pins:
        key = _field(pin, "key", "pin")
        if key not in locks:
            raise AnsibleFilterError("the pinned model %s has no lock (resolve its revision first)" % key)
        commits.append(_field(locks[key], "commit", "lock of %s" % key))
    for read in unit_reads:
        try:
            text = base64.b64decode(_field(read, "content", "slurp result")).decode("utf-8", errors="replace")
        except (binascii.Error, TypeError, ValueError) as exc:
            raise AnsibleFilterError("the unit file %s is not valid slurp content: %s" % (read.get("source"), exc))
        commits.extend(_REVISION.findall(text))
    return sorted(set(commits))


def engine_service_stage_jobs(started, cache_dir):
    """The background downloads a looped ``model_snapshot`` (``async``, ``poll: 0``) started, for
    engine_service_follow: ``[{jid, name, progress}]``, one per result with an ``ansible_job_id``; ``name``
    is the pin's key (the result's ``item.item``: the look's item) and ``progress`` the progress file
    the start task gives the module, ``<cache_dir>/<the pin's lock file name>.progress``."""
    if not isinstance(started, list):
        raise AnsibleFilterError("engine_service_stage_jobs: the input must be the results of the looped model_snapshot"
                                 " started in the background (a list), not %r" % (started,))
    jobs = []
    for result in started:
        if not isinstance(result, dict) or "ansible_job_id" not in result:
            continue  # skipped: nothing started
        pin = _field(_field(_field(result, "item", "started download"), "item", "model_snapshot look"), "key", "pin")
        jobs.append({"jid": result["ansible_job_id"], "name": pin,
                     "progress": "%s/%s.progress" % (cache_dir, result["item"]["item"]["file"])})
    return jobs
