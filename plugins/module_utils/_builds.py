# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The vLLM build table (data) and the policy that picks a node's build (pure functions).

Used by the ``gpu_probe`` module, by the ``llmfleet.engines.engine_build_plan`` /
``engine_builds`` filters (so the role's ``auto`` is this code, not a copy) and by the
GPU-check hints in ``_gpu.py``. No I/O here.

Build names
-----------
``cu13``   the CUDA 13 build of a vLLM version (needs driver >= 580).
``cu129``  the CUDA 12 build of a vLLM version (needs driver >= 525.60.13).
``none``   no engine on this node.
``auto``   (a request only) let :func:`choose` decide from the node's facts.

A build name is a promise about what the node must have (driver branch, GPU generation),
not a toolkit patch level. Where each build lives moved over time (FACTS.md):

=================  ======================  ===============================================
vLLM               PyPI default wheel      GitHub release asset (torch index)
=================  ======================  ===============================================
>= 0.20.0          ``cu13``  (CUDA 13.0)   ``cu129`` = ``+cu129`` (torch ``cu129``)
0.12.0 - 0.19.x    ``cu129`` (CUDA 12.9)   ``cu13``  = ``+cu130`` (torch ``cu130``)
0.11.1 - 0.11.x    ``cu129`` (CUDA 12.9)   ``cu13``  = ``+cu130`` (torch ``cu130``)
0.11.0             ``cu129`` (CUDA 12.8)   none used (see below); no CUDA 13 build exists
=================  ======================  ===============================================

0.11.0: PyPI's wheel is CUDA 12.8 and the GitHub release carries a ``+cu129`` wheel. Both are
CUDA 12 builds with the same driver floor (525.60.13, minor-version compatibility) and the same
GPU floor, so for what a node can run they are the same build. ``cu129`` therefore names PyPI's
CUDA 12.8 wheel for 0.11.0: every era then has exactly one PyPI default, ``auto`` without a
driver always means "the PyPI default", and the GitHub asset would only add a GitHub look-up
(60 requests an hour unauthenticated) and a second index (whose torch can silently fall back
to PyPI's) for nothing the node can run better. The plan reports ``cuda: "12.8"`` so the
difference stays visible. Likewise 0.11.1-0.11.2 also carry a duplicate ``+cu129`` asset,
unused because ``cu129`` is PyPI's wheel there.
"""

from __future__ import annotations

import re

PROJECT = "vllm"
GITHUB_REPO = "vllm-project/vllm"

#: Builds that install something; ``none`` and ``auto`` are not in this tuple.
BUILDS = ("cu13", "cu129")
#: What a host may ask for.
REQUESTS = ("auto", "cu13", "cu129", "none")

#: What a node needs to run each build (FACTS.md, "What a node can run"). The compute
#: capability floor is that of current vLLM (older vLLM docs said 7.0; CUDA 13 itself dropped
#: Maxwell, Pascal and Volta).
REQUIREMENTS = {
    "cu13": {"label": "CUDA 13", "driver": "580", "compute_capability": "7.5"},
    "cu129": {"label": "CUDA 12", "driver": "525.60.13", "compute_capability": "7.5"},
}

#: Driver from which a CUDA toolkit runs with full features, not only under minor-version
#: compatibility (NVIDIA CUDA toolkit release notes, table 3; 12.9 also in FACTS.md). Used for
#: hints when kernels built by a newer toolkit meet an older driver (unsupported PTX).
FULL_SUPPORT_DRIVER = {"12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"}

#: Machine architectures vLLM publishes wheels for, by the names ``uname -m`` and Python give.
ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

#: Where each build of a vLLM version lives, newest era first. ``since`` is inclusive; an era
#: runs until the next newer one starts. ``pypi``: the build of the default wheel and its CUDA;
#: ``github``: the other build, the local label of its asset and of the torch it needs (that
#: label is also the name of the PyTorch index that serves that torch).
ERAS = (
    {
        "since": "0.20.0",
        "pypi": {"build": "cu13", "cuda": "13.0"},
        "github": {"build": "cu129", "cuda": "12.9", "label": "cu129"},
    },
    {
        # 0.12.0 - 0.19.x, and 0.11.1 - 0.11.2 (whose duplicate +cu129 asset is not used)
        "since": "0.11.1",
        "pypi": {"build": "cu129", "cuda": "12.9"},
        "github": {"build": "cu13", "cuda": "13.0", "label": "cu130"},
    },
    {
        "since": "0.11.0",
        "pypi": {"build": "cu129", "cuda": "12.8"},
        "github": None,
    },
)

OLDEST = ERAS[-1]["since"]

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+\-]?[A-Za-z0-9.+\-]*)?\s*$")


class BuildTableError(ValueError):
    """A vLLM version the table does not cover, or one it cannot read."""


class BuildRequestError(ValueError):
    """A requested build that is not a build, or that the version does not publish."""


def release(version):
    """``"0.20.0"`` -> ``(0, 20, 0)``; pre-release and local suffixes are ignored."""
    match = _VERSION_RE.match(str(version or ""))
    if not match:
        raise BuildTableError(
            "vLLM version %r is not a version number: give one such as 0.20.0" % (version,)
        )
    return tuple(int(part or 0) for part in match.groups())


def dotted(text):
    """A dotted number (driver version, compute capability) as a tuple of ints, or None."""
    if text is None:
        return None
    parts = re.findall(r"\d+", str(text))
    if not parts:
        return None
    return tuple(int(part) for part in parts)


def at_least(value, floor):
    """``value >= floor`` for dotted numbers, missing trailing parts counting as 0."""
    a, b = list(dotted(value)), list(dotted(floor))
    width = max(len(a), len(b))
    a += [0] * (width - len(a))
    b += [0] * (width - len(b))
    return a >= b


def era(version):
    """The table row that holds ``version``."""
    wanted = release(version)
    for row in ERAS:
        if wanted >= release(row["since"]):
            return row
    raise BuildTableError(
        "vLLM %s is older than the oldest version the build table knows (%s): "
        "choose engine version %s or newer" % (version, OLDEST, OLDEST)
    )


def normalise_arch(arch):
    """``x86_64``/``aarch64`` for the names vLLM's wheels use, else None."""
    return ARCHITECTURES.get(str(arch or "").lower())


def asset_pattern(version, label, arch):
    """Regex selecting the GitHub asset of ``version`` with local ``label`` for ``arch``.

    Asset names look like ``vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl``, but the
    platform tag moved many times (manylinux1, 2014, 2_31, 2_35, ...): the pattern pins the
    version, the label, the stable ABI and the architecture, and leaves the manylinux tag free.
    """
    return r"^%s-%s\+%s-cp\d+-abi3-[A-Za-z0-9_.]*_%s\.whl$" % (
        PROJECT,
        re.escape(str(version).strip().lstrip("v")),
        re.escape(label),
        re.escape(arch),
    )


def default_build(version):
    """The build of ``version``'s PyPI wheel."""
    return era(version)["pypi"]["build"]


def builds(version, arch="x86_64"):
    """Every build ``version`` publishes, with where it comes from.

    Returns ``{build: source}``; a source is::

        {"build", "origin": "pypi"|"github", "cuda", "default": bool,
         "requirement": "vllm==X" (PyPI) | None,
         "github": {"repo", "tag", "pattern"} | None,   # pattern None for an unknown arch
         "torch_index": "cu129"|"cu130"|None,           # suffix of the PyTorch index URL
         "torch_label": "+cu129"|"+cu130"|None,         # local label the locked torch must carry
         "requires": {"driver", "compute_capability", "label"}}
    """
    row = era(version)
    version = str(version).strip().lstrip("v")
    arch = normalise_arch(arch)
    out = {}
    pypi = row["pypi"]
    out[pypi["build"]] = {
        "build": pypi["build"],
        "origin": "pypi",
        "cuda": pypi["cuda"],
        "default": True,
        "requirement": "%s==%s" % (PROJECT, version),
        "github": None,
        "torch_index": None,
        "torch_label": None,
        "requires": dict(REQUIREMENTS[pypi["build"]]),
    }
    other = row["github"]
    if other:
        out[other["build"]] = {
            "build": other["build"],
            "origin": "github",
            "cuda": other["cuda"],
            "default": False,
            "requirement": None,
            "github": {
                "repo": GITHUB_REPO,
                "tag": "v%s" % version,
                "pattern": asset_pattern(version, other["label"], arch) if arch else None,
            },
            "torch_index": other["label"],
            "torch_label": "+" + other["label"],
            "requires": dict(REQUIREMENTS[other["build"]]),
        }
    return out


def _gpu_name(gpu):
    return "GPU %s (%s)" % (gpu.get("index", "?"), gpu.get("name") or "unknown model")


def blockers(build, source, facts):
    """Why this node cannot run ``source`` (a list of sentences; empty: it can).

    Without a driver there is no driver or GPU to check against; only a known machine
    architecture without GitHub wheels can rule a GitHub build out. Without any facts nothing
    rules a build out (and a GitHub build's asset pattern is None until the architecture is known).
    """
    need = REQUIREMENTS[build]
    why = []
    if source["origin"] == "github" and not source["github"]["pattern"] and facts.get("architecture"):
        why.append(
            "vLLM's GitHub release has wheels for %s only, not for machine architecture %s"
            % (" and ".join(sorted(set(ARCHITECTURES.values()))), facts["architecture"])
        )
    driver = facts.get("driver_version")
    if not driver:
        return why
    if not at_least(driver, need["driver"]):
        why.append("driver %s is older than %s, which %s needs" % (driver, need["driver"], need["label"]))
    below = []
    for gpu in facts.get("gpus") or []:
        cap = gpu.get("compute_capability")
        if dotted(cap) is not None and not at_least(cap, need["compute_capability"]):
            below.append(gpu)
    if below:
        weakest = min(below, key=lambda g: dotted(g.get("compute_capability")))
        more = len(below) - 1
        why.append(
            "%s has compute capability %s%s, below %s, which %s builds of vLLM need"
            % (
                _gpu_name(weakest),
                weakest.get("compute_capability"),
                (" (and %d more GPU%s below it)" % (more, "s" if more > 1 else "")) if more else "",
                need["compute_capability"],
                need["label"],
            )
        )
    return why


def _describe(source):
    return "%s (CUDA %s, from %s)" % (
        source["build"],
        source["cuda"],
        "PyPI" if source["origin"] == "pypi" else "the GitHub release",
    )


def choose(facts, version, requested="auto"):
    """Pick the build of vLLM ``version`` for a node.

    ``facts``: what ``gpu_probe`` returns (``driver_version``, ``gpus`` with
    ``compute_capability``, ``architecture``); ``requested``: one of :data:`REQUESTS`.

    Returns::

        {"version", "requested", "build": "cu13"|"cu129"|"none", "default": the PyPI build,
         "runnable": {"cu13": bool, "cu129": bool}, "reasons": {build: [why not, ...]},
         "why": one sentence on the choice, "skip_gpu_check": bool, "warnings": [...],
         "source": builds()[build] | None}

    ``auto``: the PyPI default when the node can run it, else the other build, else ``none``;
    mixed GPUs are judged by the weakest. No driver: the PyPI default, GPU check skipped.
    An explicit ``cu13``/``cu129`` is honoured (with warnings when the facts say it will not
    run), unless the version publishes no such build.
    """
    requested = "auto" if requested is None else str(requested)
    if requested not in REQUESTS:
        raise BuildRequestError(
            "build %r is not one of %s" % (requested, ", ".join(REQUESTS))
        )
    facts = facts or {}
    version = str(version).strip().lstrip("v")
    published = builds(version, facts.get("architecture"))
    default = default_build(version)
    driver = facts.get("driver_version")
    gpus = facts.get("gpus") or []

    runnable, reasons = {}, {}
    for name in BUILDS:
        if name in published:
            reasons[name] = blockers(name, published[name], facts)
        else:
            reasons[name] = ["vLLM %s publishes no %s build" % (version, REQUIREMENTS[name]["label"])]
        runnable[name] = not reasons[name]

    warnings = []
    if requested == "none":
        build = "none"
        why = "build none was asked for: no engine on this node"
    elif requested in BUILDS:
        if requested not in published:
            raise BuildRequestError(
                "vLLM %s publishes no %s build (%s): choose %s, auto or none"
                % (
                    version,
                    requested,
                    REQUIREMENTS[requested]["label"],
                    ", ".join(sorted(published)),
                )
            )
        build = requested
        why = "build %s was asked for: %s" % (requested, _describe(published[requested]))
        warnings = [
            "build %s was asked for, but this node may not run it: %s" % (requested, reason)
            for reason in reasons[requested]
        ]
    elif not driver:
        build = default
        why = (
            "no NVIDIA driver on this node: vLLM %s's default build %s; "
            "the GPU check will be skipped" % (version, _describe(published[default]))
        )
    else:
        order = [default] + [name for name in BUILDS if name != default and name in published]
        build = next((name for name in order if runnable[name]), "none")
        if build == default:
            why = "this node runs vLLM %s's default build %s" % (version, _describe(published[build]))
        elif build != "none":
            why = "this node cannot run vLLM %s's default build %s (%s): %s instead" % (
                version,
                default,
                "; ".join(reasons[default]),
                _describe(published[build]),
            )
        else:
            why = "no build of vLLM %s runs on this node: %s" % (
                version,
                "; ".join("%s: %s" % (name, " and ".join(reasons[name])) for name in BUILDS),
            )

    return {
        "version": version,
        "requested": requested,
        "build": build,
        "default": default,
        "runnable": runnable,
        "reasons": reasons,
        "why": why,
        "skip_gpu_check": build == "none" or not driver or not gpus,
        "warnings": warnings,
        "source": published.get(build),
    }
