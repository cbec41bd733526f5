# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_cache role's mirror of the Hugging Face hub, nginx's side, as filters: the values of the
mirror's nginx configuration (``engine_cache_hub_mirror_conf_values``) and of the root-only file it includes
for the hub's token (``engine_cache_hub_mirror_token_values``), each one let through only when
``engine_cache_hub_mirror_problems`` (``engine_cache_hub_mirror.py``) finds nothing wrong with it, so that the
role's templates (``roles/engine_cache/templates/hub-mirror*.conf.j2``) only place them and cannot be talked
into a directive of their own; the two files' text as those templates render it (``engine_cache_hub_mirror_conf``,
``engine_cache_hub_mirror_token_conf``); and the files of nginx's cache that hold the entries to purge
(``engine_cache_hub_mirror_purge_files``).

What nginx does with it: tests/unit/plugins/filter/test_hub_mirror_filter.py (``nginx -t`` of the
rendered text), tests/system/test_hub_mirror_nginx.py (a real nginx before the fake hub).
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
from urllib.parse import quote

import jinja2

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.filter.engine_cache_hub_mirror import (
    DEFAULTS, HUB_CDN_ORIGINS, VARIABLES, _URL_RE, _address, _bool, _client, _host, _nameservers, _origin, _pin,
    _purge_entry, _resolvers, _whole, engine_cache_hub_mirror_problems,
)

# One segment of a file's path as the fleet's clients send it (huggingface_hub and hf_warm quote the path, '/'
# kept): unreserved and sub-delimiter characters and percent escapes, never an escaped '/', '\' or '.' (each is
# read as something else by one parser or another), never a '.' or '..' segment - and no backslash at all, which
# a WHATWG URL parser reads as '/' (then '..\' climbs out of the pinned repo).
_SEGMENT_RE = r"(?!\.\.?(?:/|\?|$))(?:[A-Za-z0-9._~!&'()*+,;=:@-]|%(?!2[EeFf]|5[Cc])[0-9A-Fa-f]{2})+"
# A file at a commit as a whole, matched against the URL as sent ($request_uri): the repo, the commit and the
# path captured and put back together into what is asked of the hub and cached ($hub_file, in the template), so
# that nothing the grammar did not match travels. Python's re reads it as PCRE does (tests/unit/plugins/filter).
FILE_RE = (r"^/(?P<hub_repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)/resolve/(?P<hub_commit>[0-9a-f]{40})"
           r"/(?P<hub_file_path>%s(?:/%s)*)(?:\?.*)?$" % (_SEGMENT_RE, _SEGMENT_RE))
# said with the 400 (an nginx string: no backslash, no double quote, no '$')
FILE_ALLOWED = ("a file's path is segments of letters, digits, -._~!&'()*+,;=:@ and %XX escapes (none of a slash,"
                " a backslash or a dot), without a '.', '..' or empty segment and without a backslash")
_HEX40_RE = re.compile(r"[0-9a-fA-F]{40}")
# Where nobody says otherwise: systemd-resolved's stub.
FALLBACK_RESOLVER = "127.0.0.53"


def _regex_escape(text):
    """``text`` (a validated URL, repo or quoted revision: letters, digits and ``.-_~%@+:[]/``) as a PCRE
    literal in a quoted nginx string."""
    return re.sub(r"([.+\[\]])", r"\\\1", text)


def _pin_patterns(models):
    """The regexes of the fleet's pins (the ``$hub_pinned`` map), each once: per repo, its revision look-ups
    (the model API as hf_revision asks it) and its files - at the pinned commit where the revision is one, else at any commit (a branch or
    tag pin resolves to a commit only on the controller, after this configuration is written)."""
    out = []
    for item in models:
        repo, revision = _pin(item)
        literal = _regex_escape(repo)
        out.append("^/api/models/%s/revision/%s$" % (literal, _regex_escape(quote(revision, safe=""))))
        commit = revision.lower() if _HEX40_RE.fullmatch(revision) else "[0-9a-f]{40}"
        out.append("^/%s/resolve/%s/" % (literal, commit))
    seen = set()
    return [pattern for pattern in out if not (pattern in seen or seen.add(pattern))]


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


def engine_cache_hub_mirror_conf_values(params):
    """The values of the mirror's nginx configuration (``templates/hub-mirror.conf.j2``), from ``params``:
    ``dir`` and ``token_file`` (required; the root-only file of the token template, included at the ``http``
    level), and any of ``listen``, ``port``, ``upstream``, ``max_size_gib``, ``resolver`` (empty: the name
    servers of ``resolv_conf``, else 127.0.0.53), ``validate_certs``, ``user`` and ``group`` (the workers',
    when nginx starts as root), ``ca_file``, ``lock_timeout``, ``inactive_days``, ``clients``, ``models``,
    ``cdn``. Every one is checked as ``engine_cache_hub_mirror_problems`` checks it, so the template only
    places them; ``token`` is checked, never returned."""
    problems = engine_cache_hub_mirror_problems(params)
    if not problems:
        problems = ["the mirror's parameters have no %s" % key for key in ("dir", "token_file") if key not in params]
    if problems:
        raise AnsibleFilterError("engine_cache_hub_mirror_conf: %s" % "; ".join(problems))
    p = dict(DEFAULTS, **params)
    clients = []
    for client in (_client(c) for c in p["clients"]):
        if client not in clients:
            clients.append(client)
    if not clients:
        raise AnsibleFilterError("engine_cache_hub_mirror_conf: %s is [], allowed: at least one address or network"
                                 " (nobody could use the mirror)" % VARIABLES["clients"])
    url = _URL_RE.fullmatch(p["upstream"])
    upstream = p["upstream"].rstrip("/")
    origin = "%s://%s%s" % (url.group("scheme"), url.group("host"), ":" + url.group("port") if url.group("port") else "")
    resolvers = [_host(r) if _address(r) is not None else r for r in _resolvers(p["resolver"])]
    user = p["user"] or ""
    cdn = [_origin(c) for c in (p["cdn"] or HUB_CDN_ORIGINS)]
    lock = "%ds" % _whole(p["lock_timeout"], 1)
    return {
        "paths": _paths(p["dir"]),
        "token_file": p["token_file"],
        "listen": _host(p["listen"]),
        "port": _whole(p["port"], 1, 65535),
        "upstream": upstream,
        # a hub below a path (http://host/hub): its relative redirects start with it; empty for none
        "upstream_path": url.group("path").rstrip("/") if url.group("path").strip("/") else "",
        "origin": origin,
        "origin_re": _regex_escape(origin),
        # where the hub's redirects may go: below the hub's URL, then each CDN origin
        "next_allowed_re": [_regex_escape(upstream)] + [_regex_escape(c) for c in cdn if c != upstream],
        "pinned_re": _pin_patterns(p["models"]),
        "resolvers": resolvers or _nameservers(p["resolv_conf"]) or [FALLBACK_RESOLVER],
        "verify": "on" if _bool(p["validate_certs"]) else "off",
        "ca_file": p["ca_file"],
        "lock": lock,
        "max_size_gib": _whole(p["max_size_gib"], 1),
        "inactive_days": _whole(p["inactive_days"], 1),
        "user": user,
        "group": p["group"] or user,
        "clients": clients,
        "file_re": FILE_RE,
        "file_allowed": FILE_ALLOWED,
    }


def engine_cache_hub_mirror_token_values(token):
    """The value of the root-only token file (``templates/hub-mirror-token.conf.j2``): ``{"token": token}``,
    the token checked as ``engine_cache_hub_mirror_problems`` checks it and never shown in an error."""
    problems = engine_cache_hub_mirror_problems({"token": token})
    if problems:
        raise AnsibleFilterError("engine_cache_hub_mirror_token_conf: %s" % "; ".join(problems))
    return {"token": token}


# The role's templates, as its template tasks render them (ansible.builtin.template's defaults: trim_blocks,
# no lstrip_blocks, the template's last newline kept).
_TEMPLATES = pathlib.Path(__file__).resolve().parents[2] / "roles" / "engine_cache" / "templates"


def _render(name, variables):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), trim_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    return env.get_template(name).render(variables)


def engine_cache_hub_mirror_conf(params):
    """The whole nginx configuration of the mirror as text: ``templates/hub-mirror.conf.j2`` rendered with
    ``engine_cache_hub_mirror_conf_values(params)``, the bytes the role writes (for the tests and the bench)."""
    return _render("hub-mirror.conf.j2", {"__engine_cache_hub_conf_values": engine_cache_hub_mirror_conf_values(params)})


def engine_cache_hub_mirror_token_conf(token):
    """The text of the root-only file the mirror's configuration includes (at the ``http`` level):
    ``templates/hub-mirror-token.conf.j2`` rendered with ``engine_cache_hub_mirror_token_values(token)`` - the
    map that gives ``$hub_authorization``, ``Bearer <token>`` where ``$hub_to_hub`` is 1 (a request to the hub's
    own origin), empty (no header) everywhere else, and always when ``token`` is empty."""
    return _render("hub-mirror-token.conf.j2",
                   {"__engine_cache_hub_token_values": engine_cache_hub_mirror_token_values(token)})


class FilterModule:
    """llmfleet.engines filters for the nginx configuration of the engine_cache role's hub mirror."""

    def filters(self):
        return {
            "engine_cache_hub_mirror_conf": engine_cache_hub_mirror_conf,
            "engine_cache_hub_mirror_conf_values": engine_cache_hub_mirror_conf_values,
            "engine_cache_hub_mirror_token_conf": engine_cache_hub_mirror_token_conf,
            "engine_cache_hub_mirror_token_values": engine_cache_hub_mirror_token_values,
            "engine_cache_hub_mirror_purge_files": engine_cache_hub_mirror_purge_files,
        }
