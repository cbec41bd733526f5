#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pypi_published
short_description: When a release was published on a PyPI-compatible index, and its files
version_added: 0.1.0
description:
  - Looks up one release of a project on PyPI or a PyPI-compatible mirror and returns when its
    first file was uploaded (RV(published)), that time plus O(margin) hours (RV(exclude_newer), the
    cut-off to give C(uv pip compile --exclude-newer) so that dependencies resolve as the index
    stood then), and every file of the release with its sha256.
  - The cut-off is taken from the B(first) upload so that it does not move when a file is added to
    the release later (a wheel for another architecture uploaded months after the others), so a node
    built next month resolves the same dependencies as one built today. Files uploaded after the
    cut-off are listed in RV(late_files) and named in a warning; uv leaves them out too unless it is
    given C(--exclude-newer-package <project>=<the file's late_files[].exclude_newer>), which is what the
    C(engine_node) role does for a node that no file uploaded in time fits (then for the earliest late
    wheel of its architecture alone, and its lock pins that file).
  - Asks the release JSON (C(/pypi/<project>/<version>/json)) first, then the project JSON
    (C(/pypi/<project>/json)), then the PEP 691 simple JSON with PEP 700 upload times
    (C(<simple_url>/<project>/)), because PyPI and its mirrors do not all answer every one. Only a
    404 (or a release JSON about another version) moves on to the next; any other failure is
    reported. RV(source) tells which one answered.
  - Connection errors, time-outs, 429 and 5xx answers are tried again with an exponential
    back-off; other answers are not.
  - Read-only. It never changes anything, so it also runs in check mode. Run it once per play on
    the controller (C(run_once) with C(delegate_to=localhost)) rather than once per node.
author:
  - llmfleet maintainers (@llmfleet)
options:
  project:
    description:
      - The project name, as on the index (compared in PEP 503 normal form where it matters).
    type: str
    required: true
  version:
    description:
      - The release to look up, for example C(0.11.0). Matched exactly, else in PEP 440 normal form.
    type: str
    required: true
  index_url:
    description:
      - Base URL of a PyPI-compatible index; the JSON API lives under C(<index_url>/pypi/).
      - Point it at a mirror (Artifactory, Nexus, devpi, pypiserver) on an air-gapped site.
      - A password in it (C(https://USER:TOKEN@mirror/)) is sent to the mirror's origin only, and is C(****) in
        every URL and message the module returns (C(https://USER:****@mirror/)).
    type: str
    default: https://pypi.org
  simple_url:
    description:
      - Base URL of the simple index (PEP 503/691) asked last. Defaults to C(<index_url>/simple).
    type: str
  margin:
    description:
      - Hours added to RV(published) (the first upload) to give RV(exclude_newer), and to each late
        file's upload to give its RV(late_files[].exclude_newer).
      - Files uploaded more than this after the first one are RV(late_files), and the task warns.
    type: int
    default: 24
  allow_yanked:
    description:
      - A yanked release (withdrawn by its publisher, usually because it is broken) fails the task
        unless this is V(true).
      - With V(true) the task succeeds, returns RV(yanked=true) and RV(yanked_reason), and warns.
        Use it only to keep a fleet on a release you knowingly pinned before it was yanked.
    type: bool
    default: false
extends_documentation_fragment:
  - llmfleet.engines.http
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same look-up in check mode and reports the same result.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Needs only Python and network access to the index; usually run on the controller.
notes:
  - C(changed) is always V(false).
  - The sha256 of a file is what the index lists for it; a file the index gives no sha256 for, or a
    value that is not 64 hex digits (such as V(md5:<hex>)), is returned with RV(files[].sha256=null).
seealso:
  - module: llmfleet.engines.github_digest
  - name: PyPI JSON API
    description: The release and project JSON endpoints.
    link: https://docs.pypi.org/api/json/
  - name: PEP 691 and PEP 700
    description: The JSON simple index and its upload times.
    link: https://peps.python.org/pep-0700/
"""

EXAMPLES = r"""
- name: Find when vLLM 0.11.0 was published, once for the whole fleet
  llmfleet.engines.pypi_published:
    project: vllm
    version: 0.11.0
  run_once: true
  delegate_to: localhost
  register: vllm_release

- name: Resolve dependencies as the index stood one day after that
  ansible.builtin.debug:
    msg: "uv pip compile --exclude-newer {{ vllm_release.exclude_newer }}"

- name: Ask a mirror, with a shorter margin and a quick retry
  llmfleet.engines.pypi_published:
    project: llmfleet-fakedep
    version: 1.1.0
    index_url: https://artifactory.example.com/artifactory/api/pypi/pypi-remote
    margin: 12
    retries: 5
    backoff: 0.5
  delegate_to: localhost
  register: dep_release
"""

RETURN = r"""
published:
  description:
    - The first upload time of the release's files, RFC 3339 in UTC.
    - It does not move when a file is added to the release later; RV(last_upload) is the latest upload.
  returned: success
  type: str
  sample: "2025-10-04T01:39:32.382596Z"
last_upload:
  description: The latest upload time of the release's files, RFC 3339 in UTC.
  returned: success
  type: str
  sample: "2025-10-04T01:39:57.798320Z"
exclude_newer:
  description:
    - RV(published) plus O(margin) hours, RFC 3339 in UTC. It does not move when files are added to the release later.
  returned: success
  type: str
  sample: "2025-10-05T01:39:32.382596Z"
late_files:
  description:
    - The release's files uploaded after RV(exclude_newer), oldest first; empty when every file came within
      O(margin) hours of the first. uv leaves them out at that cut-off; each one's RV(late_files[].exclude_newer) given
      as C(--exclude-newer-package <project>=<it>) lets uv see it (and only the project's own files).
  returned: success
  type: list
  elements: dict
  sample: []
  contains:
    filename:
      description: The file name.
      type: str
      sample: vllm-0.11.0-cp38-abi3-manylinux2014_aarch64.whl
    upload_time:
      description: When it was uploaded, RFC 3339 in UTC.
      type: str
    exclude_newer:
      description: Its upload time plus O(margin) hours, RFC 3339 in UTC.
      type: str
    sha256:
      description: Its sha256 as the index lists it (hex), or V(null) when the index lists none.
      type: str
files:
  description: Every file of the release, sorted by file name.
  returned: success
  type: list
  elements: dict
  contains:
    filename:
      description: The file name.
      type: str
      sample: vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl
    url:
      description: Where the file downloads from (absolute).
      type: str
    sha256:
      description: The sha256 the index lists for the file, or null when it lists none (or not as 64 hex digits).
      type: str
    size:
      description: Size in bytes, when the index gives it.
      type: int
    packagetype:
      description: C(bdist_wheel), C(sdist) or C(bdist_egg).
      type: str
    upload_time:
      description: When the file was uploaded, RFC 3339 in UTC.
      type: str
    yanked:
      description: Whether this file is yanked.
      type: bool
yanked:
  description: Whether the release is yanked (a task only succeeds with this V(true) when O(allow_yanked=true)).
  returned: success
  type: bool
  sample: false
yanked_reason:
  description: The publisher's reason for yanking, when the release is yanked and has one.
  returned: success
  type: str
  sample: null
source:
  description: Which endpoint answered, V(release_json), V(project_json) or V(simple_json).
  returned: success
  type: str
  sample: project_json
source_url:
  description: The URL that answered; a password in it as C(****).
  returned: success
  type: str
  sample: https://pypi.org/pypi/vllm/json
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    HttpError,
    client_from_params,
    http_argument_spec,
    http_option_problem,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.index._pypi import (
    DEFAULT_INDEX_URL,
    PypiError,
    late_files_warning,
    lookup,
    redact_passwords,
    url_secrets,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            project=dict(type="str", required=True),
            version=dict(type="str", required=True),
            index_url=dict(type="str", default=DEFAULT_INDEX_URL),
            simple_url=dict(type="str"),
            margin=dict(type="int", default=24),
            allow_yanked=dict(type="bool", default=False),
            **http_argument_spec()
        ),
        supports_check_mode=True,
    )
    p = module.params
    # A mirror's password in index_url or simple_url: ``****`` in every URL and message returned (the
    # role copies them into the node's failure and the play's stats, which AWX keeps as artifacts)
    secrets = url_secrets(p["index_url"], p["simple_url"])
    module.no_log_values.update(secrets)

    def fail(**result):
        module.fail_json(**redact_passwords(result, secrets))

    if p["margin"] < 0:
        fail(msg="margin must not be negative (got %s)" % p["margin"])
    problem = http_option_problem(p)
    if problem:
        fail(msg=problem)

    client = client_from_params(p)
    what = "%s %s" % (p["project"], p["version"])
    try:
        result = lookup(client, p["project"], p["version"], index_url=p["index_url"],
                        simple_url=p["simple_url"], margin_hours=p["margin"])
    except PypiError as exc:
        fail(msg="looking up %s: %s" % (what, exc.msg), changed=False, **exc.details)
    except HttpError as exc:
        fail(msg="looking up %s on %s: %s" % (what, p["index_url"], exc.msg), changed=False, url=exc.url)

    result = redact_passwords(result, secrets)
    index = redact_passwords(p["index_url"], secrets)
    spread = late_files_warning(p["project"], p["version"], result)
    if spread:
        module.warn(spread)
    if result["yanked"]:
        reason = " (reason: %s)" % result["yanked_reason"] if result["yanked_reason"] else ""
        if not p["allow_yanked"]:
            fail(msg="%s is yanked on %s%s: its publisher withdrew it. Pick another version, or set "
                     "allow_yanked: true to use it knowingly" % (what, index, reason),
                 changed=False, yanked=True, yanked_reason=result["yanked_reason"], source=result["source"],
                 source_url=result["source_url"])
        module.warn("%s is yanked on %s%s; used because allow_yanked is true" % (what, index, reason))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
