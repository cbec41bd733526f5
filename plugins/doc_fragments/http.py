# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The HTTP options of the look-up modules (argument spec: _http.http_argument_spec), and the
    option of those that send a token (``llmfleet.engines.http.token``; argument spec:
    _http.http_token_argument_spec)."""

    DOCUMENTATION = r"""
options:
  timeout:
    description:
      - Seconds to wait for each request (each wait on the network).
      - One attempt, the whole answer included, must end within four times this, however slowly the server
        sends it (else it is tried again, as after a time-out); an answer longer than 32 MiB fails the task at
        once (a wrong URL, or a hostile server; the JSON and index pages read here are far smaller).
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

    TOKEN = r"""
options:
  allow_plain_http_token:
    description:
      - Send O(token) over plain C(http://) to a host that is not this host's loopback (C(localhost),
        C(127.0.0.0/8), C(::1)). By default the module refuses, before anything is sent (in check
        mode too), since anyone on the network between could read the token.
      - Rather than setting this, give the server's C(https://) URL (a mirror behind a reverse proxy
        with a certificate).
      - Whatever this says, the token goes only to the origin (scheme, host and port) of the URL it is
        given for. Redirects are followed by hand, at most 10, and only to C(http) and C(https) URLs
        (a redirect to C(file://), C(ftp://) or C(data:) fails the task, naming it); a redirect to
        another origin (a CDN) is followed without the token, and a redirect from C(https) to C(http)
        while the token would be sent fails the task.
    type: bool
    default: false
"""
