# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

PEP 440 versions read without ``packaging`` (managed nodes have none to import): one reading,
shared by the index look-ups (``_pypi``: normal form, ordering) and the lock checks (``_uvlock``:
whether two versions are the same).
"""

from __future__ import annotations

import re

# Epoch, release, pre-, post- and dev-release, local label, in every spelling PEP 440 normalises.
VERSION_RE = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
PRE_LABELS = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "pre": "rc", "preview": "rc", "rc": "rc"}


def parts(text):
    """``(epoch, release, pre, post, dev, local)`` of a PEP 440 version, normalised (release a
    tuple of ints as written, pre ``("a"|"b"|"rc", n)``, post and dev ints or None, local the
    label lower-cased with ``.`` between its segments, or None); None if ``text`` is not one."""
    found = VERSION_RE.match(text or "")
    if not found:
        return None
    g = found.groupdict()
    release = tuple(int(p) for p in g["release"].split("."))
    pre = (PRE_LABELS[g["pre_l"].lower()], int(g["pre_n"] or 0)) if g["pre_l"] else None
    post = None
    if g["post_n1"] is not None or g["post_l"]:
        post = int(g["post_n1"] or g["post_n2"] or 0)
    dev = int(g["dev_n"] or 0) if g["dev_l"] else None
    local = re.sub(r"[-_]", ".", g["local"].lower()) if g["local"] else None
    return int(g["epoch"] or 0), release, pre, post, dev, local
