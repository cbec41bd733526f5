# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

uv's command lines and the environment uv runs with, for the uv environment flow (``_uvenv``).
Pure functions: they build argv lists and dicts and run nothing.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import OptionError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import plain_http_credential_problem
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import (
    CONTROL_CHARS, EXPANDS_WHY, percent_decoded, split_userinfo, strip_userinfo, url_secrets, url_text_problem)

# The only UV_* variables a uv command inherits from the node. Every other one is dropped
# (``scrub_environ``): uv reads dozens, and many change what is installed or how files are
# checked (UV_LINK_MODE, UV_SKIP_WHEEL_FILENAME_CHECK, UV_INSECURE_NO_ZIP_VALIDATION,
# UV_NO_BUILD_ISOLATION, UV_PYTHON_INSTALL_MIRROR, ...); a denylist misses the next one uv adds.
# Those kept tune how uv talks to the network, never what it installs, which the flow pins by
# hashes anyway:
#   UV_HTTP_TIMEOUT, UV_REQUEST_TIMEOUT (its older name), UV_HTTP_CONNECT_TIMEOUT,
#   UV_HTTP_RETRIES        a slow or flaky mirror needs more patience than uv's defaults;
#   UV_NATIVE_TLS, UV_SYSTEM_CERTS
#                          trust the system's CA store, as a site with its own CA for its mirror
#                          needs (like SSL_CERT_FILE, which is not UV_* and is kept too);
#   UV_CONCURRENT_DOWNLOADS, UV_CONCURRENT_INSTALLS
#                          how much uv does at once, which a node may cap to spare its link or disk.
# Not UV_* and so kept as well: HTTP_PROXY, HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE, SSL_CERT_DIR.
KEPT_UV_ENV = (
    "UV_HTTP_TIMEOUT",
    "UV_REQUEST_TIMEOUT",
    "UV_HTTP_CONNECT_TIMEOUT",
    "UV_HTTP_RETRIES",
    "UV_NATIVE_TLS",
    "UV_SYSTEM_CERTS",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_CONCURRENT_INSTALLS",
)

# How uv puts files from its cache into the environment: uv's own default on Linux
# (copy-on-write where the filesystem has it, else hard links, else a copy). Set, so that a
# node's UV_LINK_MODE=symlink cannot tie the environment to a cache the flow deletes.
LINK_MODE = "clone"

# The names under which an index whose URL carries credentials is given to uv
# (``--default-index NAME=URL``, ``--index NAME=URL``); uv reads that index's credentials from
# UV_INDEX_<NAME>_USERNAME and UV_INDEX_<NAME>_PASSWORD.
DEFAULT_INDEX_NAME = "llmfleet-default"
EXTRA_INDEX_NAME = "llmfleet-extra-%d"

# uv refusing for lack of a wheel it may install (with --no-build), as uv 0.13 words it:
#   "Because vllm==0.20.0 has no wheels with a matching platform tag (e.g., `manylinux_2_17_x86_64`)"
#   "Because vllm==0.11.0 has no usable wheels"
#   "Wheels are required for `vllm` because building from source is disabled"
#   "Building source distributions is disabled, but attempted to build `vllm`"
_NO_WHEEL = (
    re.compile(r"(?<![\w.-])(?P<pkg>[A-Za-z0-9][A-Za-z0-9._-]*(?:==[^\s,]+)?) has no "
               r"(?P<why>usable wheels|wheels with a matching [A-Za-z ]*?tag(?: \(e\.g\., `[^`]+`\))?)"),
    re.compile(r"attempted to build `(?P<pkg>[^`]+)`"),
    re.compile(r"Wheels are required for `(?P<pkg>[^`]+)`"),
)

VERIFY_SNIPPET = (
    "import importlib, json, sys\n"
    "m = importlib.import_module(sys.argv[1])\n"
    "print(json.dumps({'version': getattr(m, '__version__', None),"
    " 'file': getattr(m, '__file__', None)}))\n"
)


def parse_uv_version(output):
    """``uv 0.13.8 (x86_64-unknown-linux-gnu)`` -> ``0.13.8``; None if it is not uv."""
    match = re.search(r"^uv (\S+)", (output or "").strip())
    return match.group(1) if match else None


def normalize_sha256(value):
    """Lower-case hex; accepts GitHub's ``sha256:<hex>`` form. Raises OptionError."""
    text = (value or "").strip().lower()
    if text.startswith("sha256:"):
        text = text[len("sha256:"):]
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise OptionError(
            "wheel.sha256 must be 64 hex digits (optionally prefixed by 'sha256:'), got %r" % value
        )
    return text


def exclude_newer_package_args(per_package):
    """``{name: timestamp|false}`` -> ``--exclude-newer-package NAME=VALUE`` pairs, sorted."""
    args = []
    for name in sorted(per_package or {}):
        value = per_package[name]
        if value is False or (isinstance(value, str) and value.strip().lower() == "false"):
            rendered = "false"
        elif isinstance(value, str) and value.strip():
            rendered = value.strip()
        else:
            raise OptionError(
                "exclude_newer_package[%s] must be a timestamp (e.g. 2025-10-03T20:10:00Z) or "
                "false, got %r" % (name, value)
            )
        args += ["--exclude-newer-package", "%s=%s" % (name, rendered)]
    return args


# -- credentials in URLs (split, stripped and redacted by common._urls) ------------------------


def param_secrets(params):
    """``url_secrets`` of every URL option of uv_engine_env."""
    return url_secrets(params.get("index_url"), params.get("python_install_mirror"),
                       (params.get("wheel") or {}).get("url"), params.get("kernels_index_url"),
                       *(params.get("extra_index_url") or []))


def _named_indexes(index_url=None, extra_index_url=None):
    """``(flag, name, url)`` of each index, in the order uv is given them."""
    found = []
    if index_url:
        found.append(("--default-index", DEFAULT_INDEX_NAME, index_url))
    for number, url in enumerate(extra_index_url or [], 1):
        found.append(("--index", EXTRA_INDEX_NAME % number, url))
    return found


def _env_name(index_name):
    return "UV_INDEX_%s" % re.sub(r"[^A-Z0-9]", "_", index_name.upper())


def index_args(index_url=None, extra_index_url=None, index_strategy=None):
    """The index options, the same for compile and install.

    ``--default-index`` and ``--index`` (uv's names for ``--index-url`` and
    ``--extra-index-url``, same precedence). An index whose URL carries credentials is given
    without them, named (``NAME=URL``): uv takes them from ``index_credentials``' variables,
    so they are never on a command line (which any user of the node can read).
    """
    args = []
    for flag, name, url in _named_indexes(index_url, extra_index_url):
        clean, user, password = split_userinfo(url)
        args += [flag, "%s=%s" % (name, clean) if user or password else clean]
    if index_strategy:
        args += ["--index-strategy", index_strategy]
    return args


def index_credentials(index_url=None, extra_index_url=None):
    """``UV_INDEX_<NAME>_USERNAME`` / ``_PASSWORD`` for each index whose URL carries them.

    uv sends them to that index, and to any URL on the same host, port and scheme (its files
    and, measured with uv 0.13, a wheel URL there); not to other hosts.
    """
    env = {}
    for _flag, name, url in _named_indexes(index_url, extra_index_url):
        _clean, user, password = split_userinfo(url)
        if user:
            env[_env_name(name) + "_USERNAME"] = user
        if password:
            env[_env_name(name) + "_PASSWORD"] = password
    return env


# The option that lets uv send an index's credentials over plain http to a host that is not this
# host's loopback, and the engine_node role's variable that sets it (for the refusal's words).
ALLOW_PLAIN_HTTP = "allow_plain_http_password"
ALLOW_PLAIN_HTTP_ROLE = "engine_node_index_allow_plain_http"


def credential_urls(params):
    """``(option, url)`` of each URL option whose userinfo uv sends (as Basic credentials): the
    indexes, FlashInfer's index and, for uv_engine_env, the Python downloads' mirror."""
    found = [("index_url", params.get("index_url"))]
    found += [("extra_index_url[%d]" % number, url) for number, url in enumerate(params.get("extra_index_url") or [])]
    found += [("kernels_index_url", params.get("kernels_index_url")),
              ("python_install_mirror", params.get("python_install_mirror"))]
    return [(option, url) for option, url in found if url]


def check_credential_transport(params):
    """Refuse (OptionError) an option's URL whose credentials uv would send over plain ``http`` to a
    host that is not this host's loopback, unless ``allow_plain_http_password``: the collection's
    one policy (``_http.plain_http_credential_problem``, its own HTTP client's), checked before uv
    runs at all (it gets the credentials in its environment), in check mode too. A ``wheel.url``
    with credentials must carry an index's on the same origin (``check_wheel_credentials``), so the
    index's check covers it."""
    if params.get(ALLOW_PLAIN_HTTP):
        return
    for option, url in credential_urls(params):
        _clean, user, password = split_userinfo(url)
        if not (user or password):
            continue
        problem = plain_http_credential_problem(url, "the credentials in %s" % option, ALLOW_PLAIN_HTTP)
        if problem:
            raise OptionError("%s (the engine_node role: %s=true). Nothing was done."
                              % (problem, ALLOW_PLAIN_HTTP_ROLE), option=option, url=strip_userinfo(url))


def _realm(url):
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.scheme.lower(), (parts.hostname or "").lower(),
            port or {"http": 80, "https": 443}.get(parts.scheme.lower()))


def check_wheel_credentials(wheel_url, index_url=None, extra_index_url=None):
    """A wheel URL may carry credentials only when an index on its host carries the same ones.

    uv writes a direct URL's credentials into the lock; so the wheel is resolved from its URL
    without them, and uv authenticates the download with the credentials of an index on the
    same host (``index_credentials``). Raises OptionError when no index there has them.
    """
    clean, user, password = split_userinfo(wheel_url)
    if not (user or password):
        return
    for url in [index_url] + list(extra_index_url or []):
        index_clean, index_user, index_password = split_userinfo(url)
        if index_clean and _realm(index_clean) == _realm(clean) and (index_user, index_password) == (user, password):
            return
    scheme, host, port = _realm(clean)
    raise OptionError(
        "wheel.url carries credentials, and no index_url or extra_index_url on %s://%s:%s carries the same: "
        "uv would write them into the lock file. Give them with an index on that host "
        "(https://USER:TOKEN@%s/...), whose credentials uv also sends for the wheel, or serve the wheel "
        "without credentials." % (scheme, host, port, host))


# -- what may become a requirement or lock line ----------------------------------------------------

# uv expands ``${NAME}`` in requirement lines (those it reads on stdin and those of a ``-r`` lock) from
# its own environment, where the indexes' credentials are (``UV_INDEX_<NAME>_PASSWORD``, and whatever
# the controller or the node has, GITHUB_TOKEN...). A URL an upstream gave (a fleet cache's listing,
# a release's assets) that holds one would send them to the host it names; the wheel's sha256 protects
# the file, not the secret. So no ``$`` in a line at all, nor a ``%`` escape that decodes to one (a
# tool on the way may decode it), nor white space or a control character in a URL (a line break
# starts a line of the attacker's own; the line parsers here and uv's must agree on where lines end).
LINE_BREAKERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\u2028\u2029]")


def line_text_problem(line):
    """Why a requirement line (as given, before it is written for uv) cannot be one, or None: a
    ``$`` anywhere, a control character, or a direct reference whose URL ``url_text_problem`` refuses."""
    text = str(line)
    if "$" in text:
        return "it holds a '$' (%s)" % EXPANDS_WHY
    control = CONTROL_CHARS.search(text)
    if control:
        return "it holds a control character or a line break (%r)" % control.group(0)
    if "@" in text.split("://", 1)[0]:
        # a direct reference, NAME @ URL: the @ comes before the URL's scheme
        ref = text.split("@", 1)[1].strip().split(" ", 1)[0].split(";", 1)[0]
        problem = url_text_problem(ref) if ref else None
        if problem:
            return problem
    if "$" in percent_decoded(text):
        return "it holds a %-escape that decodes to '$' (" + EXPANDS_WHY + ")"
    return None


def check_requirement_inputs(engine, version, requirements=None, wheel=None, where=None):
    """Refuse (OptionError) before uv sees them the values that become requirement lines: the engine,
    its version, the wheel's URL and each of ``requirements``, naming the option, the value (without
    userinfo) and, with ``where``, where such a value comes from."""
    values = [("engine", engine), ("version", version)]
    if wheel:
        values.append(("wheel.url", wheel.get("url")))
    values += [("requirements[%d]" % index, line) for index, line in enumerate(requirements or [])]
    for option, value in values:
        if value is None:
            continue
        problem = url_text_problem(value) if option == "wheel.url" else line_text_problem(value)
        if problem:
            raise OptionError(
                "%s %s cannot become a requirement line: %s. %sRefused before uv ran; nothing was done."
                % (option, _shown(value), problem, ("It comes from %s. " % where) if where else ""),
                option=option, value=_shown(value))


def _shown(value):
    """A value as a message shows it: repr-quoted (a control character seen), without userinfo, at most 200
    characters."""
    text = repr(strip_userinfo(str(value)))
    return text if len(text) <= 200 else text[:197] + "..."


# A project name as PEP 508 writes one (letters, digits, ``.``, ``-``, ``_``; a letter or digit at each end).
_PROJECT_NAME = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])\Z")


def _normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def omitted_packages(engine, omit):
    """``omit_packages`` checked: each a PEP 508 project name, not the engine. Returns the names PEP 503
    normalised, without duplicates, sorted (the order given decides nothing). Raises OptionError naming
    the option, the value and what is allowed."""
    names = set()
    for index, name in enumerate(omit or []):
        text = name if isinstance(name, str) else str(name)
        if not _PROJECT_NAME.match(text):
            raise OptionError(
                "omit_packages[%d] %s is not a project name: a PEP 508 name is letters, digits, '.', '-' and '_', "
                "starting and ending with a letter or digit (for example torchvision). Nothing was done."
                % (index, _shown(text)), option="omit_packages[%d]" % index, value=_shown(text))
        if _normalized(text) == _normalized(engine or ""):
            raise OptionError(
                "omit_packages[%d] %s is the engine itself (%s): the engine cannot be left out of its own lock. "
                "Nothing was done." % (index, _shown(text), engine), option="omit_packages[%d]" % index,
                value=_shown(text))
        names.add(_normalized(text))
    return sorted(names)


def no_emit_args(omit):
    """``--no-emit-package NAME`` for each name left out of the lock (resolved, not written)."""
    args = []
    for name in omit or ():
        args += ["--no-emit-package", name]
    return args


def engine_requirement(engine, version, wheel=None):
    """The engine's requirement line: a pin, or the wheel's URL (without credentials) pinned by
    its sha256."""
    if wheel:
        url = strip_userinfo(wheel["url"].split("#", 1)[0])
        return "%s @ %s#sha256=%s" % (engine, url, normalize_sha256(wheel["sha256"]))
    return "%s==%s" % (engine, version)


def no_wheel(output):
    """What uv's output says it found no installable wheel of (``vllm==0.20.0``), and why; or
    None when the failure is something else. Under ``--no-build`` this is how a node whose
    platform (glibc, architecture, Python) no wheel fits shows up."""
    for pattern in _NO_WHEEL:
        match = pattern.search(output or "")
        if match:
            why = match.groupdict().get("why")
            return match.group("pkg"), why
    return None


def requirement_lines(engine, version, requirements=None, wheel=None):
    """What uv pip compile reads on stdin: the engine first, then the extra requirements."""
    return [engine_requirement(engine, version, wheel)] + [
        r.strip() for r in (requirements or []) if r and r.strip()
    ]


def uv_environ(cache_dir, python_install_dir, python_preference, python_install_mirror=None,
               credentials=None):
    """The environment every uv command runs with (on top of the scrubbed process environment):
    everything the flow needs set explicitly, and the indexes' credentials (``index_credentials``)."""
    env = {
        "UV_CACHE_DIR": cache_dir,
        "UV_PYTHON_INSTALL_DIR": python_install_dir,
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_PREFERENCE": python_preference,
        "UV_LINK_MODE": LINK_MODE,
        "NO_COLOR": "1",
    }
    if python_install_mirror:
        env["UV_PYTHON_INSTALL_MIRROR"] = python_install_mirror
    env.update(credentials or {})
    return env


def scrub_environ(environ=None):
    """Drop every UV_* variable but ``KEPT_UV_ENV`` from this (module) process's environment,
    which the commands it runs inherit. Returns the names dropped, sorted."""
    environ = os.environ if environ is None else environ
    removed = sorted(name for name in environ if name.startswith("UV_") and name not in KEPT_UV_ENV)
    for name in removed:
        del environ[name]
    return removed


def venv_argv(uv, python, target):
    # --allow-existing: the flow creates the target itself, with its build token in it (_envdir)
    return [uv, "venv", "--relocatable", "--no-project", "--allow-existing", "--python", python, target]


def python_find_argv(uv, request):
    """``uv python find`` as uv venv looks (no project, no virtual environment; the preference and
    the managed Pythons' directory come from ``uv_environ``): prints the interpreter's path."""
    return [uv, "python", "find", "--no-project", "--system", request]


def python_install_argv(uv, request):
    """``uv python install`` into the managed Pythons' directory (``uv_environ``)."""
    return [uv, "python", "install", request]


def compile_argv(uv, python_bin, lock_path, exclude_newer, per_package=None, indexes=(), header=None, omit=()):
    argv = [uv, "pip", "compile", "--generate-hashes", "--emit-index-annotation", "--no-build",
            "--exclude-newer", exclude_newer]
    argv += exclude_newer_package_args(per_package)
    argv += list(indexes)
    argv += no_emit_args(omit)
    if header:
        argv += ["--custom-compile-command", header]
    argv += ["--python", python_bin, "--output-file", lock_path, "-"]
    return argv


def install_argv(uv, python_bin, lock_path, indexes=()):
    return [uv, "pip", "install", "--python", python_bin, "--require-hashes", "--no-deps", "--no-build",
            "-r", lock_path] + list(indexes)


def verify_argv(python_bin, import_name):
    return [python_bin, "-I", "-c", VERIFY_SNIPPET, import_name]


def resolve_command(argv, env_dir):
    """A bare program name that the environment's ``bin/`` has is taken from there."""
    argv = list(argv)
    if argv and "/" not in argv[0]:
        candidate = os.path.join(env_dir, "bin", argv[0])
        if os.path.exists(candidate):
            argv[0] = candidate
    return argv


# -- the controller's compile, for a group of nodes (uv_fleet_lock) ------------------------------


def fleet_environ(cache_dir=None, credentials=None):
    """The environment of the controller's ``uv pip compile``: no config files, no Python download
    (``--python-version`` and ``--python-platform`` describe the nodes; no interpreter of theirs
    is needed, and nothing is built), the indexes' credentials (``index_credentials``). The cache
    is ``cache_dir`` (which the caller judges), or none: ``UV_NO_CACHE`` (uv then uses a private
    temporary directory), never uv's default one under ``XDG_CACHE_HOME``, which nobody judged."""
    env = {"UV_NO_CONFIG": "1", "NO_COLOR": "1", "UV_PYTHON_DOWNLOADS": "never",
           "UV_PYTHON_PREFERENCE": "only-system"}
    if cache_dir:
        env["UV_CACHE_DIR"] = cache_dir
        env["UV_NO_CACHE"] = None
    else:
        env["UV_NO_CACHE"] = "1"
        env["UV_CACHE_DIR"] = None
    env.update(credentials or {})
    return env


def fleet_compile_argv(uv, output, exclude_newer, python_version, python_platform, per_package=None,
                       indexes=(), header=None, pylock=False, src="-", omit=()):
    """``uv pip compile`` for nodes described by ``python_version`` and ``python_platform``, not for
    this machine: no ``--python``. ``pylock``: PEP 751 format (``output`` must be named
    ``pylock.toml`` or ``pylock.<name>.toml``)."""
    argv = [uv, "pip", "compile", "--generate-hashes", "--no-build"]
    if not pylock:
        argv += ["--emit-index-annotation"]
    argv += ["--exclude-newer", exclude_newer]
    argv += exclude_newer_package_args(per_package)
    argv += list(indexes)
    argv += no_emit_args(omit)
    argv += ["--python-version", python_version, "--python-platform", python_platform]
    if header:
        argv += ["--custom-compile-command", header]
    if pylock:
        argv += ["--format", "pylock.toml"]
    argv += ["--output-file", output, src]
    return argv
