# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's decisions, as filters: what is wrong with a host's served models,
and the systemd unit of each model (name, command line, environment), so that the role's task
files and its unit template hold no logic of their own.

Unit tests: ``tests/unit/plugins/filter/test_service_filter.py``. Documentation: one
``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError

# A unit instance name: systemd accepts more, but these names also make directory names.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The options the role sets itself on the command line: a model's args must not repeat them.
OWNED_ARGS = ("--host", "--port", "--served-model-name", "--shutdown-timeout")
UNIT_PREFIX = "llmfleet-vllm-"


def _json(value):
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _port(value):
    """The port as an int, or None when it is not a whole number in 1..65535 (bools are not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.match(r"^[0-9]{1,5}$", value.strip()):
        number = int(value.strip())
    else:
        return None
    return number if 1 <= number <= 65535 else None


def engine_service_problems(models):
    """What is wrong with a host's ``engine_service_models``, one text per problem; empty when nothing is."""
    where = "variable engine_service_models"
    if not isinstance(models, list):
        return ["%s is %s, allowed: a list of models, each {name, model, port[, args, environment]}"
                % (where, _json(models))]
    out = []
    names, ports = {}, {}
    for index, entry in enumerate(models):
        item = "%s[%d]" % (where, index)
        if not isinstance(entry, dict):
            out.append("%s is %s, allowed: a mapping {name, model, port[, args, environment]}" % (item, _json(entry)))
            continue
        unknown = sorted(set(entry) - {"name", "model", "port", "args", "environment"})
        if unknown:
            out.append("%s has %s, allowed keys: name, model, port, args, environment" % (item, ", ".join(unknown)))
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            out.append("%s.name is %s, allowed: 1-48 of a-z, 0-9 and -, starting with a letter or digit"
                       " (it names the unit %s<name>.service)" % (item, _json(name), UNIT_PREFIX))
        elif name in names:
            out.append("%s.name is %s, already the name of engine_service_models[%d]" % (item, _json(name), names[name]))
        else:
            names[name] = index
        model = entry.get("model")
        if not isinstance(model, str) or not model.strip():
            out.append("%s.model is %s, allowed: a model name (org/model) or an absolute path on the node"
                       % (item, _json(model)))
        port = _port(entry.get("port"))
        if port is None:
            out.append("%s.port is %s, allowed: a whole number from 1 to 65535" % (item, _json(entry.get("port"))))
        elif port in ports:
            out.append("%s.port is %d, already the port of engine_service_models[%d]" % (item, port, ports[port]))
        else:
            ports[port] = index
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                                 for a in args):
            out.append("%s.args is %s, allowed: a list of command-line arguments (strings)" % (item, _json(args)))
        else:
            owned = sorted({str(a).split("=", 1)[0] for a in args} & set(OWNED_ARGS))
            if owned:
                out.append("%s.args sets %s, which the role sets itself: use name, port, engine_service_host"
                           " or engine_service_shutdown_timeout" % (item, ", ".join(owned)))
        env = entry.get("environment", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and _ENV_NAME_RE.match(k) for k in env):
            out.append("%s.environment is %s, allowed: a mapping of environment variable names to values"
                       % (item, _json(env)))
    return out


def _systemd_word(text):
    """One argument of ExecStart=: double-quoted when it needs to be, with systemd's escapes."""
    text = str(text).replace("%", "%%")
    if text and re.match(r"^[A-Za-z0-9_@%+=:,./-]+$", text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def _systemd_env(key, value):
    return '"%s=%s"' % (key, str(value).replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"'))


def engine_service_units(models, root, env_name, host="127.0.0.1", shutdown_timeout=30, environment=None):
    """The unit of each served model: ``[{name, unit, port, model, url, exec_start, environment}]``.

    ``env_name`` is the environment the unit starts (``<version>-<build>``, where ``current``
    points then): vLLM's, Triton's and FlashInfer's compiled caches are kept per environment, so
    a new version never loads kernels another one compiled.
    """
    problems = engine_service_problems(models)
    if problems:
        raise AnsibleFilterError("engine_service_units: " + "; ".join(problems))
    if not isinstance(root, str) or not root.startswith("/"):
        raise AnsibleFilterError("engine_service_units: root must be an absolute path, not %s" % _json(root))
    if not isinstance(env_name, str) or not re.match(r"^[0-9A-Za-z.+_-]+$", env_name):
        raise AnsibleFilterError("engine_service_units: env_name must be an environment's name, not %s"
                                 % _json(env_name))
    root = root.rstrip("/")
    common = dict(environment or {})
    out = []
    for entry in models:
        port = _port(entry["port"])
        cache = "%s/cache" % root
        env = {
            "HF_HOME": "%s/huggingface" % cache,
            "VLLM_CACHE_ROOT": "%s/vllm/%s" % (cache, env_name),
            "TRITON_CACHE_DIR": "%s/triton/%s" % (cache, env_name),
            "FLASHINFER_WORKSPACE_BASE": "%s/flashinfer/%s" % (cache, env_name),
            "XDG_CACHE_HOME": "%s/xdg/%s" % (cache, env_name),
        }
        env.update(common)
        env.update(entry.get("environment") or {})
        argv = ["%s/engines/vllm/current/bin/vllm" % root, "serve", entry["model"], "--host", host,
                "--port", str(port), "--served-model-name", entry["name"],
                "--shutdown-timeout", str(int(shutdown_timeout))] + [str(a) for a in entry.get("args") or []]
        connect = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        out.append({
            "name": entry["name"],
            "unit": "%s%s.service" % (UNIT_PREFIX, entry["name"]),
            "port": port,
            "model": entry["model"],
            "url": "http://%s:%d" % ("[%s]" % connect if ":" in connect else connect, port),
            "argv": argv,
            "exec_start": " ".join(_systemd_word(a) for a in argv),
            "environment": [_systemd_env(k, env[k]) for k in sorted(env)],
            "cache_dirs": sorted({env["VLLM_CACHE_ROOT"], env["TRITON_CACHE_DIR"], env["FLASHINFER_WORKSPACE_BASE"],
                                  env["XDG_CACHE_HOME"], env["HF_HOME"]}),
        })
    return out


def engine_service_unit_states(text):
    """``systemctl show -p Id -p LoadState -p ActiveState -p SubState UNIT...`` -> ``{unit: {...}}``."""
    out = {}
    for block in re.split(r"\n\s*\n", str(text or "").strip()):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if fields.get("Id"):
            out[fields["Id"]] = {"load": fields.get("LoadState", ""), "active": fields.get("ActiveState", ""),
                                 "sub": fields.get("SubState", "")}
    return out


def engine_service_says(item, what):
    """A preflight problem of one model (an entry of engine_service_models or of engine_service_units)."""
    if not isinstance(item, dict):
        raise AnsibleFilterError("engine_service_says: the input must be a model (a dict), not %s" % _json(item))
    name = item.get("name")
    if what == "missing":
        return ("variable engine_service_models: model %s of %s does not exist on this node (allowed: a model id,"
                " or a path that exists)" % (_json(item.get("model")), _json(name)))
    if what == "port_in_use":
        return ("variable engine_service_models: port %s of %s is in use by another program on this node (not %s%s.service)"
                % (item.get("port"), _json(name), UNIT_PREFIX, name))
    raise AnsibleFilterError("engine_service_says: unknown problem %s" % _json(what))


def engine_service_failure(result, task=""):
    """What failed in a rolled-out version, in words: the task, its message and the unit's last journal
    lines (from ``ansible_failed_result``; a looped task's first failed item)."""
    if not isinstance(result, dict):
        return "%s failed" % (task or "a task")
    failed = result
    for item in result.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            failed = item
            break
    msg = str(failed.get("msg") or "no message").strip()
    text = "%s: %s" % (task, msg) if task else msg
    journal = [str(line) for line in failed.get("journal") or [] if str(line).strip()]
    if journal and not all(line in msg for line in journal[-5:]):
        text += " Last journal lines: %s" % " | ".join(journal[-10:])
    return text


def engine_service_gate_figures(results, env_name, stage="start"):
    """The readiness figures of a gate (the looped engine_ready results), one dict per unit."""
    out = []
    for item in results or []:
        if not isinstance(item, dict) or item.get("skipped"):
            continue
        unit = (item.get("item") or {}).get("unit") if isinstance(item.get("item"), dict) else item.get("item")
        out.append({"unit": unit, "environment": env_name, "stage": stage, "ready": bool(item.get("ready")),
                    "ready_s": item.get("since_start_s"), "health_s": item.get("health_s"),
                    "completion_ms": item.get("completion_ms"), "tries": item.get("attempts", 1)})
    return out


class FilterModule:
    """llmfleet.engines filters for the engine_service role."""

    def filters(self):
        return {
            "engine_service_problems": engine_service_problems,
            "engine_service_units": engine_service_units,
            "engine_service_unit_states": engine_service_unit_states,
            "engine_service_says": engine_service_says,
            "engine_service_failure": engine_service_failure,
            "engine_service_gate_figures": engine_service_gate_figures,
        }
