"""The engine_cache role's hub mirror filters (plugins/filter/engine_cache_hub_mirror.py, engine_cache_nginx.py).

The nginx configuration is data: every value that would end a directive, open or close a block, start a
comment, a string or a variable is refused with its variable's name and value (the token's never shown);
what is rendered is pinned directive by directive, and a real nginx (``nginx -t``, Debian's nginx-light,
which CI installs) accepts it for the defaults and for odd but valid values, with a temporary prefix and
directory (no root-only path). What it does with traffic: tests/system/test_hub_mirror_nginx.py.

``conf`` and ``token_conf`` render the role's templates (roles/engine_cache/templates/hub-mirror*.conf.j2) with
the values the filters let through; tests/unit/roles/test_hub_mirror_template.py holds them to the bytes the
role's own task renders through Ansible.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError

REPO = pathlib.Path(__file__).resolve().parents[4]
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
TOKEN = "hf_PLANTEDsecretTOKEN0123456789"


M = filter_plugin("engine_cache_hub_mirror")
NGINX_CONF = filter_plugin("engine_cache_nginx")
F = dict(M.FilterModule().filters(), **NGINX_CONF.FilterModule().filters())
del F["engine_cache_hub_mirror_where"]  # tested in test_engine_cache_steps_filter.py
conf = F["engine_cache_hub_mirror_conf"]
problems = F["engine_cache_hub_mirror_problems"]
token_conf = F["engine_cache_hub_mirror_token_conf"]
BASE = {"dir": "/srv/llmfleet-cache/hub-mirror", "token_file": "/etc/llmfleet/engine_cache/hub-mirror-token.conf"}
INJECT = ("no control character (newline, carriage return, tab, NUL), whitespace, quote, ';', '{', '}', '#', '\\'"
          " or '$' (nginx would read the rest as directives, blocks or variables of its own)")


def test_filters_are_registered():
    assert sorted(F) == ["engine_cache_hub_mirror_conf", "engine_cache_hub_mirror_conf_values",
                         "engine_cache_hub_mirror_fleet_clients", "engine_cache_hub_mirror_problems",
                         "engine_cache_hub_mirror_purge_files", "engine_cache_hub_mirror_token_conf",
                         "engine_cache_hub_mirror_token_values", "engine_cache_hub_mirror_unresolved"]


def test_filter_defaults_are_the_role_defaults():
    defaults = yaml.safe_load((REPO / "roles/engine_cache/defaults/main.yml").read_text())
    for key in ("listen", "port", "upstream", "max_size_gib", "resolver", "token", "cdn", "purge"):
        assert M.DEFAULTS[key] == defaults["engine_cache_hub_mirror_" + key], key
    # empty in the role: the fleet's own (tasks/hub_mirror.yml derives them from the inventory)
    assert defaults["engine_cache_hub_mirror_clients"] == [] and defaults["engine_cache_hub_mirror_models"] == []


# -- what is rendered ---------------------------------------------------------------------------------

def _lines(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _location(text, opening):
    """The directives of the block that starts with ``opening`` (nested blocks included)."""
    lines = _lines(text)
    start = lines.index(opening)
    depth, out = 0, []
    for line in lines[start:]:
        depth += line.count("{") - line.count("}")
        out.append(line)
        if depth == 0:
            return out
    raise AssertionError("block %r is not closed" % opening)


RESOLVE = 'location ~ "^/[^/]+/[^/]+/resolve/[0-9a-f]{40}/" {'


def test_defaults_render_the_cache_and_the_server():
    lines = _lines(conf(BASE))
    for line in (
        "pid /srv/llmfleet-cache/hub-mirror/run/nginx.pid;",
        "error_log /srv/llmfleet-cache/hub-mirror/log/error.log warn;",
        "access_log /srv/llmfleet-cache/hub-mirror/log/access.log llmfleet_hub;",
        "proxy_cache_path /srv/llmfleet-cache/hub-mirror/cache levels=1:2 keys_zone=llmfleet_hub:64m max_size=500g"
        " inactive=365d use_temp_path=off;",
        "client_body_temp_path /srv/llmfleet-cache/hub-mirror/tmp/client_body;",
        "proxy_temp_path /srv/llmfleet-cache/hub-mirror/tmp/proxy;",
        "resolver 127.0.0.53 ipv6=off;",
        "listen 0.0.0.0:8090;",
        "add_header X-Cache-Status $upstream_cache_status always;",
        "include /etc/llmfleet/engine_cache/hub-mirror-token.conf;",
        '"~^/" https://huggingface.co$upstream_http_location;',
        '"~^https://huggingface\\.co/" 1;',
    ):
        assert line in lines, line
    # no user directive unless asked; never daemon (the unit gives -g 'daemon off;')
    assert not [line for line in lines if line.startswith(("user ", "daemon "))]


def test_the_resolve_location_caches_follows_redirects_and_sends_the_token_to_the_hub_only():
    text = conf(BASE)
    block = _location(text, RESOLVE)
    for line in (
        "proxy_pass https://huggingface.co$hub_file;",
        "proxy_cache llmfleet_hub;",
        "proxy_cache_key $hub_file;",
        "proxy_cache_valid 200 3650d;",
        "proxy_cache_lock on;",
        "proxy_cache_lock_timeout 3600s;",
        "proxy_cache_lock_age 3600s;",
        "proxy_force_ranges on;",
        "proxy_intercept_errors on;",
        "error_page 301 302 303 307 308 = @cdn;",
        "set $hub_to_hub 1;",
        "proxy_set_header Authorization $hub_authorization;",
        'proxy_set_header Accept-Encoding "";',
        'proxy_set_header Cookie "";',
        "proxy_ssl_server_name on;",
        "proxy_ssl_verify on;",
        "proxy_ssl_trusted_certificate /etc/ssl/certs/ca-certificates.crt;",
        'if ($request_uri !~ "^/[^/]+/[^/]+/resolve/[0-9a-f]{40}/") {',
    ):
        assert line in block, line
    cdn = _location(text, "location @cdn {")
    assert "set $hub_to_hub $hub_same_origin;" in cdn
    assert "proxy_pass $hub_next;" in cdn
    assert "proxy_cache_key $hub_file;" in cdn and "recursive_error_pages on;" in cdn
    # the token's variable is chosen per URL: 1 only for the hub's own origin
    assert cdn.index("set $hub_to_hub $hub_same_origin;") < cdn.index("proxy_set_header Authorization $hub_authorization;")
    api = _location(text, "location /api/models/ {")
    assert "proxy_cache off;" in api and "proxy_pass https://huggingface.co$request_uri;" in api
    assert "proxy_cache llmfleet_hub;" not in api
    assert [line for line in api if line.startswith("proxy_redirect")] == ["proxy_redirect https://huggingface.co/ /;"]
    anything = _location(text, "location / {")
    assert len(anything) == 3 and anything[1].startswith("return 404 ")


def _nginx_unquote(text):
    """A double-quoted nginx string's content as nginx reads it (\\", \\', \\\\ and \\t, \\r, \\n; any other
    backslash is kept with what follows, as PCRE then reads it)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "\"'\\trn":
            out.append({"t": "\t", "r": "\r", "n": "\n"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _hub_file(text):
    """What the rendered ``map $request_uri $hub_file`` gives: a function of the URL as sent, read from the
    configuration (its regex compiled by Python's re, which reads this one as PCRE does; its value's
    variables filled from the named captures)."""
    block = _location(text, "map $request_uri $hub_file {")
    assert block[-2:] == ['default "";', "}"] and len(block) == 4, block
    found = re.fullmatch(r'"~((?:[^"\\]|\\.)*)" (\S+);', block[1])
    assert found, block[1]
    pattern, value = re.compile(_nginx_unquote(found.group(1))), found.group(2)

    def hub_file(uri):
        match = pattern.search(uri)
        if not match:
            return ""
        return re.sub(r"\$(\w+)", lambda m: match.group(m.group(1)), value)
    return hub_file


COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILE_PREFIX = "/llmfleet-test/tiny-chat/resolve/%s/" % COMMIT


@pytest.mark.parametrize("path, sent", [
    ("config.json", "config.json"),
    ("onnx/model-00001-of-00002.safetensors", "onnx/model-00001-of-00002.safetensors"),
    ("a%20b%C3%A9.json", "a%20b%C3%A9.json"),  # huggingface_hub's quote of "a bé.json"
    (".gitattributes", ".gitattributes"),
    ("a..b/...", "a..b/..."),
    ("x+y@1_~!&'()*,;=:-.bin", "x+y@1_~!&'()*,;=:-.bin"),
    ("config.json?download=true", "config.json"),  # the query is never sent (nor part of the cache key)
])
def test_the_file_grammar_passes_what_the_clients_send_and_sends_only_what_it_matched(path, sent):
    hub_file = _hub_file(conf(BASE))
    assert hub_file(FILE_PREFIX + path) == FILE_PREFIX + sent


@pytest.mark.parametrize("path", [
    # a backslash, which a WHATWG URL parser reads as '/': '..\\' climbs out of the pinned repo and commit
    "x/..\\..\\..\\..\\..\\other\\secret\\resolve\\main\\y",
    "x/..%5c..%5c..%5c..%5c..%5cother%5csecret%5cresolve%5cmain%5cy",
    "x/..%5C..%5Cother%5Csecret%5Cresolve%5Cmain%5Cy",
    "config\\json", "config.json\\",
    # dot segments, literal or escaped, however they end
    "..", ".", "x/..", "x/.", "x/../y", "x/./y", "../y", "x/..?y=1", "x/.?y", "%2e%2e/y", "x/%2E%2e", ".%2e/y",
    "x%2e/y", "%2E",
    # an escaped separator; an empty segment; no path
    "x%2fy", "x%2Fy", "x//y", "y/", "/y", "",
    # what no client sends: raw space, quote, '$', '#', '%' without two hex digits
    "x y", 'x"y', "x$y", "x#y", "x%zzy", "x%2",
])
def test_the_file_grammar_refuses_backslashes_dot_segments_and_escaped_separators(path):
    hub_file = _hub_file(conf(BASE))
    assert hub_file(FILE_PREFIX + path) == "", path


@pytest.mark.parametrize("uri", [
    "/llmfleet-test/tiny-chat/resolve/%s/config.json" % COMMIT.upper(),
    "/llmfleet-test/tiny-chat/resolve/main/config.json",
    "/../tiny-chat/resolve/%s/config.json" % COMMIT,
    "/llmfleet-test\\tiny-chat/resolve/%s/config.json" % COMMIT,
    "/llmfleet-test/tiny-chat/x/resolve/%s/config.json" % COMMIT,
    "//llmfleet-test/tiny-chat/resolve/%s/config.json" % COMMIT,
    "/api/models/llmfleet-test/tiny-chat/revision/main",
])
def test_the_file_grammar_refuses_any_other_repo_or_commit_shape(uri):
    assert _hub_file(conf(BASE))(uri) == ""


def test_only_the_grammars_file_is_asked_of_the_hub_and_cached():
    """In the resolve location the grammar's refusal comes before anything is asked, and what is asked and
    cached is the file it put together, not the URL as sent."""
    block = _location(conf(BASE), RESOLVE)
    refusal = block.index('if ($hub_file = "") {')
    assert block[refusal + 1].startswith('return 400 "llmfleet hub mirror: a file\'s path is segments of')
    assert block[refusal + 2] == "}"
    assert refusal < block.index("if ($hub_pinned = 0) {") < block.index("proxy_pass https://huggingface.co$hub_file;")
    assert [line for line in block if line.startswith(("proxy_pass", "proxy_cache_key"))] == [
        "proxy_pass https://huggingface.co$hub_file;", "proxy_cache_key $hub_file;"]


def test_the_maps_that_are_read_more_than_once_a_request_are_volatile():
    lines = _lines(conf(BASE))
    for opening in ("map $upstream_http_location $hub_redirect {", "map $hub_next $hub_same_origin {"):
        assert lines[lines.index(opening) + 1] == "volatile;", opening


def test_odd_but_valid_values_render():
    text = conf(dict(BASE, listen="::1", port="8443", upstream="http://[::1]:8080/hub/", max_size_gib="7",
                     resolver=["10.0.0.2", "[2001:db8::53]:5353", "2001:db8::54", "10.0.0.3:53"],
                     validate_certs="no", user="llmfleet-hub-mirror", group="nogroup", ca_file="/opt/ca+1/b@.pem",
                     lock_timeout=60, inactive_days=30, token=TOKEN))
    lines = _lines(text)
    assert "listen [::1]:8443;" in lines
    assert "user llmfleet-hub-mirror nogroup;" in lines
    assert "resolver 10.0.0.2 [2001:db8::53]:5353 [2001:db8::54] 10.0.0.3:53 ipv6=off;" in lines
    assert "proxy_pass http://[::1]:8080/hub$hub_file;" in lines
    assert '"~^/" http://[::1]:8080$upstream_http_location;' in lines
    assert "proxy_redirect http://[::1]:8080/hub/ /;" in lines and "proxy_redirect /hub/ /;" in lines
    assert '"~^http://\\[::1\\]:8080/" 1;' in lines
    assert "proxy_ssl_verify off;" in lines and "proxy_cache_lock_timeout 60s;" in lines
    assert "max_size=7g inactive=30d" in text
    assert TOKEN not in text


@pytest.mark.parametrize("resolv_conf, expected", [
    ("nameserver 10.255.255.53\n", "10.255.255.53"),
    ("# x\nsearch example.org\nnameserver 192.0.2.1 # first\n  nameserver\t2001:db8::1\nnameserver fe80::1%eth0\n",
     "192.0.2.1 [2001:db8::1]"),
    ("nameserver not-an-address\n", "127.0.0.53"),
    ("", "127.0.0.53"),
])
def test_resolver_from_resolv_conf(resolv_conf, expected):
    assert "resolver %s ipv6=off;" % expected in _lines(conf(dict(BASE, resolv_conf=resolv_conf)))


def test_resolver_given_wins_over_resolv_conf():
    params = dict(BASE, resolver="10.0.0.9", resolv_conf="nameserver 10.0.0.1\n")
    assert "resolver 10.0.0.9 ipv6=off;" in _lines(conf(params))


def test_token_conf():
    text = token_conf(TOKEN)
    assert _lines(text) == ["map $hub_to_hub $hub_authorization {", "volatile;", 'default "";',
                            '1 "Bearer %s";' % TOKEN, "}"]
    assert "Bearer" not in token_conf("")
    assert text.endswith("\n")


def test_the_token_is_checked_never_a_value_of_the_world_readable_configuration():
    values = F["engine_cache_hub_mirror_conf_values"](dict(BASE, token=TOKEN))
    assert TOKEN not in repr(values) and TOKEN not in conf(dict(BASE, token=TOKEN))
    assert F["engine_cache_hub_mirror_token_values"](TOKEN) == {"token": TOKEN}
    assert F["engine_cache_hub_mirror_token_values"]("") == {"token": ""}


# -- refusals -----------------------------------------------------------------------------------------

NASTY = ["a\nb", "a;b", "a{", "}", 'a"b', "a'b", "a b", "a\tb", "x\x00", "$host", "a#b", "a\\b", "\x7f", "a\rb",
         "\x85"]
VARIABLES = {
    "listen": "variable engine_cache_hub_mirror_listen",
    "upstream": "variable engine_cache_hub_mirror_upstream",
    "dir": "variable engine_cache_hub_mirror_dir",
    "port": "variable engine_cache_hub_mirror_port",
    "max_size_gib": "variable engine_cache_hub_mirror_max_size_gib",
    "resolver": "variable engine_cache_hub_mirror_resolver",
    "user": "parameter user",
    "token_file": "parameter token_file",
    "ca_file": "parameter ca_file",
}


@pytest.mark.parametrize("key", sorted(VARIABLES))
@pytest.mark.parametrize("nasty", NASTY, ids=[repr(n) for n in NASTY])
def test_injection_is_refused_naming_variable_and_value(key, nasty):
    import json

    value = "https://huggingface.co/" + nasty if key == "upstream" else nasty
    params = dict(BASE, **{key: [value] if key == "resolver" else value})
    expected = "%s is %s, allowed: %s" % (VARIABLES[key], json.dumps(value), INJECT)
    assert problems(params) == [expected]
    # the role's task calls the values filter, the tests and the bench the text one: both refuse
    for call in (conf, F["engine_cache_hub_mirror_conf_values"]):
        with pytest.raises(AnsibleFilterError) as err:
            call(params)
        assert str(err.value) == "engine_cache_hub_mirror_conf: " + expected


@pytest.mark.parametrize("nasty", NASTY + ['hf_x" ; }', "hf_x\nserver {"], ids=repr)
def test_an_injecting_token_is_refused_without_showing_it(nasty):
    token = TOKEN + nasty
    for call in (lambda: conf(dict(BASE, token=token)), lambda: token_conf(token),
                 lambda: F["engine_cache_hub_mirror_conf_values"](dict(BASE, token=token)),
                 lambda: F["engine_cache_hub_mirror_token_values"](token)):
        with pytest.raises(AnsibleFilterError) as err:
            call()
        assert "variable engine_cache_hub_mirror_token" in str(err.value)
        assert "a secret, not shown" in str(err.value)
        assert TOKEN not in str(err.value) and "PLANTED" not in str(err.value)


@pytest.mark.parametrize("key, value, fragment", [
    ("port", 0, "is 0, allowed: a port number (1-65535)"),
    ("port", 65536, "is 65536, allowed: a port number"),
    ("port", True, "is true, allowed: a port number"),
    ("port", "80x", 'is "80x", allowed: a port number'),
    ("listen", "", 'is "", allowed: an IP address (0.0.0.0 or :: for all) or a host name of this host'),
    ("listen", "-host", 'is "-host", allowed: an IP address'),
    ("listen", ["0.0.0.0"], 'is ["0.0.0.0"], allowed: an IP address'),
    ("upstream", "ftp://huggingface.co", 'is "ftp://huggingface.co", allowed: an http(s) URL of the hub'),
    ("upstream", "https://user@huggingface.co", "allowed: an http(s) URL"),
    ("upstream", "https://huggingface.co/?x=1", "allowed: an http(s) URL"),
    ("upstream", "https://huggingface.co/a/../b", "allowed: an http(s) URL"),
    ("upstream", "https://huggingface.co:99999", "allowed: an http(s) URL"),
    ("upstream", "https://[zz::1]", "allowed: an http(s) URL"),
    ("upstream", "huggingface.co", "allowed: an http(s) URL"),
    ("max_size_gib", 0, "is 0, allowed: a whole number of GiB, 1 or more"),
    ("max_size_gib", 1.5, "is 1.5, allowed: a whole number of GiB"),
    ("dir", "relative/dir", 'is "relative/dir", allowed: an absolute path'),
    ("dir", "/", 'is "/", allowed: an absolute path'),
    ("dir", "/srv/../etc", "allowed: an absolute path"),
    ("resolver", ["dns.example.org"], 'has "dns.example.org", not an IP address; allowed: a list of IP addresses'),
    ("resolver", ["10.0.0.1:0"], 'has "10.0.0.1:0", not a port number after the address'),
    ("resolver", [53], "is [53], allowed: a list of IP addresses"),
    ("validate_certs", "maybe", 'variable engine_cache_validate_certs is "maybe", allowed: true or false'),
    ("user", "Root", 'parameter user is "Root", allowed: a system user name'),
    ("group", "9x", 'parameter group is "9x", allowed: a system group name'),
    ("lock_timeout", 0, "parameter lock_timeout is 0, allowed: a whole number of seconds, 1 or more"),
    ("inactive_days", "x", 'parameter inactive_days is "x", allowed: a whole number of days, 1 or more'),
    ("token", 123, "variable engine_cache_hub_mirror_token is a int (a secret, not shown), allowed: a string"),
])
def test_shapes_are_refused(key, value, fragment):
    found = problems(dict(BASE, **{key: value}))
    assert len(found) == 1 and fragment in found[0], found
    with pytest.raises(AnsibleFilterError):
        conf(dict(BASE, **{key: value}))


def test_unknown_keys_missing_keys_and_not_a_mapping():
    assert problems({"colour": "red"}) == [
        "the mirror's parameters have colour, allowed keys: " + ", ".join(M.KEYS)]
    assert problems("x")[0].startswith('the mirror\'s parameters are "x", allowed: a mapping')
    with pytest.raises(AnsibleFilterError, match="the mirror's parameters have no dir; the mirror's parameters have"
                                                 " no token_file"):
        conf({})
    assert problems({}) == []


def test_the_role_defaults_have_no_problem():
    defaults = yaml.safe_load((REPO / "roles/engine_cache/defaults/main.yml").read_text())
    params = {key: defaults["engine_cache_hub_mirror_" + key]
              for key in ("listen", "port", "upstream", "max_size_gib", "resolver", "token", "clients", "models",
                          "cdn", "purge")}
    assert problems(params) == []


# -- who may ask, what may be asked, where a redirect may go, what is purged --------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FLEET = dict(BASE, clients=["10.0.0.0/24", "2001:db8::/64", "10.1.2.3", "10.1.2.3"],
             models=[{"name": "chat", "model": "org/chat.v1", "revision": "refs/pr/1", "port": 8000},
                     {"model": "org/pinned", "revision": COMMIT.upper()},
                     {"model": "org/chat.v1", "revision": "refs/pr/1"}])


def test_only_the_clients_are_allowed_before_any_location():
    lines = _lines(conf(FLEET))
    start = lines.index("deny all;")
    assert lines[start - 3:start + 1] == ["allow 10.0.0.0/24;", "allow 2001:db8::/64;", "allow 10.1.2.3;", "deny all;"]
    assert lines.index("server {") < start < min(i for i, line in enumerate(lines) if line.startswith("location "))
    default = _lines(conf(BASE))
    assert default[default.index("deny all;") - 2:default.index("deny all;")] == ["allow 127.0.0.1;", "allow ::1;"]
    assert len([line for line in default if line.startswith(("allow ", "deny "))]) == 3


def test_only_the_pinned_repos_revisions_and_commits_are_asked_of_the_hub():
    text = conf(FLEET)
    lines = _lines(text)
    start = lines.index("map $hub_path $hub_pinned {")
    assert lines[start + 1:start + 7] == [
        '"~^/api/models/org/chat\\.v1/revision/refs%2Fpr%2F1$" 1;',
        # a branch or tag pin: its commit is known only on the controller, later: any commit of the repo
        '"~^/org/chat\\.v1/resolve/[0-9a-f]{40}/" 1;',
        '"~^/api/models/org/pinned/revision/%s$" 1;' % COMMIT.upper(),
        # a commit pin: that commit only
        '"~^/org/pinned/resolve/%s/" 1;' % COMMIT,
        "default 0;",
        "}",
    ]
    for block in (_location(text, RESOLVE), _location(text, "location /api/models/ {")):
        check = block.index("if ($hub_pinned = 0) {")
        assert block[check + 1].startswith("return 403 ") and block[check + 2] == "}"
        assert check < min(i for i, line in enumerate(block) if line.startswith(("proxy_pass", "set $hub_to_hub")))
    # no pin: nothing is asked of the hub
    lines = _lines(conf(BASE))
    assert lines[lines.index("map $hub_path $hub_pinned {") + 1:][:2] == ["default 0;", "}"]


def test_a_redirect_is_followed_only_to_the_hub_and_its_cdns():
    lines = _lines(conf(BASE))
    start = lines.index("map $hub_next $hub_next_allowed {")
    expected = ['"~^https://huggingface\\.co/" 1;'] + [
        '"~^%s/" 1;' % origin.replace(".", "\\.") for origin in M.HUB_CDN_ORIGINS]
    assert lines[start + 1:start + 3 + len(expected)] == ["volatile;"] + expected + ["default 0;"]
    cdn = _location(conf(BASE), "location @cdn {")
    check = cdn.index("if ($hub_next_allowed = 0) {")
    assert cdn[check + 1].startswith("return 502 ") and check < cdn.index("proxy_pass $hub_next;")
    lines = _lines(conf(dict(BASE, cdn=["http://127.0.0.1:9000", "https://[::1]:8443"])))
    start = lines.index("map $hub_next $hub_next_allowed {")
    assert lines[start + 1:start + 6] == ["volatile;", '"~^https://huggingface\\.co/" 1;',
                                          '"~^http://127\\.0\\.0\\.1:9000/" 1;',
                                          '"~^https://\\[::1\\]:8443/" 1;', "default 0;"]


def test_purge_names_the_cache_files_nginx_keeps():
    import hashlib

    found = F["engine_cache_hub_mirror_purge_files"](["org/chat@%s/sub dir/model.safetensors" % COMMIT],
                                                     "/srv/llmfleet-cache/hub-mirror/")
    key = "/org/chat/resolve/%s/sub%%20dir/model.safetensors" % COMMIT
    digest = hashlib.md5(key.encode()).hexdigest()  # noqa: S324
    assert found == [{"entry": "org/chat@%s/sub dir/model.safetensors" % COMMIT, "key": key,
                      "file": "/srv/llmfleet-cache/hub-mirror/cache/%s/%s/%s" % (digest[-1], digest[-3:-1], digest)}]
    assert F["engine_cache_hub_mirror_purge_files"]([], "/srv/x") == []


def test_fleet_clients_are_the_inventory_the_controller_and_the_loopback():
    inventory = {"n1": "10.0.0.5", "n2": "", "n3": "node3.example", "n4": "2001:db8::7", "n5": None}
    assert F["engine_cache_hub_mirror_unresolved"](inventory) == ["n2", "n5", "node3.example"]
    found = F["engine_cache_hub_mirror_fleet_clients"](
        inventory, {"n2": "10.0.0.6      STREAM n2\n10.0.0.6      DGRAM\n", "n5": "fd00::5 STREAM n5\n",
                    "node3.example": ""}, "10.9.9.9 50522 22")
    assert found["clients"] == ["127.0.0.1", "::1", "10.0.0.5", "10.0.0.6", "2001:db8::7", "fd00::5", "10.9.9.9"]
    assert found["problems"] == ['inventory host n3 (ansible_host "node3.example") has no address this host can look'
                                 " up: set engine_cache_hub_mirror_clients to the addresses the fleet reaches the"
                                 " mirror from"]
    assert F["engine_cache_hub_mirror_fleet_clients"]({}, {}, "") == {"clients": ["127.0.0.1", "::1"], "problems": []}
    assert problems(dict(BASE, clients=found["clients"])) == []


@pytest.mark.parametrize("key, value, fragment", [
    ("clients", "10.0.0.1", 'variable engine_cache_hub_mirror_clients is "10.0.0.1", allowed: a list of addresses'),
    ("clients", ["10.0.0.1/24"], 'variable engine_cache_hub_mirror_clients has "10.0.0.1/24", allowed: addresses'),
    ("clients", ["node1.example"], 'has "node1.example", allowed: addresses or networks'),
    ("clients", ["10.0.0.0/33"], 'has "10.0.0.0/33"'),
    ("clients", ["10.0.0.1;"], 'has "10.0.0.1;"'),
    ("clients", [""], 'has ""'),
    ("clients", [5], "has 5"),
    ("models", [{"model": "gpt2", "revision": "main"}],
     'variable engine_cache_hub_mirror_models has {"model": "gpt2", "revision": "main"}, allowed: mappings with'),
    ("models", [{"model": "org/x"}], 'has {"model": "org/x", "revision": null}'),
    ("models", [{"model": "org/x", "revision": " main"}], 'has {"model": "org/x", "revision": " main"}'),
    ("models", [{"model": "org/a..b", "revision": "main"}], 'has {"model": "org/a..b"'),
    ("models", [{"model": "org/x", "revision": "ma\nin"}], "has {"),
    ("models", ["org/x"], 'has "org/x", allowed: mappings'),
    ("cdn", ["cdn-lfs.hf.co"], 'variable engine_cache_hub_mirror_cdn has "cdn-lfs.hf.co", allowed: origins'),
    ("cdn", ["https://cdn-lfs.hf.co/x"], 'has "https://cdn-lfs.hf.co/x"'),
    ("cdn", ["ftp://cdn-lfs.hf.co"], 'has "ftp://cdn-lfs.hf.co"'),
    ("cdn", ["https://cdn;lfs.hf.co"], 'has "https://cdn;lfs.hf.co"'),
    ("cdn", "https://cdn-lfs.hf.co", "is \"https://cdn-lfs.hf.co\", allowed: a list of origins"),
    ("purge", ["org/x@main/config.json"], 'variable engine_cache_hub_mirror_purge has "org/x@main/config.json",'
                                          " allowed: <org>/<name>@<40-hex commit>/<path of the file>"),
    ("purge", ["org/x@%s/../y" % COMMIT], "has \"org/x@%s/../y\"" % COMMIT),
    ("purge", ["org/x@%s//y" % COMMIT], "has "),
    ("purge", ["org/x@%s/" % COMMIT], "has "),
    ("purge", ["org/x@%s/a\nb" % COMMIT], "has "),
    ("purge", ["org/x@%s/y" % COMMIT.upper()], "has "),
    ("purge", "org/x@%s/y" % COMMIT, "allowed: a list of <org>/<name>@"),
])
def test_fleet_values_are_refused_naming_variable_and_value(key, value, fragment):
    found = problems(dict(BASE, **{key: value}))
    assert len(found) == 1 and fragment in found[0], found
    with pytest.raises(AnsibleFilterError):
        conf(dict(BASE, **{key: value}))


def test_no_client_at_all_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"engine_cache_hub_mirror_clients is \[\], allowed: at least one"):
        conf(dict(BASE, clients=[]))
    with pytest.raises(AnsibleFilterError, match="variable engine_cache_hub_mirror_purge has"):
        F["engine_cache_hub_mirror_purge_files"](["x"], "/srv/x")


# -- what nginx makes of it -----------------------------------------------------------------------------

def _nginx_test(tmp_path, params, token=""):
    """``nginx -t`` of the configuration rendered for ``params`` under ``tmp_path`` (prefix and directory)."""
    assert NGINX, "nginx is not installed (apt-get install nginx-light; CI installs it)"
    directory = tmp_path / "mirror"
    for sub in ("cache", "tmp", "log", "run"):
        (directory / sub).mkdir(parents=True)
    token_file = tmp_path / "token.conf"
    token_file.write_text(token_conf(token))
    token_file.chmod(0o600)
    config = tmp_path / "nginx.conf"
    config.write_text(conf(dict(params, dir=str(directory), token_file=str(token_file))))
    return subprocess.run([NGINX, "-t", "-q", "-p", str(tmp_path), "-c", str(config)],
                          capture_output=True, text=True, check=False, timeout=60)


def test_nginx_accepts_the_defaults(tmp_path):
    result = _nginx_test(tmp_path, {})
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result.stderr


@pytest.mark.parametrize("params", [
    {"listen": "127.0.0.1", "port": 18090, "upstream": "http://127.0.0.1:8080/hub", "resolver": ["127.0.0.1:5353"]},
    {"listen": "::1", "upstream": "https://[::1]:8443", "resolver": "[::1] 10.0.0.2", "validate_certs": False,
     "max_size_gib": 1, "lock_timeout": 5, "inactive_days": 1},
    {"listen": "localhost", "upstream": "https://hub.example-mirror.org/a/b", "resolv_conf": "nameserver 192.0.2.53\n"},
    {"clients": FLEET["clients"], "models": FLEET["models"], "cdn": ["http://127.0.0.1:9000", "https://[::1]:8443"]},
], ids=["loopback-http-upstream-with-path", "ipv6", "names", "fleet"])
def test_nginx_accepts_odd_but_valid_values(tmp_path, params):
    result = _nginx_test(tmp_path, params, token=TOKEN)
    assert result.returncode == 0, result.stderr
    assert not re.search(r"\[(emerg|alert|crit|error)\]", result.stderr), result.stderr


def test_nginx_accepts_a_workers_user(tmp_path):
    result = _nginx_test(tmp_path, {"user": "nobody", "group": "nogroup" if _group("nogroup") else "nobody"})
    assert result.returncode == 0, result.stderr
    if os.geteuid() == 0:
        assert result.stderr == ""


def _group(name):
    import grp

    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True
