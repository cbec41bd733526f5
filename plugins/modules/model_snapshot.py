#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_snapshot
short_description: Lay out a model's files in the Hugging Face hub cache from its lock, each checked
version_added: 0.4.0
description:
  - Makes O(cache_dir) hold the snapshot of O(lock) (the lock of M(llmfleet.engines.hf_revision))
    exactly as the real C(huggingface_hub) lays it out, so that an engine started with
    C(HF_HUB_OFFLINE=1) and C(HF_HUB_CACHE=<cache_dir>) finds every file by commit or by the
    lock's revision, in
    C(models--<org>--<name>/blobs/<sha256 or git blob id>),
    C(snapshots/<commit>/<path>) (relative links to the blobs) and C(refs/<revision>).
  - Downloads only what is missing, from O(endpoint) (the hub or a mirror of it), O(parallel) files at
    once, 1 MiB at a time, into C(blobs/<name>.incomplete), which the next run resumes with an HTTP
    range. Each file is hashed as its bytes arrive and checked against the lock (size, and sha256 for
    an LFS file or the git blob id for a file kept in git) before it is renamed into place, and linked
    only after every file of the lock is there. When one download fails, the others stop at once
    (their connections are shut; their C(.incomplete) files are kept, to be resumed), nothing is
    linked, and the task fails naming the file that failed.
    A file that is not the lock's fails the task, naming the file and the expected and received
    size and hash; it is removed and never linked.
  - When the snapshot is complete it sends no request at all. A blob already there is trusted when
    its size is the lock's (O(verify=full) hashes it again); one of another size is downloaded again.
  - Files are made C(0644) and directories C(0755), owned by the user the module runs as (root on the
    nodes), so the service user reads the weights and cannot change them. A O(cache_dir) that another
    user could change is refused. A download in progress (C(.incomplete)) is C(0600) until its bytes
    are checked.
  - Redirects are followed only to C(http) and C(https) URLs, at most 10 (see O(allow_plain_http_token));
    a hub or mirror that redirects a file to C(file://) fails the task, and no local file is read.
  - One run per repo at a time, by a lock file in the repo's directory (C(.llmfleet-snapshot.lock)).
  - With O(prune), snapshots of the same repo beyond the O(keep) newest are removed, with the blobs
    and refs only they used; other repos, and entries that are not the cache's, are never touched.
    Blobs and C(.incomplete) downloads of the repo that neither the lock nor a kept snapshot uses
    (another revision's download, left by a run that failed) are removed too, whether or not a
    snapshot goes; a C(.incomplete) file of the lock's own blob is resumed.
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.http
  - llmfleet.engines.http.token
attributes:
  check_mode:
    support: full
    description: Sends no request and writes nothing; says what would be downloaded, linked and pruned.
  diff_mode:
    support: full
    description: The snapshot's files and the repo's snapshots before and after.
options:
  lock:
    description:
      - The model lock, as M(llmfleet.engines.hf_revision) returns it (C(lock)) or its lock file holds
        C({format, repo, revision, commit, files, size}).
    type: dict
    required: true
  cache_dir:
    description:
      - The hub cache directory, the engine's C(HF_HUB_CACHE) (by default C(HF_HOME/hub)).
      - Made when missing (C(0755)).
    type: path
    required: true
  endpoint:
    description:
      - Base URL of the hub, or of a mirror of it (the cache host), under which files are at
        C(<endpoint>/<org>/<name>/resolve/<commit>/<path>).
    type: str
    default: https://huggingface.co
  token:
    description:
      - A hub token, for gated or private repos. Sent as C(Authorization) to the origin of
        O(endpoint) only, never to the host a download is redirected to (the hub's CDN).
      - Over plain C(http://) only to this host's loopback, unless O(allow_plain_http_token) is set.
    type: str
  verify:
    description:
      - How a blob already in the cache is checked. C(size) compares its size with the lock's;
        C(full) also hashes it (reads every byte of the model, every run).
    type: str
    choices: [size, full]
    default: size
  prune:
    description: Remove older snapshots of this repo, and what only they used (see O(keep)).
    type: bool
    default: true
  keep:
    description:
      - How many snapshots of this repo to keep, counting the lock's commit; the newest (by
        modification time) are kept. O(in_use) are kept on top.
    type: int
    default: 2
  in_use:
    description: Commits of this repo that are never pruned (for example, what running units serve).
    type: list
    elements: str
    default: []
  free_space_margin_mib:
    description:
      - Free space, in MiB, that must remain on the cache's filesystem after the missing bytes
        (less what unfinished downloads already hold); otherwise the task fails before downloading.
    type: int
    default: 1024
  progress_file:
    description:
      - A JSON file rewritten about once a second while downloading, C({file, files, bytes_done,
        bytes_total, rate_bps, started, files_done, files_total}), and removed at the end. C(bytes_done)
        sums every download in flight, C(files) lists them, C(file) is the last one that moved.
    type: path
  lock_timeout:
    description: Seconds to wait for another run on the same repo to finish.
    type: int
    default: 3600
  parallel:
    description:
      - How many files are downloaded at once (each by its own thread, which hashes the bytes as they
        arrive), 1 to 32. C(1) downloads one file after another.
      - The progress file's C(bytes_done) sums them; memory use is about 1 MiB per download whatever the
        file sizes.
    type: int
    default: 8
notes:
  - Large files are written to disk as they arrive; memory use does not grow with their size.
  - The real C(huggingface_hub) also reads a snapshot written by it (for example by C(snapshot_download));
    this module accepts such a snapshot as it is when its links and blobs are the lock's.
seealso:
  - module: llmfleet.engines.hf_revision
  - module: llmfleet.engines.hf_warm
"""

EXAMPLES = r"""
- name: Resolve the model's revision once
  llmfleet.engines.hf_revision:
    repo: Qwen/Qwen3-0.6B
    revision: main
  register: model
  delegate_to: localhost
  run_once: true

- name: Lay out the model in the hub cache of the node
  llmfleet.engines.model_snapshot:
    lock: "{{ model.lock }}"
    cache_dir: /opt/llmfleet/hf/hub
    endpoint: http://cache.example:8090
    keep: 2
    progress_file: /run/llmfleet-model-progress.json

- name: A gated model, checked byte for byte, keeping what a unit still serves
  llmfleet.engines.model_snapshot:
    lock: "{{ lookup('ansible.builtin.file', 'locks/llama.json') | from_json }}"
    cache_dir: /opt/llmfleet/hf/hub
    token: "{{ hf_token }}"
    verify: full
    in_use: ["{{ previous_commit }}"]
"""

RETURN = r"""
repo:
  description: The lock's repo.
  returned: always
  type: str
  sample: Qwen/Qwen3-0.6B
commit:
  description: The lock's commit.
  returned: always
  type: str
path:
  description: The snapshot directory, C(<cache_dir>/models--<org>--<name>/snapshots/<commit>).
  returned: always
  type: str
downloaded:
  description: The paths of the files downloaded by this run (in check mode, that it would download).
  returned: always
  type: list
  elements: str
bytes_downloaded:
  description: Bytes received by this run (in check mode, still to download).
  returned: always
  type: int
bytes_total:
  description: The lock's size, the sum of its files' sizes.
  returned: always
  type: int
reused:
  description: How many of the lock's files were already in the cache, checked as O(verify) says.
  returned: always
  type: int
pruned:
  description: The commits whose snapshots were removed (in check mode, would be).
  returned: always
  type: list
  elements: str
blobs_removed:
  description: The blobs removed with them (used by no kept snapshot nor by the lock).
  returned: always
  type: list
  elements: str
space:
  description:
    - In check mode, when files are to be downloaded - the free space of the filesystem they go to,
      for a caller that stages several models on it at once and checks their sum
      (RV(bytes_downloaded) of each) in one go.
  returned: check mode, when something is to be downloaded
  type: dict
  contains:
    free_bytes:
      description: Free bytes on that filesystem (for an unprivileged user).
      type: int
    place:
      description: The directory measured (the blobs directory, or its nearest existing parent).
      type: str
    device:
      description: Its filesystem's device number (C(st_dev)); models with the same one share the space.
      type: int
    margin_mib:
      description: O(free_space_margin_mib).
      type: int
unknown:
  description: Entries of the repo's directory that are not the cache's and were left alone.
  returned: always
  type: list
  elements: str
msg:
  description: What happened, in one line.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import free_bytes
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import cache_lock_problems
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._fetch import DEFAULT_PARALLEL, MAX_PARALLEL, Fetcher, run_parallel
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._snapshot import DownloadProgress, Snapshot
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import (
    DEFAULT_ENDPOINT,
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
from ansible_collections.llmfleet.engines.plugins.module_utils.common._pathlock import PathLock
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import (
    owner_name,
    untrusted_component,
)


def _option_problem(p):
    problem = http_option_problem(p)
    if problem:
        return problem
    if p["keep"] < 1:
        return "keep must be 1 or more (the lock's own snapshot counts), got %d" % p["keep"]
    if p["free_space_margin_mib"] < 0:
        return "free_space_margin_mib must not be negative, got %d" % p["free_space_margin_mib"]
    if not 1 <= p["parallel"] <= MAX_PARALLEL:
        return "parallel must be 1 to %d (files downloaded at once), got %d" % (MAX_PARALLEL, p["parallel"])
    if p["lock_timeout"] < 0:
        return "lock_timeout must not be negative, got %d" % p["lock_timeout"]
    bad = [c for c in p["in_use"] if not (len(c) == 40 and all(ch in "0123456789abcdef" for ch in c))]
    if bad:
        return "in_use must list full commits (40 lower-case hex digits); not one: %s" % ", ".join(map(repr, bad))
    # before anything is sent, in check mode too: a token over plain http only to the loopback
    return validate_endpoint(p["endpoint"]) or token_transport_problem(p["endpoint"], p["token"], p, "the hub token")


def _prune_plan(p, snapshot):
    if p["prune"]:
        return snapshot.prune_plan(p["keep"], p["in_use"])
    return {"snapshots": [], "blobs": [], "partials": [], "refs": [], "unknown": []}


def _diff(snapshot, survey, plan):
    base = os.path.relpath(snapshot.snapshot_dir, snapshot.repo_dir)
    before = [base + "/" + f["path"] for f in survey["files"]
              if f["link_state"] == "ok" and f["blob_state"] == "ok"]
    after = [base + "/" + f["path"] for f in survey["files"]]
    existing = survey["snapshots"]
    kept = [c for c in existing if c not in plan["snapshots"]]
    if snapshot.commit not in kept:
        kept = sorted(kept + [snapshot.commit])
    return {
        "before_header": snapshot.repo_dir, "after_header": snapshot.repo_dir,
        "before": "".join("%s\n" % line for line in ["snapshot %s" % c for c in existing] + before),
        "after": "".join("%s\n" % line for line in ["snapshot %s" % c for c in kept] + after),
    }


def main():
    argument_spec = dict(
        lock=dict(type="dict", required=True),
        cache_dir=dict(type="path", required=True),
        endpoint=dict(type="str", default=DEFAULT_ENDPOINT),
        token=dict(type="str", no_log=True),
        verify=dict(type="str", choices=["size", "full"], default="size"),
        prune=dict(type="bool", default=True),
        keep=dict(type="int", default=2),
        in_use=dict(type="list", elements="str", default=[]),
        free_space_margin_mib=dict(type="int", default=1024),
        progress_file=dict(type="path"),
        lock_timeout=dict(type="int", default=3600),
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
    problem = _option_problem(p)
    if problem:
        module.fail_json(msg=problem)

    snapshot = Snapshot(lock, p["cache_dir"])
    result = dict(changed=False, repo=snapshot.repo, commit=snapshot.commit, path=snapshot.snapshot_dir,
                  downloaded=[], bytes_downloaded=0, bytes_total=lock["size"], reused=0, pruned=[],
                  blobs_removed=[], unknown=[])
    untrusted = untrusted_component(snapshot.repo_dir)
    if untrusted:
        module.fail_json(
            msg="cache_dir %s cannot be trusted: the engine loads the model from it, and %s. Every "
                "directory on its path must belong to root or %s and be writable by no one else: %s. "
                "Nothing was done." % (p["cache_dir"], untrusted.describe(), owner_name(os.geteuid()),
                                       untrusted.fix),
            untrusted=untrusted.as_dict(), **result)

    def finish(survey, plan, **extra):
        result.update(extra)
        if module._diff:
            result["diff"] = _diff(snapshot, survey, plan)
        module.exit_json(**result)

    try:
        survey = snapshot.survey(p["verify"])
        if survey["in_the_way"]:
            module.fail_json(msg="%s in the way of the hub cache's layout for %s@%s (a link, a file or a "
                                 "directory where the cache has something else); it is never removed. "
                                 "Move it away." % (", ".join(survey["in_the_way"]), snapshot.repo,
                                                    snapshot.commit), in_the_way=survey["in_the_way"], **result)
        work = snapshot.work(survey)
        plan = _prune_plan(p, snapshot)
        idle = not (work["fetch"] or work["links"] or work["ref"] or plan["snapshots"] or plan["blobs"]
                    or plan["partials"] or plan["refs"])
        result["reused"] = sum(1 for f in survey["files"] if f["blob_state"] == "ok")
        result["unknown"] = plan["unknown"]
        if idle:
            finish(survey, plan, msg="%s@%s: complete in %s (%d files, %s), nothing to do"
                   % (snapshot.repo, snapshot.commit[:12], snapshot.snapshot_dir, len(lock["files"]),
                      human_size(lock["size"])))
        if module.check_mode:
            fetch = [f["path"] for f in survey["files"] if f["blob_state"] != "ok"]
            snapshot.check_space(work["fetch"], p["free_space_margin_mib"])
            if work["fetch"]:
                # for a caller that stages several models at once: one check of their sum
                free, place = free_bytes(snapshot.blobs_dir)
                result["space"] = {"free_bytes": free, "place": place, "device": os.stat(place).st_dev,
                                   "margin_mib": p["free_space_margin_mib"]}
            finish(survey, plan, changed=True, downloaded=fetch,
                   bytes_downloaded=snapshot.space_needed(work["fetch"]),
                   pruned=plan["snapshots"], blobs_removed=plan["blobs"],
                   msg="%s@%s: would download %d files (%s)%s%s" % (
                       snapshot.repo, snapshot.commit[:12], len(work["fetch"]),
                       human_size(snapshot.space_needed(work["fetch"])),
                       ", link %d" % len(work["links"]) if work["links"] else "",
                       ", prune %d snapshots" % len(plan["snapshots"]) if plan["snapshots"] else ""))
        _apply(p, snapshot, survey, result, finish)
    except LlmfleetError as exc:
        module.fail_json(msg=exc.msg, **dict(result, **exc.details))
    except OSError as exc:
        module.fail_json(msg="%s@%s in %s: %s" % (snapshot.repo, snapshot.commit, p["cache_dir"], exc), **result)


def _download(p, snapshot, entry, item, fetcher, progress, cancel):
    """One worker's file: downloaded to its .incomplete (resumed), checked, renamed into place."""
    start = item["partial"]

    def report(pos, _total):
        if progress is not None:
            progress.file_bytes(item["path"], max(0, pos - start))

    if progress is not None:
        progress.file_started(item["path"])
    received = snapshot.download(item, entry, fetcher,
                                 file_url(p["endpoint"], snapshot.repo, snapshot.commit, item["path"]),
                                 progress=report, cancel=cancel)
    if progress is not None:
        progress.file_finished(item["path"])
    return received


def _apply(p, snapshot, first_survey, result, finish):
    snapshot.prepare_repo()
    lock = PathLock(snapshot.lock_path, p["lock_timeout"],
                    about="model_snapshot %s@%s" % (snapshot.repo, snapshot.commit))
    lock.acquire()
    progress = None
    try:
        snapshot.prepare()
        survey = snapshot.survey(p["verify"])  # again: another run may have done part of it
        work = snapshot.work(survey)
        result["reused"] = sum(1 for f in survey["files"] if f["blob_state"] == "ok")
        by_path = dict((e["path"], e) for e in snapshot.files)
        if work["fetch"]:
            snapshot.check_space(work["fetch"], p["free_space_margin_mib"])
            fetcher = Fetcher(token=p["token"], timeout=p["timeout"], retries=p["retries"],
                              backoff=p["backoff"], validate_certs=p["validate_certs"],
                              allow_plain_http_token=p["allow_plain_http_token"])
            bytes_total = snapshot.space_needed(work["fetch"])
            if p["progress_file"]:
                progress = DownloadProgress(p["progress_file"], bytes_total, len(work["fetch"]))
            fetched = run_parallel(work["fetch"], lambda item, cancel: _download(
                p, snapshot, by_path[item["path"]], item, fetcher, progress, cancel), p["parallel"])
            for item, received in zip(work["fetch"], fetched):
                result["bytes_downloaded"] += received
                result["downloaded"].extend(f["path"] for f in survey["files"] if f["blob"] == item["blob"])
                result["changed"] = True
        # links only once every blob of the lock is in place, checked: a failed download links nothing
        if work["links"]:
            snapshot.link_all(work["links"])
            result["changed"] = True
        if work["ref"]:
            snapshot.write_ref()
            result["changed"] = True
        plan = _prune_plan(p, snapshot)
        if plan["snapshots"] or plan["blobs"] or plan["partials"] or plan["refs"]:
            snapshot.prune(plan)
            result["changed"] = True
        result.update(pruned=plan["snapshots"], blobs_removed=plan["blobs"], unknown=plan["unknown"])
    finally:
        if progress is not None:
            progress.remove()
        lock.release()
    parts = []
    if result["downloaded"]:
        parts.append("downloaded %d files (%s)" % (len(result["downloaded"]), human_size(result["bytes_downloaded"])))
    if result["reused"]:
        parts.append("reused %d" % result["reused"])
    if plan["snapshots"]:
        parts.append("pruned %d snapshots and %d blobs" % (len(plan["snapshots"]), len(plan["blobs"])))
    finish(first_survey, plan, msg="%s@%s in %s: %s" % (
        snapshot.repo, snapshot.commit[:12], snapshot.snapshot_dir, ", ".join(parts) or "links and refs made"))


if __name__ == "__main__":
    main()
