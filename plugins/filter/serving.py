# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a node serves its models, as filters, for ``playbooks/report.yml``: the engine_service role's
units read back from the node (``roles/engine_service/tasks/state.yml``), the problems the report
names (a unit failed or restarted, a GPU the unit was given that the node no longer lists), the
words of the report's serving table, and the Prometheus ``file_sd`` targets of every unit's
``/metrics``.

The units are read from their files as ``engine_service_units`` wrote them (``ExecStart=`` and
``Environment=`` quoted by systemd's rules) and from ``systemctl show``; the last readiness gate
from the root-owned record the role writes after each gate (``<root>/engines/vllm/<unit>.gate.json``).

Unit tests: ``tests/unit/plugins/filter/test_serving_filter.py``. Documentation: one
``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from ansible.errors import AnsibleFilterError

# The metrics README.md's alert rules use (vLLM >= 0.11: kv_cache_usage_perc replaced
# gpu_cache_usage_perc, which 0.12 removed), and the fake `vllm serve` serves.
ALERT_METRICS = ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket")
_LOOPBACK = re.compile(r"^(127\.[0-9.]+|::1|localhost)$")
_ANY = ("0.0.0.0", "::", "")
_DESCRIPTION = re.compile(r"^vLLM serving \S+ \(([^()\s]+)\), managed by llmfleet\.engines$")
_GPU_UUID = re.compile(r"^(GPU|MIG)-", re.I)
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")


def _slurped(read):
    """(path, text) of one looped ``slurp`` result; text None when the file could not be read."""
    if not isinstance(read, dict):
        raise AnsibleFilterError("each read must be a result of a looped slurp, not %r" % (read,))
    path = read.get("source") or read.get("item")
    content = read.get("content")
    if content is None or read.get("failed"):
        return path, None
    try:
        return path, base64.b64decode(content).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, TypeError) as exc:
        raise AnsibleFilterError("the file %s cannot be read as UTF-8 text: %s" % (path, exc)) from exc


def _words(text):
    """The words of a unit file's value, split and unquoted as systemd does for ``ExecStart=`` and
    ``Environment=``: whitespace between words, double or single quotes around one, ``\\`` before
    a quote or a backslash; then ``%%`` is ``%`` (specifiers) and, for ExecStart=, ``$$`` is ``$``."""
    words, word, quote, escape, started = [], [], None, False, False
    for char in text:
        if escape:
            word.append(char)
            escape = False
        elif char == "\\":
            escape = True
            started = True
        elif quote:
            if char == quote:
                quote = None
            else:
                word.append(char)
        elif char in "\"'" and not started:
            quote = char
            started = True
        elif char.isspace():
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(char)
            started = True
    if started:
        words.append("".join(word))
    return words


def engine_service_unit_file(text):
    """What a unit file of the role says: ``{argv, environment, env_name}`` (``env_name`` from its
    Description, the environment it was written for; None when the file does not say)."""
    argv, environment, env_name = [], {}, None
    for line in str(text or "").splitlines():
        key, sep, value = line.partition("=")
        if not sep or line.lstrip().startswith(("#", ";")):
            continue
        key = key.strip()
        if key == "ExecStart":
            argv = [w.replace("%%", "%").replace("$$", "$") for w in _words(value)]
            if argv and argv[0][:1] in "-@+!:":
                argv[0] = argv[0].lstrip("-@+!:")
        elif key == "Environment":
            for word in _words(value):
                name, has, val = word.replace("%%", "%").partition("=")
                if has:
                    environment[name] = val
        elif key == "Description":
            match = _DESCRIPTION.match(value.strip())
            env_name = match.group(1) if match else env_name
    if env_name is None and environment.get("VLLM_CACHE_ROOT"):
        env_name = environment["VLLM_CACHE_ROOT"].rstrip("/").rsplit("/", 1)[-1]
    return {"argv": argv, "environment": environment, "env_name": env_name}


def _option(argv, name):
    """The value of the last ``name VALUE`` or ``name=VALUE`` of a command line, or None."""
    found = None
    for index, word in enumerate(argv):
        if word == name and index + 1 < len(argv):
            found = argv[index + 1]
        elif word.startswith(name + "="):
            found = word[len(name) + 1:]
    return found


def _show(show):
    """``{unit: {property: value}}`` of ``systemctl show -p ... UNIT...``, and its error (or None)."""
    if isinstance(show, dict):
        if show.get("rc") not in (0, None) or show.get("failed"):
            error = (show.get("stderr") or show.get("msg") or "rc %s" % show.get("rc")).strip()
            return {}, "systemctl show failed: %s" % error
        show = show.get("stdout", "")
    out = {}
    for block in re.split(r"\n\s*\n", str(show or "").strip()):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if fields.get("Id"):
            out[fields["Id"]] = fields
    return out, None


def _int(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _gpus(environment):
    """CUDA_VISIBLE_DEVICES as a list (``[]``: none), or None when the unit does not set it (all)."""
    if "CUDA_VISIBLE_DEVICES" not in environment:
        return None
    return [g.strip() for g in environment["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]


def engine_service_state(unit_files, show=None, gates=None, current=""):
    """How the role's units serve on one node: one dict per unit file read (see state.yml)."""
    if not isinstance(unit_files, list):
        raise AnsibleFilterError("engine_service_state: the input must be the results of a looped slurp of the"
                                 " unit files, not %s" % type(unit_files).__name__)
    states, show_error = _show(show)
    records = {}
    for read in gates or []:
        path, text = _slurped(read)
        if text is None:
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue
        name = str(path).rsplit("/", 1)[-1]
        if isinstance(record, dict) and name.endswith(".gate.json"):
            records[name[:-len(".gate.json")]] = record
    current = str(current or "")
    out = []
    for read in unit_files:
        path, text = _slurped(read)
        unit = str(path).rsplit("/", 1)[-1]
        parsed = engine_service_unit_file(text)
        argv, environment, env_name = parsed["argv"], parsed["environment"], parsed["env_name"]
        serve = argv.index("serve") if "serve" in argv else None
        state = states.get(unit, {})
        env_name = env_name or current or None
        entry = {
            "unit": unit,
            "name": _option(argv, "--served-model-name") or unit[len("llmfleet-vllm-"):-len(".service")],
            "model": argv[serve + 1] if serve is not None and serve + 1 < len(argv) else None,
            "listen": _option(argv, "--host") or "0.0.0.0",
            "port": _int(_option(argv, "--port") or (8000 if argv else None)),
            "revision": _option(argv, "--revision"),
            "environment": env_name,
            "engine_version": env_name.rsplit("-", 1)[0] if env_name and "-" in env_name else None,
            "build": env_name.rsplit("-", 1)[1] if env_name and "-" in env_name else None,
            "gpus": _gpus(environment),
            "offline": environment.get("HF_HUB_OFFLINE") == "1",
            "load": state.get("LoadState"),
            "active": state.get("ActiveState"),
            "sub": state.get("SubState"),
            "result": state.get("Result"),
            "restarts": _int(state.get("NRestarts")),
            "main_pid": _int(state.get("MainPID")) or None,
            "started": state.get("ExecMainStartTimestamp") or None,
            "gate": records.get(unit),
            "problems": [],
        }
        problems = entry["problems"]
        if text is None:
            problems.append("its unit file could not be read")
        if show_error:
            problems.append(show_error)
        elif entry["load"] != "loaded":
            problems.append("systemd has not loaded it (LoadState %s)" % (entry["load"] or "unknown"))
        elif entry["active"] == "failed":
            problems.append("the unit failed (%s)" % (entry["result"] or "failed"))
        elif entry["sub"] == "auto-restart":
            problems.append("it exited (%s) and waits for systemd to restart it" % (entry["result"] or "failed"))
        elif entry["active"] != "active":
            problems.append("it is not running (%s/%s)" % (entry["active"], entry["sub"]))
        if entry["restarts"]:
            problems.append("systemd restarted it %d time%s since its last start (Restart=on-failure: it exited)"
                            % (entry["restarts"], "" if entry["restarts"] == 1 else "s"))
        if state.get("NeedDaemonReload") == "yes":
            problems.append("its unit file changed and systemd has not reloaded it")
        if current and env_name and env_name != current:
            problems.append("it was written for %s, but current points to %s (it runs %s after its next restart)"
                            % (env_name, current, current))
        out.append(entry)
    return sorted(out, key=lambda e: e["unit"])


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


def engine_report_targets(nodes):
    """Prometheus ``file_sd`` targets of every unit's ``/metrics`` (``engine_report_serving``'s nodes):
    ``[{targets: [host:port], labels: {host, unit, name, model, revision, engine_version, build,
    environment}}]``; units on loopback are left out."""
    if not isinstance(nodes, list):
        raise AnsibleFilterError("engine_report_targets: the input (the report's nodes) must be a list")
    out = []
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


class FilterModule:
    """llmfleet.engines filters for the serving state of the fleet's report."""

    def filters(self):
        return {
            "engine_service_state": engine_service_state,
            "engine_report_serving": engine_report_serving,
            "engine_report_targets": engine_report_targets,
        }
