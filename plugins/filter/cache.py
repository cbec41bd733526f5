# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_cache role's own checks, as filters: what is wrong with the variables of devpi-server's
part of the role (``engine_cache_problems``; the hub mirror's are ``engine_cache_hub_mirror_problems``
in hub_mirror.py). Tests: tests/unit/plugins/filter/test_cache_filter.py.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils._placement import json_text as _json

# The keys engine_cache_problems reads, each the role variable engine_cache_<key>.
KEYS = ("password", "root", "port", "torch_indexes", "pypi_url")
_INDEX_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")


def _port(value):
    if isinstance(value, bool):
        return False
    text = str(value)
    return re.fullmatch(r"[0-9]+", text) is not None and 0 < int(text) < 65536


def engine_cache_problems(params):
    """Each engine_cache variable that devpi-server's part of the role cannot use, in words naming the
    variable, its value (never the password's) and what is allowed; empty when all are usable."""
    if not isinstance(params, dict):
        raise AnsibleFilterError("engine_cache_problems: the input must be a dict of %s, not %s"
                                 % (", ".join(KEYS), type(params).__name__))
    missing = [key for key in KEYS if key not in params]
    if missing:
        raise AnsibleFilterError("engine_cache_problems: the input lacks %s" % ", ".join(missing))
    out = []
    password = params["password"]
    if password is None or len(str(password)) == 0:
        out.append("variable engine_cache_password: it is empty; devpi root user's password is required"
                   " (keep it in ansible-vault)")
    root = params["root"]
    if not isinstance(root, str) or not posixpath.isabs(root):
        out.append("variable engine_cache_root: %s is not an absolute path" % _json(root))
    if not _port(params["port"]):
        out.append("variable engine_cache_port: %s is not a port number (1-65535)" % _json(params["port"]))
    indexes = params["torch_indexes"]
    if not isinstance(indexes, (list, tuple)) \
            or not all(isinstance(i, str) and _INDEX_NAME.match(i) for i in indexes):
        out.append("variable engine_cache_torch_indexes: %s must be a list of index names such as cu129"
                   % _json(indexes))
    url = params["pypi_url"]
    if not isinstance(url, str) or not re.match(r"(https?|file)://", url):
        out.append("variable engine_cache_pypi_url: %s is not an http(s) URL"
                   % _json(re.sub(r"//[^/@]*@", "//", url) if isinstance(url, str) else url))
    return out


class FilterModule(object):
    def filters(self):
        return {"engine_cache_problems": engine_cache_problems}
