# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_cache role's mirror of the Hugging Face hub, its variables, as filters: what
is wrong with them (``engine_cache_hub_mirror_problems``), and the mirror's default clients from the
inventory (``engine_cache_hub_mirror_fleet_clients``, with the names the cache host must look up:
``engine_cache_hub_mirror_unresolved``). nginx's configuration rendered from the values these checks let
through: ``engine_cache_nginx.py`` (the values) and the role's templates/hub-mirror*.conf.j2 (the text).

nginx's configuration is data: a value reaches it only when it is refused nothing - no control
character (a newline ends the directive), no quote, ``;``, ``{``, ``}``, ``#``, ``\\``, ``$``
(nginx expands variables in most values) or whitespace (it splits a value into two) - and each
value has a shape of its own (an address, a port, a URL, a path).

Unit tests: tests/unit/plugins/filter/test_hub_mirror_filter.py, test_engine_cache_steps_filter.py.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json, whole
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import DEFAULT_ENDPOINT
from ansible_collections.llmfleet.engines.plugins.plugin_utils._paths import plain_path_problem

# What ends a directive, starts a block, a comment, a string or a variable, or splits a value in
# nginx's configuration: control characters (C0, DEL, C1), lone surrogates, whitespace, quotes,
# ';', '{', '}', '#', '\\' and '$'.
_INJECT_RE = re.compile("[\x00-\x20\x7f-\x9f\ud800-\udfff\"';{}#\\\\$]")
_INJECT_ALLOWED = ("no control character (newline, carriage return, tab, NUL), whitespace, quote, ';', '{', '}', '#',"
                   " '\\' or '$' (nginx would read the rest as directives, blocks or variables of its own)")
_HOST_RE = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_URL_RE = re.compile(r"(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?"
                     r"(?P<path>(/[A-Za-z0-9._~+@-]*)*)")
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# RFC 6750's b64token: what a Bearer token may hold (Hugging Face's are hf_ and letters and digits).
_TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_NAMESERVER_RE = re.compile(r"^[ \t]*nameserver[ \t]+([^\s#;]+)", re.M)
# The hosts huggingface.co redirects a file to (its LFS CDNs and the Xet bridge): the only targets, besides
# the hub's own origin, of a redirect the mirror follows (engine_cache_hub_mirror_cdn empty). The one list.
HUB_CDN_ORIGINS = (
    "https://cdn-lfs.hf.co",
    "https://cdn-lfs-us-1.hf.co",
    "https://cdn-lfs-eu-1.hf.co",
    "https://cdn-lfs.huggingface.co",
    "https://cdn-lfs-us-1.huggingface.co",
    "https://cdn-lfs-eu-1.huggingface.co",
    "https://cas-bridge.xethub.hf.co",
    "https://transfer.xethub.hf.co",
    "https://transfer.xethub-eu.hf.co",
)
# Who may use the mirror when the filter is given nobody: the cache host itself.
LOOPBACK_CLIENTS = ("127.0.0.1", "::1")
_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_PURGE_RE = re.compile(r"(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)@(?P<commit>[0-9a-f]{40})/"
                       r"(?P<path>[^\x00-\x1f\x7f]+)")
_PURGE_ALLOWED = ("<org>/<name>@<40-hex commit>/<path of the file> (the file of a model's lock, as hf_warm names"
                  " it), the path relative, without '.' or '..' parts")
# The defaults of the role (roles/engine_cache/defaults/main.yml) and of the filter.
DEFAULTS = {
    "listen": "0.0.0.0",
    "port": 8090,
    "upstream": DEFAULT_ENDPOINT,
    "max_size_gib": 500,
    "resolver": [],
    "resolv_conf": "",
    "token": "",
    "validate_certs": True,
    "user": "",
    "group": "",
    "ca_file": "/etc/ssl/certs/ca-certificates.crt",
    "lock_timeout": 3600,
    "inactive_days": 365,
    "clients": list(LOOPBACK_CLIENTS),
    "models": [],
    "cdn": [],
    "purge": [],
}
# The variable each key of the parameters comes from, named in every problem.
VARIABLES = {
    "listen": "variable engine_cache_hub_mirror_listen",
    "port": "variable engine_cache_hub_mirror_port",
    "upstream": "variable engine_cache_hub_mirror_upstream",
    "max_size_gib": "variable engine_cache_hub_mirror_max_size_gib",
    "dir": "variable engine_cache_hub_mirror_dir",
    "resolver": "variable engine_cache_hub_mirror_resolver",
    "resolv_conf": "the cache host's /etc/resolv.conf",
    "token": "variable engine_cache_hub_mirror_token",
    "validate_certs": "variable engine_cache_validate_certs",
    "user": "parameter user",
    "group": "parameter group",
    "token_file": "parameter token_file",
    "ca_file": "parameter ca_file",
    "lock_timeout": "parameter lock_timeout",
    "inactive_days": "parameter inactive_days",
    "clients": "variable engine_cache_hub_mirror_clients",
    "models": "variable engine_cache_hub_mirror_models",
    "cdn": "variable engine_cache_hub_mirror_cdn",
    "purge": "variable engine_cache_hub_mirror_purge",
}
KEYS = tuple(VARIABLES)


def _whole(value, low, high=None):
    """A whole number from ``low`` (to ``high``) as an int, or None; sizes in bytes take up to 12 digits."""
    return whole(value, low, high, digits=12)


def _bool(value):
    """True/False from a bool or the strings Ansible reads as one, else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("yes", "true", "on", "1", "no", "false", "off", "0"):
        return value.strip().lower() in ("yes", "true", "on", "1")
    return None


def _address(text):
    """The IP address in ``text`` (IPv6 with or without brackets), or None."""
    text = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _host(text):
    """``text`` as nginx writes a host: an IPv6 address in brackets."""
    address = _address(text)
    return "[%s]" % address if address is not None and address.version == 6 else text


def _resolvers(value):
    """The resolver's addresses as a list of strings (from a list, or a string of words)."""
    if isinstance(value, str):
        return value.replace(",", " ").split()
    return list(value)


def _resolver_problem(item):
    """None when ``item`` is an IP address with an optional port (``[v6]:53``, ``v4:53``), else why not."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::([0-9]{1,5}))?|([0-9.]+)(?::([0-9]{1,5}))?|([0-9A-Fa-f:.]+)", item)
    if not match:
        return "not an IP address"
    address, port = (match.group(1) or match.group(3) or match.group(5)), (match.group(2) or match.group(4))
    if _address(address) is None:
        return "not an IP address"
    if port is not None and _whole(port, 1, 65535) is None:
        return "not a port number after the address"
    return None


def _nameservers(text):
    """The name servers of a resolv.conf, as nginx's resolver takes them (IPv6 in brackets); those with a
    zone (``fe80::1%eth0``) are left out: nginx cannot use them."""
    out = []
    for word in _NAMESERVER_RE.findall(text or ""):
        address = _address(word)
        if address is not None and "%" not in word:
            out.append(_host(str(address)))
    return out


def _injection(key, value, secret=False):
    """The problem of a string that would inject nginx syntax, or None."""
    if isinstance(value, str) and _INJECT_RE.search(value):
        shown = "(a secret, not shown)" if secret else _json(value)
        return "%s is %s, allowed: %s" % (VARIABLES[key], shown, _INJECT_ALLOWED)
    return None


def engine_cache_hub_mirror_problems(params):
    """What is wrong with the mirror's variables, one text per problem naming the variable and its value
    (never the token's); empty when nothing is. ``params`` holds the keys of ``KEYS``; a key left out
    is not checked (``dir`` and ``token_file`` included)."""
    if not isinstance(params, dict):
        return ["the mirror's parameters are %s, allowed: a mapping with the keys %s" % (_json(params), ", ".join(KEYS))]
    out = []
    unknown = sorted(str(k) for k in set(params) - set(KEYS))
    if unknown:
        out.append("the mirror's parameters have %s, allowed keys: %s" % (", ".join(unknown), ", ".join(KEYS)))
    for key in KEYS:
        if key not in params:
            continue
        value = params[key]
        if key == "resolver" and isinstance(value, (list, str)):
            # a string is split at whitespace and commas: only the words reach nginx
            problems = [_injection(key, v) for v in _resolvers(value) if isinstance(v, str)]
            problem = next((p for p in problems if p), None)
        elif key == "resolv_conf":
            problem = None  # read, never copied: only the addresses found in it reach nginx
        elif key in ("clients", "models", "cdn", "purge"):
            problem = None  # each entry has a shape of its own that admits none of nginx's syntax
        else:
            problem = _injection(key, value, secret=key == "token")
        if problem:
            out.append(problem)
            continue
        problem = _CHECKS[key](value)
        if problem:
            out.append(problem)
    return out


def _check_listen(value):
    if not isinstance(value, str) or not (_address(value) is not None or _HOST_RE.fullmatch(value)):
        return ("%s is %s, allowed: an IP address (0.0.0.0 or :: for all) or a host name of this host"
                % (VARIABLES["listen"], _json(value)))
    return None


def _check_port(value):
    if _whole(value, 1, 65535) is None:
        return "%s is %s, allowed: a port number (1-65535)" % (VARIABLES["port"], _json(value))
    return None


def _check_upstream(value):
    allowed = ("an http(s) URL of the hub without user, query or fragment, such as https://huggingface.co"
               " (a path is kept: http://host:port/hub)")
    match = _URL_RE.fullmatch(value) if isinstance(value, str) else None
    if not match:
        return "%s is %s, allowed: %s" % (VARIABLES["upstream"], _json(value), allowed)
    host, port = match.group("host"), match.group("port")
    if host.startswith("[") and _address(host) is None or not host.startswith("[") and not (
            _HOST_RE.fullmatch(host) or _address(host) is not None):
        return "%s is %s, allowed: %s" % (VARIABLES["upstream"], _json(value), allowed)
    if port is not None and _whole(port, 1, 65535) is None:
        return "%s is %s, allowed: %s" % (VARIABLES["upstream"], _json(value), allowed)
    if any(part in (".", "..") for part in match.group("path").split("/")):
        return "%s is %s, allowed: %s" % (VARIABLES["upstream"], _json(value), allowed)
    return None


def _check_max_size(value):
    if _whole(value, 1) is None:
        return ("%s is %s, allowed: a whole number of GiB, 1 or more (the cache's limit on disk)"
                % (VARIABLES["max_size_gib"], _json(value)))
    return None


def _path_check(key):
    def check(value):
        problem = plain_path_problem(value)
        return "%s is %s, allowed: %s" % (VARIABLES[key], _json(value), problem) if problem else None
    return check


def _check_resolver(value):
    allowed = ("a list of IP addresses of name servers, each with an optional port (10.0.0.2, [2001:db8::53]:53);"
               " empty for the cache host's /etc/resolv.conf")
    if not isinstance(value, (list, str)) or isinstance(value, list) and not all(isinstance(v, str) for v in value):
        return "%s is %s, allowed: %s" % (VARIABLES["resolver"], _json(value), allowed)
    for item in _resolvers(value):
        problem = _resolver_problem(item)
        if problem:
            return "%s has %s, %s; allowed: %s" % (VARIABLES["resolver"], _json(item), problem, allowed)
    return None


def _check_resolv_conf(value):
    if not isinstance(value, str):
        return "%s is %s, allowed: its text" % (VARIABLES["resolv_conf"], _json(value))
    return None


def _check_token(value):
    if not isinstance(value, str):
        return "%s is a %s (a secret, not shown), allowed: a string (quote it)" % (VARIABLES["token"],
                                                                                   type(value).__name__)
    if value and not _TOKEN_RE.fullmatch(value):
        return ("%s has a character a Bearer token cannot hold (a secret, not shown), allowed: letters, digits"
                " and . _ ~ + / - (a Hugging Face token is hf_ and letters and digits), or empty for no token"
                % VARIABLES["token"])
    return None


def _check_validate_certs(value):
    if _bool(value) is None:
        return "%s is %s, allowed: true or false" % (VARIABLES["validate_certs"], _json(value))
    return None


def _check_user(value, key="user"):
    if value not in ("", None) and (not isinstance(value, str) or not _USER_RE.fullmatch(value)):
        return ("%s is %s, allowed: a system %s name (1-32 of a-z, 0-9, _ and -, starting with a letter or _),"
                " or empty" % (VARIABLES[key], _json(value), key))
    return None


def _whole_check(key, low, what):
    def check(value):
        if _whole(value, low) is None:
            return "%s is %s, allowed: %s" % (VARIABLES[key], _json(value), what)
        return None
    return check


def _list_problem(key, value, allowed):
    if not isinstance(value, list):
        return "%s is %s, allowed: a list of %s" % (VARIABLES[key], _json(value), allowed)
    return None


def _check_clients(value):
    allowed = ("addresses or networks (10.0.0.5, 10.0.0.0/24, 2001:db8::/64), host bits of a network zero;"
               " empty in the role for the inventory's hosts")
    problem = _list_problem("clients", value, allowed)
    if problem:
        return problem
    for item in value:
        if _client(item) is None:
            return "%s has %s, allowed: %s" % (VARIABLES["clients"], _json(item), allowed)
    return None


def _client(item):
    """``item`` as nginx's ``allow`` takes it (an address or a network in CIDR form), or None."""
    if not isinstance(item, str) or _INJECT_RE.search(item):
        return None
    try:
        network = ipaddress.ip_network(item, strict=True)
    except ValueError:
        return None
    return str(network.network_address) if "/" not in item else str(network)


def _pin(item):
    """``(repo, revision)`` of a pinned model (a mapping with ``model`` and ``revision``), or None."""
    if not isinstance(item, dict):
        return None
    repo, revision = item.get("model"), item.get("revision")
    if not isinstance(repo, str) or not _REPO_RE.fullmatch(repo) or "--" in repo or ".." in repo:
        return None
    if not isinstance(revision, str) or not revision or revision != revision.strip() or any(
            ord(c) < 32 or ord(c) == 127 for c in revision):
        return None
    return repo, revision


def _check_models(value):
    allowed = ("mappings with model (<org>/<name>) and revision (a branch, tag or 40-hex commit), as in"
               " engine_service_models; empty in the role for the pinned models of the inventory's hosts")
    problem = _list_problem("models", value, allowed)
    if problem:
        return problem
    for item in value:
        if _pin(item) is None:
            shown = {k: item.get(k) for k in ("model", "revision")} if isinstance(item, dict) else item
            return "%s has %s, allowed: %s" % (VARIABLES["models"], _json(shown), allowed)
    return None


def _origin(item):
    """``item`` as an origin (``scheme://host[:port]``, nothing after it), or None."""
    match = _URL_RE.fullmatch(item) if isinstance(item, str) else None
    if not match or match.group("path").strip("/"):
        return None
    host, port = match.group("host"), match.group("port")
    if host.startswith("[") and _address(host) is None or not host.startswith("[") and not (
            _HOST_RE.fullmatch(host) or _address(host) is not None):
        return None
    if port is not None and _whole(port, 1, 65535) is None:
        return None
    return "%s://%s%s" % (match.group("scheme"), host.lower(), ":" + port if port else "")


def _check_cdn(value):
    allowed = ("origins (https://host or https://host:port, no path) the hub redirects files to; empty for"
               " huggingface.co's CDNs")
    problem = _list_problem("cdn", value, allowed)
    if problem:
        return problem
    for item in value:
        if _origin(item) is None:
            return "%s has %s, allowed: %s" % (VARIABLES["cdn"], _json(item), allowed)
    return None


def _purge_entry(item):
    """``(repo, commit, path)`` of an entry of engine_cache_hub_mirror_purge, or None."""
    match = _PURGE_RE.fullmatch(item) if isinstance(item, str) else None
    if not match:
        return None
    path = match.group("path")
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return None
    return match.group("repo"), match.group("commit"), path


def _check_purge(value):
    problem = _list_problem("purge", value, _PURGE_ALLOWED)
    if problem:
        return problem
    for item in value:
        if _purge_entry(item) is None:
            return "%s has %s, allowed: %s" % (VARIABLES["purge"], _json(item), _PURGE_ALLOWED)
    return None


_CHECKS = {
    "listen": _check_listen,
    "port": _check_port,
    "upstream": _check_upstream,
    "max_size_gib": _check_max_size,
    "dir": _path_check("dir"),
    "resolver": _check_resolver,
    "resolv_conf": _check_resolv_conf,
    "token": _check_token,
    "validate_certs": _check_validate_certs,
    "user": _check_user,
    "group": lambda value: _check_user(value, "group"),
    "token_file": _path_check("token_file"),
    "ca_file": _path_check("ca_file"),
    "lock_timeout": _whole_check("lock_timeout", 1, "a whole number of seconds, 1 or more"),
    "inactive_days": _whole_check("inactive_days", 1, "a whole number of days, 1 or more"),
    "clients": _check_clients,
    "models": _check_models,
    "cdn": _check_cdn,
    "purge": _check_purge,
}


def engine_cache_hub_mirror_unresolved(inventory):
    """The names among ``inventory`` ({host: its ansible_host or empty}) that are not IP addresses: those
    the cache host looks up (sorted, each once)."""
    return sorted({(address or host) for host, address in (inventory or {}).items()
                   if _address(str(address or host)) is None})


def engine_cache_hub_mirror_fleet_clients(inventory, looked_up=None, ssh_client=""):
    """The mirror's default clients: 127.0.0.1, ::1, every inventory host's address (``inventory``:
    {host: its ansible_host or empty, for its name}; a name is read from ``looked_up``, {name: the output
    of ``getent ahosts <name>`` on the cache host, empty when it was not found}) and the address the
    controller's SSH connection comes from (``ssh_client``: ``$SSH_CLIENT`` on the cache host). Returns
    ``{clients, problems}``: a problem names each host whose address is unknown."""
    clients, problems = list(LOOPBACK_CLIENTS), []
    looked_up = looked_up or {}
    for host, address in sorted((inventory or {}).items()):
        name = str(address or host)
        if _address(name) is not None:
            clients.append(str(_address(name)))
            continue
        found = [word.split()[0] for word in str(looked_up.get(name) or "").splitlines() if word.split()]
        found = [str(_address(word)) for word in found if _address(word) is not None]
        if not found:
            problems.append("inventory host %s (%s) has no address this host can look up: set"
                            " engine_cache_hub_mirror_clients to the addresses the fleet reaches the mirror from"
                            % (host, "ansible_host " + _json(name) if address else "its name"))
        clients.extend(found)
    words = str(ssh_client or "").split()
    if words and _address(words[0]) is not None:
        clients.append(str(_address(words[0])))
    seen = set()
    return {"clients": [c for c in clients if not (c in seen or seen.add(c))], "problems": problems}


_WILDCARDS = ("0.0.0.0", "::")


def _url(host, port):
    return "http://%s:%s" % ("[%s]" % host if ":" in host else host, port)


def engine_cache_hub_mirror_where(listen, port, host):
    """Where the hub mirror listening on ``listen``:``port`` is reached: ``local`` (the address the role
    itself uses on the cache host: the loopback of a wildcard's family, else ``listen``), ``local_url``
    and ``url`` (the fleet's: the cache host's ``host`` for a wildcard, else ``listen``)."""
    if not isinstance(listen, str) or not listen:
        raise AnsibleFilterError("engine_cache_hub_mirror_listen must be an address or a name, not %r" % (listen,))
    if isinstance(port, bool) or not isinstance(port, (int, str)) or not str(port):
        raise AnsibleFilterError("engine_cache_hub_mirror_port must be a port number, not %r" % (port,))
    wildcard = listen in _WILDCARDS
    local = ("::1" if listen == "::" else "127.0.0.1") if wildcard else listen
    fleet = str(host) if wildcard else listen
    return {"local": local, "local_url": _url(local, port), "url": _url(fleet, port)}


class FilterModule:
    """llmfleet.engines filters for the variables of the engine_cache role's hub mirror."""

    def filters(self):
        return {
            "engine_cache_hub_mirror_problems": engine_cache_hub_mirror_problems,
            "engine_cache_hub_mirror_unresolved": engine_cache_hub_mirror_unresolved,
            "engine_cache_hub_mirror_fleet_clients": engine_cache_hub_mirror_fleet_clients,
            "engine_cache_hub_mirror_where": engine_cache_hub_mirror_where,
        }
