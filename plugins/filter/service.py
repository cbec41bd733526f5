# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_service role's decisions, as filters: what is wrong with a host's served models,
the systemd unit of each model (rendered here, line by line, from validated values) and its
root-only secrets file, so that the role's task files and its unit template hold no logic.

Unit files are data: every value that reaches a unit is refused when it holds a control
character (it would end the line and start a directive of its own) and escaped by systemd's
rules everywhere else - ``%`` (specifiers) as ``%%``, ``$`` in ``ExecStart=`` as ``$$``,
backslashes and double quotes inside double quotes. Secrets (API key, Hugging Face token)
never reach the unit, argv or what ``engine_service_units`` returns: they go to an
``EnvironmentFile=`` (``engine_service_secret_file``) that the role writes root-only.

Unit tests: ``tests/unit/plugins/filter/test_service_filter.py``; what systemd itself makes of
the rendered units: ``tests/unit/plugins/filter/test_service_units_systemd.py``.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _placement

# A unit instance name: systemd accepts more, but these names also make directory names.
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_DIR_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]*")
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# What ends or breaks a line of a unit file or of an environment file: C0 controls (newline,
# carriage return, tab, NUL, ...), DEL, C1 controls; and lone surrogates (not UTF-8 at all).
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_ALLOWED = ("text without control characters (newline, carriage return, tab, NUL, DEL: they would end"
                    " the unit file's line and start directives of their own)")
# Path parts the unit names unquoted (WorkingDirectory=, ReadWritePaths=, EnvironmentFile=): no
# whitespace, quotes, backslashes, % (specifiers) or $.
_PATH_PART_RE = re.compile(r"[A-Za-z0-9._+@-]+")
_PATH_ALLOWED = ("an absolute path of letters, digits, '.', '_', '+', '@', '-' and '/', without '.' or '..' parts,"
                 " not / and not under /home, /root or /run/user (ProtectHome=yes hides them)")
# An ExecStart= word that needs no quotes (and no escapes but the two below).
_PLAIN_WORD_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")

# The options the role sets itself on the command line: a model's args must not repeat them.
OWNED_ARGS = ("--host", "--port", "--served-model-name", "--shutdown-timeout")
# vLLM's flag that turns uvicorn's access log off (vllm PR #14754, 0.8: every version the role installs).
# Request logging, with the prompts, is off by default from 0.11 on (vllm PR #21739: only --enable-log-requests
# turns it on); the old --disable-log-requests was removed in 0.12 (vllm PR #29402), so the role passes neither.
ACCESS_LOG_OFF = "--disable-uvicorn-access-log"
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
# systemd waits this much longer than vLLM's --shutdown-timeout before it kills (TimeoutStopSec=).
STOP_MARGIN_S = 30
MIN_LIMIT_NOFILE = 1024
SECRETS_DIR = "/etc/llmfleet/engine_service"
MODEL_KEYS = ("name", "model", "port", "args", "environment", "api_key", "revision", "gpus", "internal_port")
# A model id on the hub (org/name), as engine_service_models[].model names it when it is pinned.
_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# A revision: a branch, a tag or a commit (git's ref names, without what a ref may not hold).
_REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,199}")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
# What the role sets on the command line and in the environment of a pinned model's unit.
PINNED_ARGS = ("--revision", "--tokenizer-revision", "--code-revision")
PINNED_NAMES = ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")

# Hardening that vLLM tolerates, each with why it is there, and what is left out on purpose.
HARDENING = (
    ("NoNewPrivileges=yes", "no privilege gained through setuid binaries, nvidia-modprobe included: the GPU's"
                            " device nodes must exist before the start (nvidia-persistenced)"),
    ("PrivateTmp=yes", "a /tmp and /var/tmp of its own (vLLM's IPC paths and Inductor's scratch files)"),
    ("ProtectHome=yes", "/home, /root and /run/user hidden; HOME is <root>/serve"),
    ("ProtectKernelModules=yes", "no module loading"),
    ("ProtectKernelTunables=yes", "/proc/sys and /sys read-only"),
    ("ProtectControlGroups=yes", "the cgroup tree read-only"),
    ("RestrictSUIDSGID=yes", "no setuid/setgid files made"),
    ("LockPersonality=yes", "no personality(2) changes"),
    ("RestrictRealtime=yes", "no realtime scheduling"),
)
LEFT_OUT = (
    ("PrivateDevices=", "would hide the GPUs (/dev/nvidia*)"),
    ("ProtectClock=", "installs a device allow-list that denies /dev/nvidia*"),
    ("MemoryDenyWriteExecute=", "Triton, Inductor and CUDA JIT-compile into writable, executable memory"),
    ("RestrictAddressFamilies=", "NCCL, Gloo and Ray use netlink, unix and IP sockets (and InfiniBand more)"),
    ("IPAddressDeny=", "multi-node parallelism and model downloads connect out"),
    ("SystemCallFilter=", "CUDA, NCCL and PyTorch make calls outside systemd's usual sets"),
)


# One copy of these helpers, shared with the placement rules.
_json = _placement.json_text
_whole = _placement.whole


def _port(value):
    """The port as an int, or None when it is not a whole number in 1..65535 (bools are not)."""
    return _whole(value, 1, 65535)


def _control(value):
    """True when the text has a control character (or is not valid text at all)."""
    return bool(_CONTROL_RE.search(str(value)))


def _path_problem(value):
    """None when ``value`` is a path the unit can name unquoted and the service may write, else why not."""
    if not isinstance(value, str) or not value.startswith("/"):
        return _PATH_ALLOWED
    parts = value.rstrip("/").split("/")[1:]
    if not parts or not all(_PATH_PART_RE.fullmatch(p) and p not in (".", "..") for p in parts):
        return _PATH_ALLOWED
    if parts[0] in ("home", "root") or parts[:2] == ["run", "user"]:
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


def _scalar(value):
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _environment_problems(env, where, secret=False, root=None):
    """Problems of an environment mapping (``where`` is its variable path)."""
    if not isinstance(env, dict):
        return ["%s is %s, allowed: a mapping of environment variable names to values"
                % (where, "a " + type(env).__name__ if secret else _json(env))]
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
                out.append("%s is a %s (a secret, not shown), allowed: a string" % (item, type(value).__name__))
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
        return "%s is a %s (a secret, not shown), allowed: a string (quote it)" % (where, type(value).__name__)
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


def engine_service_model_pins(models):
    """The distinct (model, revision) pins of lists of models (``engine_service_models`` of several hosts, or
    of one): ``[{repo, revision, key, file}]``, sorted by key. ``key`` (``org/name@revision``) indexes the
    locks; ``file`` is the lock file's name (``org--name@revision.json``, ``/`` of a revision as ``--``).
    Entries that are not valid pins are left out (the validation names them)."""
    if not isinstance(models, list):
        raise AnsibleFilterError("engine_service_model_pins: the input must be a list of models (or of lists of"
                                 " models), not %s" % type(models).__name__)
    flat = []
    for entry in models:
        flat.extend(entry if isinstance(entry, list) else [entry])
    pins = {}
    for entry in flat:
        if not isinstance(entry, dict) or "revision" not in entry:
            continue
        if _revision_problems(entry, "model") or not isinstance(entry.get("model"), str):
            continue
        key = "%s@%s" % (entry["model"], entry["revision"])
        pins[key] = {"repo": entry["model"], "revision": entry["revision"], "key": key,
                     "file": "%s@%s.json" % (entry["model"].replace("/", "--"), entry["revision"].replace("/", "--"))}
    return [pins[k] for k in sorted(pins)]


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


def _exec_word(text):
    """One word of ExecStart= that systemd reads back as ``text``: double-quoted unless it is plain, with
    ``\\`` and ``"`` escaped inside the quotes, ``%`` as ``%%`` (specifiers are expanded on the whole line
    before it is split) and ``$`` as ``$$`` (variables are expanded in each word when the command runs)."""
    text = str(text)
    if not _PLAIN_WORD_RE.fullmatch(text):
        text = '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')
    return text.replace("%", "%%").replace("$", "$$")


def _environment_word(key, value):
    """One assignment of Environment=: the whole of it double-quoted, ``\\`` and ``"`` escaped, ``%`` as ``%%``
    (specifiers are expanded in each assignment after unquoting; ``$`` means nothing there)."""
    text = "%s=%s" % (key, value)
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def _env_file_value(value):
    """A value of an EnvironmentFile=, double-quoted: inside, systemd (like a shell) reads ``\\`` followed by one of
    ``"\\`$`` as that character and expands nothing (no variables, no specifiers)."""
    out = str(value)
    for char in ("\\", '"', "`", "$"):
        out = out.replace(char, "\\" + char)
    return '"%s"' % out


def _fail(where, problems):
    if problems:
        raise AnsibleFilterError("%s: %s" % (where, "; ".join(problems)))


def _unit_text(unit, user, ready_timeout, shutdown_timeout, limit_nofile, env_name):
    """The unit file of one model, line by line, from validated values only."""
    lines = [
        "[Unit]",
        "Description=vLLM serving %s (%s), managed by llmfleet.engines" % (unit["name"], env_name),
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        "User=%s" % user,
        "Group=%s" % user,
        "WorkingDirectory=%s" % unit["working_directory"],
    ]
    lines += ["Environment=%s" % word for word in unit["environment"]]
    lines += [
        "# The secrets (VLLM_API_KEY, HF_TOKEN, engine_service_secret_environment), root-only (0600), read by",
        "# systemd before it starts the service. No '-': without the file the unit does not start (rather",
        "# than serve without its API key).",
        "EnvironmentFile=%s" % unit["environment_file"],
        "ExecStart=%s" % unit["exec_start"],
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStartSec=%d" % ready_timeout,
        "KillSignal=SIGTERM",
        "# vLLM's --shutdown-timeout (%d s) lets in-flight requests finish; systemd waits %d s more, then kills."
        % (shutdown_timeout, STOP_MARGIN_S),
        "TimeoutStopSec=%d" % (shutdown_timeout + STOP_MARGIN_S),
        "# vLLM with tensor parallelism: every worker holds many files (shared memory, sockets, NCCL).",
        "LimitNOFILE=%d" % limit_nofile,
        "",
        "# Hardening that vLLM tolerates.",
        "# The file system read-only but /dev (so /dev/shm, NCCL's shared memory, stays writable), /proc, /sys",
        "# and what the service writes: its home and working directories, its caches.",
        "ProtectSystem=strict",
        "ReadWritePaths=%s" % " ".join(unit["writable_dirs"]),
    ]
    for setting, why in HARDENING:
        lines += ["# %s" % why, setting]
    lines.append("# Left out on purpose, as they break vLLM:")
    lines += ["# %s %s" % (setting, why) for setting, why in LEFT_OUT]
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


def engine_service_units(models, root, env_name, host="127.0.0.1", shutdown_timeout=30, environment=None,
                         user="llmfleet-vllm", ready_timeout=900, limit_nofile=65536, secrets_dir=SECRETS_DIR,
                         api_key="", locks=None, access_log=False, gpus=None):
    """The unit of each served model: ``[{name, unit, port, model, url, argv, exec_start, environment, cache_dirs,
    working_directory, writable_dirs, environment_file, api_key_from, revision, commit, gpus, vllm_port,
    tensor_parallel_size, text}]``.

    ``env_name`` is the environment the unit starts (``<version>-<build>``, where ``current``
    points then): vLLM's, Triton's and FlashInfer's compiled caches are kept per environment, so
    a new version never loads kernels another one compiled. ``api_key`` (``engine_service_api_key``, or
    whether it is set, a bool) only decides ``api_key_from``: no secret is returned.

    ``locks`` maps each pin (``org/name@revision``, see ``engine_service_model_pins``) to its model lock
    (``hf_revision``'s ``lock``, or at least ``{commit}``). A pinned model's unit serves offline
    (``HF_HUB_OFFLINE=1``) from the snapshot that ``model_snapshot`` staged under ``<root>/models``
    (``HF_HUB_CACHE``, read-only to the service), at that commit (``--revision``, ``--tokenizer-revision``).

    ``access_log`` (``engine_service_access_log``) false: ``--disable-uvicorn-access-log`` (a line per request,
    Prometheus' scrapes and the gate's /health included, would flood the journal), unless the model's args set it.

    ``gpus``: the node's GPUs (``gpu_probe``'s ``gpus``, or its whole result), needed when a model gives ``gpus``:
    its unit gets ``CUDA_VISIBLE_DEVICES`` with their UUIDs in the order given, and ``--tensor-parallel-size`` the
    number of its GPUs (divided by its pipeline and data parallel sizes) unless its args set it. Every unit gets a
    ``VLLM_PORT`` of its own (``internal_port``, else one derived from its port: plugins/module_utils/serve/_placement.py).
    """
    _fail("engine_service_units", engine_service_problems(
        models, environment=environment or {}, api_key=None if isinstance(api_key, bool) else api_key,
        root=root, user=user, host=host,
        shutdown_timeout=shutdown_timeout, ready_timeout=ready_timeout, limit_nofile=limit_nofile,
        secrets_dir=secrets_dir))
    if not isinstance(env_name, str) or not _ENV_DIR_RE.fullmatch(env_name):
        raise AnsibleFilterError("engine_service_units: env_name must be an environment's name, not %s"
                                 % _json(env_name))
    root = root.rstrip("/")
    secrets_dir = secrets_dir.rstrip("/")
    shutdown_timeout, ready_timeout, limit_nofile = int(shutdown_timeout), int(ready_timeout), int(limit_nofile)
    common = dict(environment or {})
    try:
        node_gpus = _placement.node_gpus(gpus)
    except ValueError as exc:
        raise AnsibleFilterError("engine_service_units: %s" % exc)
    internal = _placement.internal_ports(models)
    out = []
    for index, entry in enumerate(models):
        port = _port(entry["port"])
        cache = "%s/cache" % root
        env = {
            "HOME": "%s/serve" % root,
            "HF_HOME": "%s/huggingface" % cache,
            "VLLM_CACHE_ROOT": "%s/vllm/%s" % (cache, env_name),
            "TRITON_CACHE_DIR": "%s/triton/%s" % (cache, env_name),
            "FLASHINFER_WORKSPACE_BASE": "%s/flashinfer/%s" % (cache, env_name),
            "XDG_CACHE_HOME": "%s/xdg/%s" % (cache, env_name),
        }
        env.update(common)
        env.update(entry.get("environment") or {})
        commit = None
        if "revision" in entry:
            pin = "%s@%s" % (entry["model"], entry["revision"])
            lock = (locks or {}).get(pin) if isinstance(locks, dict) else None
            commit = lock.get("commit") if isinstance(lock, dict) else None
            if not isinstance(commit, str) or not _COMMIT_RE.fullmatch(commit):
                raise AnsibleFilterError("engine_service_units: no lock (a commit) for the model %s at revision %s"
                                         " (engine_service_models entry %s): the role resolves it with"
                                         " llmfleet.engines.hf_revision before it renders the units"
                                         % (_json(entry["model"]), _json(entry["revision"]), _json(entry["name"])))
            env["HF_HUB_CACHE"] = "%s/models" % root
            env["HF_HUB_OFFLINE"] = "1"
        env["VLLM_PORT"] = internal[index]
        sizes = _placement.parallel_sizes(entry)
        visible = None
        if "gpus" in entry:
            if node_gpus is None:
                raise AnsibleFilterError("engine_service_units: the model %s gives gpus: the node's GPUs (gpu_probe's"
                                         " gpus, the parameter gpus) are needed to render its unit" % _json(entry["name"]))
            try:
                visible = _placement.visible_devices(entry["gpus"], node_gpus)
            except ValueError as exc:
                raise AnsibleFilterError("engine_service_units: the model %s: %s" % (_json(entry["name"]), exc))
            env["CUDA_VISIBLE_DEVICES"] = visible
        env = {key: str(value) for key, value in env.items()}
        argv = ["%s/engines/vllm/current/bin/vllm" % root, "serve", entry["model"], "--host", host,
                "--port", str(port), "--served-model-name", entry["name"],
                "--shutdown-timeout", str(shutdown_timeout)]
        if commit:
            argv += ["--revision", commit, "--tokenizer-revision", commit]
        if not access_log and not any(_arg_sets(a, (ACCESS_LOG_OFF,)) for a in entry.get("args") or []):
            argv.append(ACCESS_LOG_OFF)
        if visible is not None and not sizes["tensor_given"]:
            argv += ["--tensor-parallel-size", str(sizes["tensor"])]
        argv += [str(a) for a in entry.get("args") or []]
        connect = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        unit_name = "%s%s.service" % (UNIT_PREFIX, entry["name"])
        cache_dirs = sorted({env[k].rstrip("/") for k in PATH_NAMES if k != "HOME"})
        unit = {
            "name": entry["name"],
            "unit": unit_name,
            "port": port,
            "model": entry["model"],
            "url": "http://%s:%d" % ("[%s]" % connect if ":" in connect else connect, port),
            "argv": argv,
            "exec_start": " ".join(_exec_word(a) for a in argv),
            "environment": [_environment_word(k, env[k]) for k in sorted(env)],
            "cache_dirs": cache_dirs,
            "working_directory": "%s/serve/%s" % (root, entry["name"]),
            # the service user's home first (the working directories are in it), then the rest
            "writable_dirs": ["%s/serve" % root] + sorted(({env["HOME"].rstrip("/")} | set(cache_dirs))
                                                          - {"%s/serve" % root}),
            "environment_file": "%s/%s.env" % (secrets_dir, unit_name),
            "api_key_from": "model" if entry.get("api_key") else "global" if api_key else "none",
            "revision": entry.get("revision"),
            "commit": commit,
            "gpus": visible.split(",") if visible is not None else None,
            "vllm_port": internal[index],
            "tensor_parallel_size": sizes["tensor"],
        }
        unit["text"] = _unit_text(unit, user, ready_timeout, shutdown_timeout, limit_nofile, env_name)
        out.append(unit)
    return out


def engine_service_secret_file(model, api_key="", hf_token="", secret_environment=None):
    """The text of the root-only EnvironmentFile= of one model (an entry of ``engine_service_models``):
    ``VLLM_API_KEY`` (the model's ``api_key``, else ``api_key``), ``HF_TOKEN`` (``hf_token``; not for a
    pinned model, which is served offline from what the role staged) and
    ``secret_environment``, each value double-quoted for systemd's parser. Empty values are left out; the
    file is written even then (the unit requires it). Never shows a secret in an error."""
    if not isinstance(model, dict):
        raise AnsibleFilterError("engine_service_secret_file: the input must be a model of engine_service_models"
                                 " (a dict), not a %s" % type(model).__name__)
    where = "variable engine_service_models (the model %s)" % _json(model.get("name"))
    problems = [p.replace("variable engine_service_models[0]", where)
                for p in engine_service_problems([model], secret_environment=secret_environment or {},
                                                 api_key=api_key, hf_token=hf_token)]
    _fail("engine_service_secret_file", problems)
    values = dict(secret_environment or {})
    # A pinned model is staged by the role and served offline (HF_HUB_OFFLINE=1): its unit, vLLM and
    # any remote code it runs get no token to read from /proc/<pid>/environ.
    if hf_token and "revision" not in model:
        values["HF_TOKEN"] = hf_token
    key = model.get("api_key") or api_key
    if key:
        values["VLLM_API_KEY"] = key
    lines = ["# Secrets of %s%s.service (llmfleet.engines.engine_service), read by systemd: keep it root-only, 0600."
             % (UNIT_PREFIX, model["name"])]
    lines += ["%s=%s" % (k, _env_file_value(values[k])) for k in sorted(values)]
    return "\n".join(lines) + "\n"


def engine_service_lock_age(stats, now):
    """Seconds since a rollout lock was last touched, from the ``stat`` results of its holder file and
    of its directory (in that order; more results are ignored): the holder's age, else (a run that
    died between making the directory and writing the holder) the directory's; -1 when there is
    no lock."""
    if not isinstance(stats, list) or len(stats) < 2:
        raise AnsibleFilterError("engine_service_lock_age: the input must be the stat results of the holder file"
                                 " and of the lock directory")
    for result in stats[:2]:
        info = (result or {}).get("stat") or {}
        if info.get("exists"):
            return max(float(now) - float(info.get("mtime") or 0), 0.0)
    return -1.0


def engine_service_unit_states(text):
    """``systemctl show -p Id -p LoadState -p ActiveState -p SubState UNIT...`` -> ``{unit: {...}}``."""
    out = {}
    for block in re.split(r"\n\s*\n", str(text or "").strip()):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if fields.get("Id"):
            out[fields["Id"]] = {"load": fields.get("LoadState", ""), "active": fields.get("ActiveState", ""),
                                 "sub": fields.get("SubState", "")}
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
            "engine_service_model_pins": engine_service_model_pins,
            "engine_service_secret_file": engine_service_secret_file,
            "engine_service_unit_states": engine_service_unit_states,
            "engine_service_lock_age": engine_service_lock_age,
            "engine_service_says": engine_service_says,
            "engine_service_failure": engine_service_failure,
            "engine_service_gate_figures": engine_service_gate_figures,
        }
