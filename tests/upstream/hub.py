"""The fake Hugging Face hub of the fake upstream: the API and files under ``/hub``, the CDN under
``/hub-cdn`` (served by ``server.FakeUpstream``, which routes those paths here).

Standard library only. The catalogue is built in memory; what the routes answer, the controls and
the faults are specified in docs/dev/CONTRACTS.md, section "The fake Hugging Face hub".

A hostile hub is the upstream's ``redirect`` fault on hub paths (``server.py``): for instance
``up.fault("redirect", path=resolve_path(repo, commit, "config.json"), location="file:///root/x")``
answers that file's ``resolve`` with a redirect to a local file, ``location=other.url + "/x"`` sends it
to another origin (``server.ForeignOrigin``), ``location="{path}", count=100`` loops.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import posixpath
import re
import struct
import threading
import time
import urllib.parse

from tests.upstream import tiny_llama
from tests.upstream.builder import tamper

HUB_TOKEN = "hf_llmfleetFakeToken000000000000000"  # the one token with access to the gated repo
HUB_PREFIX = "/hub"  # endpoint = <upstream.url>/hub
HUB_CDN_PREFIX = "/hub-cdn"  # served on the CDN's own port (FakeUpstream.hub_cdn_url)
HUB_CDN_TTL = 300
BENCH_SIZE = 4 << 20
TINY_CHAT = "llmfleet-test/tiny-chat"
TINY_SHARDED = "llmfleet-test/tiny-sharded"
GATED_TINY = "llmfleet-test/gated-tiny"
BENCH_MODEL = "llmfleet-test/bench-model"
TINY_LLAMA = "llmfleet-test/tiny-llama"  # a real, loadable Llama (tiny_llama.py)
RENAMED = {"llmfleet-test/tiny-chat-old": TINY_CHAT}  # answered with the hub's relative 307
# The real hub answers /resolve of a small (git) file with a relative 307 to /api/resolve-cache/...
# (seen on huggingface.co in 2025-2026); switched off, the fake answers 200 with the bytes at once.
# The real hub serves a gated repo's info and tree to anyone, and only its files need access.
HUB_SWITCH_DEFAULTS = {"resolve_cache": True, "gated_info": "public"}
HUB_SWITCH_VALUES = {"resolve_cache": (True, False), "gated_info": ("public", "token")}
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
_SIGNING_KEY = b"llmfleet fake hub cdn signing key"
_KEY_PAIR_ID = "K2FAKEHUBCDN0000"
_CREATED = datetime.datetime(2025, 6, 2, 10, 0, tzinfo=datetime.timezone.utc)
_COMMIT_RE = re.compile(r"[0-9a-f]{40}\Z")
_RANGE_RE = re.compile(r"bytes=(\d*)-(\d*)\Z")
_PATH_PART = re.compile(r"[A-Za-z0-9._ +=@,()-]+\Z")
_EXPANDABLE = (
    "author", "baseModels", "cardData", "childrenModelCount", "config", "createdAt", "disabled", "downloads",
    "downloadsAllTime", "evalResults", "gated", "gguf", "inference", "inferenceProviderMapping", "lastModified",
    "library_name", "likes", "mask_token", "model-index", "pipeline_tag", "private", "resourceGroup",
    "safetensors", "sha", "siblings", "spaces", "tags", "transformersInfo", "trendingScore", "usedStorage",
    "widgetData",
)


class HubControlError(ValueError):
    """A hub control request that cannot be honoured (answered 400)."""


# -- content: git ids, LFS pointers, deterministic bytes -----------------------------------------


def git_oid(data: bytes) -> str:
    """The git blob id of ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's algorithm


def lfs_pointer(sha256: str, size: int) -> bytes:
    return (LFS_POINTER % (sha256, size)).encode()


def pseudo_random(seed: int, size: int) -> bytes:
    """``size`` deterministic bytes for ``seed`` (SHAKE-256 by 1 MiB block)."""
    block = 1 << 20
    return b"".join(
        hashlib.shake_256(b"llmfleet fake hub %d/%d" % (seed, n)).digest(min(block, size - at))
        for n, at in enumerate(range(0, size, block))
    )


def safetensors_file(seed: int, size: int, names=("model.embed_tokens.weight", "lm_head.weight")) -> bytes:
    """A valid safetensors file of exactly ``size`` bytes: u64 LE header length, JSON header (padded
    with spaces to a multiple of 8), then the tensors' bytes (pseudo-random)."""
    room = 128
    while True:
        data_len = size - 8 - room
        if data_len < 2 * len(names):
            raise HubControlError("a safetensors file of %d bytes is too small" % size)
        header, at = {"__metadata__": {"format": "pt"}}, 0
        for i, name in enumerate(names):
            nbytes = data_len - at if i == len(names) - 1 else data_len // len(names)
            dtype, count = ("F16", nbytes // 2) if nbytes % 2 == 0 else ("U8", nbytes)
            header[name] = {"dtype": dtype, "shape": [count], "data_offsets": [at, at + nbytes]}
            at += nbytes
        text = json.dumps(header, separators=(",", ":")).encode()
        if len(text) <= room:
            break
        room += 64
    return struct.pack("<Q", room) + text.ljust(room) + pseudo_random(seed, data_len)


def safetensors_header(data: bytes) -> dict:
    """The JSON header of a safetensors file (raises ValueError when it is not one)."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: %d bytes" % len(data))
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length].decode())
    end = max([t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"] or [0])
    if 8 + length + end != len(data):
        raise ValueError("safetensors: header says %d data bytes, file has %d" % (end, len(data) - 8 - length))
    return header


_CONTENT: dict = {}
_CONTENT_LOCK = threading.Lock()


def content(kind: str, seed: int, size: int) -> bytes:
    """Generated file content, cached for the process ('safetensors' or 'random')."""
    key = (kind, seed, size)
    with _CONTENT_LOCK:
        if key not in _CONTENT:
            _CONTENT[key] = safetensors_file(seed, size) if kind == "safetensors" else pseudo_random(seed, size)
        return _CONTENT[key]


class Blob:
    """One file's content as the hub keeps it: a git blob, or an LFS object behind a pointer."""

    def __init__(self, data: bytes, lfs: bool):
        self.data = data
        self.size = len(data)
        self.lfs = lfs
        self.sha256 = hashlib.sha256(data).hexdigest() if lfs else None
        self.pointer_size = len(lfs_pointer(self.sha256, self.size)) if lfs else None
        # what the hub publishes as blobId / oid: the git id of the file in git (the pointer for LFS)
        self.blob_id = git_oid(lfs_pointer(self.sha256, self.size) if lfs else data)

    @property
    def etag(self) -> str:
        """The blob's name in the client's cache (X-Linked-Etag for LFS, ETag otherwise)."""
        return self.sha256 if self.lfs else self.blob_id

    def lock_entry(self, path: str) -> dict:
        """The file as docs/dev/MODELS.md's lock lists it."""
        key = "sha256" if self.lfs else "git_oid"
        return {"path": path, "size": self.size, key: self.etag}


def _text(value) -> Blob:
    return Blob(value.encode() if isinstance(value, str) else json.dumps(value, indent=2).encode() + b"\n", False)


def _lfs(kind: str, seed: int, size: int) -> Blob:
    return Blob(content(kind, seed, size), True)


class Repo:
    """A model repository: commits (each a full file map), branches and tags."""

    def __init__(self, name: str, number: int, gated=False):
        self.name = name
        self.gated = gated
        self.created = _CREATED + datetime.timedelta(days=number)
        self.object_id = hashlib.md5(name.encode()).hexdigest()[:24]  # noqa: S324 - a fake Mongo id
        self.commits: dict[str, dict] = {}
        self.order: list[str] = []
        self.branches: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.lfs: dict[str, Blob] = {}  # sha256 -> object (what the CDN serves)
        self.lfs_paths: dict[str, set] = {}  # sha256 -> every path that ever held it

    def commit(self, files: dict, message: str, parent: str | None = None) -> str:
        date = self.commits[parent]["date"] + datetime.timedelta(hours=1) if parent else self.created
        listing = "".join("%s %s\n" % (files[p].blob_id, p) for p in sorted(files))
        body = "tree\n%sparent %s\ndate %s\n\n%s" % (listing, parent, date.isoformat(), message)
        cid = hashlib.sha1(body.encode()).hexdigest()  # noqa: S324 - a commit id, as git makes them
        self.commits[cid] = {"id": cid, "parent": parent, "date": date, "message": message, "files": dict(files)}
        self.order.append(cid)
        for path, blob in files.items():
            if blob.lfs:
                self.lfs[blob.sha256] = blob
                self.lfs_paths.setdefault(blob.sha256, set()).add(path)
        return cid

    def resolve(self, rev: str | None) -> str | None:
        """A branch, a tag or a full commit id -> the commit id (None: no such revision)."""
        rev = "main" if rev is None else rev
        if rev in self.branches:
            return self.branches[rev]
        if rev in self.tags:
            return self.tags[rev]
        return rev if _COMMIT_RE.match(rev) and rev in self.commits else None


# -- the catalogue --------------------------------------------------------------------------------

GITATTRIBUTES = (
    "*.bin filter=lfs diff=lfs merge=lfs -text\n"
    "*.pth filter=lfs diff=lfs merge=lfs -text\n"
    "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
)


def _config(hidden: int, layers: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": hidden * 4,
        "num_attention_heads": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-05,
        "torch_dtype": "float16",
        "vocab_size": 256,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def _tokenizer_files() -> dict:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({"<0x%02X>" % b: 3 + b for b in range(253)})
    return {
        "tokenizer.json": _text({
            "version": "1.0",
            "added_tokens": [{"id": i, "content": t, "special": True} for t, i in list(vocab.items())[:3]],
            "model": {"type": "BPE", "byte_fallback": True, "vocab": vocab, "merges": []},
        }),
        "tokenizer_config.json": _text({
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 512,
            "tokenizer_class": "LlamaTokenizerFast",
            "chat_template": "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}",
        }),
        "special_tokens_map.json": _text({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    }


def _readme(name: str, text: str) -> Blob:
    return _text("---\nlicense: apache-2.0\nlibrary_name: transformers\n---\n# %s\n\n%s\n" % (name, text))


def _tiny_chat(number: int) -> Repo:
    repo = Repo(TINY_CHAT, number)
    files = {
        ".gitattributes": _text(GITATTRIBUTES),
        "README.md": _readme("tiny-chat", "A tiny chat model for the llmfleet.engines tests (revision 1)."),
        "config.json": _text(_config(64, 2)),
        "generation_config.json": _text({"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 32}),
        "model.safetensors": _lfs("safetensors", 1, 40000),
        "pytorch_model.bin": _lfs("random", 2, 24000),
        **_tokenizer_files(),
    }
    first = repo.commit(files, "Upload tiny-chat")
    repo.tags["v1"] = first
    files["model.safetensors"] = _lfs("safetensors", 3, 44000)
    files["README.md"] = _readme("tiny-chat", "A tiny chat model for the llmfleet.engines tests (revision 2).")
    repo.branches["main"] = repo.commit(files, "New weights", first)
    return repo


def _tiny_sharded(number: int) -> Repo:
    repo = Repo(TINY_SHARDED, number)
    shards, weight_map = {}, {}
    for n, (seed, size) in enumerate(((11, 30000), (12, 20000)), 1):
        name = "model-%05d-of-00002.safetensors" % n
        tensors = ("model.layers.%d.weight" % n, "model.norm%d.weight" % n)
        shards[name] = Blob(safetensors_file(seed, size, tensors), True)
        weight_map.update({k: name for k in safetensors_header(shards[name].data) if k != "__metadata__"})
    total = sum(s.size - 8 - struct.unpack("<Q", s.data[:8])[0] for s in shards.values())
    files = {
        ".gitattributes": _text(GITATTRIBUTES),
        "README.md": _readme("tiny-sharded", "A tiny sharded model with an original/ folder."),
        "config.json": _text(_config(96, 2)),
        "generation_config.json": _text({"bos_token_id": 1, "eos_token_id": 2}),
        "model.safetensors.index.json": _text({"metadata": {"total_size": total}, "weight_map": weight_map}),
        "original/params.json": _text({"dim": 96, "n_layers": 2, "n_heads": 4, "vocab_size": 256}),
        "original/consolidated.00.pth": _lfs("random", 13, 16384),
        **shards,
        **_tokenizer_files(),
    }
    repo.branches["main"] = repo.commit(files, "Upload tiny-sharded")
    return repo


def _gated_tiny(number: int) -> Repo:
    repo = Repo(GATED_TINY, number, gated="manual")
    files = {
        ".gitattributes": _text(GITATTRIBUTES),
        "README.md": _readme("gated-tiny", "A gated tiny model: files need the token."),
        "config.json": _text(_config(64, 1)),
        "model.safetensors": _lfs("safetensors", 21, 16384),
    }
    repo.branches["main"] = repo.commit(files, "Upload gated-tiny")
    return repo


def _bench_model(number: int, size: int) -> Repo:
    repo = Repo(BENCH_MODEL, number)
    files = {
        ".gitattributes": _text(GITATTRIBUTES),
        "config.json": _text(_config(256, 4)),
        "model.safetensors": _lfs("safetensors", 31, size),
    }
    repo.branches["main"] = repo.commit(files, "Upload bench-model")
    return repo


def _tiny_llama(number: int) -> Repo:
    repo = Repo(TINY_LLAMA, number)
    files = {
        ".gitattributes": _text(GITATTRIBUTES),
        "README.md": _readme("tiny-llama", "A real tiny Llama (random bf16 weights, a byte-level BPE tokenizer) that "
                             "transformers loads and vLLM serves, for the llmfleet.engines real-engine tests."),
    }
    files.update({path: Blob(data, path.endswith(".safetensors")) for path, data in tiny_llama.files().items()})
    first = repo.commit(files, "Upload tiny-llama")
    repo.tags["v1"] = repo.branches["main"] = first
    return repo


# -- HTTP -----------------------------------------------------------------------------------------


class Reply:
    """What a hub route answers (the same shape as server.Response)."""

    def __init__(self, status=200, body=b"", content_type="application/json", headers=None):
        self.status = status
        self.body = body
        self.headers = {"Content-Type": content_type}
        self.headers.update(headers or {})


def _json(obj, status=200, headers=None) -> Reply:
    return Reply(status, json.dumps(obj, indent=1).encode() + b"\n", "application/json; charset=utf-8", headers)


def _error(status: int, message: str, code: str | None = None, headers=None) -> Reply:
    """An error as the hub answers it: JSON ``{"error"}`` plus ``X-Error-Code``/``X-Error-Message``."""
    extra = {"X-Error-Message": message}
    if code:
        extra["X-Error-Code"] = code
    extra.update(headers or {})
    return _json({"error": message}, status, extra)


def _cdn_error(status: int, code: str, message: str) -> Reply:
    body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code><Message>%s</Message></Error>"
    return Reply(status, (body % (code, message)).encode(), "application/xml")


def byte_range(spec: str | None, size: int):
    """A ``Range`` header -> None (serve it all), (first, last) inclusive, or "unsatisfiable"."""
    match = _RANGE_RE.match((spec or "").replace(" ", ""))
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:  # bytes=-N: the last N bytes
        return (max(0, size - int(last)), size - 1) if int(last) > 0 and size else "unsatisfiable"
    first, last = int(first), (int(last) if last else None)
    if last is not None and last < first:
        return None
    return "unsatisfiable" if first >= size else (first, size - 1 if last is None else min(last, size - 1))


def _serve(data: bytes, headers, extra: dict, content_type="application/octet-stream") -> Reply:
    """The bytes, or the part of them a ``Range`` asks for (206; 416 past the end)."""
    extra = dict(extra, **{"Accept-Ranges": "bytes"})
    rng = byte_range(headers.get("Range"), len(data))
    if rng is None:
        return Reply(200, data, content_type, extra)
    if rng == "unsatisfiable":
        extra["Content-Range"] = "bytes */%d" % len(data)
        return Reply(416, b"", content_type, extra)
    extra["Content-Range"] = "bytes %d-%d/%d" % (rng[0], rng[1], len(data))
    return Reply(206, data[rng[0] : rng[1] + 1], content_type, extra)


def _content_type(path: str) -> str:
    if path.endswith(".json"):
        return "application/json; charset=utf-8"
    if path.endswith((".md", ".txt")) or posixpath.basename(path).startswith("."):
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


def _disposition(path: str, kind: str = "inline") -> str:
    name = posixpath.basename(path)
    return "%s; filename*=UTF-8''%s; filename=\"%s\";" % (kind, urllib.parse.quote(name), name)


def _flag(query: dict, key: str) -> bool:
    """A boolean query parameter as the hub reads it (``true``, ``True`` or ``1``)."""
    return (query.get(key) or ["false"])[-1].lower() in ("1", "true")


def _stamp(date: datetime.datetime) -> str:
    return date.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def resolve_path(repo: str, revision: str, path: str) -> str:
    """The path (below the upstream's root, as the request log and the faults see it) at which the
    hub answers ``resolve`` of ``path`` in ``repo`` at ``revision``."""
    return "%s/%s/resolve/%s/%s" % (HUB_PREFIX, repo, revision, path)


def info_path(repo: str, revision: str = "main") -> str:
    """The path of ``repo``'s model info at ``revision`` (as the request log and the faults see it)."""
    return "%s/api/models/%s/revision/%s" % (HUB_PREFIX, repo, revision)


def valid_path(path) -> bool:
    """A relative POSIX path without empty, '.' or '..' parts."""
    if not isinstance(path, str) or not path or path.startswith("/"):
        return False
    return all(part not in ("", ".", "..") and _PATH_PART.match(part) for part in path.split("/"))


class Hub:
    """The fake hub's repositories and routes. ``state`` is the server's State (faults)."""

    def __init__(self, state, bench_size: int = BENCH_SIZE):
        self.state = state
        self.bench_size = bench_size
        self.base = ""  # the upstream's URL, set by FakeUpstream.start()
        self.cdn_base = ""  # the CDN's URL (another port: another origin)
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.switches = dict(HUB_SWITCH_DEFAULTS)
            self._repos = {
                TINY_CHAT: _tiny_chat(0),
                TINY_SHARDED: _tiny_sharded(1),
                GATED_TINY: _gated_tiny(2),
                BENCH_MODEL: lambda: _bench_model(3, self.bench_size),  # built on first use
                TINY_LLAMA: lambda: _tiny_llama(4),  # built on first use
            }

    def repo(self, name: str) -> Repo | None:
        with self.lock:
            repo = self._repos.get(name)
            if callable(repo):
                repo = self._repos[name] = repo()
            return repo

    # -- controls ---------------------------------------------------------------------------------
    def set_switches(self, body) -> dict:
        if not isinstance(body, dict):
            raise HubControlError("hub switches are a JSON object")
        for key, value in body.items():
            if key not in HUB_SWITCH_VALUES:
                raise HubControlError("unknown hub switch %r; known: %s" % (key, ", ".join(HUB_SWITCH_VALUES)))
            if not any(value is v if isinstance(v, bool) else value == v for v in HUB_SWITCH_VALUES[key]):
                raise HubControlError("hub switch %s must be one of %s" % (key, HUB_SWITCH_VALUES[key]))
        with self.lock:
            self.switches.update(body)
            return dict(self.switches)

    def commit(self, repo: str, files: dict, branch: str = "main", message: str | None = None,
               tag: str | None = None) -> str:
        """A new commit on top of ``branch`` (a new branch starts from main): ``files`` maps a path to
        a text (a git file), ``{"seed", "size"[, "lfs"]}`` (generated bytes, LFS unless ``lfs`` is
        false; a valid safetensors file for ``*.safetensors``) or None (deleted). Returns its id."""
        with self.lock:
            target = self.repo(repo)
            if target is None:
                raise HubControlError("no hub repo %r" % repo)
            if not valid_path(branch) or _COMMIT_RE.match(branch):
                raise HubControlError("bad branch name %r" % (branch,))
            if not isinstance(files, dict) or not files:
                raise HubControlError("files must be a non-empty JSON object")
            parent = target.branches.get(branch) or target.branches["main"]
            tree = dict(target.commits[parent]["files"])
            for path, spec in files.items():
                if not valid_path(path):
                    raise HubControlError("bad file path %r" % (path,))
                if spec is None:
                    if tree.pop(path, None) is None:
                        raise HubControlError("cannot delete %s: not in %s@%s" % (path, repo, branch))
                elif isinstance(spec, str):
                    tree[path] = _text(spec)
                elif isinstance(spec, dict) and all(isinstance(spec.get(k), int) for k in ("seed", "size")):
                    if spec["size"] < 0:
                        raise HubControlError("size must not be negative")
                    kind = "safetensors" if path.endswith(".safetensors") else "random"
                    tree[path] = Blob(content(kind, spec["seed"], spec["size"]), bool(spec.get("lfs", True)))
                else:
                    raise HubControlError("file %s: a text, null or {\"seed\": int, \"size\": int}" % path)
            if not tree:
                raise HubControlError("a commit needs at least one file")
            cid = target.commit(tree, message or "Update %s" % ", ".join(sorted(files)), parent)
            target.branches[branch] = cid
            if tag is not None:
                if not valid_path(tag) or _COMMIT_RE.match(tag):
                    raise HubControlError("bad tag name %r" % (tag,))
                target.tags[tag] = cid
            return cid

    def catalog(self) -> dict:
        """Every repo with its refs and commits; commit files in the lock's shape (MODELS.md)."""
        out = {}
        for name in sorted(self._repos):
            repo = self.repo(name)
            commits = []
            for cid in repo.order:
                commit = repo.commits[cid]
                files = [commit["files"][p].lock_entry(p) for p in sorted(commit["files"])]
                commits.append({
                    "commit": cid, "parent": commit["parent"], "date": _stamp(commit["date"]),
                    "message": commit["message"], "files": files, "size": sum(f["size"] for f in files),
                })
            out[name] = {"gated": repo.gated, "branches": dict(repo.branches), "tags": dict(repo.tags),
                         "commits": commits}
        return {"endpoint": HUB_PREFIX, "cdn": self.cdn_base + HUB_CDN_PREFIX, "repos": out,
                "renamed": dict(RENAMED), "switches": dict(self.switches)}

    # -- CDN URLs ---------------------------------------------------------------------------------
    @staticmethod
    def signature(key: str, expires: str) -> str:
        return hashlib.sha256(_SIGNING_KEY + b"|" + key.encode() + b"|" + expires.encode()).hexdigest()

    def cdn_url(self, repo: str, sha256: str, filename: str = "", ttl: float = HUB_CDN_TTL) -> str:
        key = "%s/%s" % (repo, sha256)
        expires = str(int(time.time() + ttl))
        query = [("response-content-disposition", _disposition(filename or sha256, "attachment")),
                 ("Expires", expires), ("Signature", self.signature(key, expires)), ("Key-Pair-Id", _KEY_PAIR_ID)]
        return "%s%s/%s?%s" % (self.cdn_base, HUB_CDN_PREFIX, key, urllib.parse.urlencode(query))

    # -- dispatch ---------------------------------------------------------------------------------
    def route(self, raw_path: str, raw_query: str, headers) -> Reply:
        """A GET or HEAD under /hub/ or /hub-cdn/ (``raw_path`` still URL-quoted; the server leaves
        the body out for HEAD)."""
        parts = [urllib.parse.unquote(p) for p in raw_path.split("/") if p]
        query = urllib.parse.parse_qs(raw_query, keep_blank_values=True)
        if parts[0] == HUB_CDN_PREFIX[1:]:
            return self.cdn(parts[1:], query, headers)
        rest = parts[1:]
        if rest[:1] == ["api"]:
            if rest[1:3] == ["resolve-cache", "models"] and len(rest) >= 7:
                return self.resolve("/".join(rest[3:5]), rest[5], "/".join(rest[6:]), headers, raw_path, True)
            if rest[1:2] == ["models"] and len(rest) >= 4:
                return self.api("/".join(rest[2:4]), rest[4:], query, headers, raw_path, raw_query)
        elif len(rest) >= 5 and rest[2] == "resolve":
            return self.resolve("/".join(rest[:2]), rest[3], "/".join(rest[4:]), headers, raw_path)
        return _error(404, "Sorry, we can't find the page you are looking for.")

    def _access(self, name: str, headers, files: bool):
        """(repo, None) when the request may see the repo, else (None, the error reply)."""
        auth = headers.get("Authorization")
        scheme, _sep, token = (auth or "").partition(" ")
        token = token.strip()
        if auth is not None and (scheme.lower() != "bearer" or not token.startswith("hf_")):
            return None, _error(401, "Invalid credentials in Authorization header")
        repo = self.repo(name)
        if repo is None:
            return None, _error(401 if auth is None else 404, "Repository not found", "RepoNotFound")
        needs_token = files or self.switches["gated_info"] == "token"
        if repo.gated and needs_token and token != HUB_TOKEN:
            if auth is None:
                message = ("Access to model %s is restricted. You must have access to it and be authenticated to "
                           "access it. Please log in." % name)
                return None, _error(401, message, "GatedRepo")
            message = ("Access to model %s is restricted and you are not in the authorized list. Visit "
                       "https://huggingface.co/%s to ask for access." % (name, name))
            return None, _error(403, message, "GatedRepo")
        return repo, None

    @staticmethod
    def _moved(name: str, raw_path: str, raw_query: str = "") -> Reply:
        """The hub's answer for a renamed repo: a relative 307 to the same path under the new name."""
        old = urllib.parse.quote(name)
        location = raw_path.replace("/" + old + "/", "/" + urllib.parse.quote(RENAMED[name]) + "/", 1)
        if location == raw_path and raw_path.endswith("/" + old):
            location = raw_path[: -len(old)] + urllib.parse.quote(RENAMED[name])
        location += "?" + raw_query if raw_query else ""
        return Reply(307, ("Temporary Redirect. Redirecting to %s" % location).encode(), "text/plain; charset=utf-8",
                     {"Location": location})

    def _revision(self, repo: Repo, rev: str | None):
        cid = repo.resolve(rev)
        if cid is None:
            return None, _error(404, "Invalid rev id: %s" % rev, "RevisionNotFound")
        return repo.commits[cid], None

    # -- /api/models/<repo>[/revision/<rev> | /tree/<rev>[/<path>] | /refs] --------------------------
    def api(self, name: str, tail: list, query: dict, headers, raw_path: str, raw_query: str) -> Reply:
        if name in RENAMED:
            return self._moved(name, raw_path, raw_query)
        repo, error = self._access(name, headers, files=False)
        if error:
            return error
        if not tail or tail[0] == "revision":
            if tail and len(tail) < 2:
                return _error(404, "Sorry, we can't find the page you are looking for.")
            commit, error = self._revision(repo, "/".join(tail[1:]) if tail else None)
            if error:
                return error
            expand = query.get("expand") or query.get("expand[]")
            unknown = sorted(set(expand or ()) - set(_EXPANDABLE))
            if unknown:
                return _error(400, "Invalid expand value(s): %s" % ", ".join(unknown))
            return _json(self.model_info(repo, commit, _flag(query, "blobs"), expand))
        if tail[0] == "tree" and len(tail) >= 2:
            commit, error = self._revision(repo, tail[1])
            if error:
                return error
            entries = self.tree(commit, "/".join(tail[2:]), _flag(query, "recursive"))
            if entries is None:
                return _error(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit["id"]})
            return _json(entries)
        if tail == ["refs"]:
            refs = {"branches": [], "converts": [], "tags": []}
            for key, kind, table in (("branches", "heads", repo.branches), ("tags", "tags", repo.tags)):
                for ref, cid in sorted(table.items()):
                    refs[key].append({"name": ref, "ref": "refs/%s/%s" % (kind, ref), "targetCommit": cid})
            return _json(refs)
        return _error(404, "Sorry, we can't find the page you are looking for.")

    def model_info(self, repo: Repo, commit: dict, blobs: bool, expand=None) -> dict:
        files = commit["files"]
        siblings = []
        for path in sorted(files):
            sibling = {"rfilename": path}
            if blobs:
                blob = files[path]
                sibling.update(size=blob.size, blobId=blob.blob_id)
                if blob.lfs:
                    sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
            siblings.append(sibling)
        org = repo.name.split("/")[0]
        config = {}
        if "config.json" in files:
            parsed = json.loads(files["config.json"].data)
            config = {k: parsed[k] for k in ("architectures", "model_type") if k in parsed}
        info = {
            "_id": repo.object_id,
            "id": repo.name,
            "modelId": repo.name,
            "author": org,
            "sha": commit["id"],
            "lastModified": _stamp(commit["date"]),
            "createdAt": _stamp(repo.created),
            "private": False,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "library_name": "transformers",
            "pipeline_tag": "text-generation",
            "tags": ["transformers", "safetensors", "llama", "text-generation", "license:apache-2.0", "region:us"],
            "config": config,
            "cardData": {"license": "apache-2.0", "library_name": "transformers"},
            "spaces": [],
            "siblings": siblings,
            "usedStorage": sum(b.size for b in files.values()),
        }
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        return info

    @staticmethod
    def tree(commit: dict, under: str, recursive: bool):
        """The tree API's entries below folder ``under`` ('' = root); None when it is no folder."""
        files = commit["files"]
        folders = {posixpath.dirname(p) for p in files}
        folders |= {"/".join(f.split("/")[:n]) for f in folders for n in range(1, f.count("/") + 1)}
        folders.discard("")
        if under and under not in folders:
            return None
        prefix = under + "/" if under else ""
        entries = []
        for folder in sorted(folders):
            if folder.startswith(prefix) and (recursive or "/" not in folder[len(prefix) :]):
                inside = [p for p in sorted(files) if p.startswith(folder + "/")]
                listing = "tree " + "".join("%s %s\n" % (files[p].blob_id, p) for p in inside)
                oid = hashlib.sha1(listing.encode()).hexdigest()  # noqa: S324 - a fake tree id
                entries.append({"type": "directory", "oid": oid, "size": 0, "path": folder})
        for path in sorted(files):
            if path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :]):
                blob = files[path]
                entry = {"type": "file", "oid": blob.blob_id, "size": blob.size, "path": path}
                if blob.lfs:
                    entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
                entries.append(entry)
        return entries

    # -- /<repo>/resolve/<rev>/<path> and /api/resolve-cache/models/<repo>/<commit>/<path> -----------
    def resolve(self, name: str, rev: str, path: str, headers, raw_path: str, cache: bool = False) -> Reply:
        if name in RENAMED and not cache:
            return self._moved(name, raw_path)
        repo, error = self._access(name, headers, files=True)
        if error:
            return error
        commit, error = self._revision(repo, rev)
        if error:
            return error
        blob = commit["files"].get(path)
        common = {"X-Repo-Commit": commit["id"], "Accept-Ranges": "bytes"}
        if blob is None:
            return _error(404, "Entry not found", "EntryNotFound", common)
        if blob.lfs:
            location = self.cdn_url(name, blob.sha256, path)
            common.update({
                "Location": location,
                "X-Linked-Etag": '"%s"' % blob.sha256,
                "X-Linked-Size": str(blob.size),
                "ETag": '"%s"' % blob.blob_id,
                "Content-Disposition": _disposition(path, "attachment"),
            })
            return Reply(302, ("Found. Redirecting to %s" % location).encode(), "text/plain; charset=utf-8", common)
        if not cache and self.switches["resolve_cache"]:
            location = "%s/api/resolve-cache/models/%s/%s/%s?%s=&etag=%s" % (
                HUB_PREFIX, urllib.parse.quote(name), commit["id"], urllib.parse.quote(path),
                urllib.parse.quote(raw_path, safe=""), urllib.parse.quote('"%s"' % blob.blob_id, safe=""),
            )
            common["Location"] = location
            return Reply(307, ("Temporary Redirect. Redirecting to %s" % location).encode(),
                         "text/plain; charset=utf-8", common)
        common.update({"ETag": '"%s"' % blob.blob_id, "Content-Disposition": _disposition(path)})
        return _serve(self._bytes(name, {path}, blob), headers, common, _content_type(path))

    # -- /hub-cdn/<org>/<name>/<sha256>?Expires=..&Signature=.. -------------------------------------
    def cdn(self, parts: list, query: dict, headers) -> Reply:
        if len(parts) != 3:
            return _cdn_error(404, "NoSuchKey", "The specified key does not exist.")
        name, sha256 = "/".join(parts[:2]), parts[2]
        expires = (query.get("Expires") or [""])[-1]
        signature = (query.get("Signature") or [""])[-1]
        if not expires.isdigit() or signature != self.signature("%s/%s" % (name, sha256), expires):
            return _cdn_error(403, "AccessDenied", "Access denied")
        if int(expires) < time.time():
            return _cdn_error(403, "AccessDenied", "Request has expired")
        repo = self.repo(name)
        blob = repo.lfs.get(sha256) if repo else None
        if blob is None:
            return _cdn_error(404, "NoSuchKey", "The specified key does not exist.")
        extra = {"ETag": '"%s"' % sha256, "Cache-Control": "public, max-age=604800, immutable"}
        disposition = (query.get("response-content-disposition") or [""])[-1]
        if disposition:
            extra["Content-Disposition"] = disposition
        return _serve(self._bytes(name, repo.lfs_paths[sha256], blob), headers, extra)

    def _bytes(self, name: str, paths, blob: Blob) -> bytes:
        """The bytes served for ``blob``: altered (same size) when a tamper fault names one of its
        paths (and this repo, if the rule names one)."""
        for rule in self.state.rules("tamper"):
            if rule["filename"] in paths and rule.get("repo", name) == name:
                return tamper(blob.data)
        return blob.data
