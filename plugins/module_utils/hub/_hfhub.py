# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The Hugging Face hub as ``huggingface_hub`` speaks it, and the model lock (docs/dev/MODELS.md):

* URLs: model info (``/api/models/<org>/<name>/revision/<revision>?blobs=true``) and files
  (``/<org>/<name>/resolve/<commit>/<path>``), under an endpoint that may carry a path prefix.
* :func:`fetch_model_info`: the model info, with 401/403/404 turned into sentences that say what
  to do; the token goes only into the ``Authorization`` header, never into a message.
* :func:`select_files`: which files of a repo to pin (by default: what vLLM loads), with the
  pattern semantics of ``huggingface_hub.utils.filter_repo_objects``.
* :func:`build_lock`: the lock of a repo at a revision, in the format of ``_lock`` (which checks,
  writes and names it: :func:`_lock.validate_lock`, :func:`_lock.lock_text`, :func:`_lock.blob_name`).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from fnmatch import fnmatchcase
from urllib.parse import quote, urlsplit

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import owner_name, trusted_uids, untrusted_component
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    HttpStatusError,
    NotFoundError,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._lock import (
    HEX40,
    HEX64,
    LOCK_FORMAT,
    is_size,
    path_problem,
    validate_lock,
)

# The one public default: every other hub URL is built from the endpoint.
DEFAULT_ENDPOINT = "https://huggingface.co"

# What vLLM loads from a repo (weights, config, tokenizer, generation config, remote code).
DEFAULT_ALLOW_PATTERNS = (
    "*.safetensors",
    "*.safetensors.index.json",
    "*.json",
    "tokenizer.model",
    "*.tiktoken",
    "*.txt",
    "*.py",
)
# PyTorch pickles, taken only when the repo has no safetensors weights at all.
FALLBACK_WEIGHT_PATTERNS = ("*.bin", "*.pt", "*.pth")
# Never in the default selection: Meta's consolidated checkpoints, docs, pictures, other formats.
DEFAULT_IGNORE_PATTERNS = (
    "original/",
    "*.md",
    ".gitattributes",
    "*.png", "*.jpg", "*.jpeg", "*.gif", "*.webp", "*.svg", "*.bmp",
    "*.onnx", "*.onnx_data", "*.gguf", "*.msgpack", "*.h5", "*.ot", "*.tflite",
)
# Training leftovers that vLLM skips among PyTorch weights (vllm model_loader weight_utils).
TRAINING_STATE_FILES = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt",
                        "scaler.pt")
# The index of PyTorch weights, useless (and misleading) next to safetensors weights.
TORCH_INDEX_PATTERNS = ("*.bin.index.json", "*.pt.index.json", "*.pth.index.json")


class HubError(LlmfleetError):
    """Base class: the hub did not give a usable answer, or the answer cannot be pinned."""


class HubArgumentError(HubError):
    """A repo, revision, endpoint or pattern that cannot be used."""


class HubAccessError(HubError):
    """401 or 403: a token is needed, or the token has no access."""


class HubNotFoundError(HubError):
    """404: no such repo, or no such revision of it."""


class HubAnswerError(HubError):
    """An answer that is not a model info this module can pin (no sha, no sizes, bad paths)."""


class SelectionError(HubError):
    """The patterns select no file, or no config.json."""


# -- names and URLs -------------------------------------------------------------------------------
def validate_revision(revision):
    """What is wrong with ``revision`` (a branch, tag or commit), or None."""
    if not isinstance(revision, str) or not revision.strip():
        return "revision must be a branch, tag or commit, not empty"
    if revision != revision.strip() or any(ord(c) < 32 or ord(c) == 127 for c in revision):
        return "revision %r has spaces around it or control characters" % (revision,)
    return None


def validate_endpoint(endpoint):
    """What is wrong with ``endpoint`` (an http(s) base URL, path prefix allowed), or None."""
    try:
        parts = urlsplit(endpoint or "")
    except ValueError as exc:
        return "endpoint %r is not a URL (%s)" % (endpoint, exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "endpoint %r is not an http:// or https:// URL with a host" % (endpoint,)
    if parts.query or parts.fragment:
        return "endpoint %r must not have a query or fragment: give the base URL only" % (endpoint,)
    if parts.username or parts.password:
        return "endpoint must not carry a user or password: give a token instead"
    return None


def _base(endpoint):
    return (endpoint or DEFAULT_ENDPOINT).rstrip("/")


def quote_revision(revision):
    """A revision as one URL path segment (``refs/pr/1`` -> ``refs%2Fpr%2F1``), as the real client."""
    return quote(revision, safe="")


def model_info_url(endpoint, repo, revision, blobs=True):
    """The model info URL of ``repo`` at ``revision`` (with file sizes and hashes when ``blobs``)."""
    url = "%s/api/models/%s/revision/%s" % (_base(endpoint), repo, quote_revision(revision))
    return url + "?blobs=true" if blobs else url


def file_url(endpoint, repo, commit, path):
    """Where a file of ``repo`` at ``commit`` downloads from (path quoted, ``/`` kept)."""
    return "%s/%s/resolve/%s/%s" % (_base(endpoint), repo, quote_revision(commit), quote(path, safe="/"))


def repo_page(endpoint, repo):
    """The repo's page on the hub (where a gated model's terms are accepted)."""
    return "%s/%s" % (_base(endpoint), repo)


# -- model info ------------------------------------------------------------------------------------
def _hub_words(client, exc):
    """What the hub said about a failed request (its X-Error-Message, else its body's message),
    with the client's secrets masked."""
    said = (exc.headers or {}).get("x-error-message") or exc.server_message or ""
    said = client.redact(" ".join(str(said).split()))[:300]
    return " (the hub says: %s)" % said if said else ""


def _access_error(client, exc, endpoint, repo, url, token):
    """A 401 or 403 of the hub as a :class:`HubAccessError` that says what to do (else None)."""
    page = repo_page(endpoint, repo)
    words = _hub_words(client, exc)
    code = (exc.headers or {}).get("x-error-code", "")
    said = (exc.headers or {}).get("x-error-message") or exc.server_message or ""
    if exc.status == 401 and not token:
        if code == "GatedRepo":
            what = ("%s is gated: its files need a token (asked %s, answer 401)%s. Accept its terms on "
                    "%s with your account, then set the token option to a token of that account"
                    % (repo, url, words, page))
        else:
            what = ("%s answered 401 without a token (asked %s)%s: a token is needed. The repo is gated "
                    "(accept its terms on %s first) or private, or it does not exist; set the token "
                    "option to a token of an account that can read it" % (_base(endpoint), url, words, page))
    elif exc.status == 401 and "credentials" in said.lower():
        what = ("%s refused the token (401, asked %s)%s: check that it is valid and not expired or "
                "revoked" % (_base(endpoint), url, words))
    elif exc.status == 401:
        what = ("%s answered 401 with the token (asked %s)%s: the repo does not exist, or it is private "
                "or gated and the token's account cannot read it (for a gated model, accept its terms "
                "on %s); check the repo name and the token" % (_base(endpoint), url, words, page))
    elif exc.status == 403 and token:
        what = ("the token has no access to %s (403, asked %s)%s: for a gated model, accept its terms "
                "on %s with the token's account and wait for approval; for a private one, use a token "
                "of an account that can read it; a fine-grained token needs read access to the repo"
                % (repo, url, words, page))
    elif exc.status == 403:
        what = ("%s refused access to %s without a token (403, asked %s)%s: set the token option to a "
                "token that can read it (for a gated model, accept its terms on %s first)"
                % (_base(endpoint), repo, url, words, page))
    else:
        return None
    return HubAccessError(what, url=url, status=exc.status)


def fetch_model_info(client, endpoint, repo, revision, token=None):
    """The model info of ``repo`` at ``revision`` as a dict (``sha``, ``siblings`` with blobs).

    ``client`` is an ``_http.HttpClient`` (give it the token in ``secrets``). Raises
    :class:`HubAccessError`, :class:`HubNotFoundError` or :class:`HubAnswerError`; other
    failures (unreachable, invalid JSON, other statuses) come as ``_http.HttpError``.
    """
    url = model_info_url(endpoint, repo, revision)
    headers = {}
    if token:
        headers["Authorization"] = "Bearer %s" % token
    try:
        data, _resp = client.get_json(url, headers=headers)
    except NotFoundError as exc:
        code = (exc.headers or {}).get("x-error-code", "")
        if code == "RevisionNotFound":
            raise HubNotFoundError(
                "%s has no revision %r (asked %s, answer %d)%s: give a branch, a tag or a full commit "
                "id of the repo (see %s/tree/main for its branches)"
                % (repo, revision, url, exc.status, _hub_words(client, exc), repo_page(endpoint, repo)),
                url=url, status=exc.status)
        if code == "RepoNotFound":
            raise HubNotFoundError(
                "there is no model %s on %s (asked %s, answer %d)%s: check the repo name%s"
                % (repo, _base(endpoint), url, exc.status, _hub_words(client, exc),
                   "; a private repo is not found with a token that cannot read it" if token else
                   "; a private repo also needs a token that can read it"),
                url=url, status=exc.status)
        raise HubNotFoundError(
            "the hub has no model %s at revision %r (asked %s, answer %d)%s: check the repo name and "
            "the revision (a branch, a tag or a full commit id)"
            % (repo, revision, url, exc.status, _hub_words(client, exc)),
            url=url, status=exc.status)
    except HttpStatusError as exc:
        error = _access_error(client, exc, endpoint, repo, url, token)
        if error is not None:
            raise error
        raise
    if not isinstance(data, dict) or not isinstance(data.get("siblings"), list):
        raise HubAnswerError(
            "%s answered JSON without a 'siblings' list: is endpoint %r a Hugging Face hub (or a "
            "mirror that serves its API)?" % (url, _base(endpoint)), url=url)
    return data


def git_blob_id(data):
    """The git blob id of ``data`` (what the hub calls ``blobId`` for a file kept in git)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # nosec - git's own id


def probe_file(lock):
    """The lock's file to read to prove access: config.json, else its smallest file kept in git.

    Only a git file: the hub serves it itself, where an LFS file is a redirect to a CDN host (which
    must not get the token). None when the lock has no git file."""
    small = [f for f in lock["files"] if "git_oid" in f]
    for entry in small:
        if entry["path"] == "config.json":
            return entry
    return min(small, key=lambda f: (f["size"], f["path"])) if small else None


def check_file_access(client, endpoint, lock, token=None):
    """Download one small file of ``lock`` (see :func:`probe_file`) as the nodes will: proves that
    the token (or no token) may read the repo's files, which a gated repo's public model info does
    not, and that the hub serves the bytes its model info describes. Returns the path read, or None
    when the lock has no git file to read."""
    entry = probe_file(lock)
    if entry is None:
        return None
    repo = lock["repo"]
    url = file_url(endpoint, repo, lock["commit"], entry["path"])
    headers = {"Accept": "*/*"}
    if token:
        headers["Authorization"] = "Bearer %s" % token
    try:
        resp = client.get(url, headers=headers)
    except NotFoundError as exc:
        raise HubAnswerError(
            "%s answered %d for %s, which its model info lists at commit %s%s"
            % (_base(endpoint), exc.status, url, lock["commit"], _hub_words(client, exc)), url=url, status=exc.status)
    except HttpStatusError as exc:
        error = _access_error(client, exc, endpoint, repo, url, token)
        if error is not None:
            raise error
        raise
    body = resp.body
    if len(body) != entry["size"] or git_blob_id(body) != entry["git_oid"]:
        raise HubAnswerError(
            "%s served %s with other content than its model info says (%d bytes, blob id %s; the info "
            "says %d bytes, %s): is a proxy rewriting it?"
            % (_base(endpoint), url, len(body), git_blob_id(body), entry["size"], entry["git_oid"]), url=url)
    return entry["path"]


# -- selection ---------------------------------------------------------------------------------------
def _as_list(patterns):
    return [patterns] if isinstance(patterns, str) else [str(p) for p in patterns]


def _pattern_list(patterns):
    """Patterns as huggingface_hub uses them: ``\\`` read as ``/``, ``dir/`` as ``dir/*``."""
    if patterns is None:
        return None
    out = []
    for pattern in _as_list(patterns):
        pattern = str(pattern).replace("\\", "/")
        out.append(pattern + "*" if pattern.endswith("/") else pattern)
    return out


def _matches(path, patterns):
    return any(fnmatchcase(path, p) for p in patterns)


def sibling_path(sibling):
    return sibling.get("rfilename") if isinstance(sibling, dict) else None


def _list_text(items, limit=20):
    items = list(items)
    text = ", ".join(items[:limit])
    if len(items) > limit:
        text += " and %d more" % (len(items) - limit)
    return text or "none"


def default_allowed(paths):
    """The default selection among ``paths``: what vLLM loads (see the module's documentation)."""
    ignore = _pattern_list(DEFAULT_IGNORE_PATTERNS)
    candidates = [p for p in paths if not _matches(p, ignore)]
    safetensors = [p for p in candidates if fnmatchcase(p, "*.safetensors")]
    allow = list(DEFAULT_ALLOW_PATTERNS)
    skip = []
    if safetensors:
        skip.extend(TORCH_INDEX_PATTERNS)
        if any("/" not in p and fnmatchcase(p, "*.safetensors.index.json") for p in candidates):
            # Mistral's native checkpoint beside the sharded transformers weights: the index does not
            # list it, so vLLM does not load it.
            skip.append("consolidated*.safetensors")
    else:
        allow.extend(FALLBACK_WEIGHT_PATTERNS)
    out = []
    for path in candidates:
        if not _matches(path, allow) or _matches(path, skip):
            continue
        if posixpath.basename(path) in TRAINING_STATE_FILES or fnmatchcase(posixpath.basename(path), "rng_state*.pth"):
            continue
        out.append(path)
    return out


def select_files(siblings, allow_patterns=None, ignore_patterns=None):
    """The siblings (model info entries) to pin, sorted by path.

    Without ``allow_patterns`` the default selection (:func:`default_allowed`); with them, the
    files matching any of them, as ``huggingface_hub`` would (``fnmatch``, ``*`` crosses ``/``, a
    pattern ending in ``/`` is everything under that directory). ``ignore_patterns`` then drop
    files. Raises :class:`SelectionError` when nothing, or no ``config.json``, is selected.
    """
    by_path = {}
    for sibling in siblings or []:
        path = sibling_path(sibling)
        if isinstance(path, str) and path:
            by_path[path] = sibling
    paths = sorted(by_path)
    # matched as huggingface_hub does, with '\\' read as '/' (build_lock refuses such a path)
    matched = dict((p.replace("\\", "/"), p) for p in paths)
    allow = _pattern_list(allow_patterns)
    ignore = _pattern_list(ignore_patterns)
    if allow is None:
        selected = default_allowed(sorted(matched))
    else:
        selected = [p for p in sorted(matched) if _matches(p, allow)]
    if ignore:
        selected = [p for p in selected if not _matches(p, ignore)]
    selected = sorted(matched[p] for p in selected)
    how = "allow_patterns %s" % (json.dumps(_as_list(allow_patterns)) if allow is not None
                                 else "not set (the default selection: what vLLM loads)")
    how += ", ignore_patterns %s" % (json.dumps(_as_list(ignore_patterns)) if ignore_patterns else "not set")
    if not selected:
        raise SelectionError(
            "no file of the repo is selected (%s); the repo has: %s" % (how, _list_text(paths)),
            repo_files=paths)
    if "config.json" not in selected:
        raise SelectionError(
            "the selection has no config.json, which vLLM needs to load the model (%s); selected: %s; "
            "the repo has: %s" % (how, _list_text(selected), _list_text(paths)),
            repo_files=paths, selected=selected)
    return [by_path[p] for p in selected]


# -- the lock ----------------------------------------------------------------------------------------
def build_lock(repo, revision, info, files, endpoint=None):
    """The lock of ``repo`` at ``revision`` from its model info and the selected siblings.

    Raises :class:`HubAnswerError` when the info has no commit ``sha``, a file has no size or
    hash (the endpoint ignored ``blobs=true``), or a path is unsafe.
    """
    where = " from %s" % _base(endpoint) if endpoint else ""
    sha = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not HEX40.fullmatch(sha.lower()):
        raise HubAnswerError(
            "the model info of %s at %r%s has no commit sha (got %r): it cannot be pinned; is the "
            "endpoint a Hugging Face hub or a mirror of its API?" % (repo, revision, where, sha))
    entries = []
    missing = []
    for sibling in files:
        path = sibling_path(sibling)
        problem = path_problem(path)
        if problem:
            raise HubAnswerError("the model info of %s at %s%s lists an unsafe file: %s"
                                 % (repo, sha.lower(), where, problem))
        size = sibling.get("size")
        lfs = sibling.get("lfs") if isinstance(sibling.get("lfs"), dict) else None
        entry = {"path": path, "size": size}
        if lfs is not None:
            sha256 = lfs.get("sha256")
            if not isinstance(sha256, str) or not HEX64.fullmatch(sha256.lower()):
                raise HubAnswerError(
                    "the model info of %s at %s%s gives %s as an LFS file without a sha256 (got %r)"
                    % (repo, sha.lower(), where, path, sha256))
            entry["sha256"] = sha256.lower()
            if size is None:
                size = lfs.get("size")
                entry["size"] = size
            elif is_size(lfs.get("size")) and lfs["size"] != size:
                raise HubAnswerError(
                    "the model info of %s at %s%s gives %s two sizes: %r and LFS %r"
                    % (repo, sha.lower(), where, path, size, lfs["size"]))
        else:
            blob = sibling.get("blobId")
            if not isinstance(blob, str) or not HEX40.fullmatch(blob.lower()):
                missing.append(path)
                continue
            entry["git_oid"] = blob.lower()
        if not is_size(entry["size"]):
            missing.append(path)
            continue
        entries.append(entry)
    if missing:
        raise HubAnswerError(
            "the model info of %s at %s%s has no size or blob id for %s: the lock needs both, which the "
            "hub gives when asked with ?blobs=true; the endpoint ignored it (a mirror that drops the "
            "query string or serves a cached answer without blobs?)"
            % (repo, sha.lower(), where, _list_text(missing, 5)), files_without_blobs=missing)
    entries.sort(key=lambda e: e["path"])
    lock = {
        "format": LOCK_FORMAT,
        "repo": repo,
        "revision": revision,
        "commit": sha.lower(),
        "files": entries,
        "size": sum(e["size"] for e in entries),
    }
    problems = validate_lock(lock)
    if problems:
        raise HubAnswerError("the lock of %s at %s%s would be invalid: %s"
                             % (repo, sha.lower(), where, "; ".join(problems)))
    return lock


def read_kept_lock(lock_file, repo, revision):
    """The lock kept in ``lock_file`` (None when there is none), checked: the file and its directories
    closed to other users (``_trust``), a valid lock of ``repo`` at ``revision`` (a commit in lower case,
    as ``_lock.is_commit`` reads it). Raises ValueError with a sentence naming the file. Read by
    ``hf_revision`` and by the ``engine_service_look`` action (on the controller, where the locks are kept)."""
    problem = untrusted_component(lock_file)
    if problem:
        raise ValueError(
            "lock_file %s cannot be trusted: its lock decides the weights every node serves, and %s. Every "
            "directory on its path must belong to %s and be writable by no one else: %s"
            % (lock_file, problem.describe(), " or ".join(owner_name(uid) for uid in sorted(trusted_uids())),
               problem.fix))
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError("cannot read lock_file %s: %s" % (lock_file, exc))
    try:
        with os.fdopen(fd, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError("cannot read lock_file %s: %s" % (lock_file, exc))
    try:
        lock = json.loads(text)
    except ValueError as exc:
        raise ValueError("lock_file %s is not JSON (%s): fix or remove it, or set refresh" % (lock_file, exc))
    problems = validate_lock(lock)
    if problems:
        raise ValueError("lock_file %s is not a model lock: %s. Fix or remove it, or set refresh"
                         % (lock_file, "; ".join(problems)))
    if lock["repo"] != repo or lock["revision"] != revision:
        raise ValueError("lock_file %s holds the lock of %s at %s, not of %s at %s: remove it, or set refresh"
                         % (lock_file, lock["repo"], lock["revision"], repo, revision))
    return lock


def human_size(size):
    """``size`` bytes in binary units, one decimal (``16.0 KiB``, ``15.0 GiB``)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return "%d B" % size if unit == "B" else "%.1f %s" % (value, unit)
        value /= 1024.0
    return "%d B" % size  # pragma: no cover
