# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

FlashInfer's kernel packages in the same lock as the engine (``kernels_index_url``, ``kernels_label``).

vLLM (0.32 and newer) wants ``flashinfer-cubin`` and ``flashinfer-jit-cache`` at exactly the version of
``flashinfer-python`` on Hopper and newer GPUs, and otherwise downloads them at its first start, unpinned
(``vllm download-kernels``). Which version that is, only the resolution knows: so the lock is resolved
once as it always is, and when it holds ``flashinfer-python`` at ``V``, resolved a second time with the
same requirements plus ``flashinfer-python==V``, ``flashinfer-cubin==V`` and
``flashinfer-jit-cache==V+<label>``, FlashInfer's per-CUDA index added as the last extra index. The
second lock must hold every package of the first at the same version (the kernels move nothing else).
A lock without ``flashinfer-python`` is left as it is. Pure functions: no I/O.
"""

from __future__ import annotations

import re

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import OptionError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import strip_userinfo, url_text_problem

FLASHINFER = "flashinfer-python"
CUBIN = "flashinfer-cubin"
JIT_CACHE = "flashinfer-jit-cache"
KERNELS = (CUBIN, JIT_CACHE)
_LABEL = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+)*\Z")


def kernels_wanted(params):
    """``{"index_url", "label"}`` (the URL without credentials) when the kernels are asked for, else None.
    Raises OptionError for a half-given pair, a bad URL or label, or a kernel package in omit_packages."""
    url, label = params.get("kernels_index_url"), params.get("kernels_label")
    if not url and not label:
        return None
    if not url or not label:
        raise OptionError("kernels_index_url and kernels_label go together (got kernels_index_url %r, kernels_label %r): "
                          "the index of FlashInfer's kernels for this build's CUDA, and the jit-cache's local label "
                          "there (for example cu129). Nothing was done." % (strip_userinfo(url), label))
    problem = url_text_problem(url)
    if problem or not re.match(r"^https?://", url, re.IGNORECASE):
        raise OptionError("kernels_index_url %r is not an http(s) index URL%s. Nothing was done."
                          % (strip_userinfo(url), ": %s" % problem if problem else ""))
    if not _LABEL.match(label):
        raise OptionError("kernels_label %r is not a local version label (lower-case letters and digits, for example "
                          "cu129 or cu130). Nothing was done." % (label,))
    for name in params.get("omit_packages") or []:
        if re.sub(r"[-_.]+", "-", str(name)).lower() in KERNELS:
            raise OptionError("omit_packages names %s, which kernels_index_url puts in the lock: leave one of them "
                              "out. Nothing was done." % name)
    return {"index_url": strip_userinfo(url), "label": label}


def flashinfer_version(entries):
    """The locked ``flashinfer-python``'s version, or None (``entries``: ``_uvlock.parse_lock``)."""
    entry = entries.get(FLASHINFER)
    return entry["version"] if entry and entry.get("version") else None


def kernel_lines(version, label):
    """The requirement lines the second resolution adds."""
    public = version.split("+", 1)[0]
    return ["%s==%s" % (FLASHINFER, version), "%s==%s" % (CUBIN, public),
            "%s==%s+%s" % (JIT_CACHE, public, label)]


def kernel_extra_index(extra_index_url, kernels_index_url):
    """The extra indexes of the second resolution (and of the install): the kernels' index last."""
    extra = list(extra_index_url or [])
    return extra if not kernels_index_url or kernels_index_url in extra else extra + [kernels_index_url]


def kernel_exclude_newer(per_package):
    """The per-package cut-offs of the second resolution: FlashInfer's index publishes no upload times,
    so the jit-cache's cut-off is lifted (its version is pinned by the first lock, its files by hash)."""
    out = dict(per_package or {})
    if not any(re.sub(r"[-_.]+", "-", k).lower() == JIT_CACHE for k in out):
        out[JIT_CACHE] = False
    return out


def kernel_problems(first, second, version, label):
    """What is wrong with the second lock: a kernel missing or at another version, or a package of the
    first lock moved."""
    problems = []
    public = version.split("+", 1)[0]
    for name, wanted in ((CUBIN, public), (JIT_CACHE, "%s+%s" % (public, label))):
        entry = second.get(name)
        if entry is None:
            problems.append("%s is not in the lock (wanted %s)" % (name, wanted))
        elif entry["version"] != wanted:
            problems.append("%s is at %s, not %s" % (name, entry["version"], wanted))
    for name, entry in sorted(first.items()):
        other = second.get(name)
        if other is None or other["version"] != entry["version"]:
            problems.append("%s %s of the first resolution is %s with the kernels" % (
                entry["name"], entry["version"], "gone" if other is None else "at %s" % other["version"]))
    return problems


def given_lock_problems(entries, label):
    """A lock given as text while the kernels are asked for: with ``flashinfer-python`` in it, it must hold
    both kernels at its version (a fleet lock compiled without them would leave vLLM to download them)."""
    version = flashinfer_version(entries)
    if version is None:
        return []
    return kernel_problems({}, entries, version, label)


def kernel_failure(output, version, label, index_url):
    """The message of a failed second resolution: the package(s), the version and the index."""
    public = version.split("+", 1)[0]
    named = [name for name in KERNELS if name in (output or "")] or list(KERNELS)
    wanted = {CUBIN: "%s==%s" % (CUBIN, public), JIT_CACHE: "%s==%s+%s" % (JIT_CACHE, public, label)}
    return ("FlashInfer's kernels for flashinfer-python %s could not be resolved: %s, from the kernels' index %s "
            "(kernels_index_url) and the other indexes given" % (
                version, " and ".join(wanted[name] for name in named), strip_userinfo(index_url)))
