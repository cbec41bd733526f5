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

from ansible_collections.llmfleet.engines.plugins.module_utils._errors import OptionError

# Environment variables that would change what uv resolves or how it checks files. The node's
# configuration must not decide what is installed (UV_NO_CONFIG=1 covers the files; these are
# the variables). Network settings (proxies, certificates, timeouts) are left alone.
RESOLUTION_ENV = (
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
    "UV_INDEX_STRATEGY",
    "UV_EXCLUDE_NEWER",
    "UV_PRERELEASE",
    "UV_RESOLUTION",
    "UV_CONSTRAINT",
    "UV_OVERRIDE",
    "UV_BUILD_CONSTRAINT",
    "UV_TORCH_BACKEND",
    "UV_NO_BINARY",
    "UV_NO_BINARY_PACKAGE",
    "UV_NO_BUILD",
    "UV_NO_BUILD_PACKAGE",
    "UV_PYTHON",
    "UV_SYSTEM_PYTHON",
    "UV_BREAK_SYSTEM_PACKAGES",
    "UV_REQUIRE_HASHES",
    "UV_VERIFY_HASHES",
    "UV_NO_VERIFY_HASHES",
    "UV_CONFIG_FILE",
    "UV_CUSTOM_COMPILE_COMMAND",
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


def index_args(index_url=None, extra_index_url=None, index_strategy=None):
    """The index options, the same for compile and install."""
    args = []
    if index_url:
        args += ["--index-url", index_url]
    for url in extra_index_url or []:
        args += ["--extra-index-url", url]
    if index_strategy:
        args += ["--index-strategy", index_strategy]
    return args


def engine_requirement(engine, version, wheel=None):
    """The engine's requirement line: a pin, or the wheel's URL pinned by its sha256."""
    if wheel:
        url = wheel["url"].split("#", 1)[0]
        return "%s @ %s#sha256=%s" % (engine, url, normalize_sha256(wheel["sha256"]))
    return "%s==%s" % (engine, version)


def requirement_lines(engine, version, requirements=None, wheel=None):
    """What uv pip compile reads on stdin: the engine first, then the extra requirements."""
    return [engine_requirement(engine, version, wheel)] + [
        r.strip() for r in (requirements or []) if r and r.strip()
    ]


def uv_environ(cache_dir, python_install_dir, python_preference, python_install_mirror=None):
    """The environment every uv command runs with."""
    env = {
        "UV_CACHE_DIR": cache_dir,
        "UV_PYTHON_INSTALL_DIR": python_install_dir,
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_PREFERENCE": python_preference,
        "NO_COLOR": "1",
    }
    if python_install_mirror:
        env["UV_PYTHON_INSTALL_MIRROR"] = python_install_mirror
    return env


def scrub_environ(environ=None):
    """Drop the node's resolution-changing uv variables from this (module) process."""
    environ = os.environ if environ is None else environ
    removed = [name for name in RESOLUTION_ENV if name in environ]
    for name in removed:
        del environ[name]
    return removed


def venv_argv(uv, python, target):
    return [uv, "venv", "--relocatable", "--no-project", "--python", python, target]


def compile_argv(uv, python_bin, lock_path, exclude_newer, per_package=None, indexes=(), header=None):
    argv = [uv, "pip", "compile", "--generate-hashes", "--emit-index-annotation",
            "--exclude-newer", exclude_newer]
    argv += exclude_newer_package_args(per_package)
    argv += list(indexes)
    if header:
        argv += ["--custom-compile-command", header]
    argv += ["--python", python_bin, "--output-file", lock_path, "-"]
    return argv


def install_argv(uv, python_bin, lock_path, indexes=()):
    return [uv, "pip", "install", "--python", python_bin, "--require-hashes", "--no-deps",
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
