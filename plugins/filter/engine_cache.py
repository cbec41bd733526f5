# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_cache role's devpi-server, as filters: what is wrong with the variables of
devpi-server's part of the role (``engine_cache_problems``), and the words of devpi-server's unit as
systemd reads them back (``engine_cache_unit_words``). The hub mirror's part: ``engine_cache_hub_mirror.py``
(its variables) and ``engine_cache_nginx.py`` (the values of its nginx configuration, whose text is the
role's templates/hub-mirror*.conf.j2).

Tests: tests/unit/plugins/filter/test_cache_filter.py and test_cache_unit_systemd.py. Documentation: one
``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json
from ansible_collections.llmfleet.engines.plugins.plugin_utils._paths import path_parts

# The keys engine_cache_problems reads, each the role variable engine_cache_<key>.
KEYS = ("password", "root", "port", "torch_indexes", "pypi_url", "listen")
_INDEX_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
# What may be named in the unit without quoting: a host name's label
_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
# A word of ExecStart= that needs no quotes
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _root_problem(root):
    """None when ``root`` is an absolute path the unit can name as it is, else why not."""
    if not isinstance(root, str) or not posixpath.isabs(root):
        return "is not an absolute path"
    if path_parts(root) is None:
        return ("must be an absolute path of letters, digits, '.', '_', '+', '@', '-' and '/', without '.' or '..'"
                " parts (it is written into devpi-server's unit, which root's systemd reads)")
    return None


def _listen_problem(listen):
    """None when ``listen`` is an address devpi-server can listen on (IPv4, IPv6 without brackets, or a host
    name), else why not."""
    text = listen if isinstance(listen, str) else None
    if text:
        try:
            ipaddress.ip_address(text)
            return None
        except ValueError:
            pass
        if _HOST_NAME.fullmatch(text) and not text.replace(".", "").isdigit():
            return None
    hint = ""
    if isinstance(listen, str) and (listen.startswith("[") or re.fullmatch(r"[^:\s]+:[0-9]+", listen)):
        hint = " (give the address alone, an IPv6 one without brackets; the port is engine_cache_port)"
    return ("is not an address to listen on: an IPv4 or IPv6 address (0.0.0.0 or :: for all) or a host name,"
            " without white space or control characters%s" % hint)


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
    if _root_problem(root):
        out.append("variable engine_cache_root: %s %s" % (_json(root), _root_problem(root)))
    if _listen_problem(params["listen"]):
        out.append("variable engine_cache_listen: %s %s" % (_json(params["listen"]), _listen_problem(params["listen"])))
    if not _port(params["port"]):
        out.append("variable engine_cache_port: %s is not a port number (1-65535)" % _json(params["port"]))
    indexes = params["torch_indexes"]
    if not isinstance(indexes, (list, tuple)) \
            or not all(isinstance(i, str) and _INDEX_NAME.fullmatch(i) for i in indexes):
        out.append("variable engine_cache_torch_indexes: %s must be a list of index names such as cu129"
                   % _json(indexes))
    url = params["pypi_url"]
    if not isinstance(url, str) or not re.match(r"(https?|file)://", url):
        out.append("variable engine_cache_pypi_url: %s is not an http(s) URL"
                   % _json(re.sub(r"//[^/@]*@", "//", url) if isinstance(url, str) else url))
    return out


def _word(value, command):
    text = str(value)
    if _CONTROL.search(text):
        raise AnsibleFilterError("engine_cache_unit_words: %s holds a control character: it would end the unit's line"
                                 " and start one of its own" % _json(text))
    if not _PLAIN_WORD.fullmatch(text):
        text = '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("%", "%%")
    return text.replace("$", "$$") if command else text


def engine_cache_unit_words(words, command=True):
    """``words`` as one setting's value of devpi-server's unit, each read back by systemd as given: a word
    with anything but letters, digits and ``_@+=:,./-`` double-quoted (``\\`` and ``"`` escaped), ``%`` as
    ``%%`` (specifiers) and, in a command line (``command``), ``$`` as ``$$`` (variables). A control
    character (a line break would start a line of its own, ``ExecStartPre=+...`` run as root) is refused."""
    if isinstance(words, (str, bytes)) or not isinstance(words, (list, tuple)):
        raise AnsibleFilterError("engine_cache_unit_words: the input must be a list of words, not %s"
                                 % type(words).__name__)
    return " ".join(_word(word, command) for word in words)


class FilterModule:
    """llmfleet.engines filters for the engine_cache role's devpi-server."""

    def filters(self):
        return {
            "engine_cache_problems": engine_cache_problems,
            "engine_cache_unit_words": engine_cache_unit_words,
        }
