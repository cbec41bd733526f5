# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The HTTP options of the look-up modules (argument spec: _http.http_argument_spec)."""

    DOCUMENTATION = r"""
options:
  timeout:
    description:
      - Seconds to wait for each request.
    type: int
    default: 30
  retries:
    description:
      - How many more times to try a request after a connection error, time-out, 429 or 5xx.
    type: int
    default: 3
  backoff:
    description:
      - Seconds to wait before the first retry; each further retry waits twice as long as the
        one before (or the server's C(Retry-After), when longer, up to 60 s).
    type: float
    default: 1.0
  validate_certs:
    description:
      - Check the servers' TLS certificates. Turn off only for a mirror you trust.
    type: bool
    default: true
"""
