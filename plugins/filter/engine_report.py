# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filters of ``playbooks/report.yml`` (the fleet's report): how each node's packages drift
from those of its peers and how its engine differs from the one its inventory wants
(``engine_report_drift``), the report's serving table (``engine_report_serving``: the problems it names,
a unit failed or restarted, a GPU the unit was given that the node no longer lists, a commit other than
the pinned one), the Prometheus ``file_sd`` targets of every unit's ``/metrics``
and of each gateway's HAProxy exporter (``engine_report_targets``), the gateways' servers and their states
(``engine_report_gateways``) and the text of one cell of its Markdown table (``engine_report_md_cell``).

The units themselves are read back by ``engine_service_state`` (``engine_service_status.py``). Unit tests:
``tests/unit/plugins/filter/test_serving_filter.py``, ``test_node_report_filter.py``. Documentation: one
``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.filter.engine_gateway import DEFAULTS as GATEWAY_DEFAULTS
from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_checks import _dict, _text


def _kept_fallback(node):
    """Whether auto keeps the build it fell back to on this node, as the role does (``look.yml``): a note
    of the wanted version says the wanted build failed its GPU check and the build ``current`` points to
    computes, and the node's driver and GPUs are still those the note names."""
    if node.get("requested") != "auto":
        return False
    uuids = [g.get("uuid") for g in node.get("gpus") or [] if isinstance(g, dict)]
    for note in node.get("fallback_notes") or []:
        if (isinstance(note, dict) and _text(note.get("version")) == _text(node.get("wanted_version"))
                and note.get("from") == node.get("wanted") and note.get("to") == node.get("effective")
                and _text(note.get("driver_version")) == _text(node.get("driver_version"))
                and list(note.get("gpus") or []) == uuids):
            return True
    return False


def _off_wanted(node):
    """How the engine this node runs (``current``, ``version``, ``effective``) differs from the one its
    inventory wants (``wanted_version``, ``wanted``), or None. A node whose wanted build is none is not
    judged: the role installs nothing there and leaves what is on disk."""
    if node.get("error") is not None or "wanted_version" not in node:
        return None
    version, build = _text(node.get("wanted_version")), _text(node.get("wanted"))
    if build == "none":
        return None
    judged = build not in ("", "unknown")
    wants = "%s (%s)" % (version, build) if judged else version
    if not node.get("current"):
        return "runs nothing, the inventory wants %s" % wants
    if _text(node.get("version")) == version and (not judged or node.get("effective") == build
                                                  or _kept_fallback(node)):
        return None
    return "runs %s, the inventory wants %s" % (_text(node.get("current")), wants)


def engine_report_drift(nodes):
    """The report's nodes, each with ``lock_sha256`` (of the environment ``current`` points to),
    ``drift``: null, or why this node's packages differ from those of the other nodes that run the
    same environment on the same architecture (their locks differ), and ``off_wanted``: null, or how
    the engine it runs differs from the one its inventory wants (another version or build)."""
    if not isinstance(nodes, list):
        raise AnsibleFilterError("engine_report_drift: the input (the report's nodes) must be a list")
    current = {}
    for node in nodes:
        node = _dict(node, "engine_report_drift: a node")
        env = [e for e in node.get("environments") or [] if isinstance(e, dict) and e.get("current")]
        current[node.get("host")] = env[0] if env else None
    groups = {}
    for node in nodes:
        env = current[node.get("host")]
        if env and env.get("lock_sha256"):
            groups.setdefault((env.get("name"), node.get("architecture")), []).append((node.get("host"), env["lock_sha256"]))
    out = []
    for node in nodes:
        env = current[node.get("host")]
        sha = env.get("lock_sha256") if env else None
        drift = None
        if sha:
            group = groups[(env.get("name"), node.get("architecture"))]
            others = sorted("%s (%s)" % (host, other[:12]) for host, other in group if other != sha)
            if others:
                drift = "%s on %s: this node's lock is %s, but %s %s another" % (
                    _text(env.get("name")), _text(node.get("architecture")), sha[:12], ", ".join(others),
                    "runs" if len(others) == 1 else "run")
        out.append(dict(node, lock_sha256=sha, drift=drift, off_wanted=_off_wanted(node)))
    return out


# The metrics the alert rules of docs/vllm-alerts.yml use (vLLM >= 0.11: kv_cache_usage_perc replaced
# gpu_cache_usage_perc, which 0.12 removed), and the fake `vllm serve` serves.
ALERT_METRICS = ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket")
_LOOPBACK = re.compile(r"^(127\.[0-9.]+|::1|localhost)$")
_ANY = ("0.0.0.0", "::", "")
_GPU_UUID = re.compile(r"^(GPU|MIG)-", re.I)
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")


def _target(address, listen, port):
    """The address Prometheus scrapes (``host:port``), or None when the unit listens on loopback only."""
    if port is None or _LOOPBACK.match(str(listen)):
        return None
    host = address if listen in _ANY else listen
    host = str(host)
    return "%s:%d" % ("[%s]" % host if ":" in host and not host.startswith("[") else host, port)


def _gate_text(gate):
    if not isinstance(gate, dict):
        return "none recorded"
    one = gate.get("completion_ms")
    token = ", one token %.0f ms" % one if isinstance(one, (int, float)) else ""
    seconds = gate.get("ready_s")
    at = gate.get("at") or "?"
    if not gate.get("ready"):
        return "not ready (%s of %s, %s)" % (gate.get("stage"), gate.get("environment"), at)
    if gate.get("stage") == "steady":
        up = " (up %.0f s)" % seconds if isinstance(seconds, (int, float)) else ""
        return "serving at %s%s%s" % (at, up, token)
    ready = "ready %.1f s after its start" % seconds if isinstance(seconds, (int, float)) else "ready"
    return "%s%s (%s of %s, %s)" % (ready, token, gate.get("stage"), gate.get("environment"), at)


def _gpu_problems(unit, gpus):
    """The GPUs a unit was given (CUDA_VISIBLE_DEVICES) that the node's probe no longer lists."""
    given = unit.get("gpus")
    if not given or gpus is None:
        return []
    uuids = {str(g.get("uuid")) for g in gpus if isinstance(g, dict) and g.get("uuid")}
    out = []
    for gpu in given:
        if _GPU_UUID.match(gpu):
            if gpu not in uuids and not any(u.startswith(gpu) for u in uuids):
                out.append("it was given %s, which the node no longer lists (the GPU disappeared or was replaced)"
                           % gpu)
        elif re.match(r"^[0-9]+$", gpu) and int(gpu) >= len(gpus):
            out.append("it was given GPU %s, but the node lists %d GPU%s" % (gpu, len(gpus), "" if len(gpus) == 1 else "s"))
    return out


def _wanted_revision(unit, models):
    """The revision the inventory's entry of this unit's model gives (``engine_service_models``: the entry
    whose ``name`` is the unit's), or None."""
    for entry in models or []:
        if isinstance(entry, dict) and entry.get("name") == unit.get("name"):
            revision = entry.get("revision")
            return None if revision is None else str(revision)
    return None


def _off_revision(unit, wanted):
    """Why the unit serves another revision than the commit its inventory pins, or None. Only a full
    commit (40 hex digits) is judged: a branch or a tag moves on the hub, which the report does not ask."""
    if wanted is None or not _COMMIT.match(wanted):
        return None
    served = unit.get("revision")
    if served and str(served).lower() == wanted.lower():
        return None
    return "it serves %s, but the inventory pins %s (engine_service_models)" % (
        "revision %s" % str(served)[:12] if served else "no pinned revision", wanted[:12])


def engine_report_serving(nodes, addresses=None, models=None):
    """The report's nodes, each unit of ``serving`` with the GPU problems, ``target`` (the address
    Prometheus scrapes, or None on loopback), ``metrics`` (that in words), ``state_text``, ``gate_text``,
    ``wanted_revision`` (the inventory's) and ``off_wanted`` (null, or how the unit serves another commit
    than the one its inventory pins; also among its problems)."""
    if not isinstance(nodes, list):
        raise AnsibleFilterError("engine_report_serving: the input (the report's nodes) must be a list")
    addresses = addresses if isinstance(addresses, dict) else {}
    models = models if isinstance(models, dict) else {}
    out = []
    for node in nodes:
        if not isinstance(node, dict):
            raise AnsibleFilterError("engine_report_serving: each node must be a dict, not %r" % (node,))
        host = node.get("host")
        gpus = node.get("gpus") if isinstance(node.get("gpus"), list) else None
        serving = []
        for unit in node.get("serving") or []:
            unit = dict(unit)
            unit["wanted_revision"] = _wanted_revision(unit, models.get(host))
            unit["off_wanted"] = _off_revision(unit, unit["wanted_revision"])
            unit["problems"] = (list(unit.get("problems") or []) + _gpu_problems(unit, gpus)
                                + ([unit["off_wanted"]] if unit["off_wanted"] else []))
            unit["target"] = _target(addresses.get(host, host), unit.get("listen"), unit.get("port"))
            if unit["target"]:
                unit["metrics"] = "http://%s/metrics" % unit["target"]
            else:
                unit["metrics"] = ("listens on %s only (engine_service_host): not scraped from elsewhere"
                                   % unit.get("listen"))
            unit["state_text"] = "%s (%s)" % (unit.get("active") or "unknown", unit.get("sub") or "?")
            unit["gate_text"] = _gate_text(unit.get("gate"))
            serving.append(unit)
        out.append(dict(node, serving=serving))
    return out


# HAProxy's server states, as the report counts them (the first word of its status: "UP 1/2" is UP)
GATEWAY_STATES = ("UP", "DOWN", "DRAIN", "MAINT")
GATEWAY_UNIT = "llmfleet-gateway.service"


def engine_report_gateways(gateways):
    """The report's gateways: for each of ``gateways`` (``{host, address, bind, metrics_port, read}``: bind and metrics_port
    None for engine_gateway's defaults; ``read``
    what ``haproxy_info`` answered on it, or None when it was not read), ``{host, servers, states, metrics,
    target, error}``: its servers (backend, server, status, current sessions, total, last check), how many are
    in each of UP, DOWN, DRAIN and MAINT (and that in words, ``summary``), its exporter's address (``target`` None when it listens on
    loopback only) and why it could not be read; sorted by host."""
    if not isinstance(gateways, list):
        raise AnsibleFilterError("engine_report_gateways: the input (the gateways read) must be a list")
    out = []
    for gateway in gateways:
        gateway = _dict(gateway, "engine_report_gateways: each gateway")
        read = gateway.get("read")
        row = {"host": _text(gateway.get("host")), "servers": [], "states": {state: 0 for state in GATEWAY_STATES},
               "error": None}
        # the role's defaults where the inventory sets nothing (role defaults are not host variables)
        port = gateway.get("metrics_port")
        try:
            port = int(GATEWAY_DEFAULTS["metrics_port"] if port is None else port)
        except (TypeError, ValueError):
            port = None
        bind = GATEWAY_DEFAULTS["bind"] if gateway.get("bind") is None else _text(gateway.get("bind"))
        row["target"] = _target(gateway.get("address") or row["host"], bind, port)
        row["metrics"] = "http://%s/metrics" % row["target"] if row["target"] else "loopback only"
        if not isinstance(read, dict):
            row["error"] = "not read in this run (left out by --limit, or unreachable)"
        elif read.get("failed") or not isinstance(read.get("servers"), list):
            row["error"] = _text(read.get("msg") or "its runtime API did not answer")
        else:
            for server in read["servers"]:
                server = _dict(server, "engine_report_gateways: each server read")
                status = _text(server.get("status"))
                first = status.split(" ", 1)[0] if status else ""
                if first in row["states"]:
                    row["states"][first] += 1
                row["servers"].append({key: server.get(key) for key in ("backend", "server", "status", "current", "total", "check")})
        counted = ", ".join("%d %s" % (row["states"][state], state) for state in GATEWAY_STATES if row["states"][state])
        row["summary"] = "%s: %s" % (row["host"], row["error"] if row["error"] else (counted or "no servers"))
        out.append(row)
    return sorted(out, key=lambda row: row["host"])


def engine_report_targets(nodes, gateways=None):
    """Prometheus ``file_sd`` targets of every unit's ``/metrics`` (``engine_report_serving``'s nodes):
    ``[{targets: [host:port], labels: {host, unit, name, model, revision, engine_version, build,
    environment}}]``, and of each gateway's HAProxy exporter (``engine_report_gateways``' rows: labels
    ``host`` and ``unit``); units and gateways on loopback are left out."""
    if not isinstance(nodes, list):
        raise AnsibleFilterError("engine_report_targets: the input (the report's nodes) must be a list")
    if gateways is not None and not isinstance(gateways, list):
        raise AnsibleFilterError("engine_report_targets: gateways (engine_report_gateways' rows) must be a list")
    out = []
    for gateway in gateways or []:
        gateway = _dict(gateway, "engine_report_targets: each gateway")
        if gateway.get("target"):
            out.append({"targets": [gateway["target"]], "labels": {"host": _text(gateway.get("host")), "unit": GATEWAY_UNIT}})
    for node in nodes:
        for unit in (node or {}).get("serving") or []:
            if not unit.get("target"):
                continue
            labels = {"host": node.get("host"), "unit": unit.get("unit"), "name": unit.get("name"),
                      "model": unit.get("model"), "revision": unit.get("revision") or "",
                      "engine_version": unit.get("engine_version") or "", "build": unit.get("build") or "",
                      "environment": unit.get("environment") or ""}
            out.append({"targets": [unit["target"]], "labels": {k: str(v) if v is not None else "" for k, v in labels.items()}})
    return sorted(out, key=lambda t: (t["labels"]["host"], t["labels"]["unit"]))


# Markdown's own syntax in a value, each character backslash-escaped: '|' would end the cell, '`' open code,
# '[' and ']' make a link or a remote image (![x](https://...), [a](javascript:...), [a][ref]): every link and
# image needs a bracket, so '(', ')' and '!' stay as they are ("0.15.1 (wants 0.20.0)" reads as written).
_MD_SYNTAX = re.compile(r"([|`\[\]])")


def engine_report_md_cell(value):
    """``value`` as the text of one Markdown table cell: HTML's special characters escaped (a Markdown
    page renders raw HTML: a model path with ``<script>`` must stay text), ``|``, backquotes and the
    brackets every link and image needs (``[ ]``) backslash-escaped (they would end the cell, open code,
    or make a link or a remote image of a model path), backslashes kept, line breaks - ``\\n``, ``\\r\\n`` and
    a lone ``\\r``, each a line ending to CommonMark - made spaces (they would end the row)."""
    text = "" if value is None else _text(value)
    text = text.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SYNTAX.sub(r"\\\1", text)
    return re.sub(r"[\r\n]+", " ", text)


class FilterModule:
    """llmfleet.engines filters for the fleet's report."""

    def filters(self):
        return {
            "engine_report_drift": engine_report_drift,
            "engine_report_serving": engine_report_serving,
            "engine_report_targets": engine_report_targets,
            "engine_report_gateways": engine_report_gateways,
            "engine_report_md_cell": engine_report_md_cell,
        }
