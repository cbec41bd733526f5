#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: github_digest
short_description: The download URL and publisher's sha256 of a GitHub release asset
version_added: 0.1.0
description:
  - Looks up the release O(tag) of O(repo) through the GitHub REST API and picks an asset by its
    exact name (O(asset)) or by a regular expression (O(pattern)).
  - The sha256 comes from the asset's C(digest) in the release JSON. When the release gives no
    digest for it, the module reads a checksum file attached to the same release (see
    O(checksum_asset_pattern)). When there is neither, it fails; it never returns an unpinned file.
  - Read-only. It never changes anything, so it also runs in check mode. Unauthenticated API
    requests are limited to 60 an hour per IP address, so run it once per play on the controller
    (C(run_once) with C(delegate_to=localhost)), and give a O(token) for more.
  - Connection errors, time-outs, 429 and 5xx answers are tried again with an exponential
    back-off. A used-up rate limit is not; the task fails at once, saying when the limit resets.
author:
  - llmfleet maintainers (@llmfleet)
options:
  repo:
    description:
      - The repository, as C(owner/name).
    type: str
    required: true
  tag:
    description:
      - The release's tag, for example C(v0.11.0).
    type: str
    required: true
  asset:
    description:
      - The exact name of the asset. When no asset has it, the error lists the closest names.
      - Exactly one of O(asset) and O(pattern) is required.
    type: str
  pattern:
    description:
      - A Python regular expression searched (C(re.search)) in each asset name.
      - Exactly one of O(asset) and O(pattern) is required.
      - When it matches more than one asset the task fails listing them, unless O(multiple=true).
    type: str
  multiple:
    description:
      - With O(pattern), accept several matching assets. Each must be pinned; all are returned in
        RV(assets), sorted by name, and RV(asset), RV(url), RV(sha256), RV(size) and
        RV(digest_source) describe the first of them.
    type: bool
    default: false
  api_url:
    description:
      - Base URL of the GitHub REST API (GitHub Enterprise Server, or a mirror that answers the same).
    type: str
    default: https://api.github.com
  download_url:
    description:
      - Base URL that release assets download from; RV(url) is
        C(<download_url>/<repo>/releases/download/<tag>/<asset>), with a C(+) in the name sent as C(%2B).
      - Checksum files are downloaded from there too, without the token.
    type: str
    default: https://github.com
  token:
    description:
      - A GitHub token, sent to the API in an C(Authorization) header. Raises the rate limit from 60 to
        5,000 requests an hour and lets the module read releases of private repositories.
      - Sent only to the origin of O(api_url) (never to a host the API redirects to, nor to
        O(download_url)); over plain C(http://) only to this host's loopback, unless
        O(allow_plain_http_token) is set.
      - When not set, the controller's environment variable E(GITHUB_TOKEN) is used, if set, but only when
        O(api_url) is GitHub's own API (C(https://api.github.com)). The environment's token is a
        github.com token, and a mirror, a GitHub Enterprise Server or any other O(api_url) gets a token
        only when O(token) gives it.
    type: str
  checksum_asset_pattern:
    description:
      - A Python regular expression (C(re.search)) for the release's checksum file assets, read when
        an asset has no digest. Lines are C(<sha256>  <name>) (also C(<sha256> *<name>) and
        C(SHA256 (<name>) = <sha256>)); a file named C(<asset>.sha256) may hold just the hex.
      - The default matches C(sha256sum.txt), C(sha256sums.txt), C(SHA256SUMS), C(*checksums.txt),
        C(*.sha256) and C(*.sha256sum), in any case.
    type: str
    default: '(?i)^(sha256sums?(\.txt)?|.*checksums?\.txt|.+\.sha256(sum)?)$'
extends_documentation_fragment:
  - llmfleet.engines.http
  - llmfleet.engines.http.token
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
    description: Needs only Python and network access to the API; meant to run on the controller.
notes:
  - C(changed) is always V(false).
  - Assets uploaded to GitHub since June 2025 carry a C(digest); older ones need a checksum file.
seealso:
  - module: llmfleet.engines.pypi_published
  - module: ansible.builtin.get_url
  - name: GitHub REST API, releases
    description: Get a release by tag name.
    link: https://docs.github.com/en/rest/releases/releases#get-a-release-by-tag-name
"""

EXAMPLES = r"""
- name: Pin the CUDA 12.9 build of vLLM 0.11.0 from its GitHub release, once per play
  llmfleet.engines.github_digest:
    repo: vllm-project/vllm
    tag: v0.11.0
    pattern: '^vllm-0\.11\.0\+cu129-.*_x86_64\.whl$'
  run_once: true
  delegate_to: localhost
  register: vllm_wheel

- name: Download it, refusing a file that differs
  ansible.builtin.get_url:
    url: "{{ vllm_wheel.url }}"
    dest: "/tmp/{{ vllm_wheel.asset }}"
    checksum: "sha256:{{ vllm_wheel.sha256 }}"
    mode: "0644"

- name: Every CUDA 13.0 wheel of a release, through a GitHub Enterprise Server, with a token
  llmfleet.engines.github_digest:
    repo: vllm-project/vllm
    tag: v0.15.1
    pattern: '\+cu130-.*\.whl$'
    multiple: true
    api_url: https://ghe.example.com/api/v3
    download_url: https://ghe.example.com
    token: "{{ lookup('ansible.builtin.env', 'GHE_TOKEN') }}"
  delegate_to: localhost
  register: vllm_wheels
"""

RETURN = r"""
asset:
  description: The asset's name (the first match, by name, when O(multiple=true)).
  returned: success
  type: str
  sample: vllm-0.11.0+cu129-cp38-abi3-manylinux1_x86_64.whl
url:
  description: Where the asset downloads from.
  returned: success
  type: str
  sample: https://github.com/vllm-project/vllm/releases/download/v0.11.0/vllm-0.11.0%2Bcu129-cp38-abi3-manylinux1_x86_64.whl
sha256:
  description: The asset's sha256, lower-case hex.
  returned: success
  type: str
  sample: 0d8ae2ae5e8e1c8c0e6e53a4e5f1a14a8ff1f0d6b2a4b9f04c2c8fda4cf1d6a3
size:
  description: The asset's size in bytes, as the release lists it.
  returned: success
  type: int
  sample: 415370828
digest_source:
  description: Where the sha256 came from, V(digest) (the release JSON) or the name of the checksum asset.
  returned: success
  type: str
  sample: digest
assets:
  description: Every matching asset, sorted by name (one unless O(multiple=true)).
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The asset's name.
      type: str
    url:
      description: Where it downloads from.
      type: str
    sha256:
      description: Its sha256.
      type: str
    size:
      description: Its size in bytes.
      type: int
    digest_source:
      description: V(digest) or the name of the checksum asset.
      type: str
tag:
  description: The release's tag, as the API gives it.
  returned: success
  type: str
  sample: v0.11.0
release_url:
  description: The API URL that was asked.
  returned: success
  type: str
  sample: https://api.github.com/repos/vllm-project/vllm/releases/tags/v0.11.0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.index._github import (
    DEFAULT_API_URL,
    DEFAULT_CHECKSUM_PATTERN,
    DEFAULT_DOWNLOAD_URL,
    GithubError,
    Lookup,
    api_token,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    HttpError,
    client_from_params,
    http_argument_spec,
    http_option_problem,
    http_token_argument_spec,
    token_transport_problem,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo=dict(type="str", required=True),
            tag=dict(type="str", required=True),
            asset=dict(type="str"),
            pattern=dict(type="str"),
            multiple=dict(type="bool", default=False),
            api_url=dict(type="str", default=DEFAULT_API_URL),
            download_url=dict(type="str", default=DEFAULT_DOWNLOAD_URL),
            # GITHUB_TOKEN is read by api_token, for GitHub's own API only (not an env_fallback)
            token=dict(type="str", no_log=True),
            checksum_asset_pattern=dict(type="str", default=DEFAULT_CHECKSUM_PATTERN),
            **dict(http_argument_spec(), **http_token_argument_spec())
        ),
        mutually_exclusive=[("asset", "pattern")],
        required_one_of=[("asset", "pattern")],
        supports_check_mode=True,
    )
    p = module.params
    problem = http_option_problem(p)
    if problem:
        module.fail_json(msg=problem)
    if p["multiple"] and p["asset"]:
        module.fail_json(msg="multiple applies to pattern only: an exact asset name matches one asset")

    token = api_token(p["api_url"], p["token"])
    # before anything is sent: a token over plain http only to the loopback, unless allowed
    problem = token_transport_problem(p["api_url"], token, p, "the GitHub token")
    if problem:
        module.fail_json(msg=problem, changed=False)
    client = client_from_params(p, secrets=[token] if token else None)
    try:
        result = Lookup(client, p["repo"], p["tag"], asset=p["asset"], pattern=p["pattern"],
                        multiple=p["multiple"], token=token, api_url=p["api_url"],
                        download_url=p["download_url"],
                        checksum_asset_pattern=p["checksum_asset_pattern"]).run()
    except GithubError as exc:
        module.fail_json(msg=client.redact(exc.msg), changed=False, **exc.details)
    except HttpError as exc:
        module.fail_json(msg=client.redact("looking up release %s of %s: %s" % (p["tag"], p["repo"], exc.msg)),
                         changed=False, url=client.redact(exc.url))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
