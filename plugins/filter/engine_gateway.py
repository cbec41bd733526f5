# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_gateway role's HAProxy, as filters: the fleet's servers read from the inventory
(``engine_gateway_fleet``), the problems of the gateway's values (``engine_gateway_problems``), and the values of
the HAProxy configuration (``engine_gateway_haproxy_values``), each one let through only when those problems find
nothing wrong with it, so that the role's template (``roles/engine_gateway/templates/haproxy.cfg.j2``) only prints
them and no value can add a directive of its own; the configuration's text as that template renders it
(``engine_gateway_haproxy_cfg``, for the tests and the bench).

What HAProxy does with it: tests/unit/plugins/filter/test_engine_gateway.py (``haproxy -c`` of the rendered
text), tests/unit/roles/test_haproxy_template.py (the bytes the role writes), tests/system/test_gateway_haproxy.py
(a real haproxy before fake engines, drained through its admin socket while a client sends requests).
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import ipaddress
import json
import pathlib
import posixpath
import re

import jinja2

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.plugin_utils import _service_groups

# Each value that reaches the configuration: no whitespace, quote, "#" or backslash (HAProxy would read
# the rest of the line as another word, a comment or an escape).
_WORD_RE = re.compile(r"[A-Za-z0-9._:/@+=-]+")
_HOST_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")
# HAProxy's proxy and server names
_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# engine_service_models[].name
_MODEL_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")
BACKEND_PREFIX = "llmfleet_"
# What is retried on another server, and why (docs/gateway.md): a connection refused or reset, an empty
# or garbled answer (a server that stopped), and 500/503 - vLLM (0.32.0) answers every completion 500 for
# several seconds after SIGTERM while /health still answers 200. Never a timeout: a slow generation would run
# twice. HAProxy retries only before any byte of the answer went to the client.
RETRY_ON = ("conn-failure", "empty-response", "junk-response", "500", "503")
RETRY_ON_ALLOWED = ("conn-failure", "empty-response", "junk-response", "response-timeout", "0rtt-rejected",
                    "404", "408", "425", "500", "501", "502", "503", "504")

DEFAULTS = {
    "models": [],
    "bind": "0.0.0.0",
    "socket": "/run/llmfleet-gateway/admin.sock",
    "state_file": "/var/lib/llmfleet-gateway/servers.state",
    "metrics_port": 8405,
    "metrics_allow": [],
    "tls_certificate": "",
    "timeout_connect": 5,
    "timeout_client": 600,
    "timeout_server": 600,
    "timeout_queue": 60,
    "maxconn": 4096,
    "server_maxconn": 256,
    "check_interval": 2,
    "check_fall": 2,
    "check_rise": 2,
    "error_limit": 10,
    "retries": 3,
    "retry_on": list(RETRY_ON),
    "hard_stop_after": 3600,
    "request_buffer_kib": 64,
}
VARIABLES = {key: "engine_gateway_" + key for key in DEFAULTS}


def _json(value):
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _whole(value, low, high):
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if low <= number <= high else None


def _address(value):
    """An IP address (v4 or v6, no zone) or ``*``; None when it is not one."""
    text = str(value)
    if text == "*":
        return text
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _network(value):
    """An IP address or network (``10.0.0.0/24``), as HAProxy's ``src`` takes it; None when it is not one."""
    if not isinstance(value, str) or "/" in value and not value.split("/", 1)[1].isdigit():
        return None
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        return None


# Who reads the exporter when engine_gateway_metrics_allow is empty: the gateway itself (a Prometheus there,
# or an SSH tunnel). The metrics name every server, its address and its load: not for anyone on the network.
METRICS_LOOPBACK = ("127.0.0.0/8", "::1/128")


def _bind(address, port):
    return ("[%s]:%d" % (address, port)) if ":" in address else ("%s:%d" % (address, port))


def engine_gateway_problems(values):
    """Every problem of the gateway's own values (``values``: the keys of DEFAULTS, missing ones default), each
    naming the variable, the value and what is allowed; [] when none."""
    values = dict(values or {})
    out = []
    unknown = sorted(str(key) for key in values if key not in DEFAULTS)
    if unknown:
        out.append("unknown keys %s, allowed: %s" % (", ".join(unknown), ", ".join(sorted(DEFAULTS))))
    merged = dict(DEFAULTS, **{k: v for k, v in values.items() if k in DEFAULTS})
    for key, (low, high) in {"metrics_port": (1, 65535), "timeout_connect": (1, 3600), "timeout_client": (1, 604800),
                             "timeout_server": (1, 604800), "timeout_queue": (1, 3600), "maxconn": (1, 1000000),
                             "server_maxconn": (1, 100000), "check_interval": (1, 3600), "check_fall": (1, 100),
                             "check_rise": (1, 100), "error_limit": (1, 100000), "retries": (0, 10),
                             "hard_stop_after": (1, 604800), "request_buffer_kib": (16, 1024)}.items():
        if _whole(merged[key], low, high) is None:
            out.append("%s is %s, allowed: a whole number from %d to %d" % (VARIABLES[key], _json(merged[key]), low, high))
    if _address(merged["bind"]) is None:
        out.append("%s is %s, allowed: an IP address the gateway listens on (0.0.0.0, ::, 10.0.0.5) or *"
                   % (VARIABLES["bind"], _json(merged["bind"])))
    for key in ("socket", "state_file"):
        value = merged[key]
        if not isinstance(value, str) or not value.startswith("/") or not _WORD_RE.fullmatch(value):
            out.append("%s is %s, allowed: an absolute path of letters, digits and ._:/@+=-"
                       % (VARIABLES[key], _json(value)))
    cert = merged["tls_certificate"]
    if cert not in ("", None) and (not isinstance(cert, str) or not cert.startswith("/") or not _WORD_RE.fullmatch(cert)):
        out.append("%s is %s, allowed: empty (no TLS), or the absolute path of a PEM file with the certificate and "
                   "its key on the gateway (letters, digits and ._:/@+=-)" % (VARIABLES["tls_certificate"], _json(cert)))
    retry_on = merged["retry_on"]
    # an empty list would render a bare "retry-on", which haproxy -c refuses: no retry is retries: 0
    if not isinstance(retry_on, list) or not retry_on or any(str(item) not in RETRY_ON_ALLOWED for item in retry_on):
        out.append("%s is %s, allowed: a list of at least one of %s (no retry at all: engine_gateway_retries: 0)"
                   % (VARIABLES["retry_on"], _json(retry_on), ", ".join(RETRY_ON_ALLOWED)))
    allow = merged["metrics_allow"]
    if not isinstance(allow, list) or any(_network(item) is None for item in allow):
        out.append("%s is %s, allowed: a list of IP addresses or networks (10.0.0.5, 10.0.0.0/24, 2001:db8::/64) that "
                   "may read the metrics besides the gateway itself; empty: the gateway itself only"
                   % (VARIABLES["metrics_allow"], _json(allow)))
    out.extend(_model_problems(merged["models"], _whole(merged["metrics_port"], 1, 65535)))
    return out


def _model_problems(models, metrics_port):
    out = []
    if not isinstance(models, list) or not models:
        return ["engine_gateway_models is %s, allowed: a list of at least one {name: <a model name the fleet serves>, "
                "port: <the gateway's port for it>}" % _json(models)]
    names, ports = {}, {}
    for index, entry in enumerate(models):
        item = "engine_gateway_models[%d]" % index
        if not isinstance(entry, dict):
            out.append("%s is %s, allowed: {name, port}" % (item, _json(entry)))
            continue
        unknown = sorted(str(k) for k in entry if k not in ("name", "port"))
        if unknown:
            out.append("%s has %s, allowed keys: name, port" % (item, ", ".join(unknown)))
        name, port = entry.get("name"), _whole(entry.get("port"), 1, 65535)
        if not isinstance(name, str) or not _MODEL_RE.fullmatch(name):
            out.append("%s.name is %s, allowed: a model name of engine_service_models (1-48 of a-z, 0-9 and -)"
                       % (item, _json(name)))
        elif name in names:
            out.append("%s.name is %s, already engine_gateway_models[%d]" % (item, _json(name), names[name]))
        else:
            names[name] = index
        if port is None:
            out.append("%s.port is %s, allowed: a whole number from 1 to 65535" % (item, _json(entry.get("port"))))
        elif port in ports or port == metrics_port:
            out.append("%s.port is %d, already the port of %s" % (
                item, port, ("engine_gateway_models[%d]" % ports[port]) if port in ports else "engine_gateway_metrics_port"))
        else:
            ports[port] = index
    return out


def engine_gateway_fleet(hostvars, hosts):
    """The serving nodes among ``hosts`` (inventory names), read from ``hostvars``: a list of ``{host, address,
    listen, models: [{name, port}]}``, for the hosts whose engine_service_models is a non-empty list, in the order
    of ``hosts``; a model group's model (engine_service_model_groups) only on its leader. ``address`` is the host's
    ``engine_gateway_address``, else its ``ansible_host``, else its name; ``listen`` its engine_service_host (where
    vLLM listens; 127.0.0.1 by default)."""
    out = []
    for host in hosts or []:
        try:
            variables = hostvars[host]
        except KeyError:
            raise AnsibleFilterError("engine_gateway_fleet: %s is not a host of the inventory" % _json(host))
        models = variables.get("engine_service_models") or []
        if not isinstance(models, list) or not models:
            continue
        followed = _service_groups.followed(variables.get("engine_service_model_groups"), host)
        models = [m for m in models if not (isinstance(m, dict) and m.get("name") in followed)]
        if not models:
            continue
        address = variables.get("engine_gateway_address") or variables.get("ansible_host") or host
        out.append({
            "host": str(host),
            "address": str(address),
            "listen": str(variables.get("engine_service_host") or "127.0.0.1"),
            "models": [{"name": m.get("name"), "port": m.get("port")} for m in models if isinstance(m, dict)],
        })
    return out


def _fleet_problems(fleet, models, gateway_host):
    out = []
    served = {}
    for node in fleet:
        host, address = node["host"], node["address"]
        if not _NAME_RE.fullmatch(host):
            out.append("host %s: its inventory name cannot name an HAProxy server (allowed: 1-64 of letters, digits and "
                       "_.:-)" % _json(host))
            continue
        if _CONTROL_RE.search(address) or not (_address(address) not in (None, "*") or _HOST_RE.fullmatch(address)):
            out.append("host %s: its address %s (engine_gateway_address, else ansible_host) is not an IP address or a "
                       "host name" % (host, _json(address)))
            continue
        loopback = _loopback(node["listen"])
        if loopback and not _loopback(address) and gateway_host != host:
            out.append("host %s: vLLM listens on %s (engine_service_host), which the gateway cannot reach at %s; set "
                       "engine_service_host to an address the gateway reaches (0.0.0.0, or the node's)"
                       % (host, node["listen"], address))
        for model in node["models"]:
            if _whole(model.get("port"), 1, 65535) is None:
                continue  # engine_service's own checks name it on that host
            served.setdefault(model.get("name"), []).append((host, address, int(model["port"])))
    for entry in models:
        if entry.get("name") not in served:
            out.append("engine_gateway_models names %s, which no host of the fleet serves (engine_service_models of: "
                       "%s)" % (_json(entry.get("name")), ", ".join(node["host"] for node in fleet) or "no host"))
    return out, served


def engine_gateway_fleet_problems(fleet, models, gateway_host=None):
    """The problems of the fleet's servers for the gateway (engine_gateway_fleet's ``fleet``): a node the gateway
    cannot name or reach, a model of ``models`` (engine_gateway_models) that no node serves; [] when none, and
    when ``models`` itself is not a list of mappings (engine_gateway_problems names that)."""
    if not isinstance(models, list) or not all(isinstance(entry, dict) for entry in models):
        return []
    return _fleet_problems(fleet, models, gateway_host)[0]


def _loopback(address):
    try:
        return ipaddress.ip_address(str(address)).is_loopback
    except ValueError:
        return str(address) == "localhost"


def engine_gateway_servers(fleet, models):
    """The servers of each model the gateway fronts: ``[{model, backend, port, servers: [{name, address, port}]}]``,
    ``name`` the node's inventory name (``<backend>/<name>`` is what haproxy_server drains)."""
    _problems, served = _fleet_problems(fleet, models, None)
    return [{"model": entry["name"], "backend": BACKEND_PREFIX + entry["name"], "port": int(entry["port"]),
             "servers": [{"name": host, "address": address, "port": port}
                         for host, address, port in served.get(entry["name"], [])]}
            for entry in models]


# The numbers of the configuration, each checked by engine_gateway_problems as a whole number in its range.
_NUMBERS = ("metrics_port", "timeout_connect", "timeout_client", "timeout_server", "timeout_queue", "maxconn",
            "server_maxconn", "check_interval", "check_fall", "check_rise", "error_limit", "retries", "hard_stop_after",
            "request_buffer_kib")
# What the template may print: words HAProxy reads as one (an IPv6 address in brackets, "*" for any address).
_PRINTABLE_RE = re.compile(r"[A-Za-z0-9._:/@+=\[\]*-]+")


def _printable(value, where="values"):
    """``value`` as it is when every string in it is one word of _PRINTABLE_RE and every number a whole one; else
    AnsibleFilterError. The last gate before the template: a value some future check forgets still cannot end a
    line, start a comment or add a word."""
    if isinstance(value, dict):
        return {key: _printable(item, "%s.%s" % (where, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable(item, "%s[%d]" % (where, index)) for index, item in enumerate(value)]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (value == "" or _PRINTABLE_RE.fullmatch(value)):
        return value
    raise AnsibleFilterError("%s is %s, which HAProxy would not read as one word" % (where, _json(value)))


def _haproxy_values(name, values, fleet, gateway_host):
    """engine_gateway_haproxy_values' result; ``name``, the filter called, starts each error."""
    problems = engine_gateway_problems(values)
    merged = dict(DEFAULTS, **dict(values or {}))
    if not problems:
        fleet_problems, served = _fleet_problems(fleet, merged["models"], gateway_host)
        problems += fleet_problems
    if problems:
        raise AnsibleFilterError("%s: %s" % (name, "; ".join(problems)))
    n = {key: int(str(merged[key]).strip()) for key in _NUMBERS}
    bind = _address(merged["bind"])
    out = {key: n[key] for key in _NUMBERS if key not in ("metrics_port", "request_buffer_kib")}
    out.update({
        "socket": merged["socket"],
        "state_file": merged["state_file"],
        "bufsize": n["request_buffer_kib"] * 1024,
        "metrics_bind": _bind(bind, n["metrics_port"]),
        "metrics_clients": list(METRICS_LOOPBACK) + [_network(item) for item in merged["metrics_allow"]],
        "tls_certificate": merged["tls_certificate"] or "",
        "retry_on": [str(item) for item in merged["retry_on"]],
        "models": [{
            "backend": BACKEND_PREFIX + entry["name"],
            "bind": _bind(bind, int(str(entry["port"]).strip())),
            # an IP address as HAProxy takes it with a port (IPv6 in brackets), a name as it is
            "servers": [{"name": host, "address": _bind(address, port) if _address(address) else "%s:%d" % (address, port)}
                        for host, address, port in served[entry["name"]]],
        } for entry in merged["models"]],
    })
    return _printable(out, name + ": values")


def engine_gateway_haproxy_values(values, fleet, gateway_host=None):
    """What the role's template (``roles/engine_gateway/templates/haproxy.cfg.j2``) prints in the gateway's HAProxy
    configuration, from ``values`` (engine_gateway_problems' keys) and ``fleet`` (engine_gateway_fleet): every value
    checked as engine_gateway_problems and engine_gateway_fleet_problems check it (AnsibleFilterError listing every
    problem), numbers as ints, addresses and networks normalised, binds and servers as ``<address>:<port>``; the
    template computes nothing."""
    return _haproxy_values("engine_gateway_haproxy_values", values, fleet, gateway_host)


# The role's template, as its task renders it (ansible.builtin.template's defaults: trim_blocks, no lstrip_blocks,
# the template's last newline kept).
_TEMPLATES = pathlib.Path(__file__).resolve().parents[2] / "roles" / "engine_gateway" / "templates"


def engine_gateway_haproxy_cfg(values, fleet, gateway_host=None):
    """The whole HAProxy configuration of the gateway as text: ``templates/haproxy.cfg.j2`` rendered with
    ``engine_gateway_haproxy_values(values, fleet, gateway_host)``, the bytes the role writes (for the tests, the
    bench and a playbook of its own). Raises AnsibleFilterError listing every problem."""
    checked = _haproxy_values("engine_gateway_haproxy_cfg", values, fleet, gateway_host)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), trim_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    return env.get_template("haproxy.cfg.j2").render({"__engine_gateway_haproxy": checked})


def engine_gateway_drains(hostvars, gateways, host, units):
    """What ``host``'s rollout drains on each gateway: for each of ``gateways`` (inventory names) whose
    engine_gateway_fleet holds ``host``, ``{gateway, socket, servers}`` with ``servers`` the ``<backend>/<host>`` of
    the models of ``units`` (``llmfleet-vllm-<name>.service``) that the gateway fronts, and the gateway's state file
    (saved after each change, so that a reload of the gateway keeps a drain) and the record of the rollout's drains
    (``mark``); gateways with none left out, and a model ``host`` serves as a model group's follower (it has no server
    there). ``host`` None: every gateway of ``gateways``, ``servers`` empty."""
    names = []
    for unit in units or []:
        unit = str(unit)
        if unit.startswith("llmfleet-vllm-") and unit.endswith(".service"):
            names.append(unit[len("llmfleet-vllm-"):-len(".service")])
    if host is not None and host in hostvars:
        followed = _service_groups.followed(hostvars[host].get("engine_service_model_groups"), host)
        names = [name for name in names if name not in followed]
    out = []
    for gateway in gateways or []:
        try:
            variables = hostvars[gateway]
        except KeyError:
            raise AnsibleFilterError("engine_gateway_drains: the gateway %s is not a host of the inventory" % _json(gateway))
        fleet = variables.get("engine_gateway_fleet")
        if host is not None and fleet is not None and host not in fleet:
            continue
        fronted = {entry.get("name") for entry in variables.get("engine_gateway_models") or [] if isinstance(entry, dict)}
        servers = ["%s%s/%s" % (BACKEND_PREFIX, name, host) for name in names if name in fronted]
        # host None: every gateway, with no server (what site.yml reads once per gateway)
        if servers or host is None:
            state_file = str(variables.get("engine_gateway_state_file") or DEFAULTS["state_file"])
            out.append({"gateway": str(gateway), "socket": str(variables.get("engine_gateway_socket") or DEFAULTS["socket"]),
                        "state_file": state_file, "mark": mark_file(state_file), "servers": servers})
    return out


def mark_file(state_file):
    """The record of the servers a rollout drained (haproxy_server's ``mark``), beside the gateway's state file
    (the directory engine_gateway makes root's alone)."""
    return posixpath.join(posixpath.dirname(state_file) or "/", "rollout-drained.json")


class FilterModule:
    """llmfleet.engines filters for the engine_gateway role's HAProxy."""

    def filters(self):
        return {
            "engine_gateway_problems": engine_gateway_problems,
            "engine_gateway_fleet": engine_gateway_fleet,
            "engine_gateway_fleet_problems": engine_gateway_fleet_problems,
            "engine_gateway_servers": engine_gateway_servers,
            "engine_gateway_haproxy_cfg": engine_gateway_haproxy_cfg,
            "engine_gateway_haproxy_values": engine_gateway_haproxy_values,
            "engine_gateway_drains": engine_gateway_drains,
        }
