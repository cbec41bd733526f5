# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The one grammar of a path the collection writes unquoted into a configuration file it renders (a
systemd unit, nginx's and devpi-server's configuration): absolute, made of parts of letters, digits and
``._+@-``, no ``.`` or ``..`` part, not ``/``. No whitespace, quotes, backslashes, ``%`` (systemd's
specifiers), ``$`` or ``;`` can reach such a file through a path. Each caller adds its own rules on top
(the engine_service units refuse the trees ProtectHome= hides) and says why in its own words.

Unit tests: ``tests/unit/plugins/plugin_utils/test_paths.py``.
"""

from __future__ import annotations

import re

PART_RE = re.compile(r"[A-Za-z0-9._+@-]+")
ALLOWED = "an absolute path of letters, digits, '.', '_', '+', '@', '-' and '/', without '.' or '..' parts, not /"


def path_parts(value):
    """The parts of ``value`` below ``/`` when it is a path of the grammar above, else None."""
    if not isinstance(value, str) or not value.startswith("/"):
        return None
    parts = value.rstrip("/").split("/")[1:]
    if not parts or not all(PART_RE.fullmatch(p) and p not in (".", "..") for p in parts):
        return None
    return parts


def plain_path_problem(value):
    """None when ``value`` is a path of the grammar above, else what is allowed (``ALLOWED``)."""
    return None if path_parts(value) is not None else ALLOWED
