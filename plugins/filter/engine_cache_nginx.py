# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_cache role's mirror of the Hugging Face hub, nginx's side, as filters: the whole
nginx configuration of the mirror (``engine_cache_hub_mirror_conf``), the root-only file it includes for
the hub's token (``engine_cache_hub_mirror_token_conf``) and the files of nginx's cache that hold the
entries to purge (``engine_cache_hub_mirror_purge_files``), rendered here line by line from the values
``engine_cache_hub_mirror_problems`` (``engine_cache_hub_mirror.py``) lets through, so that the role's
task file holds no logic and no template can be talked into a directive of its own.

What nginx does with it: tests/unit/plugins/filter/test_hub_mirror_filter.py (``nginx -t`` of the
rendered text), tests/system/test_hub_mirror_nginx.py (a real nginx before the fake hub).
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.filter.engine_cache_hub_mirror import (
    DEFAULTS, HUB_CDN_ORIGINS, VARIABLES, _URL_RE, _address, _bool, _client, _host, _nameservers, _origin, _pin,
    _purge_entry, _resolvers, _whole, engine_cache_hub_mirror_problems,
)

# The only URLs cached: a file at a commit. A branch or a tag moves; its URL is never cached.
RESOLVE_RE = "^/[^/]+/[^/]+/resolve/[0-9a-f]{40}/"
# One segment of a file's path as the fleet's clients send it (huggingface_hub and hf_warm quote the path, '/'
# kept): unreserved and sub-delimiter characters and percent escapes, never an escaped '/', '\' or '.' (each is
# read as something else by one parser or another), never a '.' or '..' segment - and no backslash at all, which
# a WHATWG URL parser reads as '/' (then '..\' climbs out of the pinned repo).
_SEGMENT_RE = r"(?!\.\.?(?:/|\?|$))(?:[A-Za-z0-9._~!&'()*+,;=:@-]|%(?!2[EeFf]|5[Cc])[0-9A-Fa-f]{2})+"
# A file at a commit as a whole, matched against the URL as sent ($request_uri): the repo, the commit and the
# path captured and put back together into what is asked of the hub and cached ($hub_file), so that nothing
# the grammar did not match travels. Python's re reads it as PCRE does (tests/unit/plugins/filter).
FILE_RE = (r"^/(?P<hub_repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)/resolve/(?P<hub_commit>[0-9a-f]{40})"
           r"/(?P<hub_file_path>%s(?:/%s)*)(?:\?.*)?$" % (_SEGMENT_RE, _SEGMENT_RE))
FILE_VALUE = "/$hub_repo/resolve/$hub_commit/$hub_file_path"
# said with the 400 (an nginx string: no backslash, no double quote, no '$')
FILE_ALLOWED = ("a file's path is segments of letters, digits, -._~!&'()*+,;=:@ and %XX escapes (none of a slash,"
                " a backslash or a dot), without a '.', '..' or empty segment and without a backslash")
_HEX40_RE = re.compile(r"[0-9a-fA-F]{40}")
# Where nobody says otherwise: systemd-resolved's stub.
FALLBACK_RESOLVER = "127.0.0.53"
ZONE = "llmfleet_hub"


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
        "# the file as the grammar matched it (the URL's path as the client sent it, without the query): one",
        "# entry per file of a commit",
        "proxy_cache_key $hub_file;",
        "proxy_cache_valid 200 3650d;",
        "# the URLs are immutable: what the hub or the CDN say about caching does not count, and nothing",
        "# they answer makes nginx redirect internally (X-Accel-Redirect) or vary a cached entry",
        "proxy_ignore_headers Cache-Control Expires Set-Cookie Vary X-Accel-Expires X-Accel-Redirect"
        " X-Accel-Limit-Rate X-Accel-Buffering X-Accel-Charset;",
        "proxy_hide_header Set-Cookie;",
        "# concurrent misses for one file wait for the first download instead of starting their own",
        # (the hub's redirect is not cached: nginx lets go of the lock when it comes and takes it again in
        # @cdn, so a waiter whose 500 ms timer fires in between asks the hub for the redirect once more;
        # the bytes still come once - tests/system/test_hub_mirror_nginx.py)
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
        "    # a file at a commit as the mirror's grammar allows it, put back together from the repo, the commit",
        "    # and the path it matched in the URL as sent; empty for anything else (refused, nothing asked)",
        "    map $request_uri $hub_file {",
        '        "~%s" %s;' % (FILE_RE, FILE_VALUE),
        '        default "";',
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
        "            # only a path of the grammar, and only that is sent: no backslash, no dot segment, no escaped",
        "            # separator reaches the hub to be read as something else there",
        '            if ($hub_file = "") {',
        '                return 400 "llmfleet hub mirror: %s\\n";' % FILE_ALLOWED,
        "            }",
        "            if ($hub_pinned = 0) {",
        '                return 403 "llmfleet hub mirror: not a repo and commit the fleet pins'
        ' (engine_cache_hub_mirror_models)\\n";',
        "            }",
        "            proxy_pass %s$hub_file;" % upstream,
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
    """llmfleet.engines filters for the nginx configuration of the engine_cache role's hub mirror."""

    def filters(self):
        return {
            "engine_cache_hub_mirror_conf": engine_cache_hub_mirror_conf,
            "engine_cache_hub_mirror_token_conf": engine_cache_hub_mirror_token_conf,
            "engine_cache_hub_mirror_purge_files": engine_cache_hub_mirror_purge_files,
        }
