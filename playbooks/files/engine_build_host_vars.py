# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""engine_build.yml's helper, run on the controller with the playbook's own Python (Ansible's
loader, so ``!vault`` values are read as Ansible reads them, and never decrypted):

``find VAR NODE GROUPS_JSON SOURCE...``
    For each inventory source (its directory, or the directory it is in) or playbook directory, the files Ansible loads for the
    host NODE (``host_vars/``, in Ansible's order: ``host_vars/NODE`` as a directory, walked in
    sorted order, or the first of ``NODE``, ``NODE.yml``, ``NODE.yaml``, ``NODE.json``) and for
    its groups (``group_vars/``); which of them set VAR, which are vault-encrypted as a whole,
    which ``host_vars`` files Ansible does not read, and any file that does not parse. JSON out.

``inventory VAR NODE PLAYBOOK_DIR SOURCE...``
    VAR of NODE as ``ansible-inventory --host`` reads the inventory now (every SOURCE, and the
    playbook's host_vars and group_vars), as JSON ``{"defined", "value"}``; exit 1 naming
    ansible-inventory's error when it fails.

``validate VAR VALUE FILE``
    FILE parses as Ansible parses it, is a mapping (or empty), and sets VAR to VALUE. Exit 1 with
    the reason otherwise (lineinfile's ``validate``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible.parsing.dataloader import DataLoader

VAULT_HEADER = b"$ANSIBLE_VAULT"
EXTENSIONS = ("", ".yml", ".yaml", ".json")


def _read(loader, path):
    """``(data, problem)``: the file as Ansible loads it (vault-tagged values left encrypted)."""
    path = os.path.abspath(path)
    with open(path, "rb") as handle:
        raw = handle.read()
    if raw.lstrip().startswith(VAULT_HEADER):
        return None, "encrypted"
    try:
        data = loader.load(raw.decode("utf-8"), file_name=path)
    except Exception as exc:  # pylint: disable=broad-exception-caught  # Ansible's own parse errors
        return None, "does not parse as Ansible reads it: %s" % (str(exc).splitlines() or ["?"])[0]
    if data is not None and not isinstance(data, dict):
        return None, "is not a mapping of variables (a %s)" % type(data).__name__
    return data or {}, None


def _scan(loader, var, files, out):
    for path in files:
        out["files"].append(path)
        data, problem = _read(loader, path)
        if problem == "encrypted":
            out["encrypted"].append(path)
        elif problem:
            out["errors"].append("%s %s" % (path, problem))
        elif var in data:
            out["defining"].append(path)


def find(var, node, groups, basedirs):
    loader = DataLoader()
    result = []
    for source in basedirs:
        # an inventory source's variables sit beside it: in it when it is a directory
        base = source if os.path.isdir(source) else os.path.dirname(source)
        entry = {"base": base, "host_vars": os.path.join(base, "host_vars"), "is_dir": False,
                 "files": [], "defining": [], "encrypted": [], "errors": [], "unread": [],
                 "groups": {"files": [], "defining": [], "encrypted": [], "errors": []}}
        host_vars = entry["host_vars"]
        if os.path.isdir(host_vars):
            found = loader.find_vars_files(os.path.abspath(host_vars), node)
            first = next((os.path.join(host_vars, node + ext) for ext in EXTENSIONS
                          if os.path.exists(os.path.join(host_vars, node + ext))), None)
            entry["is_dir"] = bool(first) and os.path.isdir(first)
            # Ansible stops at the first name that exists: the others it never reads
            entry["unread"] = [os.path.join(host_vars, node + ext) for ext in EXTENSIONS
                               if os.path.exists(os.path.join(host_vars, node + ext))
                               and os.path.join(host_vars, node + ext) != first]
            _scan(loader, var, [os.path.normpath(p) for p in found], entry)
        group_vars = os.path.join(base, "group_vars")
        if os.path.isdir(group_vars):
            for group in groups:
                _scan(loader, var, [os.path.normpath(p) for p in loader.find_vars_files(os.path.abspath(group_vars), group)],
                      entry["groups"])
        result.append(entry)
    return result


def validate(var, value, path):
    data, problem = _read(DataLoader(), path)
    if problem:
        return "the edited host_vars file %s" % problem
    if data.get(var) != value:
        return "the edited file sets %s to %r, not %r" % (var, data.get(var), value)
    return None


def inventory(var, node, playbook_dir, sources):
    """``{"defined": ..., "value": ...}``: VAR of NODE as ``ansible-inventory --host`` gives it, with
    the inventory SOURCES and the playbook's directory (vault-tagged values stay encrypted)."""
    argv = [sys.executable, "-m", "ansible", "inventory", "--playbook-dir", playbook_dir, "--host", node]
    argv += ["--inventory=" + source for source in sources]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("ansible-inventory --host %s failed (rc %s): %s" % (node, proc.returncode, proc.stderr.strip()))
    data = json.loads(proc.stdout)
    value = data.get(var)
    return {"defined": var in data, "value": value if isinstance(value, (str, int, float, bool)) or value is None
            else "(a %s)" % type(value).__name__}


def main(argv):
    if len(argv) >= 5 and argv[1] == "find":
        print(json.dumps(find(argv[2], argv[3], json.loads(argv[4]), argv[5:])))
        return 0
    if len(argv) >= 6 and argv[1] == "inventory":
        print(json.dumps(inventory(argv[2], argv[3], argv[4], argv[5:])))
        return 0
    if len(argv) == 5 and argv[1] == "validate":
        problem = validate(argv[2], argv[3], argv[4])
        if problem:
            sys.stderr.write(problem + "\n")
            return 1
        return 0
    sys.stderr.write("usage: engine_build_host_vars.py find VAR NODE GROUPS_JSON SOURCE... | inventory VAR NODE PLAYBOOK_DIR SOURCE..."
                     " | validate VAR VALUE FILE\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
