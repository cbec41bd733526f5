# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the engine_service role's units serve on a node, as filters: the units read back
from their files and from ``systemctl show`` with the last readiness gate of each
(``engine_service_state``, for ``roles/engine_service/tasks/state.yml`` and ``playbooks/report.yml``), and
the load and active states of units (``engine_service_unit_states``).

The units are read from their files as ``engine_service_units`` wrote them (``ExecStart=`` and
``Environment=`` quoted by systemd's rules) and from ``systemctl show``; the last readiness gate
from the root-owned record the role writes after each gate (``<root>/engines/vllm/<unit>.gate.json``).

Unit tests: ``tests/unit/plugins/filter/test_serving_filter.py``, ``test_service_filter.py``.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from ansible.errors import AnsibleFilterError

_DESCRIPTION = re.compile(r"^vLLM serving \S+ \(([^()\s]+)\), managed by llmfleet\.engines$")


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
            # `vllm serve MODEL`, or the module launcher's `--model MODEL`
            "model": (argv[serve + 1] if serve is not None and serve + 1 < len(argv) else None) or _option(argv, "--model"),
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


def engine_service_unit_states(text):
    """``systemctl show -p Id -p LoadState -p ActiveState -p SubState UNIT...`` -> ``{unit: {...}}``."""
    states, _error = _show(str(text or ""))
    return {unit: {"load": fields.get("LoadState", ""), "active": fields.get("ActiveState", ""),
                   "sub": fields.get("SubState", "")} for unit, fields in states.items()}


class FilterModule:
    """llmfleet.engines filters for the serving state of the engine_service role's units."""

    def filters(self):
        return {
            "engine_service_state": engine_service_state,
            "engine_service_unit_states": engine_service_unit_states,
        }
