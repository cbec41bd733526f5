"""Fake engine environments for the role tests, made in milliseconds instead of by uv.

``make_env(root, "0.11.2", "cu129")`` makes ``<root>/engines/vllm/0.11.2-cu129/`` the way
``uv_engine_env`` leaves one, as far as the roles look at it:

- ``site/vllm`` and ``site/torch``: the fake packages of the fake upstream
  (``tests/upstream/pkgsrc``), with the ``version.py`` the upstream's builder writes;
- ``bin/vllm``: the console script; like a real environment's, its first line names the
  environment's own interpreter (``bin/python``, a link to the system's Python 3) and it finds its
  packages by absolute path, so a service started through ``current`` keeps running the
  environment it started from after ``current`` moves;
- ``pyvenv.cfg``, ``llmfleet-requirements.txt`` and the marker ``.llmfleet-engine.json``
  (``_envdir.inspect_env`` finds it intact, and ``uv_engine_env state=absent`` removes it).

Everything is root's, directories and scripts 0755, files 0644: the service user reads and runs it.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._envdir import (
    LOCK_FILE_NAME, MARKER_FORMAT, MARKER_NAME, file_sha256, wanted_spec)
from tests.upstream import builder, catalog

# torch of each CUDA build, as the fake upstream publishes it
TORCH = {"cu129": ("2.9.0+cu129", "12.9"), "cu13": ("2.9.0+cu130", "13.0")}
# engine_node's vars/main.yml __engine_node_env_regex: what is an environment under engines/vllm
ENV_NAME = re.compile(r"^[0-9][0-9A-Za-z.+!]*-(cu13|cu129)$")
SYSTEM_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else os.path.realpath(sys.executable)


def engines_dir(root) -> pathlib.Path:
    return pathlib.Path(root) / "engines" / "vllm"


def _mkdirs(path: pathlib.Path):
    """Make ``path`` and its missing parents, each 0755 (whatever the umask)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir()
        folder.chmod(0o755)


def _write(path: pathlib.Path, data, mode=0o644):
    _mkdirs(path.parent)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    path.chmod(mode)


def make_env(root, version: str, build: str = "cu129", vllm_version: str | None = None,
             fail_flag: bool = False, detach: bool = False) -> str:
    """Make the environment ``<version>-<build>`` under ``<root>/engines/vllm``; returns its name.

    ``vllm_version``: what ``vllm.__version__`` says (default ``version``; a GitHub build says
    e.g. ``0.20.0+cu129``). ``fail_flag``: ``bin/vllm`` exits 1 at once while the file
    ``<env>/fail-start`` exists (a test's hook makes this version fail from then on).
    ``detach``: ``bin/vllm`` runs the server in a child of its own session and exits 0 on SIGTERM
    without it, so a stop (the fake systemd signals the main process's group) leaves the server
    running: a stale server still answering on the port (the test kills it)."""
    name = "%s-%s" % (version, build)
    env = engines_dir(root) / name
    if env.exists():
        raise FileExistsError(env)
    torch_version, cuda = TORCH[build]
    vllm_version = vllm_version or version
    site = env / "site"
    for project, pkg_version in ((catalog.VLLM, vllm_version), (catalog.TORCH, torch_version)):
        for rel, data in builder._sources(project, pkg_version, cuda).items():  # pylint: disable=protected-access
            _write(site / rel, data)
    _mkdirs(env / "bin")
    os.symlink(SYSTEM_PYTHON, str(env / "bin" / "python"))
    script = (
        "#!%s\n"
        "# the vllm console script of the fake environment %s (tests/roles/engines.py)\n"
        "import sys\n"
        "sys.path.insert(0, %r)\n") % (env / "bin" / "python", name, str(site))
    if fail_flag:
        script += (
            "import os\n"
            "if os.path.exists(%r):\n"
            "    sys.exit('fake environment %s: fail-start exists, refusing to start')\n") % (str(env / "fail-start"), name)
    if detach:
        script += (
            "import os, signal\n"
            "child = os.fork()\n"
            "if child == 0:\n"
            "    os.setsid()  # out of the unit's process group: a stop does not reach the server\n"
            "    from vllm.scripts import main\n"
            "    sys.exit(main())\n"
            "signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # leaves the server running\n"
            "_pid, status = os.waitpid(child, 0)\n"
            "sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)\n")
    else:
        script += "from vllm.scripts import main\nsys.exit(main())\n"
    _write(env / "bin" / "vllm", script, mode=0o755)
    _write(env / "pyvenv.cfg", "home = %s\nversion_info = %d.%d\ninclude-system-site-packages = false\n"
           % (os.path.dirname(SYSTEM_PYTHON), sys.version_info[0], sys.version_info[1]))
    # its site-packages names the fake packages' directory, so that its own python imports vllm as a
    # real environment's does (the role import-checks an environment on disk before switching to it)
    _write(env / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages" / "llmfleet_fake_site.pth",
           "%s\n" % site)
    lock = env / LOCK_FILE_NAME
    _write(lock, "vllm==%s\ntorch==%s\n" % (vllm_version, torch_version))
    spec = wanted_spec({
        "engine": "vllm", "version": version, "build": build, "requirements": [], "wheel": None,
        "index_url": "http://127.0.0.1:9/simple", "extra_index_url": [], "index_strategy": None,
        "exclude_newer": None, "exclude_newer_package": {}, "python": SYSTEM_PYTHON,
        "python_preference": "only-system"}, "0.13.8")
    marker = {
        "format": MARKER_FORMAT, "spec": spec,
        "lock": {"file": LOCK_FILE_NAME, "sha256": file_sha256(str(lock)), "packages": 2},
        "installed_at": "2026-01-01T00:00:00Z", "verified": {"import": "vllm", "version": vllm_version},
        "gpu": None,
    }
    _write(env / MARKER_NAME, json.dumps(marker, indent=1, sort_keys=True) + "\n")
    return name


def remove_env(root, name: str):
    shutil.rmtree(str(engines_dir(root) / name))


def set_current(root, name: str):
    """Point ``current`` at ``name`` (relative, as the roles make it), replacing it atomically."""
    folder = engines_dir(root)
    tmp = folder / (".current.%d" % os.getpid())
    if os.path.lexists(str(tmp)):
        os.unlink(str(tmp))
    os.symlink(name, str(tmp))
    os.replace(str(tmp), str(folder / "current"))


def current(root) -> str | None:
    """Where ``current`` points (its target's name), or None when there is no link."""
    link = engines_dir(root) / "current"
    return os.path.basename(os.readlink(str(link))) if link.is_symlink() else None


def on_disk(root) -> list[dict]:
    """``[{name, mtime}]`` of the environments (with a marker), as engine_node's look.yml lists them."""
    out = []
    folder = engines_dir(root)
    for marker in sorted(folder.glob("*/" + MARKER_NAME)) if folder.is_dir() else []:
        if marker.parent.is_symlink() or not ENV_NAME.match(marker.parent.name):
            continue  # current, a *.partial
        out.append({"name": marker.parent.name, "mtime": marker.stat().st_mtime})
    return out
