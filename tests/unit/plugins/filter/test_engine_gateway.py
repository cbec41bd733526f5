"""The engine_gateway role's filters (plugins/filter/engine_gateway.py): the fleet read from the inventory,
the gateway's values checked, HAProxy's configuration rendered, and what a node's rollout drains.

The configuration is data: a value that would end a word, start a comment or an escape is refused with
its variable's name and value, and what reaches the role's template (engine_gateway_haproxy_values) is plain,
normalised data of single words; the text (the role's templates/haproxy.cfg.j2, rendered by
engine_gateway_haproxy_cfg) is pinned directive by directive (the health check, the retries on the real
engine's shutdown 500, the passive checks, the root-only admin socket, no stats page); and a real HAProxy
(``haproxy -c``, Debian's package, which ``make test`` installs) accepts it. The bytes the role writes:
tests/unit/roles/test_haproxy_template.py. What it does with traffic: tests/system/test_gateway_haproxy.py.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess

import pytest

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError

M = filter_plugin("engine_gateway")
F = M.FilterModule().filters()
fleet_of = F["engine_gateway_fleet"]
problems = F["engine_gateway_problems"]
fleet_problems = F["engine_gateway_fleet_problems"]
cfg = F["engine_gateway_haproxy_cfg"]
values_of = F["engine_gateway_haproxy_values"]
servers = F["engine_gateway_servers"]
drains = F["engine_gateway_drains"]
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

HOSTVARS = {
    "node-1": {"engine_service_models": [{"name": "qwen", "model": "Qwen/Qwen3-8B", "port": 8000},
                                         {"name": "small", "model": "x/y", "port": 8001}],
               "engine_service_host": "0.0.0.0", "ansible_host": "10.0.0.11"},
    "node-2": {"engine_service_models": [{"name": "qwen", "model": "Qwen/Qwen3-8B", "port": 8000}],
               "engine_service_host": "10.0.0.12", "engine_gateway_address": "10.0.0.12", "ansible_host": "node-2.lan"},
    "cache": {},
    "idle": {"engine_service_models": []},
    "gw": {"engine_gateway_models": [{"name": "qwen", "port": 9000}]},
}
MODELS = [{"name": "qwen", "port": 9000}, {"name": "small", "port": 9001}]


def fleet():
    return fleet_of(HOSTVARS, ["node-1", "node-2", "cache", "idle", "gw"])


def render(**values):
    return cfg(dict({"models": MODELS}, **values), fleet(), "gw")


def test_the_fleet_is_the_hosts_with_models_in_inventory_order_reached_at_their_address():
    assert fleet() == [
        {"host": "node-1", "address": "10.0.0.11", "listen": "0.0.0.0",
         "models": [{"name": "qwen", "port": 8000}, {"name": "small", "port": 8001}]},
        {"host": "node-2", "address": "10.0.0.12", "listen": "10.0.0.12", "models": [{"name": "qwen", "port": 8000}]},
    ]
    with pytest.raises(AnsibleFilterError, match="not a host of the inventory"):
        fleet_of(HOSTVARS, ["ghost"])


def test_a_model_group_is_one_server_its_leader():
    groups = [{"name": "qwen", "members": ["node-2", "node-1"], "parallel": "tensor", "network": "10.0.0.0/24"}]
    hostvars = {host: dict(variables, engine_service_model_groups=groups) for host, variables in HOSTVARS.items()}
    assert fleet_of(hostvars, ["node-1", "node-2"]) == [
        {"host": "node-1", "address": "10.0.0.11", "listen": "0.0.0.0", "models": [{"name": "small", "port": 8001}]},
        {"host": "node-2", "address": "10.0.0.12", "listen": "10.0.0.12", "models": [{"name": "qwen", "port": 8000}]},
    ]


def test_each_model_has_a_frontend_on_its_port_and_a_backend_of_every_node_that_serves_it():
    text = render()
    assert "frontend llmfleet_qwen\n    bind 0.0.0.0:9000\n    default_backend llmfleet_qwen\n" in text
    assert "frontend llmfleet_small\n    bind 0.0.0.0:9001\n" in text
    qwen = text.split("\nbackend llmfleet_qwen\n")[1].split("\nfrontend")[0]
    assert [line for line in qwen.splitlines() if line.strip().startswith("server ")] == [
        "    server node-1 10.0.0.11:8000 check", "    server node-2 10.0.0.12:8000 check"]
    small = text.split("\nbackend llmfleet_small\n")[1]
    assert [line for line in small.splitlines() if line.strip().startswith("server ")] == [
        "    server node-1 10.0.0.11:8001 check"]
    assert servers(fleet(), MODELS) == [
        {"model": "qwen", "backend": "llmfleet_qwen", "port": 9000,
         "servers": [{"name": "node-1", "address": "10.0.0.11", "port": 8000},
                     {"name": "node-2", "address": "10.0.0.12", "port": 8000}]},
        {"model": "small", "backend": "llmfleet_small", "port": 9001,
         "servers": [{"name": "node-1", "address": "10.0.0.11", "port": 8001}]},
    ]


def test_health_retries_and_passive_checks_are_the_ones_a_stopping_vllm_needs():
    text = render()
    backend = text.split("\nbackend llmfleet_qwen\n")[1].split("\nfrontend")[0]
    lines = [line.strip() for line in backend.splitlines() if not line.strip().startswith("#")]
    assert "balance leastconn" in lines
    assert "option httpchk" in lines and "http-check send meth GET uri /health" in lines
    assert "http-check expect status 200" in lines
    # vLLM 0.32.0 answers completions 500 after SIGTERM while /health says 200: retried elsewhere
    assert "retry-on conn-failure empty-response junk-response 500 503" in lines
    # without the whole request in hand HAProxy retries nothing (tests/system/test_gateway_haproxy.py)
    assert "option http-buffer-request" in lines
    assert "    tune.bufsize 65536\n" in text and "    tune.bufsize 131072\n" in render(request_buffer_kib=128)
    assert "response-timeout" not in text  # a slow generation would run twice
    assert "retries 3" in lines and "option redispatch 1" in lines
    assert ("default-server inter 2s fall 2 rise 2 maxconn 256 observe layer7 error-limit 10 on-error mark-down"
            " init-addr last,libc,none"
            in lines)
    assert "    timeout server 600s" in text and "    timeout client 600s" in text
    tuned = render(timeout_server=3600, check_interval=5, check_fall=3, retries=1, retry_on=["conn-failure"])
    assert "    timeout server 3600s" in tuned and "retry-on conn-failure\n" in tuned and "retries 1\n" in tuned
    assert "default-server inter 5s fall 3 rise 2" in tuned


def test_the_admin_socket_is_root_only_there_is_no_stats_page_and_metrics_are_prometheus():
    text = render()
    assert "    stats socket /run/llmfleet-gateway/admin.sock mode 600 level admin expose-fd listeners\n" in text
    assert "stats enable" not in text and "stats uri" not in text and "stats auth" not in text
    assert "    server-state-file /var/lib/llmfleet-gateway/servers.state\n" in text
    assert "    load-server-state-from-file global\n" in text
    metrics = text.split("frontend llmfleet_metrics\n")[1].split("\n\n")[0]
    assert "    bind 0.0.0.0:8405" in metrics
    assert "http-request use-service prometheus-exporter if { path /metrics }" in metrics
    # the exporter names every server, its address and load: the gateway itself only, unless allowed
    assert metrics.index("http-request deny deny_status 403 if !llmfleet_metrics_clients") < metrics.index("use-service")
    assert "    acl llmfleet_metrics_clients src 127.0.0.0/8 ::1/128\n" in metrics
    allowed = render(metrics_allow=["10.0.0.5", "10.1.0.0/16", "2001:db8::/64"])
    assert "    acl llmfleet_metrics_clients src 127.0.0.0/8 ::1/128 10.0.0.5/32 10.1.0.0/16 2001:db8::/64\n" in allowed
    assert "    chroot /var/lib/haproxy\n    user haproxy\n    group haproxy\n" in text


def test_a_node_the_gateway_cannot_resolve_is_one_server_in_maintenance_not_a_gateway_that_cannot_start():
    hostvars = {"n1": {"engine_service_models": [{"name": "qwen", "port": 8000}], "engine_service_host": "0.0.0.0",
                       "ansible_host": "10.0.0.1"},
                "n2.invalid": {"engine_service_models": [{"name": "qwen", "port": 8000}], "engine_service_host": "0.0.0.0"}}
    text = cfg({"models": [{"name": "qwen", "port": 9000}]}, fleet_of(hostvars, ["n1", "n2.invalid"]), "gw")
    backend = text.split("\nbackend llmfleet_qwen\n")[1]
    # every server of the backend takes the default-server line, the name one among them
    default = [line for line in backend.splitlines() if line.startswith("    default-server ")]
    assert len(default) == 1 and default[0].endswith(" init-addr last,libc,none"), default
    assert "    server n2.invalid n2.invalid:8000 check\n" in backend


def test_tls_from_a_certificate_path_on_every_model_frontend():
    text = render(tls_certificate="/etc/ssl/private/gateway.pem")
    assert "    bind 0.0.0.0:9000 ssl crt /etc/ssl/private/gateway.pem alpn http/1.1\n" in text
    assert "    bind 0.0.0.0:9001 ssl crt /etc/ssl/private/gateway.pem alpn http/1.1\n" in text
    assert "ssl-default-bind-options ssl-min-ver TLSv1.2" in text
    assert "bind 0.0.0.0:9000 ssl" not in render()
    assert "    bind [::]:9000\n" in render(bind="::")


def test_the_templates_values_are_plain_data_checked_and_normalised():
    # what a play hands the filter: numbers as strings (-e), an address and a network not in their usual form
    found = values_of({"models": [{"name": "qwen", "port": "9000"}], "bind": "0:0::0", "timeout_connect": " 7",
                       "metrics_allow": ["10.1.2.3/16", "2001:DB8::5"], "retry_on": ["conn-failure", 503],
                       "tls_certificate": "/etc/ssl/private/gateway.pem", "request_buffer_kib": "128"},
                      fleet_of(dict(HOSTVARS, v6={"engine_service_models": [{"name": "qwen", "port": 8000}],
                                                  "engine_service_host": "::", "engine_gateway_address": "2001:db8::7"}),
                               ["node-1", "v6"]), "gw")
    assert found == {
        "maxconn": 4096, "socket": "/run/llmfleet-gateway/admin.sock", "state_file": "/var/lib/llmfleet-gateway/servers.state",
        "hard_stop_after": 3600, "bufsize": 131072, "timeout_connect": 7, "timeout_client": 600, "timeout_server": 600,
        "timeout_queue": 60, "metrics_bind": "[::]:8405",
        "metrics_clients": ["127.0.0.0/8", "::1/128", "10.1.0.0/16", "2001:db8::5/128"],
        "tls_certificate": "/etc/ssl/private/gateway.pem", "retry_on": ["conn-failure", "503"], "retries": 3,
        "check_interval": 2, "check_fall": 2, "check_rise": 2, "server_maxconn": 256, "error_limit": 10,
        "models": [{"backend": "llmfleet_qwen", "bind": "[::]:9000",
                    "servers": [{"name": "node-1", "address": "10.0.0.11:8000"},
                                {"name": "v6", "address": "[2001:db8::7]:8000"}]}],
    }
    # nothing the template could call or iterate in a way of its own: JSON's types only
    assert json.loads(json.dumps(found)) == found


@pytest.mark.parametrize("value", ["/run/a b.sock", "/run/x.sock\n    stats enable", "/run/x#y", "/run/'x'", "/run/x\\y",
                                   "/run/\u00e9"])
def test_a_value_a_check_forgot_still_cannot_reach_the_template(monkeypatch, value):
    # the paths' check, as if a later change had made it let anything through: the last gate of
    # engine_gateway_haproxy_values still refuses what HAProxy would not read as one word
    monkeypatch.setattr(M, "_WORD_RE", re.compile(".+", re.S))
    assert problems({"models": MODELS, "socket": value}) == []
    with pytest.raises(AnsibleFilterError, match="engine_gateway_haproxy_values: values.socket is .*not read as one word"):
        values_of({"models": MODELS, "socket": value}, fleet(), "gw")
    for other in (True, None, 1.5, ["a b"]):
        with pytest.raises(AnsibleFilterError, match=r"values.models\[0\].bind(\[0\])? is"):
            M._printable({"models": [{"bind": other}]})


@pytest.mark.parametrize("key, value, variable", [
    ("bind", "0.0.0.0\n    stats enable", "engine_gateway_bind"),
    ("bind", "10.0.0.1 # x", "engine_gateway_bind"),
    ("bind", "gateway.lan", "engine_gateway_bind"),
    ("socket", "/run/x.sock mode 666", "engine_gateway_socket"),
    ("socket", "relative.sock", "engine_gateway_socket"),
    ("state_file", "/var/lib/x#y", "engine_gateway_state_file"),
    ("tls_certificate", "/etc/ssl/a b.pem", "engine_gateway_tls_certificate"),
    ("tls_certificate", "/etc/ssl/a.pem\n    stats enable", "engine_gateway_tls_certificate"),
    ("timeout_server", "600s", "engine_gateway_timeout_server"),
    ("timeout_server", 0, "engine_gateway_timeout_server"),
    ("retries", True, "engine_gateway_retries"),
    ("metrics_port", 70000, "engine_gateway_metrics_port"),
    ("retry_on", ["conn-failure", "all-retryable-errors"], "engine_gateway_retry_on"),
    ("retry_on", "500", "engine_gateway_retry_on"),
    # a bare "retry-on" line, which haproxy -c refuses ("needs at least one keyword")
    ("retry_on", [], "engine_gateway_retry_on"),
    ("metrics_allow", ["10.0.0.0/24", "everyone"], "engine_gateway_metrics_allow"),
    ("metrics_allow", "10.0.0.5", "engine_gateway_metrics_allow"),
    ("metrics_allow", ["10.0.0.5 # x"], "engine_gateway_metrics_allow"),
])
def test_a_bad_value_is_refused_naming_its_variable_and_value(key, value, variable):
    found = problems({"models": MODELS, key: value})
    assert len(found) == 1 and found[0].startswith(variable + " is "), found
    assert json.dumps(value, sort_keys=True) in found[0]
    with pytest.raises(AnsibleFilterError, match=variable):
        render(**{key: value})
    with pytest.raises(AnsibleFilterError, match="engine_gateway_haproxy_values: .*" + variable):
        values_of(dict({"models": MODELS}, **{key: value}), fleet(), "gw")


@pytest.mark.parametrize("models, expected", [
    ([], "engine_gateway_models is []"),
    ([{"name": "qwen"}], "engine_gateway_models[0].port is null"),
    ([{"name": "Qwen", "port": 9000}], 'engine_gateway_models[0].name is "Qwen"'),
    ([{"name": "qwen\nx", "port": 9000}], "engine_gateway_models[0].name is"),
    ([{"name": "qwen", "port": 9000}, {"name": "qwen", "port": 9001}], "already engine_gateway_models[0]"),
    ([{"name": "qwen", "port": 9000}, {"name": "small", "port": 9000}], "port is 9000, already the port of engine_gateway_models[0]"),
    ([{"name": "qwen", "port": 8405}], "already the port of engine_gateway_metrics_port"),
    ([{"name": "qwen", "port": 9000, "path": "/x"}], "has path, allowed keys: name, port"),
    ("qwen", "engine_gateway_models is \"qwen\""),
])
def test_bad_models_are_refused_naming_the_entry(models, expected):
    found = problems({"models": models})
    assert any(expected in problem for problem in found), found


def test_unknown_keys_are_named():
    assert problems({"models": MODELS, "stats": True}) == [
        "unknown keys stats, allowed: %s" % ", ".join(sorted(M.DEFAULTS))]


def test_a_node_the_gateway_cannot_reach_or_name_and_a_model_nobody_serves_fail_the_gateway():
    hostvars = {"n1": {"engine_service_models": [{"name": "qwen", "port": 8000}], "ansible_host": "10.0.0.1"},
                "bad name": {"engine_service_models": [{"name": "qwen", "port": 8000}]},
                "n3": {"engine_service_models": [{"name": "qwen", "port": 8000}], "ansible_host": "10.0.0.3 # x",
                       "engine_service_host": "0.0.0.0"}}
    found = fleet_problems(fleet_of(hostvars, ["n1", "bad name", "n3"]), [{"name": "qwen", "port": 9000},
                                                                          {"name": "gone", "port": 9001}])
    assert found == [
        "host n1: vLLM listens on 127.0.0.1 (engine_service_host), which the gateway cannot reach at 10.0.0.1; set "
        "engine_service_host to an address the gateway reaches (0.0.0.0, or the node's)",
        'host "bad name": its inventory name cannot name an HAProxy server (allowed: 1-64 of letters, digits and _.:-)',
        'host n3: its address "10.0.0.3 # x" (engine_gateway_address, else ansible_host) is not an IP address or a host name',
        'engine_gateway_models names "gone", which no host of the fleet serves (engine_service_models of: n1, bad name, n3)',
    ]
    with pytest.raises(AnsibleFilterError, match="no host of the fleet serves"):
        cfg({"models": [{"name": "gone", "port": 9001}]}, fleet(), "gw")
    # a node reached on the loopback (the gateway on the node itself) may serve on the loopback
    local = {"n1": {"engine_service_models": [{"name": "qwen", "port": 8000}], "engine_gateway_address": "127.0.0.1"}}
    assert fleet_problems(fleet_of(local, ["n1"]), [{"name": "qwen", "port": 9000}]) == []
    # the values' own problems are engine_gateway_problems'
    assert fleet_problems(fleet(), "qwen") == []


def test_a_rollout_drains_the_servers_of_the_units_that_stop_on_the_gateways_that_front_them():
    hostvars = dict(HOSTVARS, gw2={"engine_gateway_models": [{"name": "small", "port": 9001}],
                                   "engine_gateway_socket": "/run/gw2.sock"},
                    gw3={"engine_gateway_models": [{"name": "qwen", "port": 9000}], "engine_gateway_fleet": ["node-2"]})
    units = ["llmfleet-vllm-qwen.service", "llmfleet-vllm-small.service"]
    assert drains(hostvars, ["gw", "gw2", "gw3"], "node-1", units) == [
        {"gateway": "gw", "socket": "/run/llmfleet-gateway/admin.sock", "servers": ["llmfleet_qwen/node-1"],
         "state_file": "/var/lib/llmfleet-gateway/servers.state",
         "mark": "/var/lib/llmfleet-gateway/rollout-drained.json"},
        {"gateway": "gw2", "socket": "/run/gw2.sock", "servers": ["llmfleet_small/node-1"],
         "state_file": "/var/lib/llmfleet-gateway/servers.state",
         "mark": "/var/lib/llmfleet-gateway/rollout-drained.json"},
    ]
    # gw3 fronts node-2 only
    assert drains(hostvars, ["gw3"], "node-2", units) == [
        {"gateway": "gw3", "socket": "/run/llmfleet-gateway/admin.sock", "servers": ["llmfleet_qwen/node-2"],
         "state_file": "/var/lib/llmfleet-gateway/servers.state",
         "mark": "/var/lib/llmfleet-gateway/rollout-drained.json"}]
    # what site.yml reads once per gateway: every gateway, its socket and the rollout's record
    assert [(d["gateway"], d["socket"], d["mark"], d["servers"]) for d in drains(hostvars, ["gw", "gw2"], None, None)] == [
        ("gw", "/run/llmfleet-gateway/admin.sock", "/var/lib/llmfleet-gateway/rollout-drained.json", []),
        ("gw2", "/run/gw2.sock", "/var/lib/llmfleet-gateway/rollout-drained.json", [])]
    assert drains(hostvars, [], "node-1", units) == []
    assert drains(hostvars, ["gw2"], "node-1", ["llmfleet-vllm-qwen.service"]) == []
    # a follower of a model group has no server to drain for the group's model; its leader has
    groups = [{"name": "qwen", "members": ["node-2", "node-1"], "parallel": "tensor", "network": "10.0.0.0/24"}]
    grouped = {host: dict(variables, engine_service_model_groups=groups) for host, variables in hostvars.items()}
    assert [d["servers"] for d in drains(grouped, ["gw", "gw2"], "node-1", units)] == [["llmfleet_small/node-1"]]
    assert [d["servers"] for d in drains(grouped, ["gw3"], "node-2", units)] == [["llmfleet_qwen/node-2"]]
    with pytest.raises(AnsibleFilterError, match="the gateway \"ghost\" is not a host"):
        drains(hostvars, ["ghost"], "node-1", units)


def self_signed_pem():
    """A certificate for CN=gw and its key, in one PEM (what engine_gateway_tls_certificate names)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gw")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@pytest.mark.parametrize("values", [
    {},
    {"tls_certificate": "SNAKEOIL", "bind": "127.0.0.1", "timeout_server": 86400, "retry_on": ["conn-failure", "503"],
     "metrics_allow": ["10.0.0.0/24", "2001:db8::5"]},
    {"bind": "::", "retries": 0, "check_interval": 1, "check_fall": 1, "check_rise": 1},
])
def test_haproxy_accepts_what_is_rendered(tmp_path, values):
    values = dict(values, socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "servers.state"))
    if values.get("tls_certificate") == "SNAKEOIL":
        pem = tmp_path / "gateway.pem"
        pem.write_bytes(self_signed_pem())
        values["tls_certificate"] = str(pem)
    path = tmp_path / "haproxy.cfg"
    path.write_text(render(**values))
    checked = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Configuration file is valid" in checked.stdout + checked.stderr


def test_haproxy_starts_with_a_node_it_cannot_resolve_and_names_that_server(tmp_path):
    # an inventory name (the address by default) the gateway's resolver does not know (.invalid never resolves)
    hostvars = dict(HOSTVARS, **{"n3.invalid": {"engine_service_models": [{"name": "qwen", "port": 8000}],
                                                "engine_service_host": "0.0.0.0"}})
    text = cfg({"models": MODELS, "socket": str(tmp_path / "admin.sock"), "state_file": str(tmp_path / "servers.state")},
               fleet_of(hostvars, ["node-1", "node-2", "n3.invalid"]), "gw")
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    checked = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "'server llmfleet_qwen/n3.invalid' : could not resolve address 'n3.invalid'" in checked.stderr, checked.stderr
