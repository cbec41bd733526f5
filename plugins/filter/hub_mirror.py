# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_cache role's mirror of the Hugging Face hub, as filters: what is wrong with its
variables (``engine_cache_hub_mirror_problems``), the whole nginx configuration of the mirror
(``engine_cache_hub_mirror_conf``) and the root-only file it includes for the hub's token
(``engine_cache_hub_mirror_token_conf``), rendered here line by line from validated values, so that
the role's task file holds no logic and no template can be talked into a directive of its own.

nginx's configuration is data: a value reaches it only when it is refused nothing - no control
character (a newline ends the directive), no quote, ``;``, ``{``, ``}``, ``#``, ``\\``, ``$``
(nginx expands variables in most values) or whitespace (it splits a value into two) - and each
value has a shape of its own (an address, a port, a URL, a path).

What nginx does with it: tests/unit/plugins/filter/test_hub_mirror_filter.py (``nginx -t`` of the
rendered text), tests/system/test_hub_mirror_nginx.py (a real nginx before the fake hub).
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from urllib.parse import quote

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import DEFAULT_ENDPOINT
from ansible_collections.llmfleet.engines.plugins.module_utils.serve._placement import json_text as _json, whole

# What ends a directive, starts a block, a comment, a string or a variable, or splits a value in
# nginx's configuration: control characters (C0, DEL, C1), lone surrogates, whitespace, quotes,
# ';', '{', '}', '#', '\\' and '$'.
_INJECT_RE = re.compile("[\x00-\x20\x7f-\x9f\ud800-\udfff\"';{}#\\\\$]")
_INJECT_ALLOWED = ("no control character (newline, carriage return, tab, NUL), whitespace, quote, ';', '{', '}', '#',"
                   " '\\' or '$' (nginx would read the rest as directives, blocks or variables of its own)")
_PATH_PART_RE = re.compile(r"[A-Za-z0-9._+@-]+")
_PATH_ALLOWED = "an absolute path of letters, digits, '.', '_', '+', '@', '-' and '/', without '.' or '..' parts, not /"
_HOST_RE = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_URL_RE = re.compile(r"(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?"
                     r"(?P<path>(/[A-Za-z0-9._~+@-]*)*)")
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# RFC 6750's b64token: what a Bearer token may hold (Hugging Face's are hf_ and letters and digits).
_TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_NAMESERVER_RE = re.compile(r"^[ \t]*nameserver[ \t]+([^\s#;]+)", re.M)

# The only URLs cached: a file at a commit. A branch or a tag moves; its URL is never cached.
RESOLVE_RE = "^/[^/]+/[^/]+/resolve/[0-9a-f]{40}/"
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
_HEX40_RE = re.compile(r"[0-9a-fA-F]{40}")
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
# Where nobody says otherwise: systemd-resolved's stub.
FALLBACK_RESOLVER = "127.0.0.53"
ZONE = "llmfleet_hub"
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


def _path_problem(value):
    if not isinstance(value, str) or not value.startswith("/"):
        return _PATH_ALLOWED
    parts = value.rstrip("/").split("/")[1:]
    if not parts or not all(_PATH_PART_RE.fullmatch(p) and p not in (".", "..") for p in parts):
        return _PATH_ALLOWED
    return None


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
        problem = _path_problem(value)
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


def _regex_escape(text):
    """``text`` (a validated URL, repo or quoted revision: letters, digits and ``.-_~%@+:[]/``) as a PCRE
    literal in a quoted nginx string."""
    return re.sub(r"([.+\[\]])", r"\\\1", text)


def engine_cache_hub_mirror_token_conf(token):
    """The text of the root-only file the mirror's configuration includes (at the ``http`` level): the map
    that gives ``$hub_authorization`` - ``Bearer <token>`` where ``$hub_to_hub`` is 1 (a request to the
    hub's own origin), empty (no header) everywhere else, and always when ``token`` is empty. The token
    is checked as ``engine_cache_hub_mirror_problems`` checks it and never shown in an error."""
    problems = engine_cache_hub_mirror_problems({"token": token})
    if problems:
        raise AnsibleFilterError("engine_cache_hub_mirror_token_conf: %s" % "; ".join(problems))
    lines = [
        "# The hub's token of the llmfleet hub mirror (engine_cache_hub_mirror_token): keep this file",
        "# root-only (0600). nginx's master process (root) reads it; it is sent to the hub's origin only.",
        "map $hub_to_hub $hub_authorization {",
        "    volatile;",
        '    default "";',
    ]
    if token:
        lines.append('    1 "Bearer %s";' % token)
    lines += ["}", ""]
    return "\n".join(lines)


def _pin_patterns(models):
    """The map entries of the fleet's pins: per repo, its revision look-ups (the model API as hf_revision
    asks it) and its files - at the pinned commit where the revision is one, else at any commit (a branch or
    tag pin resolves to a commit only on the controller, after this configuration is written)."""
    out = []
    for item in models:
        repo, revision = _pin(item)
        literal = _regex_escape(repo)
        out.append('"~^/api/models/%s/revision/%s$" 1;' % (literal, _regex_escape(quote(revision, safe=""))))
        commit = revision.lower() if _HEX40_RE.fullmatch(revision) else "[0-9a-f]{40}"
        out.append('"~^/%s/resolve/%s/" 1;' % (literal, commit))
    seen = set()
    return [line for line in out if not (line in seen or seen.add(line))]


def engine_cache_hub_mirror_purge_files(purge, directory):
    """The cache files of ``purge`` (engine_cache_hub_mirror_purge: ``<org>/<name>@<commit>/<path>``) in
    the mirror under ``directory``: a list of ``{entry, key, file}``, ``key`` the cache key (the URL path as
    the fleet's clients ask it), ``file`` where nginx keeps it (``levels=1:2``: the key's md5, its last
    character, then the two before)."""
    problems = engine_cache_hub_mirror_problems({"purge": purge, "dir": directory})
    if problems:
        raise AnsibleFilterError("engine_cache_hub_mirror_purge_files: %s" % "; ".join(problems))
    cache = _paths(directory)["cache"]
    out = []
    for entry in purge:
        repo, commit, path = _purge_entry(entry)
        key = "/%s/resolve/%s/%s" % (repo, commit, quote(path, safe="/"))
        digest = hashlib.md5(key.encode("utf-8")).hexdigest()  # noqa: S324 - nginx's cache file name
        out.append({"entry": entry, "key": key, "file": "%s/%s/%s/%s" % (cache, digest[-1], digest[-3:-1], digest)})
    return out


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


def _paths(directory):
    """Where the mirror keeps what it writes, under ``directory`` (engine_cache_hub_mirror_dir)."""
    directory = directory.rstrip("/")
    return {
        "cache": directory + "/cache",
        "temp": directory + "/tmp",
        "log": directory + "/log",
        "run": directory + "/run",
        "pid": directory + "/run/nginx.pid",
    }


def engine_cache_hub_mirror_conf(params):
    """The whole nginx configuration of the mirror, from ``params``: ``dir`` and ``token_file`` (required;
    the root-only file of ``engine_cache_hub_mirror_token_conf``, included at the ``http`` level, never
    this text), and any of ``listen``, ``port``, ``upstream``, ``max_size_gib``, ``resolver`` (empty: the
    name servers of ``resolv_conf``, else 127.0.0.53), ``validate_certs``, ``user`` and ``group`` (the
    workers', when nginx starts as root), ``ca_file``, ``lock_timeout``, ``inactive_days``. ``token`` is
    checked, never written."""
    problems = engine_cache_hub_mirror_problems(params)
    if not problems:
        problems = ["the mirror's parameters have no %s" % key for key in ("dir", "token_file") if key not in params]
    if problems:
        raise AnsibleFilterError("engine_cache_hub_mirror_conf: %s" % "; ".join(problems))
    p = dict(DEFAULTS, **params)
    paths = _paths(p["dir"])
    clients = []
    for client in (_client(c) for c in p["clients"]):
        if client not in clients:
            clients.append(client)
    if not clients:
        raise AnsibleFilterError("engine_cache_hub_mirror_conf: %s is [], allowed: at least one address or network"
                                 " (nobody could use the mirror)" % VARIABLES["clients"])
    cdn = [_origin(c) for c in (p["cdn"] or HUB_CDN_ORIGINS)]
    port = _whole(p["port"], 1, 65535)
    url = _URL_RE.fullmatch(p["upstream"])
    upstream = p["upstream"].rstrip("/")
    origin = "%s://%s%s" % (url.group("scheme"), url.group("host"), ":" + url.group("port") if url.group("port") else "")
    resolvers = [_host(r) if _address(r) is not None else r for r in _resolvers(p["resolver"])]
    resolvers = resolvers or _nameservers(p["resolv_conf"]) or [FALLBACK_RESOLVER]
    verify = "on" if _bool(p["validate_certs"]) else "off"
    lock = "%ds" % _whole(p["lock_timeout"], 1)
    user = p["user"] or ""
    group = p["group"] or user
    tls = [
        "proxy_ssl_server_name on;",
        "proxy_ssl_verify %s;" % verify,
        "proxy_ssl_verify_depth 4;",
        "proxy_ssl_trusted_certificate %s;" % p["ca_file"],
        "proxy_ssl_protocols TLSv1.2 TLSv1.3;",
    ]
    # Headers every location sets itself (proxy_set_header is inherited only where a level sets none).
    headers = [
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        # identical bytes for every client: no compressed variant cached under the same key
        'proxy_set_header Accept-Encoding "";',
        'proxy_set_header Cookie "";',
        'proxy_set_header X-Forwarded-For "";',
    ]
    cached = [
        "proxy_cache %s;" % ZONE,
        "# the URL's path as the client sent it, without the query: one entry per file of a commit",
        "proxy_cache_key $hub_path;",
        "proxy_cache_valid 200 3650d;",
        "# the URLs are immutable: what the hub or the CDN say about caching does not count, and nothing",
        "# they answer makes nginx redirect internally (X-Accel-Redirect) or vary a cached entry",
        "proxy_ignore_headers Cache-Control Expires Set-Cookie Vary X-Accel-Expires X-Accel-Redirect"
        " X-Accel-Limit-Rate X-Accel-Buffering X-Accel-Charset;",
        "proxy_hide_header Set-Cookie;",
        "# concurrent misses for one file wait for the first download instead of starting their own",
        "proxy_cache_lock on;",
        "proxy_cache_lock_timeout %s;" % lock,
        "proxy_cache_lock_age %s;" % lock,
        "# Range is not sent upstream when caching: the whole file is fetched and cached, and the range",
        "# is served from it (on a miss too, while it streams)",
        "proxy_force_ranges on;",
        "proxy_intercept_errors on;",
    ]
    redirects = "error_page 301 302 303 307 308 = @cdn;"
    lines = [
        "# nginx configuration of the llmfleet hub mirror (llmfleet.engines.engine_cache), rendered by the",
        "# filter engine_cache_hub_mirror_conf. Started as: nginx -c <this file> -g 'daemon off;'",
        "# A caching proxy of %s: files at a commit (/<org>/<name>/resolve/<40 hex>/<path>) are" % upstream,
        "# fetched once - the hub's redirect to its CDN followed here, the final bytes cached under the",
        "# original URL - and served from disk afterwards; the model API (/api/models/) is passed through,",
        "# not cached; anything else is refused.",
        "",
        "worker_processes auto;",
    ]
    if user:
        lines += ["# the master process (root) reads this file and the token's; the workers run as %s" % user,
                  "user %s %s;" % (user, group)]
    lines += [
        "pid %s;" % paths["pid"],
        "error_log %s/error.log warn;" % paths["log"],
        "",
        "events {",
        "    worker_connections 4096;",
        "}",
        "",
        "http {",
        "    default_type application/octet-stream;",
        "    server_tokens off;",
        "    sendfile on;",
        "    tcp_nopush on;",
        "    keepalive_timeout 65s;",
        "    client_max_body_size 1k;",
        "    client_body_temp_path %s/client_body;" % paths["temp"],
        "    proxy_temp_path %s/proxy;" % paths["temp"],
        "    fastcgi_temp_path %s/fastcgi;" % paths["temp"],
        "    uwsgi_temp_path %s/uwsgi;" % paths["temp"],
        "    scgi_temp_path %s/scgi;" % paths["temp"],
        "    log_format llmfleet_hub '$remote_addr [$time_local] \"$request_method $uri\" $status $body_bytes_sent'",
        "                            ' cache=$upstream_cache_status upstream=$upstream_status $request_time s';",
        "    access_log %s/access.log llmfleet_hub;" % paths["log"],
        "",
        "    # names of the hub and of its CDN are resolved when they are used, as their addresses change",
        "    resolver %s ipv6=off;" % " ".join(resolvers),
        "    resolver_timeout 10s;",
        "    proxy_connect_timeout 30s;",
        "    proxy_read_timeout 120s;",
        "    proxy_send_timeout 60s;",
        "",
        "    proxy_cache_path %s levels=1:2 keys_zone=%s:64m max_size=%dg inactive=%dd use_temp_path=off;"
        % (paths["cache"], ZONE, _whole(p["max_size_gib"], 1), _whole(p["inactive_days"], 1)),
        "",
        "    # the path as sent, without the query string",
        "    map $request_uri $hub_path {",
        '        "~^(?<hub_p>[^?]*)" $hub_p;',
        "    }",
        "    # where a redirect goes: absolute as given; relative to the hub's origin",
        "    map $upstream_http_location $hub_redirect {",
        "        volatile;",
        '        "~^https?://" $upstream_http_location;',
        '        "~^/" %s$upstream_http_location;' % origin,
        '        default "";',
        "    }",
        "    # whether a URL is on the hub's own origin (where its token may go)",
        "    map $hub_next $hub_same_origin {",
        "        volatile;",
        '        "~^%s/" 1;' % _regex_escape(origin),
        "        default 0;",
        "    }",
        "    # where a redirect may go: the hub itself (below its URL) and its CDNs (engine_cache_hub_mirror_cdn),",
        "    # nothing else - no loopback service, no metadata address, no other host is asked by the cache host",
        "    map $hub_next $hub_next_allowed {",
        "        volatile;",
        '        "~^%s/" 1;' % _regex_escape(upstream),
    ] + ['        "~^%s/" 1;' % _regex_escape(c) for c in cdn if c != upstream] + [
        "        default 0;",
        "    }",
        "    # the fleet's pins (engine_cache_hub_mirror_models): the only repos, revisions and commits asked",
        "    # of the hub; anything else is refused here, the token never sent",
        "    map $hub_path $hub_pinned {",
    ] + ["        " + line for line in _pin_patterns(p["models"])] + [
        "        default 0;",
        "    }",
        "    # $hub_authorization: the hub's Authorization header where $hub_to_hub is 1, else none. The",
        "    # token is in this root-only file (engine_cache_hub_mirror_token_conf), never in this one.",
        "    include %s;" % p["token_file"],
        "",
        "    server {",
        "        listen %s:%d;" % (_host(p["listen"]), port),
        "        server_name _;",
        "        add_header X-Cache-Status $upstream_cache_status always;",
        "",
        "        # only the fleet (engine_cache_hub_mirror_clients): the mirror lends the hub's token to whoever",
        "        # reaches it",
    ] + ["        allow %s;" % client for client in clients] + [
        "        deny all;",
        "",
        "        # read-only",
        '        if ($request_method !~ "^(GET|HEAD)$") {',
        "            return 405;",
        "        }",
        "        # no dot segments: the hub must read the path as nginx matched it",
        '        if ($request_uri ~* "/(\\.|%2e){1,2}(/|%2f|\\?|$)|%2f(\\.|%2e){1,2}(/|%2f|\\?|$)") {',
        "            return 400;",
        "        }",
        "",
        "        location / {",
        '            return 404 "llmfleet hub mirror: only /<org>/<name>/resolve/<40-hex commit>/<path> and'
        ' /api/models/ are served\\n";',
        "        }",
        "",
        "        # a file at a commit: cached",
        '        location ~ "%s" {' % RESOLVE_RE,
        '            if ($request_uri !~ "%s") {' % RESOLVE_RE,
        "                return 404;",
        "            }",
        "            # a file's path keeps its slashes: an encoded one (or a backslash) could be read otherwise",
        '            if ($request_uri ~* "%2f|%5c") {',
        "                return 400;",
        "            }",
        "            if ($hub_pinned = 0) {",
        '                return 403 "llmfleet hub mirror: not a repo and commit the fleet pins'
        ' (engine_cache_hub_mirror_models)\\n";',
        "            }",
        "            proxy_pass %s$hub_path;" % upstream,
    ]
    lines += ["            " + line for line in cached + headers + tls]
    lines += [
        "            # the hub's token: sent to the hub",
        "            set $hub_to_hub 1;",
        "            proxy_set_header Authorization $hub_authorization;",
        "            # the hub answers LFS files with a redirect to its CDN (and small files, on huggingface.co,",
        "            # with one to its own /api/resolve-cache/): followed here, never by the client - a chain of",
        "            # them too (a renamed repo: a relative redirect to its new name, then to the CDN)",
        "            recursive_error_pages on;",
        "            " + redirects,
        "        }",
        "",
        "        location @cdn {",
        "            set $hub_next $hub_redirect;",
        '            if ($hub_next = "") {',
        "                return 502;",
        "            }",
        "            if ($hub_next_allowed = 0) {",
        '                return 502 "llmfleet hub mirror: the hub redirected to a host that is not its CDN'
        ' (engine_cache_hub_mirror_cdn)\\n";',
        "            }",
        "            # the token goes back to the hub's own origin only: never to its CDN or another host",
        "            set $hub_to_hub $hub_same_origin;",
        "            proxy_pass $hub_next;",
    ]
    lines += ["            " + line for line in cached + headers + tls]
    lines += [
        "            proxy_set_header Authorization $hub_authorization;",
        "            recursive_error_pages on;",
        "            " + redirects,
        "        }",
        "",
        "        # the model API (the controller may resolve a revision through the mirror): passed, not cached",
        "        location /api/models/ {",
        '            if ($request_uri !~ "^/api/models/") {',
        "                return 404;",
        "            }",
        "            if ($hub_pinned = 0) {",
        '                return 403 "llmfleet hub mirror: not a revision of a repo the fleet pins'
        ' (engine_cache_hub_mirror_models)\\n";',
        "            }",
        "            proxy_pass %s$request_uri;" % upstream,
        "            proxy_cache off;",
        "            proxy_redirect %s/ /;" % upstream,
    ]
    if url.group("path").strip("/"):
        # a relative redirect of a hub below a path (http://host/hub): /hub/api/... is /api/... here
        lines.append("            proxy_redirect %s/ /;" % url.group("path").rstrip("/"))
    lines += ["            " + line for line in headers + tls]
    lines += [
        "            set $hub_to_hub 1;",
        "            proxy_set_header Authorization $hub_authorization;",
        "        }",
        "    }",
        "}",
        "",
    ]
    return "\n".join(lines)


class FilterModule:
    """llmfleet.engines filters for the engine_cache role's hub mirror."""

    def filters(self):
        return {
            "engine_cache_hub_mirror_problems": engine_cache_hub_mirror_problems,
            "engine_cache_hub_mirror_conf": engine_cache_hub_mirror_conf,
            "engine_cache_hub_mirror_token_conf": engine_cache_hub_mirror_token_conf,
            "engine_cache_hub_mirror_purge_files": engine_cache_hub_mirror_purge_files,
            "engine_cache_hub_mirror_unresolved": engine_cache_hub_mirror_unresolved,
            "engine_cache_hub_mirror_fleet_clients": engine_cache_hub_mirror_fleet_clients,
        }
