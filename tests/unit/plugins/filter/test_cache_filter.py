"""engine_cache's variable checks (plugins/filter/engine_cache.py): each bad value named with its variable, its
value (never the password) and what is allowed; the texts are those the role printed when this was a Jinja
expression in its tasks/main.yml."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError

REPO = pathlib.Path(__file__).resolve().parents[4]


F = filter_plugin("engine_cache").FilterModule().filters()
PASSWORD = "planted-devpi-password-7f3a"


def params(**kw):
    out = {"password": PASSWORD, "root": "/srv/llmfleet-cache", "port": 3141, "torch_indexes": ["cu129", "cu130"],
           "pypi_url": "https://pypi.org", "listen": "0.0.0.0"}
    out.update(kw)
    return out


def test_the_documentation_file_and_the_role_defaults_pass():
    doc = yaml.safe_load((REPO / "plugins" / "filter" / "engine_cache_problems.yml").read_text())
    assert doc["DOCUMENTATION"]["name"] == "engine_cache_problems"
    assert "llmfleet.engines.engine_cache_problems" in doc["EXAMPLES"]
    defaults = yaml.safe_load((REPO / "roles" / "engine_cache" / "defaults" / "main.yml").read_text())
    given = {key: defaults["engine_cache_" + key] for key in ("root", "port", "torch_indexes", "pypi_url", "listen")}
    assert F["engine_cache_problems"](dict(given, password=PASSWORD)) == []


@pytest.mark.parametrize("port", [1, 3141, "3141", 65535])
def test_good_values_pass(port):
    assert F["engine_cache_problems"](params(port=port)) == []
    assert F["engine_cache_problems"](params(pypi_url="file:///srv/pypi", torch_indexes=[])) == []


@pytest.mark.parametrize("key, value, text", [
    ("password", "", "variable engine_cache_password: it is empty; devpi root user's password is required"
                     " (keep it in ansible-vault)"),
    ("password", None, "variable engine_cache_password: it is empty;"),
    ("root", "srv/cache", 'variable engine_cache_root: "srv/cache" is not an absolute path'),
    ("root", None, "variable engine_cache_root: null is not an absolute path"),
    ("port", 0, "variable engine_cache_port: 0 is not a port number (1-65535)"),
    ("port", 65536, "variable engine_cache_port: 65536 is not a port number (1-65535)"),
    ("port", "http", 'variable engine_cache_port: "http" is not a port number (1-65535)'),
    ("port", True, "variable engine_cache_port: true is not a port number (1-65535)"),
    ("port", "-1", 'variable engine_cache_port: "-1" is not a port number (1-65535)'),
    ("torch_indexes", "cu129", 'variable engine_cache_torch_indexes: "cu129" must be a list of index names such as cu129'),
    ("torch_indexes", ["cu129", "../x"], 'variable engine_cache_torch_indexes: ["cu129", "../x"] must be a list'),
    ("torch_indexes", ["CU129"], 'variable engine_cache_torch_indexes: ["CU129"] must be a list'),
    ("torch_indexes", [129], "variable engine_cache_torch_indexes: [129] must be a list"),
    ("pypi_url", "pypi.org", 'variable engine_cache_pypi_url: "pypi.org" is not an http(s) URL'),
    ("pypi_url", "ftp://user:pw@mirror/simple", 'variable engine_cache_pypi_url: "ftp://mirror/simple" is not an http(s) URL'),
])
def test_each_bad_value_is_named_with_what_is_allowed(key, value, text):
    problems = F["engine_cache_problems"](params(**{key: value}))
    assert len(problems) == 1 and problems[0].startswith(text), problems
    assert PASSWORD not in problems[0] and "pw@" not in problems[0]


def test_every_problem_is_listed_at_once_in_the_variables_order():
    problems = F["engine_cache_problems"](params(password="", root="x", port="y", torch_indexes="z", pypi_url="w",
                                                 listen="a b"))
    assert [p.split(":")[0] for p in problems] == ["variable engine_cache_password", "variable engine_cache_root",
                                                   "variable engine_cache_listen",
                                                   "variable engine_cache_port", "variable engine_cache_torch_indexes",
                                                   "variable engine_cache_pypi_url"]


@pytest.mark.parametrize("value, what", [("x", "must be a dict"), ({"password": "p"}, "lacks root, port")])
def test_input_that_is_not_the_role_s_is_refused(value, what):
    with pytest.raises(AnsibleFilterError, match=what):
        F["engine_cache_problems"](value)


# --- values that reach devpi-server's unit (security review, install side, finding 3) ---------
# engine_cache_listen with a newline rendered an ``ExecStartPre=+...`` line, run as root.

@pytest.mark.parametrize("listen", ["0.0.0.0", "::", "127.0.0.1", "::1", "fd00::17", "cache.example", "cache-01",
                                    "cache.example."])
def test_good_listen_addresses_pass(listen):
    assert F["engine_cache_problems"](params(listen=listen)) == []


@pytest.mark.parametrize("listen, text", [
    ("0.0.0.0\nExecStartPre=+/bin/sh -c id", 'variable engine_cache_listen: "0.0.0.0\\nExecStartPre=+/bin/sh -c id"'
                                             " is not an address to listen on"),
    ("0.0.0.0 --debug", 'variable engine_cache_listen: "0.0.0.0 --debug" is not an address to listen on'),
    ("0.0.0.0#", 'variable engine_cache_listen: "0.0.0.0#" is not an address'),
    ("#", 'variable engine_cache_listen: "#" is not an address'),
    ("", 'variable engine_cache_listen: "" is not an address'),
    (None, "variable engine_cache_listen: null is not an address"),
    ("[::1]", "(give the address alone, an IPv6 one without brackets; the port is engine_cache_port)"),
    ("127.0.0.1:3141", "(give the address alone, an IPv6 one without brackets; the port is engine_cache_port)"),
    ("999.1.1.1", 'variable engine_cache_listen: "999.1.1.1" is not an address'),
    ("cache_host", 'variable engine_cache_listen: "cache_host" is not an address'),
])
def test_a_listen_value_that_is_not_an_address_is_refused(listen, text):
    problems = F["engine_cache_problems"](params(listen=listen))
    assert len(problems) == 1 and text in problems[0], problems


@pytest.mark.parametrize("root", ["/srv/llmfleet cache", "/srv/llmfleet-cache\nExecStartPre=+/bin/id", "/srv/#cache",
                                  "/srv/50%", "/srv/$HOME", "/srv/../etc", '/srv/"q"'])
def test_a_root_the_unit_cannot_name_as_it_is_is_refused(root):
    problems = F["engine_cache_problems"](params(root=root))
    assert len(problems) == 1 and problems[0].startswith("variable engine_cache_root: ") and \
        "must be an absolute path of letters, digits" in problems[0], problems


def test_unit_words_quote_and_refuse_control_characters():
    words = F["engine_cache_unit_words"]
    assert words(["/srv/c/bin/devpi-server", "--host", "0.0.0.0", "--port", "3141"]) == \
        "/srv/c/bin/devpi-server --host 0.0.0.0 --port 3141"
    assert words(["a b", "#x", "50%", "$HOME", 'q"\\']) == '"a b" "#x" "50%%" "$$HOME" "q\\"\\\\"'
    assert words(["/a b/50%$"], command=False) == '"/a b/50%%$"'
    for bad in (["0.0.0.0\nExecStartPre=+/bin/id"], ["x\ry"], ["\x00"]):
        with pytest.raises(AnsibleFilterError, match="holds a control character"):
            words(bad)
    with pytest.raises(AnsibleFilterError, match="must be a list of words"):
        words("one string")
