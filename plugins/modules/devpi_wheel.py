#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: devpi_wheel
short_description: A release wheel, checked against its publisher's sha256, in an index of the fleet cache
version_added: 0.2.0
description:
  - Makes the wheel at O(src) available on the devpi-server at O(url), in the stage index
    O(index), and returns the URL the fleet's nodes download it from (RV(url)).
  - When the index already lists the file with the sha256 O(sha256), nothing is downloaded or
    uploaded. Otherwise the wheel is downloaded from O(src) into a temporary file, its sha256 is
    checked against O(sha256) (a mismatch fails the task and nothing is uploaded), and it is
    uploaded as user O(user).
  - When the index lists a file of the same name with another sha256, the task fails - the cache
    holds another file under that name, and the nodes' hash checks would refuse it.
  - Run it on the controller (C(delegate_to=localhost), C(run_once)), which checked the digest;
    llmfleet.engines.engine_node does so for builds from a GitHub release when
    C(engine_node_cache_url) is set. Check mode reports what would be uploaded, also when the
    server does not answer yet (a cache the same check run would set up).
  - The password goes only over C(https://) or to this host's loopback. Given with a plain
    C(http://) O(url) to another host, the task fails before anything is downloaded or sent, unless
    O(allow_plain_http_password) is set.
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.devpi
options:
  index:
    description: The stage index the wheel goes into, as C(user/name).
    type: str
    default: root/github
  user:
    description: The devpi user that uploads (allowed to by the index's C(acl_upload)).
    type: str
    default: root
  password:
    description:
      - The password of O(user). Needed only when the wheel must be uploaded; never shown.
    type: str
    default: ""
  src:
    description:
      - Where the wheel is downloaded from, an C(http://) or C(https://) URL. Redirects are followed,
        at most 10, and only to C(http) and C(https) URLs (one to C(file://) fails the task).
    type: str
    required: true
  sha256:
    description: The publisher's sha256 of the wheel (64 hex digits).
    type: str
    required: true
  filename:
    description: The wheel's file name; by default the last part of O(src)'s path, unquoted.
    type: str
  tmp_dir:
    description: Directory for the temporary download; by default the system's.
    type: path
"""

EXAMPLES = r"""
- name: Put the CUDA 12.9 build of vLLM 0.11.2 into the fleet cache
  llmfleet.engines.devpi_wheel:
    url: https://cache.example
    password: "{{ engine_cache_password }}"
    src: "{{ asset.url }}"
    sha256: "{{ asset.sha256 }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
url:
  description: The wheel's URL on the devpi-server (what a lock's direct reference names).
  returned: success
  type: str
filename:
  description: The wheel's file name.
  returned: always
  type: str
sha256:
  description: The sha256 of the wheel on the index.
  returned: always
  type: str
uploaded:
  description: Whether the wheel was downloaded and uploaded by this run (or would be, in check mode).
  returned: always
  type: bool
bytes:
  description: The size of the wheel downloaded, 0 when nothing was.
  returned: always
  type: int
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

try:  # Python 3
    from urllib.parse import unquote, urlsplit
except ImportError:  # pragma: no cover
    from urllib import unquote  # type: ignore
    from urlparse import urlsplit  # type: ignore

from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpioptions import devpi_argument_spec
from ansible_collections.llmfleet.engines.plugins.module_utils.index._devpi import (
    Devpi,
    DevpiError,
    check_index_name,
    download_checked,
    wheel_project,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import strip_userinfo


def argument_spec():
    return dict(
        devpi_argument_spec(),
        index=dict(type="str", default="root/github"),
        user=dict(type="str", default="root"),
        password=dict(type="str", default="", no_log=True),
        src=dict(type="str", required=True),
        sha256=dict(type="str", required=True),
        filename=dict(type="str"),
        tmp_dir=dict(type="path"),
    )


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
    )
    p = module.params
    sha256 = (p["sha256"] or "").strip().lower()
    filename = p["filename"] or unquote(urlsplit(p["src"]).path.rsplit("/", 1)[-1])
    result = dict(changed=False, filename=filename, sha256=sha256, uploaded=False, bytes=0)
    problem = check_index_name(p["index"])
    if problem:
        module.fail_json(msg="index: %s" % problem, **result)
    if not re.match(r"^[0-9a-f]{64}$", sha256):
        module.fail_json(msg="sha256: %r is not 64 hex digits" % p["sha256"], **result)
    try:
        project, version = wheel_project(filename)
    except DevpiError as exc:
        module.fail_json(msg="filename: %s" % exc, **result)
    devpi = Devpi(p["url"], p["user"], p["password"], timeout=p["timeout"], validate_certs=p["validate_certs"],
                  allow_plain_http_password=p["allow_plain_http_password"])
    try:
        # refused before anything is read or downloaded, whether or not this run would upload
        devpi.check_password_transport()
        try:
            listed = [f for f in devpi.project_files(p["index"], project) if f["filename"] == filename]
        except DevpiError as exc:
            if not module.check_mode:
                raise
            # check mode before the cache was set up: it would be uploaded
            result.update(changed=True, uploaded=True)
            module.exit_json(msg="would download %s and upload it to %s/%s (which does not answer yet: %s)"
                                 % (strip_userinfo(p["src"]), devpi.shown, p["index"], exc), **result)
        if listed and listed[0]["sha256"] == sha256:
            module.exit_json(url=listed[0]["url"], **result)
        if listed:
            module.fail_json(msg="%s/%s already holds %s with sha256 %s, not the publisher's %s: remove that file from"
                                 " the index (devpi's web UI or devpi-client) and run again"
                                 % (devpi.shown, p["index"], filename, listed[0]["sha256"] or "(none)", sha256), **result)
        result.update(changed=True, uploaded=True)
        if module.check_mode:
            would = "would download %s and upload it to %s/%s" % (strip_userinfo(p["src"]), devpi.shown, p["index"])
            module.exit_json(msg=would, **result)
        if not p["password"]:
            result["changed"] = False
            module.fail_json(msg="%s is not on %s/%s yet, and uploading it needs the password of %s (engine_node_cache_password,"
                                 " the engine_cache role's engine_cache_password)"
                                 % (filename, devpi.shown, p["index"], p["user"]), **result)
        path = download_checked(p["src"], sha256, p["tmp_dir"] or None, timeout=p["timeout"],
                                validate_certs=p["validate_certs"])
        try:
            result["bytes"] = os.path.getsize(path)
            devpi.upload(p["index"], path, filename, project, version)
        finally:
            os.unlink(path)
        listed = [f for f in devpi.project_files(p["index"], project) if f["filename"] == filename]
        if not listed or listed[0]["sha256"] != sha256:
            module.fail_json(msg="%s/%s does not list %s with sha256 %s after the upload (it lists %s)" % (
                devpi.shown, p["index"], filename, sha256, listed[0]["sha256"] if listed else "nothing"), **result)
    except DevpiError as exc:
        result["changed"] = False
        module.fail_json(msg=str(exc), **result)
    module.exit_json(url=listed[0]["url"], **result)


if __name__ == "__main__":
    main()
