#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: devpi_warm
short_description: Fill the fleet cache with the files of a lock, one at a time, before the nodes install it
version_added: 0.2.0
description:
  - For each package of O(lock), finds on the devpi-server at O(url) (in O(indexes), in order)
    the files whose sha256 the lock pins and that fit nodes of O(python_version) and
    O(python_platform), and downloads each once, to the end, checking its sha256. A mirror index
    fetches a file from its upstream the first time it is asked for it and keeps it; asked one at
    a time here, each file comes from the upstream once, and the nodes that then install the lock
    together find every file and index page in the cache.
  - A file the cache serves with another sha256 fails the task before any node downloads it; the message
    names the file and the lock's sha256, never the digest of what was served.
  - Only files on the cache's own origin (the scheme, host and port of O(url)) are fetched; a listing that
    names a file elsewhere, or a redirect of a listed file to another origin, fails the task before anything
    is asked there (a hostile cache could otherwise have this host fetch what only it may reach).
  - Each download is bounded, in bytes (the size the listing gives, else 16 GiB) and in time (four times
    O(timeout), plus a second for each MiB of the listed size); a body that goes on past either fails the task.
  - Reads only, as far as the fleet is concerned (C(changed) is always false); it also runs in
    check mode (where a server that does not answer yet is not an error). llmfleet.engines.engine_node
    runs it on the controller, once per fleet lock, when C(engine_node_cache_url) is set.
  - It sends no password; one in O(url)'s userinfo goes only over C(https://) or to this host's
    loopback, unless O(allow_plain_http_password) is set.
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.devpi
options:
  lock:
    description: The lock, as C(uv pip compile --generate-hashes) writes it.
    type: str
    required: true
  indexes:
    description: The indexes the lock's packages are looked for in, in order, as C(user/name).
    type: list
    elements: str
    default: [root/pypi]
  python_version:
    description: The nodes' Python version, for example C(3.12).
    type: str
    required: true
  python_platform:
    description: The nodes' platform as uv names it, for example C(x86_64-manylinux_2_35).
    type: str
    required: true
  # replaces the llmfleet.engines.devpi fragment's timeout (default 60): a lock's files take longer
  timeout:
    description:
      - Seconds to wait for each answer (each wait on the network). A whole download must end within four
        times this, plus a second for each MiB of the size the listing gives.
    type: int
    default: 600
"""

EXAMPLES = r"""
- name: Fill the fleet cache with the lock's files
  llmfleet.engines.devpi_warm:
    url: http://cache.example:3141
    lock: "{{ lookup('ansible.builtin.file', 'locks/vllm-0.20.0-cu13-x86_64-manylinux_2_35-py3.12.txt') }}"
    indexes: [root/pypi]
    python_version: "3.12"
    python_platform: x86_64-manylinux_2_35
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
files:
  description: The files fetched through the cache, C({name, url, sha256, bytes}).
  returned: always
  type: list
  elements: dict
bytes:
  description: Their total size.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpioptions import devpi_argument_spec
from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpi import (
    Devpi,
    DevpiError,
    check_index_name,
    fetch_checked,
    wheel_fits,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvlock import parse_lock


def argument_spec():
    return dict(
        devpi_argument_spec(timeout=600),
        lock=dict(type="str", required=True),
        indexes=dict(type="list", elements="str", default=["root/pypi"]),
        python_version=dict(type="str", required=True),
        python_platform=dict(type="str", required=True),
    )


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
    )
    p = module.params
    for name in p["indexes"]:
        problem = check_index_name(name)
        if problem:
            module.fail_json(msg="indexes: %s" % problem)
    devpi = Devpi(p["url"], timeout=p["timeout"], validate_certs=p["validate_certs"],
                  allow_plain_http_password=p["allow_plain_http_password"])
    try:
        devpi.check_password_transport()
    except DevpiError as exc:
        # before anything is read, in check mode too
        module.fail_json(msg=str(exc), files=[])
    files = []
    try:
        for key, entry in sorted(parse_lock(p["lock"]).items()):
            pinned = set(h.split(":", 1)[1].lower() for h in entry["hashes"] if h.startswith("sha256:"))
            if not pinned:
                module.fail_json(msg="the lock pins no sha256 for %s" % entry["name"], files=files)
            if entry.get("url"):
                wanted = [{"filename": entry["url"].rsplit("/", 1)[-1], "url": entry["url"],
                           "sha256": sorted(pinned)[0]}]
            else:
                wanted = []
                for index in p["indexes"]:
                    listed = devpi.project_files(index, key)
                    wanted = [f for f in listed if f["sha256"] in pinned
                              and wheel_fits(f["filename"], p["python_version"], p["python_platform"])]
                    if wanted:
                        break
                if not wanted:
                    module.fail_json(msg="%s %s: none of %s on %s lists a wheel the lock pins that fits %s, Python %s" % (
                        entry["name"], entry["version"], ", ".join(p["indexes"]), devpi.shown, p["python_platform"],
                        p["python_version"]), files=files)
            for found in wanted:
                # a file the cache listed is the cache's own: no redirect to another origin
                size = fetch_checked(found["url"], found["sha256"], timeout=p["timeout"],
                                     validate_certs=p["validate_certs"], size=found.get("size"),
                                     stay_on_origin=not entry.get("url"))
                files.append({"name": entry["name"], "url": found["url"], "sha256": found["sha256"], "bytes": size})
    except DevpiError as exc:
        if module.check_mode and not files:
            # check mode before the cache was set up: nothing to read yet
            module.exit_json(changed=False, files=[], bytes=0, msg="would fill %s with the lock's files (%s)"
                             % (devpi.shown, exc))
        module.fail_json(msg=str(exc), files=files)
    module.exit_json(changed=False, files=files, bytes=sum(f["bytes"] for f in files))


if __name__ == "__main__":
    main()
