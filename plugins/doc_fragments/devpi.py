# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The options of the modules that talk to a devpi-server (devpi_index, devpi_wheel, devpi_warm): where it
    is and how it is reached (argument spec: _devpioptions.devpi_argument_spec)."""

    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of the devpi-server, for example C(http://127.0.0.1:3141) or C(https://cache.example).
    type: str
    required: true
  timeout:
    description:
      - Seconds to wait for each answer (each wait on the network). A whole answer must end within four times
        this (a file download, plus a second for each MiB of its listed size); an answer of the API longer than
        32 MiB, or a download longer than its listed size (16 GiB without one), fails the task.
    type: int
    default: 60
  validate_certs:
    description:
      - Check TLS certificates, the devpi-server's and those of any other server the module downloads a file from.
    type: bool
    default: true
  allow_plain_http_password:
    description:
      - Send a password (the one the module logs in with, or one that O(url) carries, C(http://user:password@host/))
        over plain C(http://) to a host that is not this host's loopback (C(127.0.0.0/8), C(::1), C(localhost)). By
        default the module refuses when a password would be sent, before it sends anything, since anyone on the
        network between could read it.
      - Rather than setting this, put TLS in front of devpi-server (a reverse proxy such as nginx
        or caddy with a certificate) and give its C(https://) URL as O(url).
    type: bool
    default: false
"""
