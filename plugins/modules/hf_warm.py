#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_warm
short_description: Fill a caching mirror of the Hugging Face hub with a model's files, each checked
version_added: 0.4.0
description:
  - Downloads every file of O(lock) (the lock of M(llmfleet.engines.hf_revision)) through the
    mirror at O(endpoint), O(parallel) at a time and each to the end, keeping nothing; a caching mirror (nginx
    with C(proxy_cache), olah) fetches each file from the hub once and keeps it, so that the nodes
    then find every file in the cache. Run it on the controller, once per model, before the nodes
    run M(llmfleet.engines.model_snapshot).
  - Each file is checked as it streams, against the lock's size and sha256 (an LFS file) or git blob
    id (a file kept in git). A file of other bytes fails the task, naming it (the mirror holds bad
    bytes, or the hub served them); the other downloads stop at once.
  - Whether the mirror already had a file is read from its C(X-Cache-Status) header (nginx's
    C($upstream_cache_status)); C(changed) is true when the mirror did not have one of them yet.
    A mirror that sends no such header is never reported as changed.
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.http
  - llmfleet.engines.http.token
attributes:
  check_mode:
    support: full
    description: Sends no request (so it cannot tell what the mirror holds); says what it would warm.
  diff_mode:
    support: none
    description: Nothing to compare; the result lists the files fetched.
options:
  lock:
    description: The model lock, as M(llmfleet.engines.hf_revision) returns it (C(lock)).
    type: dict
    required: true
  endpoint:
    description:
      - Base URL of the mirror, under which files are at C(<endpoint>/<org>/<name>/resolve/<commit>/<path>).
    type: str
    required: true
  token:
    description:
      - A hub token, for gated or private repos. Sent as C(Authorization) to the origin of
        O(endpoint) only, never to a host a download is redirected to.
      - Over plain C(http://) only to this host's loopback, unless O(allow_plain_http_token) is set
        (a mirror that holds the token itself needs none).
    type: str
  parallel:
    description:
      - How many files are fetched through the mirror at once (each by its own thread, which hashes
        the bytes as they arrive), 1 to 32.
    type: int
    default: 8
notes:
  - Files are hashed as they arrive and thrown away; memory use does not grow with their size.
  - Redirects are followed only to C(http) and C(https) URLs, at most 10; a mirror that redirects a file
    to C(file://) fails the task, and no local file is read (nor its hash told).
seealso:
  - module: llmfleet.engines.hf_revision
  - module: llmfleet.engines.model_snapshot
"""

EXAMPLES = r"""
- name: Fill the cache host's hub mirror with the model's files (the mirror holds the hub token)
  llmfleet.engines.hf_warm:
    lock: "{{ model.lock }}"
    endpoint: http://cache.example:8090
  delegate_to: localhost
  run_once: true

- name: Through a mirror that wants the token itself, over TLS
  llmfleet.engines.hf_warm:
    lock: "{{ model.lock }}"
    endpoint: https://cache.example:8443
    token: "{{ hf_token | default(omit) }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
files:
  description: The files fetched through the mirror, C({path, bytes, cache_status}) (C(cache_status) is
    the mirror's C(X-Cache-Status), upper-case, or null when it sent none).
  returned: always
  type: list
  elements: dict
bytes:
  description: Their total size.
  returned: always
  type: int
cached:
  description: How many of them the mirror already had (C(X-Cache-Status) C(HIT)).
  returned: always
  type: int
fetched:
  description: How many the mirror said it did not have yet (another C(X-Cache-Status) than C(HIT)).
  returned: always
  type: int
msg:
  description: What happened, in one line. A file that fails its check names the purge that removes it from
    the mirror (C(engine_cache_hub_mirror_purge) of M(llmfleet.engines.engine_cache)).
  returned: always
  type: str
purge:
  description: The file that failed its check as C(engine_cache_hub_mirror_purge) takes it,
    C(<repo>@<commit>/<path>).
  returned: when a file fails its check
  type: str
  sample: meta-llama/Llama-3.1-8B@0e9e39f249a16976918f6564b8830bc894c89659/model-00001-of-00004.safetensors
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import cache_lock_problems
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._fetch import (
    DEFAULT_PARALLEL,
    MAX_PARALLEL,
    Fetcher,
    HashSink,
    Oversize,
    run_parallel,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import (
    file_url,
    human_size,
    validate_endpoint,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    http_argument_spec,
    http_option_problem,
    http_token_argument_spec,
    token_transport_problem,
)


class _Bad(LlmfleetError):
    """A file the mirror served that is not the lock's."""


def _purge_entry(lock, entry):
    """The file as engine_cache_hub_mirror_purge names it: <repo>@<commit>/<path>."""
    return "%s@%s/%s" % (lock["repo"], lock["commit"], entry["path"])


def _purge_hint(lock, entry):
    return ("Before the nodes download it, purge it from the mirror's cache (llmfleet.engines.engine_cache) and run "
            "again: ansible-playbook playbooks/site.yml --limit llmfleet_engine_cache -e "
            "'{\"engine_cache_hub_mirror_purge\": [\"%s\"]}'" % _purge_entry(lock, entry))


def main():
    argument_spec = dict(
        lock=dict(type="dict", required=True),
        endpoint=dict(type="str", required=True),
        token=dict(type="str", no_log=True),
        parallel=dict(type="int", default=DEFAULT_PARALLEL),
    )
    argument_spec.update(http_argument_spec())
    argument_spec.update(http_token_argument_spec())
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    p = module.params
    lock = p["lock"]
    problems = cache_lock_problems(lock)
    if problems:
        module.fail_json(msg="lock: %s" % "; ".join(problems), problems=problems)
    # before anything is sent, in check mode too: a token over plain http only to the loopback
    problem = (http_option_problem(p) or validate_endpoint(p["endpoint"])
               or token_transport_problem(p["endpoint"], p["token"], p, "the hub token"))
    if not problem and not 1 <= p["parallel"] <= MAX_PARALLEL:
        problem = "parallel must be 1 to %d (files fetched at once), got %d" % (MAX_PARALLEL, p["parallel"])
    if problem:
        module.fail_json(msg=problem)
    result = dict(changed=False, files=[], bytes=0, cached=0, fetched=0)
    where = "%s@%s" % (lock["repo"], lock["commit"][:12])
    if module.check_mode:
        module.exit_json(msg="%s: would fetch %d files (%s) through %s" % (
            where, len(lock["files"]), human_size(lock["size"]), p["endpoint"]), **result)
    fetcher = Fetcher(token=p["token"], timeout=p["timeout"], retries=p["retries"], backoff=p["backoff"],
                      validate_certs=p["validate_certs"], allow_plain_http_token=p["allow_plain_http_token"])
    done = {}  # path -> the fetch of a file checked already (reported on a failure too)

    def warm(entry, cancel):
        url = file_url(p["endpoint"], lock["repo"], lock["commit"], entry["path"])
        sink = HashSink(entry)
        try:
            got = fetcher.fetch(url, sink, limit=entry["size"], cancel=cancel)
        except Oversize:
            raise _Bad("%s of %s: %s sent more than the lock's %d bytes: the mirror holds bad bytes, or the hub "
                       "served them. %s" % (entry["path"], where, url, entry["size"], _purge_hint(lock, entry)),
                       file=entry["path"], purge=_purge_entry(lock, entry))
        wrong = sink.digest.problem()
        if wrong:
            raise _Bad("%s of %s through %s is not the lock's file: got %d bytes with %s %s, expected %d bytes "
                       "with %s %s. The mirror holds bad bytes, or the hub served them. %s"
                       % (entry["path"], where, p["endpoint"], sink.digest.size, sink.digest.kind,
                          sink.digest.hexdigest(), entry["size"], sink.digest.kind, sink.digest.expected,
                          _purge_hint(lock, entry)),
                       file=entry["path"], purge=_purge_entry(lock, entry), expected_size=entry["size"],
                       got_size=sink.digest.size, expected_hash=sink.digest.expected,
                       got_hash=sink.digest.hexdigest())
        done[entry["path"]] = got
        return got

    def report(entry, got):
        result["files"].append({"path": entry["path"], "bytes": entry["size"], "cache_status": got.cache_status})
        result["bytes"] += entry["size"]
        if got.cache_status == "HIT":
            result["cached"] += 1
        elif got.cache_status:
            result["fetched"] += 1

    try:
        # every file at once up to `parallel`: the first failure stops the others at their next chunk
        for entry, got in zip(lock["files"], run_parallel(lock["files"], warm, p["parallel"])):
            report(entry, got)
    except LlmfleetError as exc:
        for entry in lock["files"]:  # the files checked before the failure, in the lock's order
            if entry["path"] in done:
                report(entry, done[entry["path"]])
        module.fail_json(msg=exc.msg, **dict(result, **exc.details))
    result["changed"] = result["fetched"] > 0
    unknown = len(result["files"]) - result["cached"] - result["fetched"]
    module.exit_json(msg="%s: %d files (%s) through %s: %d already cached, %d fetched%s" % (
        where, len(result["files"]), human_size(result["bytes"]), p["endpoint"], result["cached"],
        result["fetched"], ", %d without X-Cache-Status" % unknown if unknown else ""), **result)


if __name__ == "__main__":
    main()
