#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_revision
short_description: Pin a Hugging Face model revision to a commit, with every file's size and hash
version_added: 0.1.0
description:
  - Asks the Hugging Face hub (or a mirror of its API) which commit the revision O(revision) of the
    model O(repo) points at, and returns the model's lock (RV(lock)) - that commit and, for every
    file to download, its path, its size and its hash (the sha256 of an LFS file, the git blob id of
    a small file). Nodes lay out the hub's cache from that lock with
    M(llmfleet.engines.model_snapshot) and check every byte against it, so that the whole fleet
    serves the same weights even when the branch moves on.
  - By default the lock lists the files that vLLM loads (see O(allow_patterns)).
  - Read-only unless O(lock_file) is set. Run it once per play on the controller (C(run_once) with
    C(delegate_to=localhost)).
  - Connection errors, time-outs, 429 and 5xx answers are tried again with an exponential
    back-off; other answers are not.
author:
  - llmfleet maintainers (@llmfleet)
options:
  repo:
    description:
      - The model, as C(org/name) (for example C(Qwen/Qwen3-0.6B)). Each side starts with a letter or
        a digit and has only letters, digits, C(.), C(_) and C(-); C(--) and C(..) are not allowed.
    type: str
    required: true
  revision:
    description:
      - A branch, a tag or a full commit id (40 hex digits). A branch or tag is resolved to the commit
        it points at now; a commit must be the one the hub answers for it, else the task fails. A commit
        is written in lower case in the lock and RV(revision).
    type: str
    default: main
  endpoint:
    description:
      - Base URL of the hub, or of a mirror that answers its API (olah, a proxy), with or without a
        path prefix (for example C(http://hub-cache.internal:8090/hub)). Model info is asked from
        C(<endpoint>/api/models/<repo>/revision/<revision>?blobs=true); the mirror must honour
        C(blobs=true), which gives the sizes and hashes.
    type: str
    default: https://huggingface.co
  token:
    description:
      - A Hugging Face access token (read access is enough), for gated models (whose terms the token's
        account has accepted on the model's page) and private ones. Sent only to the origin of
        O(endpoint), in an C(Authorization) header (kept on the hub's own redirects, such as a
        renamed repo's, never sent to another host); it never leaves the controller unless you pass
        it on, and it is masked in every result and error.
      - Over plain C(http://) only to this host's loopback, unless O(allow_plain_http_token) is set.
      - When not set, the environment variable E(HF_TOKEN) of the controller is used, if set.
    type: str
  allow_patterns:
    description:
      - Which files of the repo to pin, as the patterns of C(huggingface_hub)'s C(snapshot_download)
        (C(fnmatch), case-sensitive; C(*) also matches C(/); a pattern ending in C(/) means everything
        under that directory). They replace the default selection, its exclusions included.
      - The default selection is what vLLM loads - C(*.safetensors), C(*.safetensors.index.json),
        C(*.json), C(tokenizer.model), C(*.tiktoken), C(*.txt) and C(*.py); C(*.bin), C(*.pt) and
        C(*.pth) weights only when the repo has no C(*.safetensors) (without training state such as
        C(optimizer.pt)); never C(original/) (Meta's consolidated checkpoints), C(*.md),
        C(.gitattributes), images, C(*.onnx), C(*.gguf), C(*.msgpack) or C(*.h5); no PyTorch weight
        index beside safetensors weights, and no top-level C(consolidated*.safetensors) beside a
        safetensors index (Mistral's native checkpoint, which the index does not list).
      - The selection must contain C(config.json).
    type: list
    elements: str
  ignore_patterns:
    description:
      - Patterns (as in O(allow_patterns)) of files to leave out, applied after the allow patterns or
        the default selection.
    type: list
    elements: str
  lock_file:
    description:
      - When set, the lock is also written to this path as JSON (sorted keys, indented, one trailing
        newline; mode C(0644)), through a temporary file in the same directory and a rename. Missing
        directories are created. The task reports C(changed) only when the content differs.
    type: path
  refresh:
    description:
      - Whether to ask the hub even when O(lock_file) already holds a lock. V(true) (the default) - the
        revision is resolved again and the file rewritten when the answer differs.
      - V(false) - when O(lock_file) exists, its lock is returned as it is, without any request
        (RV(from_lock_file) is V(true)); only a missing file makes the module ask the hub (and write
        it). The lock read back is checked before it is used - the file and every directory above it
        must belong to root or the user running the module and be writable by no one else (the
        collection's privilege rule, as for the fleet's engine locks; nodes install what it says), it
        must be a valid lock (format 1) and name O(repo) at O(revision) - else the task fails, naming
        the file. O(allow_patterns) and O(ignore_patterns) apply only when the hub is asked.
      - Without O(lock_file), the hub is always asked.
    type: bool
    default: true
extends_documentation_fragment:
  - llmfleet.engines.http
  - llmfleet.engines.http.token
attributes:
  check_mode:
    support: full
    description: Asks the hub as in a normal run (not when O(refresh=false) reads a lock back) and reports
      whether O(lock_file) would change; writes nothing.
  diff_mode:
    support: full
    description: Shows the old and the new text of O(lock_file).
  platform:
    support: full
    platforms: posix
    description: Needs only Python and network access to the hub; meant to run on the controller.
notes:
  - Without O(lock_file), C(changed) is always V(false).
  - The hub answers 401 without a token for a private repo as well as for one that does not exist; the
    error says so.
  - The hub shows a gated repo's file list to anyone, but serves its files only with a token whose
    account was granted access. For a gated repo the module therefore also downloads one small file
    (C(config.json), kept in git) with O(token), as the nodes will, and fails when it is refused. It
    also checks that file's bytes against the hub's blob id.
  - The lock's RV(lock.repo) is O(repo) as given. C(huggingface_hub) names its cache directory after
    the name a program asks for, so serve the model under the same name.
seealso:
  - module: llmfleet.engines.model_snapshot
  - name: Hugging Face Hub API, model info
    description: The endpoint this module reads.
    link: https://huggingface.co/docs/hub/api#get-apimodelsrepoid-or-apimodelsrepoidrevisionrevision
  - name: Gated models
    description: How a token's account gets access to a gated model.
    link: https://huggingface.co/docs/hub/models-gated
"""

EXAMPLES = r"""
- name: Pin the main branch of a model and keep its lock beside the playbook
  llmfleet.engines.hf_revision:
    repo: Qwen/Qwen3-0.6B
    revision: main
    lock_file: "{{ playbook_dir }}/locks/models/Qwen--Qwen3-0.6B.json"
  run_once: true
  delegate_to: localhost
  register: qwen

- name: Say what was pinned
  ansible.builtin.debug:
    msg: "{{ qwen.repo }} {{ qwen.revision }} is {{ qwen.commit }}: {{ qwen.files }} files, {{ qwen.size_human }}"

- name: A gated model, through an internal mirror, with a token from the controller's environment
  llmfleet.engines.hf_revision:
    repo: meta-llama/Llama-3.1-8B-Instruct
    endpoint: https://hub-cache.internal:8443
    token: "{{ lookup('ansible.builtin.env', 'HF_TOKEN') }}"
  run_once: true
  delegate_to: localhost
  register: llama

- name: Check that a pinned commit is still served, with only the sharded weights and the tokenizer
  llmfleet.engines.hf_revision:
    repo: mistralai/Mistral-7B-Instruct-v0.3
    revision: "{{ mistral_commit }}"
    allow_patterns:
      - "*.json"
      - "model-*.safetensors"
      - "tokenizer*"
    ignore_patterns:
      - "consolidated*"
  run_once: true
  delegate_to: localhost
  register: mistral
"""

RETURN = r"""
lock:
  description:
    - The model's lock, as written to O(lock_file). Format 1, described in the collection's
      C(docs/dev/MODELS.md).
  returned: success
  type: dict
  contains:
    format:
      description: The lock format, V(1).
      type: int
    repo:
      description: O(repo).
      type: str
    revision:
      description: O(revision), as given (a commit id in lower case).
      type: str
    commit:
      description: The commit the revision pointed at (40 lower-case hex digits).
      type: str
    files:
      description:
        - The selected files, sorted by path. Each has RV(lock.files[].sha256) (an LFS file) or
          RV(lock.files[].git_oid) (a file kept in git), never both.
      type: list
      elements: dict
      contains:
        path:
          description: The file's path in the repo.
          type: str
        size:
          description: Its size in bytes.
          type: int
        sha256:
          description: The sha256 of an LFS file's content.
          type: str
        git_oid:
          description: The git blob id of a small file (C(sha1("blob <size>\0" + content))).
          type: str
    size:
      description: The sum of the files' sizes, in bytes.
      type: int
  sample:
    format: 1
    repo: llmfleet-test/tiny-chat
    revision: main
    commit: 9c1d3b1a3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b
    files:
      - {path: config.json, size: 611, git_oid: 0b7e7c1a2f6c5e8d9a0b1c2d3e4f5a6b7c8d9e0f}
      - {path: model.safetensors, size: 16384, sha256: 5f2b0c1e8d7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c}
    size: 16995
commit:
  description: The commit the revision pointed at.
  returned: success
  type: str
  sample: 9c1d3b1a3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b
revision:
  description: O(revision), as given (a commit id in lower case).
  returned: success
  type: str
  sample: main
repo:
  description: O(repo).
  returned: success
  type: str
  sample: llmfleet-test/tiny-chat
files:
  description: How many files the lock lists.
  returned: success
  type: int
  sample: 7
size:
  description: Their total size in bytes.
  returned: success
  type: int
  sample: 16995
size_human:
  description: The total size in binary units.
  returned: success
  type: str
  sample: 16.6 KiB
gated:
  description:
    - Whether the repo is gated, as the hub says (V(false), V(auto) or V(manual)); V(false) when the lock
      was read back (RV(from_lock_file)).
  returned: success
  type: raw
  sample: manual
from_lock_file:
  description: Whether the lock was read back from O(lock_file) (O(refresh=false)) instead of asked from the hub.
  returned: success
  type: bool
  sample: false
lock_file:
  description: O(lock_file), or null when not set.
  returned: success
  type: str
  sample: /srv/ansible/locks/models/llmfleet-test--tiny-chat.json
msg:
  description: What was pinned, in one line.
  returned: always
  type: str
  sample: "llmfleet-test/tiny-chat main -> 9c1d3b1a3e4f, 7 files, 16.6 KiB"
url:
  description: The model info URL that failed (never with a secret in it).
  returned: failure, when the hub was asked
  type: str
  sample: https://huggingface.co/api/models/meta-llama/Llama-3.1-8B/revision/main?blobs=true
"""

import os

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import (
    DEFAULT_ENDPOINT,
    HubError,
    build_lock,
    check_file_access,
    fetch_model_info,
    human_size,
    read_kept_lock,
    select_files,
    validate_endpoint,
    validate_revision,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import is_commit, lock_text, validate_repo
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    HttpError,
    client_from_params,
    http_argument_spec,
    http_option_problem,
    http_token_argument_spec,
    token_transport_problem,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import write_atomic


def _patterns_problem(name, patterns):
    if patterns is None:
        return None
    if not patterns:
        return "%s is an empty list: leave it out for the default selection" % name
    for pattern in patterns:
        if not pattern or not pattern.strip():
            return "%s has an empty pattern (%r): every pattern must match something" % (name, patterns)
    return None


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _write(path, text):
    """``text`` to ``path``, 0644, atomically (common/_fs.write_atomic: a mkstemp file beside it, renamed over it)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, text.encode("utf-8"), 0o644)


def _exit_with_kept(module, lock, lock_file, repo, revision):
    size_text = human_size(lock["size"])
    module.exit_json(
        changed=False, lock=lock, commit=lock["commit"], revision=revision, repo=repo, files=len(lock["files"]),
        size=lock["size"], size_human=size_text, lock_file=lock_file, gated=False, from_lock_file=True,
        msg="%s %s -> %s, %d file%s, %s; read back from %s (the hub was not asked)"
            % (repo, revision, lock["commit"][:12], len(lock["files"]), "" if len(lock["files"]) == 1 else "s",
               size_text, lock_file))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            endpoint=dict(type="str", default=DEFAULT_ENDPOINT),
            token=dict(type="str", no_log=True, fallback=(env_fallback, ["HF_TOKEN"])),
            allow_patterns=dict(type="list", elements="str"),
            ignore_patterns=dict(type="list", elements="str"),
            lock_file=dict(type="path"),
            refresh=dict(type="bool", default=True),
            **dict(http_argument_spec(), **http_token_argument_spec())
        ),
        supports_check_mode=True,
    )
    p = module.params
    repo, revision, endpoint = p["repo"], p["revision"], p["endpoint"]
    for problem in (validate_repo(repo), validate_revision(revision), validate_endpoint(endpoint),
                    _patterns_problem("allow_patterns", p["allow_patterns"]),
                    _patterns_problem("ignore_patterns", p["ignore_patterns"]), http_option_problem(p)):
        if problem:
            module.fail_json(msg=problem, changed=False)
    # before anything is sent: a token over plain http only to the loopback, unless allowed
    problem = token_transport_problem(endpoint, p["token"], p, "the Hugging Face token")
    if problem:
        module.fail_json(msg=problem, changed=False)

    if is_commit(revision):
        revision = revision.lower()  # the lock's revision is then its commit: no refs/ entry in the cache
    if p["lock_file"] and not p["refresh"]:
        # pins are data: a lock kept in the file is what the fleet serves, until asked to refresh
        try:
            kept = read_kept_lock(p["lock_file"], repo, revision)
        except ValueError as exc:
            module.fail_json(msg=str(exc), changed=False, lock_file=p["lock_file"])
        if kept is not None:
            _exit_with_kept(module, kept, p["lock_file"], repo, revision)

    token = p["token"] or None
    client = client_from_params(p, secrets=[token] if token else None)
    what = "%s at revision %s on %s" % (repo, revision, endpoint.rstrip("/"))
    try:
        info = fetch_model_info(client, endpoint, repo, revision, token)
        lock = build_lock(repo, revision, info,
                          select_files(info["siblings"], p["allow_patterns"], p["ignore_patterns"]),
                          endpoint=endpoint)
        if info.get("gated"):
            # a gated repo's model info is public; its files are not: prove access now, not on every node
            check_file_access(client, endpoint, lock, token)
    except HubError as exc:
        module.fail_json(msg=client.redact("resolving %s: %s" % (what, exc.msg)), changed=False,
                         **dict((k, client.redact(v) if isinstance(v, str) else v)
                                for k, v in exc.details.items()))
    except HttpError as exc:
        module.fail_json(msg=client.redact("resolving %s: %s" % (what, exc.msg)), changed=False,
                         url=client.redact(exc.url))

    if is_commit(revision) and lock["commit"] != revision:
        module.fail_json(
            msg="resolving %s: the hub answered commit %s for commit %s; a commit id must resolve to "
                "itself (is the endpoint a mirror serving another revision?)"
                % (what, lock["commit"], revision), changed=False, commit=lock["commit"])
    hub_id = info.get("id")
    if isinstance(hub_id, str) and hub_id and hub_id != repo:
        module.warn("the hub calls %s %s (renamed, or in another case); the lock keeps %s, so serve "
                    "the model under that name, or pin it as %s" % (repo, hub_id, repo, hub_id))

    text = lock_text(lock)
    changed = False
    diff = None
    lock_file = p["lock_file"]
    note = ""
    if lock_file:
        try:
            before = _read(lock_file)
        except (OSError, UnicodeDecodeError) as exc:
            module.fail_json(msg="cannot read lock_file %s: %s" % (lock_file, exc), changed=False)
        changed = before != text
        if module._diff:
            diff = {"before": before or "", "after": text,
                    "before_header": lock_file if before is not None else "%s (absent)" % lock_file,
                    "after_header": lock_file}
        if changed and not module.check_mode:
            try:
                _write(lock_file, text)
            except OSError as exc:
                module.fail_json(msg="cannot write lock_file %s: %s; an old lock there is left as it was"
                                     % (lock_file, exc), changed=False, lock=lock)
        if changed:
            note = "; %s %s" % ("would write" if module.check_mode else "wrote", lock_file)
        else:
            note = "; %s is up to date" % lock_file

    size_text = human_size(lock["size"])
    msg = "%s %s -> %s, %d file%s, %s%s" % (repo, revision, lock["commit"][:12], len(lock["files"]),
                                            "" if len(lock["files"]) == 1 else "s", size_text, note)
    result = dict(changed=changed, msg=msg, lock=lock, commit=lock["commit"], revision=revision, repo=repo,
                  files=len(lock["files"]), size=lock["size"], size_human=size_text, lock_file=lock_file,
                  gated=info.get("gated") or False, from_lock_file=False)
    if diff is not None:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
