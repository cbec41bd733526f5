# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The argument spec of the options that the modules resolving an engine with uv share
(uv_engine_env, uv_fleet_lock), documented by the ``llmfleet.engines.uv`` doc fragment.
"""

from __future__ import annotations

INDEX_STRATEGIES = ["first-index", "unsafe-first-match", "unsafe-best-match"]


def uv_argument_spec():
    """What to resolve beside the engine, from which indexes, and the uv binary: a new dict each call."""
    return dict(
        requirements=dict(type="list", elements="str", default=[]),
        wheel=dict(type="dict", options=dict(url=dict(type="str", required=True),
                                             sha256=dict(type="str", required=True))),
        expect=dict(type="dict"),
        index_url=dict(type="str"),
        extra_index_url=dict(type="list", elements="str", default=[]),
        index_strategy=dict(type="str", choices=list(INDEX_STRATEGIES)),
        exclude_newer_package=dict(type="dict"),
        omit_packages=dict(type="list", elements="str", default=[]),
        kernels_index_url=dict(type="str"),
        kernels_label=dict(type="str"),
        # the one file of the engine's release the lock may pin (a late upload the nodes need)
        engine_file=dict(type="dict", options=dict(filename=dict(type="str", required=True),
                                                   sha256=dict(type="str", required=True))),
        # the credentials in those URLs over plain http to a host that is not the loopback (refused by default)
        # a bool, not a secret: no_log=False says so (Ansible warns of any option named *password*)
        allow_plain_http_password=dict(type="bool", default=False, no_log=False),
        uv=dict(type="path"),
    )
