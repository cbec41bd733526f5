# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

What the engine_service role checks before anything is touched (the filters of
``plugins/filter/engine_service_checks.py``, and the engine_service_look action): what is wrong
with a host's served models and the role variables that reach their units (``engine_service_problems``),
with a role variable of whole seconds (``engine_service_seconds_problem``), the variables the role checks
(``engine_service_checked_variables``) and everything it checks in them (``engine_service_variable_problems``),
and the words of a preflight problem found on the node (``engine_service_says``).

Unit files are data: every value that reaches a unit is refused here when it holds a control character
(it would end the line and start a directive of its own); ``_service_units.py`` renders the units
from the values these checks let through, with systemd's escapes. Secrets (API key, Hugging Face token)
are never shown in a problem.

Unit tests: ``tests/unit/plugins/filter/test_service_filter.py``, ``test_placement_filter.py``,
``test_rollout_filter.py``. Documentation: one ``<filter>.yml`` per filter in ``plugins/filter/``.
"""

from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json, whole as _whole
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _placement
from ansible_collections.llmfleet.engines.plugins.plugin_utils._paths import ALLOWED as PATH_ALLOWED, path_parts

# A unit instance name: systemd accepts more, but these names also make directory names.
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# What ends or breaks a line of a unit file or of an environment file: C0 controls (newline,
# carriage return, tab, NUL, ...), DEL, C1 controls; and lone surrogates (not UTF-8 at all).
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_ALLOWED = ("text without control characters (newline, carriage return, tab, NUL, DEL: they would end"
                    " the unit file's line and start directives of their own)")
# Path parts the unit names unquoted (WorkingDirectory=, ReadWritePaths=, EnvironmentFile=): no
# whitespace, quotes, backslashes, % (specifiers) or $.
_PATH_ALLOWED = PATH_ALLOWED + " and not under /home, /root or /run/user (ProtectHome=yes hides them)"

# The options the role sets itself on the command line: a model's args must not repeat them.
OWNED_ARGS = ("--host", "--port", "--served-model-name", "--shutdown-timeout")
# Options that would put a secret in the world-readable unit and in argv, and what to use instead.
SECRET_ARGS = {"--api-key": "api_key (of the model) or engine_service_api_key",
               "--hf-token": "engine_service_hf_token"}
# Variables that hold secrets: refused in the unit's (world-readable) environment.
SECRET_NAMES = {"VLLM_API_KEY": "api_key (of the model) or engine_service_api_key",
                "HF_TOKEN": "engine_service_hf_token",
                "HUGGING_FACE_HUB_TOKEN": "engine_service_hf_token"}
# Variables whose value is a directory the service writes: made writable (ReadWritePaths=).
PATH_NAMES = ("HOME", "HF_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "XDG_CACHE_HOME")
UNIT_PREFIX = "llmfleet-vllm-"
MIN_LIMIT_NOFILE = 1024
MODEL_KEYS = ("name", "model", "port", "args", "environment", "api_key", "revision", "gpus", "internal_port")
# A model id on the hub (org/name), as engine_service_models[].model names it when it is pinned.
_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# A revision: a branch, a tag or a commit (git's ref names, without what a ref may not hold).
_REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}")
# What the role sets on the command line and in the environment of a pinned model's unit.
PINNED_ARGS = ("--revision", "--tokenizer-revision", "--code-revision")
PINNED_NAMES = ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")


def _port(value):
    """The port as an int, or None when it is not a whole number in 1..65535 (bools are not)."""
    return _whole(value, 1, 65535)


def _control(value):
    """True when the text has a control character (or is not valid text at all)."""
    return bool(_CONTROL_RE.search(str(value)))


def _path_problem(value):
    """None when ``value`` is a path the unit can name unquoted and the service may write, else why not."""
    parts = path_parts(value)
    if parts is None or parts[0] in ("home", "root") or parts[:2] == ["run", "user"]:
        return _PATH_ALLOWED
    return None


def _service_tree_problem(value, root):
    """None when ``value`` (a path the service writes: HOME, HF_HOME, the caches) lies in one of the
    service user's own trees below ``root`` (``<root>/serve``, ``<root>/cache/<name>`` but uv's), else
    why not: root makes these directories for the service user (llmfleet.engines.service_dirs) and
    hands it nothing of its own, so a path value must not name one of root's directories."""
    if not isinstance(root, str) or _path_problem(root):
        return None  # the root's own problem is reported on its own
    top = root.rstrip("/")
    path = value.rstrip("/")
    serve, cache = top + "/serve", top + "/cache"
    if path == serve or path.startswith(serve + "/"):
        return None
    if path.startswith(cache + "/"):
        first = path[len(cache) + 1:].split("/")[0]
        if first not in ("uv", "uv.lock"):
            return None
    return ("a directory in %s or %s/<name> (not %s/uv, root's): the service user owns what it writes, and root"
            " makes those directories for it only there" % (serve, cache, cache))


def _kind(value):
    """The name of a value's type as the inventory wrote it (list, dict, int, ...): Ansible hands a templated value
    over as a subclass of its own (_AnsibleLazyTemplateList), whose name means nothing to the operator."""
    return next(c.__name__ for c in type(value).__mro__ if c.__module__ == "builtins")


def _scalar(value):
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _environment_problems(env, where, secret=False, root=None):
    """Problems of an environment mapping (``where`` is its variable path)."""
    if not isinstance(env, dict):
        return ["%s is %s, allowed: a mapping of environment variable names to values"
                % (where, "a " + _kind(env) if secret else _json(env))]
    out = []
    for key in env:
        if not isinstance(key, str) or not _ENV_NAME_RE.fullmatch(key):
            out.append("%s has the name %s, allowed: names of letters, digits and _, not starting with a digit"
                       % (where, _json(key)))
            continue
        value = env[key]
        item = "%s.%s" % (where, key)
        if secret:
            if key in ("VLLM_API_KEY", "HF_TOKEN"):
                out.append("%s sets %s, which %s sets: use that" % (where, key, SECRET_NAMES[key]))
            elif key in PATH_NAMES:
                out.append("%s sets %s, which the role sets in the unit: use engine_service_environment" % (where, key))
            elif not _scalar(value):
                out.append("%s is a %s (a secret, not shown), allowed: a string" % (item, _kind(value)))
            elif _control(value):
                out.append("%s has a control character (a secret, not shown), allowed: %s" % (item, _CONTROL_ALLOWED))
            continue
        if key in SECRET_NAMES:
            out.append("%s sets %s, a secret, in the world-readable unit file: use %s (a root-only EnvironmentFile)"
                       % (where, key, SECRET_NAMES[key]))
        elif not _scalar(value):
            out.append("%s is %s, allowed: a string or a number" % (item, _json(value)))
        elif _control(value):
            out.append("%s is %s, allowed: %s" % (item, _json(value), _CONTROL_ALLOWED))
        elif key in PATH_NAMES and _path_problem(value):
            out.append("%s is %s, allowed: %s (the service writes there: ReadWritePaths=)"
                       % (item, _json(value), _path_problem(value)))
        elif key in PATH_NAMES and _service_tree_problem(value, root):
            out.append("%s is %s, allowed: %s" % (item, _json(value), _service_tree_problem(value, root)))
    return out


def _arg_sets(arg, options):
    """The option of ``options`` that the command-line word ``arg`` sets (argparse takes unambiguous
    prefixes: ``--api-k`` is ``--api-key``), or None."""
    word = str(arg).split("=", 1)[0]
    if not word.startswith("--") or len(word) < 5:
        return None
    for option in options:
        if option.startswith(word):
            return option
    return None


def _secret_problem(value, where):
    """The problem of a secret value (never shown), or None."""
    if not isinstance(value, str):
        return "%s is a %s (a secret, not shown), allowed: a string (quote it)" % (where, _kind(value))
    if _control(value):
        return "%s has a control character (a secret, not shown), allowed: %s" % (where, _CONTROL_ALLOWED)
    return None


def engine_service_problems(models, environment=None, secret_environment=None, api_key="", hf_token="", root=None,
                            user=None, host=None, shutdown_timeout=None, ready_timeout=None, limit_nofile=None,
                            secrets_dir=None):
    """What is wrong with a host's ``engine_service_models`` (and, when given, the role variables that reach
    its units), one text per problem; empty when nothing is. Secret values are never shown."""
    where = "variable engine_service_models"
    out = []
    if not isinstance(models, list):
        out.append("%s is %s, allowed: a list of models, each {name, model, port[, args, environment, api_key, revision, gpus, internal_port]}"
                   % (where, _json(models)))
        models = []
    names, ports = {}, {}
    for index, entry in enumerate(models):
        item = "%s[%d]" % (where, index)
        if not isinstance(entry, dict):
            out.append("%s is %s, allowed: a mapping {name, model, port[, args, environment, api_key, revision, gpus,"
                       " internal_port]}"
                       % (item, _json(entry)))
            continue
        unknown = sorted(str(k) for k in set(entry) - set(MODEL_KEYS))
        if unknown:
            out.append("%s has %s, allowed keys: %s" % (item, ", ".join(unknown), ", ".join(MODEL_KEYS)))
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            out.append("%s.name is %s, allowed: 1-48 of a-z, 0-9 and -, starting with a letter or digit"
                       " (it names the unit %s<name>.service)" % (item, _json(name), UNIT_PREFIX))
        elif name in names:
            out.append("%s.name is %s, already the name of engine_service_models[%d]" % (item, _json(name), names[name]))
        else:
            names[name] = index
        model = entry.get("model")
        if not isinstance(model, str) or not model.strip() or model.startswith("-"):
            out.append("%s.model is %s, allowed: a model name (org/model) or an absolute path on the node"
                       % (item, _json(model)))
        elif model.startswith(".") or model.startswith("~"):
            # vLLM would read it from the unit's working directory, not the one Ansible checks from
            out.append("%s.model is %s, a relative path; allowed: a model name (org/model) or an absolute path"
                       " on the node" % (item, _json(model)))
        elif _control(model):
            out.append("%s.model is %s, allowed: %s" % (item, _json(model), _CONTROL_ALLOWED))
        port = _port(entry.get("port"))
        if port is None:
            out.append("%s.port is %s, allowed: a whole number from 1024 to 65535" % (item, _json(entry.get("port"))))
        elif port < 1024:
            # vLLM runs as the service user, without CAP_NET_BIND_SERVICE (NoNewPrivileges)
            out.append("%s.port is %d, allowed: a whole number from 1024 to 65535 (the service user cannot bind"
                       " a port below 1024; put a proxy in front for one)" % (item, port))
            ports[port] = index
        elif port in ports:
            out.append("%s.port is %d, already the port of engine_service_models[%d]" % (item, port, ports[port]))
        else:
            ports[port] = index
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(_scalar(a) for a in args):
            out.append("%s.args is %s, allowed: a list of command-line arguments (strings)" % (item, _json(args)))
        else:
            for position, arg in enumerate(args):
                if _control(arg):
                    out.append("%s.args[%d] is %s, allowed: %s" % (item, position, _json(arg), _CONTROL_ALLOWED))
            owned = sorted({_arg_sets(a, OWNED_ARGS) for a in args} - {None})
            if owned:
                out.append("%s.args sets %s, which the role sets itself: use name, port, engine_service_host"
                           " or engine_service_shutdown_timeout" % (item, ", ".join(owned)))
            for option in sorted({_arg_sets(a, SECRET_ARGS) for a in args} - {None}):
                out.append("%s.args sets %s, which would put a secret in the world-readable unit and in argv:"
                           " use %s (a root-only EnvironmentFile)" % (item, option, SECRET_ARGS[option]))
        out.extend(_environment_problems(entry.get("environment", {}), item + ".environment", root=root))
        if "revision" in entry:
            out.extend(_revision_problems(entry, item))
        if "api_key" in entry:
            problem = _secret_problem(entry["api_key"], item + ".api_key")
            if problem is None and not entry["api_key"]:
                problem = ("%s.api_key is empty, allowed: the model's API key (leave api_key out for"
                           " engine_service_api_key)" % item)
            if problem:
                out.append(problem)
    out.extend(_placement_problems(models, environment))
    out.extend(_role_problems(environment, secret_environment, api_key, hf_token, root, user, host,
                              shutdown_timeout, ready_timeout, limit_nofile, secrets_dir))
    if isinstance(secret_environment, dict):
        # EnvironmentFile= would silently win over Environment=: one place per variable.
        for env, variable in [(environment, "engine_service_environment")] + [
                (entry.get("environment"), "engine_service_models[%d].environment" % index)
                for index, entry in enumerate(models) if isinstance(entry, dict)]:
            both = sorted(set(env) & set(secret_environment)) if isinstance(env, dict) else []
            if both:
                out.append("variable engine_service_secret_environment sets %s, which %s sets too: set it in one"
                           " of them" % (", ".join(str(k) for k in both), variable))
    return out


def _placement_problems(models, environment):
    """Problems of where the models run, checked without the node: each model's gpus, a model without gpus beside
    models with, CUDA_VISIBLE_DEVICES set beside gpus, VLLM_PORT set by hand (the role gives each unit its own),
    and the internal port ranges (plugins/module_utils/serve/_placement.py)."""
    out = []
    placed = False
    for index, entry in enumerate(models):
        if not isinstance(entry, dict):
            continue
        item = "variable engine_service_models[%d]" % index
        env = entry.get("environment") if isinstance(entry.get("environment"), dict) else {}
        if "gpus" in entry:
            placed = True
            out.extend(_placement.gpus_problems(entry["gpus"], item))
            if "CUDA_VISIBLE_DEVICES" in env:
                out.append("%s.environment sets CUDA_VISIBLE_DEVICES, which the role sets from its gpus (by UUID):"
                           " leave it out" % item)
        if "VLLM_PORT" in env:
            out.append("%s.environment sets VLLM_PORT, which the role sets for each unit (internal ports of its own):"
                       " use its internal_port" % item)
    if isinstance(environment, dict):
        if "VLLM_PORT" in environment:
            out.append("variable engine_service_environment sets VLLM_PORT, which the role sets for each unit (internal"
                       " ports of its own; one value for every unit would make them clash): use internal_port of a model")
        if placed and "CUDA_VISIBLE_DEVICES" in environment:
            out.append("variable engine_service_environment sets CUDA_VISIBLE_DEVICES, which the role sets for each unit"
                       " from its gpus: leave it out")
    out.extend(_placement.mix_problems(models))
    out.extend(_placement.internal_port_problems(models))
    return out


def _revision_problems(entry, item):
    """Problems of a pinned model (one that gives ``revision``): a hub model id, a revision git would
    accept, and no args or environment that would undo the pin."""
    out = []
    revision = entry["revision"]
    if not isinstance(revision, str) or not _REVISION_RE.fullmatch(revision) or ".." in revision \
            or revision.endswith((".", "/", ".lock")) or "//" in revision:
        out.append("%s.revision is %s, allowed: a branch, a tag or a 40-hex commit of the model's repository"
                   " (letters, digits, '.', '_', '/', '+', '-')" % (item, _json(revision)))
    model = entry.get("model")
    hub_id = isinstance(model, str) and _REPO_RE.fullmatch(model) and "--" not in model and ".." not in model
    if isinstance(model, str) and not _control(model) and not hub_id:
        out.append("%s.model is %s with a revision, allowed: a model id on the hub (org/name); a model path on"
                   " the node has no revision (leave revision out)" % (item, _json(model)))
    args = entry.get("args", [])
    if isinstance(args, list) and all(_scalar(a) for a in args):
        for option in sorted({_arg_sets(a, PINNED_ARGS) for a in args} - {None}):
            out.append("%s.args sets %s, which the role sets to the pinned commit of revision: leave it out"
                       % (item, option))
    env = entry.get("environment", {})
    if isinstance(env, dict):
        for key in sorted(set(env) & set(PINNED_NAMES)):
            out.append("%s.environment sets %s, which the role sets for a pinned model (served offline from"
                       " <root>/models): leave it out" % (item, key))
    return out


def _role_problems(environment, secret_environment, api_key, hf_token, root, user, host, shutdown_timeout,
                   ready_timeout, limit_nofile, secrets_dir):
    """Problems of the role variables that reach the units (each checked only when given)."""
    out = []
    if environment is not None:
        out.extend(_environment_problems(environment, "variable engine_service_environment", root=root))
    if secret_environment is not None:
        out.extend(_environment_problems(secret_environment, "variable engine_service_secret_environment",
                                         secret=True))
    for value, variable in ((api_key, "engine_service_api_key"), (hf_token, "engine_service_hf_token")):
        if value is not None:
            problem = _secret_problem(value, "variable " + variable)
            if problem:
                out.append(problem)
    for value, variable in ((root, "engine_service_root"), (secrets_dir, "engine_service_secrets_dir")):
        if value is not None and _path_problem(value):
            out.append("variable %s is %s, allowed: %s" % (variable, _json(value), _path_problem(value)))
    if (isinstance(secrets_dir, str) and isinstance(root, str) and not _path_problem(secrets_dir)
            and not _path_problem(root)):
        top, secret = root.rstrip("/"), secrets_dir.rstrip("/")
        if secret == top or any(secret == t or secret.startswith(t + "/") for t in (top + "/serve", top + "/cache")):
            out.append("variable engine_service_secrets_dir is %s, allowed: a directory outside %s/serve and %s/cache"
                       " (the service user's trees: it could read or replace the secret files there)"
                       % (_json(secrets_dir), top, top))
    if user is not None and (not isinstance(user, str) or not _USER_RE.fullmatch(user)):
        out.append("variable engine_service_user is %s, allowed: a system user name (1-32 of a-z, 0-9, _ and -,"
                   " starting with a letter or _)" % _json(user))
    if host is not None and (not isinstance(host, str) or _control(host)):
        out.append("variable engine_service_host is %s, allowed: an address (%s)" % (_json(host), _CONTROL_ALLOWED))
    if shutdown_timeout is not None and _whole(shutdown_timeout, 0) is None:
        out.append("variable engine_service_shutdown_timeout is %s, allowed: a whole number of seconds"
                   % _json(shutdown_timeout))
    if ready_timeout is not None and _whole(ready_timeout, 1) is None:
        out.append("variable engine_service_ready_timeout is %s, allowed: a whole number of seconds, 1 or more"
                   % _json(ready_timeout))
    if limit_nofile is not None and _whole(limit_nofile, MIN_LIMIT_NOFILE) is None:
        out.append("variable engine_service_limit_nofile is %s, allowed: a whole number, %d or more"
                   % (_json(limit_nofile), MIN_LIMIT_NOFILE))
    return out


def engine_service_seconds_problem(value, variable, least=0):
    """``[]``, or the one problem of a role variable that must be a whole number of seconds >= ``least``."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    if text.isdigit() and int(text) >= least:
        return []
    return ["variable %s is %s, allowed: a whole number of seconds, %d or more"
            % (variable, json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value),
               least)]


# The role variables engine_service_variable_problems checks: validate.yml and the engine_service_look action
# read each from the host's variables, named by engine_service_checked_variables.
VARIABLES = (
    "engine_service_models", "engine_service_environment", "engine_service_secret_environment",
    "engine_service_api_key", "engine_service_hf_token", "engine_service_root", "engine_service_user",
    "engine_service_host", "engine_service_shutdown_timeout", "engine_service_ready_timeout",
    "engine_service_limit_nofile", "engine_service_secrets_dir", "engine_service_steady_timeout",
    "engine_service_lock_wait", "engine_service_gateway_drain_timeout", "engine_service_gateways",
    "engine_service_lock_stale", "engine_service_shm_min_mib", "engine_service_model_progress_interval",
    "engine_service_model_timeout", "engine_service_model_keep", "engine_service_hub_mirror_url",
    "engine_service_retry_failed",
)
_BLANK_RE = re.compile("[\x00-\x20]")


def engine_service_checked_variables(options):
    """The names of the role variables engine_service_variable_problems checks (:data:`VARIABLES`, in its order:
    the models first, whose absence the look names first), each an option of the role's argument spec
    (``options``): a name the spec lacks is an error, so that a variable renamed in the spec and not here fails the
    check rather than going unchecked."""
    if not isinstance(options, dict):
        raise AnsibleFilterError("engine_service_checked_variables: the input must be the options of the role's"
                                 " argument spec (a mapping), not %s" % type(options).__name__)
    unknown = [name for name in VARIABLES if name not in options]
    if unknown:
        raise AnsibleFilterError("engine_service_checked_variables: the argument spec has no option %s"
                                 % ", ".join(unknown))
    return list(VARIABLES)


def engine_service_variable_problems(variables, hosts=()):
    """Everything the role checks in its variables before anything is touched (the role's ``validate.yml``
    and the look's first step), one text per problem; empty when nothing is wrong. ``variables``: each of
    :data:`VARIABLES` by name; ``hosts``: the inventory's hosts (the gateways must be among them)."""
    if not isinstance(variables, dict):
        raise AnsibleFilterError("engine_service_variable_problems: the input must be the role's variables (a"
                                 " mapping), not %s" % type(variables).__name__)
    missing = [name for name in VARIABLES if name not in variables]
    if missing:
        raise AnsibleFilterError("engine_service_variable_problems: the role's variables lack %s" % ", ".join(missing))
    v = variables
    out = engine_service_problems(
        v["engine_service_models"], environment=v["engine_service_environment"],
        secret_environment=v["engine_service_secret_environment"], api_key=v["engine_service_api_key"],
        hf_token=v["engine_service_hf_token"], root=v["engine_service_root"], user=v["engine_service_user"],
        host=v["engine_service_host"], shutdown_timeout=v["engine_service_shutdown_timeout"],
        ready_timeout=v["engine_service_ready_timeout"], limit_nofile=v["engine_service_limit_nofile"],
        secrets_dir=v["engine_service_secrets_dir"])
    for name, least in (("engine_service_steady_timeout", 1), ("engine_service_lock_wait", 0),
                        ("engine_service_gateway_drain_timeout", 0)):
        out.extend(engine_service_seconds_problem(v[name], name, least))
    gateways = v["engine_service_gateways"]
    if not isinstance(gateways, list) or any(not isinstance(g, str) or g not in hosts for g in gateways):
        out.append("variable engine_service_gateways is %s, allowed: a list of inventory hosts that run"
                   " llmfleet.engines.engine_gateway" % _json(gateways))
    out.extend(engine_service_seconds_problem(v["engine_service_lock_stale"], "engine_service_lock_stale", 60))
    out.extend(p.replace("seconds", "MiB")
               for p in engine_service_seconds_problem(v["engine_service_shm_min_mib"], "engine_service_shm_min_mib", 0))
    out.extend(engine_service_seconds_problem(v["engine_service_model_progress_interval"],
                                              "engine_service_model_progress_interval", 1))
    out.extend(engine_service_seconds_problem(v["engine_service_model_timeout"], "engine_service_model_timeout", 60))
    out.extend(p.replace("a whole number of seconds", "a whole number of snapshots")
               for p in engine_service_seconds_problem(v["engine_service_model_keep"], "engine_service_model_keep", 1))
    mirror = v["engine_service_hub_mirror_url"]
    if not isinstance(mirror, str) or _BLANK_RE.search(mirror):
        out.append("variable engine_service_hub_mirror_url is %s, allowed: a URL (http:// or https://) without spaces"
                   " or control characters, or \"\"" % _json(mirror))
    if str(v["engine_service_retry_failed"]).lower() not in ("true", "false", "yes", "no"):
        out.append("variable engine_service_retry_failed is %s, allowed: true or false"
                   % _json(v["engine_service_retry_failed"]))
    return out


def engine_service_says(item, what, user=None):
    """A preflight problem of one model (an entry of engine_service_models or of engine_service_units)."""
    if not isinstance(item, dict):
        raise AnsibleFilterError("engine_service_says: the input must be a model (a dict), not %s" % _json(item))
    name = item.get("name")
    if what == "missing":
        return ("variable engine_service_models: model %s of %s does not exist on this node (allowed: a model id,"
                " or a path that exists)" % (_json(item.get("model")), _json(name)))
    if what == "unreadable":
        return ("variable engine_service_models: model %s of %s cannot be read by the service user %s on this node"
                " (vLLM runs as that user; allowed: a path it can read and enter)"
                % (_json(item.get("model")), _json(name), _json(user)))
    if what == "unchecked":
        return ("variable engine_service_models: model %s of %s could not be checked as the service user %s on this node:"
                " no answer within 30 s, and the check was killed (a mount that does not answer, or a check the user"
                " stopped)" % (_json(item.get("model")), _json(name), _json(user)))
    if what == "port_in_use":
        return ("variable engine_service_models: port %s of %s is in use by another program on this node (not %s%s.service)"
                % (item.get("port"), _json(name), UNIT_PREFIX, name))
    raise AnsibleFilterError("engine_service_says: unknown problem %s" % _json(what))
