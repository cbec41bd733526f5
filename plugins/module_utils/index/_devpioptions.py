# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The argument spec of the options that the modules talking to a devpi-server share (devpi_index,
devpi_wheel, devpi_warm), documented by the ``llmfleet.engines.devpi`` doc fragment.
"""

from __future__ import annotations


def devpi_argument_spec(timeout=60):
    """The server's URL, the seconds to wait for each answer (``timeout``: the default; a module whose
    default differs documents its own), certificate checks and plain-http passwords: a new dict each call."""
    return dict(
        url=dict(type="str", required=True),
        timeout=dict(type="int", default=timeout),
        validate_certs=dict(type="bool", default=True),
        allow_plain_http_password=dict(type="bool", default=False),
    )
