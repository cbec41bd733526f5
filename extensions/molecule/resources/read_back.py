# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read an engine node's state back, independently of the role and its modules (molecule verify).

Run on the node by ``ansible.builtin.script`` with the node's python3 and one argument, the
engine root (``engine_node_root``). Prints one JSON document: the ``current`` link, every
environment under ``<root>/engines/vllm`` with its marker and its lock (each locked package
with its version or URL and its hashes, the lock file's own sha256), the debris of interrupted
runs (``*.partial``, ``*.old``), what the current environment's interpreter imports, and the uv
binaries under ``<root>/uv``. Standard library only; changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

MARKER = ".llmfleet-engine.json"
LOCK = "llmfleet-requirements.txt"
IMPORT_SNIPPET = (
    "import json, os, sys, torch, vllm\n"
    "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__,"
    " 'cuda': torch.version.cuda, 'prefix': os.path.realpath(sys.prefix)}))\n"
)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)")
URL_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*(\S+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def normalise(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    """Every requirement of a uv/pip lock: {name: {version, url, hashes}}; lines without a hash."""
    entries, unhashed = {}, []
    logical, current = [], ""
    with open(path) as handle:
        for raw in handle:
            line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
            if not line.strip():
                continue
            current += line.rstrip("\\").strip() + " "
            if not line.endswith("\\"):
                logical.append(current.strip())
                current = ""
    if current.strip():
        logical.append(current.strip())
    for line in logical:
        if line.startswith("-"):
            continue
        pin, url = PIN.match(line), URL_REQ.match(line)
        match = pin or url
        if not match:
            unhashed.append(line)
            continue
        hashes = HASH.findall(line)
        name = normalise(match.group(1))
        entries[name] = {
            "version": pin.group(2) if pin else None,
            "url": url.group(2).split("#", 1)[0] if url else None,
            "hashes": hashes,
        }
        if not hashes:
            unhashed.append(line)
    return entries, unhashed


def environment(path):
    env = {"path": path, "marker": None, "lock": None}
    marker = os.path.join(path, MARKER)
    if os.path.isfile(marker):
        with open(marker) as handle:
            env["marker"] = json.load(handle)
    lock = os.path.join(path, LOCK)
    if os.path.isfile(lock):
        entries, unhashed = read_lock(lock)
        env["lock"] = {"sha256": sha256(lock), "packages": entries, "unhashed": unhashed}
    return env


def imports(python):
    """What the interpreter imports, run without the test's environment variables."""
    environ = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    proc = subprocess.run([python, "-I", "-c", IMPORT_SNIPPET], env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    result = {"rc": proc.returncode, "stderr": proc.stderr[-2000:]}
    if proc.returncode == 0:
        result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return result


def main(root):
    engines = os.path.join(root, "engines", "vllm")
    state = {"root": root, "exists": os.path.isdir(root), "entries": [], "environments": {},
             "debris": [], "current": None, "imports": None, "uv": {}}
    if os.path.isdir(engines):
        state["entries"] = sorted(os.listdir(engines))
    for name in state["entries"]:
        full = os.path.join(engines, name)
        if name.endswith((".partial", ".old")):
            state["debris"].append(full)
        elif name == "current" or os.path.islink(full):
            continue
        elif os.path.isdir(full):
            state["environments"][name] = environment(full)
    link = os.path.join(engines, "current")
    if os.path.lexists(link):
        state["current"] = {"is_link": os.path.islink(link),
                            "target": os.readlink(link) if os.path.islink(link) else None,
                            "resolved": os.path.realpath(link)}
        python = os.path.join(link, "bin", "python")
        if os.path.exists(python):
            state["imports"] = imports(python)
    uv_root = os.path.join(root, "uv")
    if os.path.isdir(uv_root):
        for version in sorted(os.listdir(uv_root)):
            binary = os.path.join(uv_root, version, "uv")
            if os.access(binary, os.X_OK):
                proc = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      universal_newlines=True, timeout=60, check=False)
                state["uv"][version] = proc.stdout.strip()
    print(json.dumps(state, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
