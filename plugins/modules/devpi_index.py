#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: devpi_index
short_description: The indexes of a devpi-server, as configured (the fleet cache's mirrors)
version_added: 0.2.0
description:
  - Makes each index of O(indexes) exist on the devpi-server at O(url) with the settings given. A
    C(mirror) index caches an upstream simple index on demand (each file is fetched from the
    upstream once, the first time a client asks for it); a C(stage) index holds uploaded files.
  - Settings not named in an entry are left as the server has them; indexes not named are left
    alone. Nothing is ever deleted.
  - Reads first and logs in only when something must change, so a run with nothing to do makes no
    login. Supports check mode and diff.
  - Used by the role llmfleet.engines.engine_cache on the cache host.
  - The password goes only over C(https://) or to this host's loopback, unless
    O(allow_plain_http_password) is set.
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.devpi
options:
  user:
    description:
      - The devpi user that owns the indexes and logs in to change them.
    type: str
    default: root
  password:
    description:
      - The password of O(user). Never shown in the output.
    type: str
    required: true
  indexes:
    description:
      - The indexes, each C(user/name).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The index, as C(user/name) (the user must be O(user)).
        type: str
        required: true
      type:
        description: C(mirror) (an on-demand cache of O(indexes[].mirror_url)) or C(stage) (uploads).
        type: str
        choices: [mirror, stage]
        default: mirror
      mirror_url:
        description: The upstream simple index of a C(mirror), for example C(https://pypi.org/simple/).
        type: str
      bases:
        description: The indexes a C(stage) index also serves (devpi's inheritance).
        type: list
        elements: str
      volatile:
        description: Whether uploaded files may be overwritten (C(stage)) or removed (C(mirror)).
        type: bool
"""

EXAMPLES = r"""
- name: Mirror PyPI and keep a private index for checked GitHub wheels
  llmfleet.engines.devpi_index:
    url: http://127.0.0.1:3141
    password: "{{ engine_cache_password }}"
    indexes:
      - {name: root/pypi, type: mirror, mirror_url: "https://pypi.org/simple/"}
      - {name: root/github, type: stage, bases: [], volatile: false}

- name: The same indexes, on a cache behind a TLS reverse proxy
  llmfleet.engines.devpi_index:
    url: https://cache.example
    password: "{{ engine_cache_password }}"
    indexes:
      - {name: root/pypi, type: mirror, mirror_url: "https://pypi.org/simple/"}
"""

RETURN = r"""
created:
  description: The indexes created (or that would be, in check mode).
  returned: always
  type: list
  elements: str
changed_indexes:
  description: The indexes whose settings were changed, with the settings set.
  returned: always
  type: dict
indexes:
  description: The settings of each named index as the server has them now (C(projects) left out).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpi import Devpi, DevpiError, check_index_name
from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpioptions import devpi_argument_spec


def wanted_settings(entry):
    """The settings an entry asks for (only those it names)."""
    want = {"type": entry["type"]}
    if entry["type"] == "mirror":
        want["mirror_url"] = entry["mirror_url"]
    if entry.get("bases") is not None:
        want["bases"] = list(entry["bases"])
    if entry.get("volatile") is not None:
        want["volatile"] = entry["volatile"]
    return want


def entry_problem(entry, user):
    """None, or what is wrong with one entry of ``indexes``."""
    problem = check_index_name(entry.get("name"))
    if problem:
        return problem
    if entry["name"].split("/", 1)[0] != user:
        return "index %s belongs to another user than %s" % (entry["name"], user)
    if entry["type"] == "mirror" and not entry.get("mirror_url"):
        return "index %s is a mirror and needs mirror_url" % entry["name"]
    if entry["type"] == "stage" and entry.get("mirror_url"):
        return "index %s is a stage index; mirror_url is for mirrors" % entry["name"]
    return None


def _same(key, have, want):
    if key == "mirror_url":
        return (have or "").rstrip("/") == (want or "").rstrip("/")
    if key == "bases":
        return list(have or []) == list(want or [])
    return have == want


def argument_spec():
    return dict(
        devpi_argument_spec(),
        user=dict(type="str", default="root"),
        password=dict(type="str", required=True, no_log=True),
        indexes=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            type=dict(type="str", choices=["mirror", "stage"], default="mirror"),
            mirror_url=dict(type="str"),
            bases=dict(type="list", elements="str"),
            volatile=dict(type="bool"),
        )),
    )


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
    )
    p = module.params
    for entry in p["indexes"]:
        problem = entry_problem(entry, p["user"])
        if problem:
            module.fail_json(msg="indexes: %s" % problem)
    devpi = Devpi(p["url"], p["user"], p["password"], timeout=p["timeout"], validate_certs=p["validate_certs"],
                  allow_plain_http_password=p["allow_plain_http_password"])
    created, changed, now = [], {}, {}
    before, after = {}, {}
    try:
        # refused before anything is read, so that a run with nothing to change fails the same way
        devpi.check_password_transport()
        for entry in p["indexes"]:
            name = entry["name"]
            want = wanted_settings(entry)
            have = devpi.index_config(name)
            if have is None:
                created.append(name)
                before[name] = None
                after[name] = want
                now[name] = want if module.check_mode else devpi.set_index(name, want, create=True)
                continue
            diff = dict((k, v) for k, v in want.items() if not _same(k, have.get(k), v))
            if diff.get("type"):
                module.fail_json(msg="index %s on %s is a %s index, not a %s: change it by hand (devpi keeps"
                                     " an index's type)" % (name, devpi.shown, have.get("type"), want["type"]))
            if diff:
                changed[name] = diff
                before[name] = dict((k, have.get(k)) for k in diff)
                after[name] = diff
                if not module.check_mode:
                    have = devpi.set_index(name, diff, create=False)
                else:
                    have = dict(have, **diff)
            now[name] = dict((k, v) for k, v in have.items() if k != "projects")
    except DevpiError as exc:
        module.fail_json(msg=str(exc), created=created, changed_indexes=changed)
    module.exit_json(changed=bool(created or changed), created=created, changed_indexes=changed, indexes=now,
                     diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
