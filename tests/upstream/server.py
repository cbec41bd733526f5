"""The fake upstream HTTP server: PyPI JSON + simple index, GitHub releases, PyTorch extra indexes,
and the Hugging Face hub (``tests.upstream.hub``, under ``/hub``; its CDN on a port of its own).

Standard library only (``http.server.ThreadingHTTPServer`` in a thread on 127.0.0.1). The URL
layout, the control endpoints and the catalogue are specified in ``docs/dev/CONTRACTS.md``.

Hostile modes, for the tests of the collection's redirect policy:

* the fault ``{"kind": "redirect", "path": <prefix>, "location": <URL>, "status": 302, "count": 1}``
  answers the matching requests (hub, CDN, PyPI, GitHub; any method) with a redirect to
  ``location``, whatever it is: ``file:///root/secret.env``, ``ftp://...``, ``data:...``, another
  origin (a :class:`ForeignOrigin`), a plain ``http://`` URL. ``{path}`` in it is the request's own
  path and query, ``{n}`` how many times the rule answered: ``location="{path}"`` with a large
  ``count`` is an endless redirect loop;
* :class:`ForeignOrigin` is another origin (127.0.0.1 on another port, a loopback alias such as
  127.0.0.2, or https with a certificate the test makes): it answers scripted routes and logs every
  request with its headers as received, nothing masked, since no credential may ever reach it.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import html
import io
import json
import pathlib
import re
import ssl
import threading
import time
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.upstream import catalog, hub
from tests.upstream.builder import normalize, tamper

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
SIMPLE_HTML = "application/vnd.pypi.simple.v1+html"
TORCH_INDEXES = ("cu129", "cu130", "cpu")
# FlashInfer's own index, one per CUDA (flashinfer.ai/whl/<cu>): static HTML, no upload times
FLASHINFER_INDEXES = ("cu129", "cu130")
FAULT_KINDS = ("status", "slow", "truncate", "invalid_json", "rate_limit", "tamper", "wrong_digest", "redirect",
               "late_upload")
# a late_upload's time: as the catalogue writes them
_UPLOAD_TIME_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# The defaults are those of the real services (FACTS.md): the PyPI these machines reach answers
# 404 for the release JSON, and PyTorch's index dates only part of its files.
SWITCH_DEFAULTS = {"release_json_404": True, "torch_upload_times": "partial"}
SWITCH_VALUES = {"release_json_404": (True, False), "torch_upload_times": ("partial", "all", "none")}
# github.com answers a release download with a redirect to a signed, short-lived URL on another
# host (objects.githubusercontent.com / release-assets.githubusercontent.com); here another path
# of the same server, so that tests only talk to 127.0.0.1.
GITHUB_OBJECTS = "/github-objects/github-production-release-asset"
GITHUB_OBJECT_TTL = 300
_SIGNING_KEY = b"llmfleet fake upstream signing key"
RATE_LIMIT_MESSAGE = (
    "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated requests get a "
    "higher rate limit. Check out the documentation for more details.)"
)
RATE_LIMIT_DOC = "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"
GITHUB_404_DOC = "https://docs.github.com/rest/releases/releases#get-a-release-by-tag-name"
INVALID_JSON_BODY = b"<html><body><h1>502 Bad Gateway</h1>upstream sent garbage</body></html>\n"


class ControlError(ValueError):
    """A control request that cannot be honoured (answered 400)."""


def _iso(stamp: str | None) -> str | None:
    """'2025-10-02T20:00:00Z' -> '2025-10-02T20:00:00.000000Z' (PyPI's form)."""
    if stamp is None:
        return None
    return stamp[:-1] + ".000000Z"


def _dated(record: dict, upload_times: str) -> bool:
    """Whether an index in mode ``upload_times`` gives this file's upload time."""
    if not record["upload_time"] or upload_times == "none":
        return False
    return upload_times == "all" or record["dated"]


def _epoch(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def _version_key(version: str):
    public, _sep, local = version.partition("+")
    # digits as numbers; a segment like post1 after them (0.7.2 < 0.7.2.post1)
    return (tuple((0, int(p)) if p.isdigit() else (1, p) for p in public.split(".")), local)


def _packagetype(filename: str) -> str:
    return "bdist_wheel" if filename.endswith(".whl") else "sdist"


def _python_version(filename: str) -> str:
    return filename[:-4].split("-")[2] if filename.endswith(".whl") else "source"


def _wheel_metadata(data: bytes) -> bytes:
    """The METADATA file of a wheel (what PEP 658 serves at ``<file URL>.metadata``)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ValueError("a wheel with %d METADATA files" % len(names))
        return archive.read(names[0])


def _object_uuid(record: dict) -> str:
    """A fixed UUID-shaped name for a GitHub asset's object (the redirect target hides the name)."""
    digest = hashlib.sha256(("%s/%s" % (record["store"], record["filename"])).encode()).hexdigest()
    return "%s-%s-%s-%s-%s" % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


def _object_signature(key: str, expires: str) -> str:
    return hashlib.sha256(_SIGNING_KEY + b"|" + key.encode() + b"|" + expires.encode()).hexdigest()


def _content_type(filename: str) -> str:
    if filename.endswith(".tar.gz"):
        return "application/gzip"
    if filename.endswith(".txt"):
        return "text/plain"
    return "application/octet-stream"


class Catalogue:
    """The catalogue joined with the built files: sizes and digests, looked up by URL part."""

    def __init__(self, packages: pathlib.Path):
        self.packages = pathlib.Path(packages)
        self.files: dict[tuple[str, str], dict] = {}  # (store dir, filename) -> file record
        self.pypi: dict[str, list[dict]] = {}  # normalised project -> releases
        self.torch: dict[str, dict[str, list[dict]]] = {idx: {} for idx in TORCH_INDEXES}
        self.flashinfer: dict[str, dict[str, list[dict]]] = {idx: {} for idx in FLASHINFER_INDEXES}
        self.github: dict[str, dict[str, dict]] = {}  # "owner/repo" -> tag -> release
        self.objects: dict[str, dict] = {}  # "<release id>/<uuid>" -> GitHub asset record
        asset_id = 1000
        for number, row in enumerate(catalog.RELEASES):
            store = catalog.store_dir(row)
            release = {
                "row": row,
                "project": row["project"],
                "version": row["version"],
                "yanked_reason": row.get("yanked_reason"),
                "files": [],
            }
            names = [(e["filename"], e["upload_time"], e.get("dated", True)) for e in row["files"]]
            if row.get("checksum_file"):
                names.append((row["checksum_file"], row["files"][-1]["upload_time"], True))
            for filename, upload_time, dated in names:
                path = self.packages / store / filename
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    raise FileNotFoundError(
                        "fake upstream: %s is missing; run tests.upstream.build_packages(%s) first"
                        % (path, self.packages)
                    ) from None
                asset_id += 1
                metadata = _wheel_metadata(data) if filename.endswith(".whl") else None
                record = {
                    "filename": filename,
                    "store": store,
                    "path": path,
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "md5": hashlib.md5(data).hexdigest(),  # noqa: S324 - PyPI publishes md5 too
                    "blake2b_256": hashlib.blake2b(data, digest_size=32).hexdigest(),
                    "upload_time": upload_time,
                    "dated": dated,
                    "metadata": metadata,
                    "metadata_sha256": hashlib.sha256(metadata).hexdigest() if metadata is not None else None,
                    "requires_python": catalog.REQUIRES_PYTHON[row["project"]],
                    "yanked_reason": row.get("yanked_reason"),
                    "version": catalog.release_version(row, filename),
                    "asset_id": asset_id,
                    "checksum_file": filename == row.get("checksum_file"),
                }
                release["files"].append(record)
                self.files[(store, filename)] = record
            where = row["where"]
            if where == "pypi":
                self.pypi.setdefault(normalize(row["project"]), []).append(release)
            elif where.startswith("torch/"):
                for idx in catalog.torch_indexes(row, TORCH_INDEXES):
                    self.torch[idx].setdefault(normalize(row["project"]), []).append(release)
            elif where.startswith("flashinfer/"):
                self.flashinfer[where.split("/", 1)[1]].setdefault(normalize(row["project"]), []).append(release)
            else:
                release["id"] = 250000000 + number
                self.github.setdefault(row["repo"], {})[row["tag"]] = release
                for record in release["files"]:
                    record["object"] = "%d/%s" % (release["id"], _object_uuid(record))
                    self.objects[record["object"]] = record
        for releases in (list(self.pypi.values()) + [r for idx in self.torch.values() for r in idx.values()]
                         + [r for idx in self.flashinfer.values() for r in idx.values()]):
            releases.sort(key=lambda r: _version_key(r["version"]))

    def as_json(self) -> dict:
        """The catalogue for GET /_control/catalog."""
        rows = []
        for row in catalog.RELEASES:
            store = catalog.store_dir(row)
            out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items() if k != "files"}
            names = [e["filename"] for e in row["files"]]
            if row.get("checksum_file"):
                names.append(row["checksum_file"])
            out["files"] = [
                {
                    k: self.files[(store, name)][k]
                    for k in ("filename", "size", "sha256", "upload_time", "dated", "version", "store")
                }
                for name in names
            ]
            rows.append(out)
        return {"releases": rows, "torch_indexes": list(TORCH_INDEXES), "github_repos": sorted(self.github)}


class State:
    """Fault rules, switches and the request log (shared by the handler threads)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.faults: list[dict] = []
            self.switches = dict(SWITCH_DEFAULTS)
            self.requests: list[dict] = []

    def add_fault(self, rule: dict) -> dict:
        if not isinstance(rule, dict):
            raise ControlError("a fault is a JSON object")
        kind = rule.get("kind")
        if kind not in FAULT_KINDS:
            raise ControlError("unknown fault kind %r; known: %s" % (kind, ", ".join(FAULT_KINDS)))
        rule = dict(rule)
        if kind in ("tamper", "wrong_digest", "late_upload"):
            if not isinstance(rule.get("filename"), str) or not rule["filename"]:
                raise ControlError("fault %s needs a filename" % kind)
            if kind == "late_upload" and not _UPLOAD_TIME_RE.match(str(rule.get("upload_time") or "")):
                raise ControlError("fault late_upload needs an upload_time such as 2026-09-01T12:00:00Z")
            if "repo" in rule and not isinstance(rule["repo"], str):
                raise ControlError("fault %s: repo must be a hub repo name (org/name)" % kind)
        else:
            rule.setdefault("count", 1)
            rule.setdefault("path", "/github/api/" if kind == "rate_limit" else "/")
            if not isinstance(rule["count"], int) or rule["count"] < 0:
                raise ControlError("count must be a non-negative integer")
            if kind == "status":
                if not isinstance(rule.get("status"), int) or not 100 <= rule["status"] <= 599:
                    raise ControlError("fault status needs an HTTP status (100-599)")
            if kind == "slow":
                rule.setdefault("delay", 1.0)
                if not isinstance(rule["delay"], (int, float)) or rule["delay"] < 0:
                    raise ControlError("delay must be a non-negative number of seconds")
            if kind == "redirect":
                rule.setdefault("status", 302)
                rule["answered"] = 0
                if not isinstance(rule.get("location"), str) or not rule["location"]:
                    raise ControlError("fault redirect needs a location (any URL: file://, another host, {path})")
                if rule["status"] not in REDIRECT_STATUSES:
                    raise ControlError("fault redirect: status must be one of %s" % ", ".join(map(str, REDIRECT_STATUSES)))
        with self.lock:
            self.faults.append(rule)
        return rule

    def set_switches(self, body: dict) -> dict:
        if not isinstance(body, dict):
            raise ControlError("switches are a JSON object")
        for key, value in body.items():
            if key not in SWITCH_DEFAULTS:
                raise ControlError("unknown switch %r; known: %s" % (key, ", ".join(SWITCH_DEFAULTS)))
            allowed = SWITCH_VALUES[key]
            if not any(value is v if isinstance(v, bool) else value == v for v in allowed):
                raise ControlError(
                    "switch %s must be one of %s, got %s" % (key, ", ".join(json.dumps(v) for v in allowed), json.dumps(value))
                )
        with self.lock:
            self.switches.update(body)
            return dict(self.switches)

    def switch(self, name: str):
        with self.lock:
            return self.switches[name]

    def take(self, path: str, headers) -> list[dict]:
        """The counted rules that apply to this request, in order (consumed); ``slow`` stacks, the
        first other kind ends the list."""
        auth = (headers.get("Authorization") or "").split()
        authenticated = len(auth) == 2 and auth[0].lower() in ("bearer", "token")
        taken = []
        with self.lock:
            for rule in self.faults:
                if rule["kind"] in ("tamper", "wrong_digest", "late_upload") or rule["count"] <= 0:
                    continue
                if not path.startswith(rule["path"]):
                    continue
                if rule["kind"] == "rate_limit" and (authenticated or not path.startswith("/github/api/")):
                    continue
                rule["count"] -= 1
                if rule["kind"] == "redirect":
                    rule["answered"] += 1
                    rule = dict(rule)  # the answer's own copy: {n} as it was for this request
                taken.append(rule)
                if rule["kind"] != "slow":
                    break
        return taken

    def file_rules(self, kind: str) -> set[str]:
        with self.lock:
            return {rule["filename"] for rule in self.faults if rule["kind"] == kind}

    def rules(self, kind: str) -> list[dict]:
        """Copies of the rules of one kind (the hub's tamper rules may name a ``repo``)."""
        with self.lock:
            return [dict(rule) for rule in self.faults if rule["kind"] == kind]

    def record(self, entry: dict) -> None:
        with self.lock:
            self.requests.append(entry)

    def log(self) -> list[dict]:
        with self.lock:
            return copy.deepcopy(self.requests)

    def clear_log(self) -> None:
        with self.lock:
            self.requests = []


class Response:
    """What a route answers."""

    def __init__(self, status=200, body=b"", content_type="application/json", headers=None):
        self.status = status
        self.body = body
        self.headers = {"Content-Type": content_type}
        self.headers.update(headers or {})


def _json(obj, status=200, content_type="application/json", headers=None) -> Response:
    return Response(status, (json.dumps(obj, indent=1) + "\n").encode(), content_type, headers)


def _not_found(message="Not Found") -> Response:
    return _json({"message": message}, status=404)


def _redirect(status: int, location: str, raw_query: str = "") -> Response:
    """A redirect to a path of this server (PyPI answers 301 with the canonical name)."""
    if raw_query:
        location += "?" + raw_query
    body = ("<html><body>Moved to <a href=\"%s\">%s</a></body></html>\n" % (html.escape(location), html.escape(location)))
    return Response(status, body.encode(), "text/html; charset=UTF-8", {"Location": location})


def _logged_headers(path: str, headers) -> dict:
    """The request's headers for the log; the hub's tokens never reach it (masked)."""
    out = dict(headers.items())
    for key, value in out.items():
        hub_auth = key.lower() == "authorization" and path.startswith((hub.HUB_PREFIX + "/", hub.HUB_CDN_PREFIX + "/"))
        if hub_auth or hub.HUB_TOKEN in value:
            out[key] = value.split(" ", 1)[0] + " ***" if " " in value else "***"
    return out


def _blob_error(status: int, code: str, message: str) -> Response:
    """An error as the storage behind GitHub's release downloads answers it (XML)."""
    body = '<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>%s</Message></Error>' % (
        code,
        html.escape(message),
    )
    return Response(status, body.encode(), "application/xml")


class Upstream:
    """Routing: turns a decoded path into a Response, using the catalogue and the state."""

    def __init__(self, cat: Catalogue, state: State, base_url: str):
        self.cat = cat
        self.state = state
        self.base = base_url

    # -- digests and bytes, with the tamper / wrong_digest faults ------------------------------
    def sha256(self, record: dict) -> str:
        if record["filename"] in self.state.file_rules("wrong_digest"):
            return hashlib.sha256(b"wrong digest for " + record["filename"].encode()).hexdigest()
        return record["sha256"]

    def file_bytes(self, record: dict) -> bytes:
        data = record["path"].read_bytes()
        if record["checksum_file"]:
            wrong = self.state.file_rules("wrong_digest")
            lines = []
            for line in data.decode().splitlines(keepends=True):
                hexdigest, _sep, name = line.rstrip("\n").partition("  ")
                other = self.cat.files.get((record["store"], name))
                if other is not None and name in wrong:
                    hexdigest = self.sha256(other)
                lines.append("%s  %s\n" % (hexdigest, name))
            data = "".join(lines).encode()
        if record["filename"] in self.state.file_rules("tamper"):
            data = tamper(data)
        return data

    def upload_time(self, record: dict) -> str | None:
        """When the index says the file was uploaded: the catalogue's time, or a late_upload fault's
        (the file was added to its release then, as an aarch64 wheel months after the x86_64 one)."""
        late = [r["upload_time"] for r in self.state.rules("late_upload") if r["filename"] == record["filename"]]
        return late[-1] if late else record["upload_time"]

    def file_url(self, record: dict) -> str:
        quoted = urllib.parse.quote(record["filename"])
        if record["store"] == "pypi":
            return "%s/files/%s" % (self.base, quoted)
        if record["store"] == "torch":
            return "%s/torch/files/%s" % (self.base, quoted)
        if record["store"] == "flashinfer":
            return "%s/flashinfer/files/%s" % (self.base, quoted)
        repo, tag = record["store"].split("/", 1)[1].rsplit("/", 1)
        return "%s/github/download/%s/releases/download/%s/%s" % (self.base, repo, tag, quoted)

    # -- dispatch ---------------------------------------------------------------------------------
    def route(self, path: str, query: dict, accept: str, raw_query: str = "") -> Response:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return _json({"service": "llmfleet fake upstream"})
        head = parts[0]
        if head == "pypi":
            return self.pypi_json(parts[1:], raw_query)
        if head == "simple":
            if not path.endswith("/"):  # PyPI: /simple/<name> -> /simple/<name>/
                return _redirect(301, path + "/", raw_query)
            if len(parts) == 2 and parts[1] != normalize(parts[1]) and normalize(parts[1]) in self.cat.pypi:
                return _redirect(301, "/simple/%s/" % normalize(parts[1]), raw_query)
            return self.simple(self.cat.pypi, parts[1:], query, accept, upload_times="all")
        if head == "files" and len(parts) == 2:
            return self.serve_file(("pypi", parts[1]))
        if head == "torch":
            if len(parts) == 3 and parts[1] == "files":
                return self.serve_file(("torch", parts[2]))
            if len(parts) >= 2 and parts[1] in self.cat.torch:
                return self.simple(
                    self.cat.torch[parts[1]],
                    parts[2:],
                    query,
                    accept,
                    upload_times=self.state.switch("torch_upload_times"),
                )
            return _not_found()
        if head == "flashinfer":
            # like flashinfer.ai/whl/<cu>/<project>/: HTML only, no upload times
            if len(parts) == 3 and parts[1] == "files":
                return self.serve_file(("flashinfer", parts[2]))
            if len(parts) >= 3 and parts[1] == "whl" and parts[2] in self.cat.flashinfer:
                if not path.endswith("/"):
                    return _redirect(301, path + "/", raw_query)
                return self.simple(self.cat.flashinfer[parts[2]], parts[3:], {}, "", upload_times="none")
            return _not_found()
        if head == "github":
            if len(parts) >= 2 and parts[1] == "api":
                return self.github_api(parts[2:])
            if len(parts) == 8 and parts[1] == "download" and parts[4:6] == ["releases", "download"]:
                return self.github_download(("github/%s/%s/%s" % (parts[2], parts[3], parts[6]), parts[7]))
            return _not_found()
        if path.startswith(GITHUB_OBJECTS + "/"):
            return self.github_object(path[len(GITHUB_OBJECTS) + 1 :], query)
        return _not_found()

    def serve_file(self, key) -> Response:
        """A file of an index, or its PEP 658 metadata at ``<file>.metadata`` (wheels only)."""
        store, name = key
        record = self.cat.files.get(key)
        if record is None and name.endswith(".metadata"):
            record = self.cat.files.get((store, name[: -len(".metadata")]))
            if record is None or record["metadata"] is None:
                return _not_found()
            return Response(200, record["metadata"], "application/octet-stream")
        if record is None:
            return _not_found()
        return Response(200, self.file_bytes(record), _content_type(record["filename"]))

    # -- GitHub downloads: a redirect to a signed object URL, as github.com answers --------------
    def github_download(self, key) -> Response:
        record = self.cat.files.get(key)
        if record is None:
            return Response(404, b"Not Found", "text/plain; charset=utf-8")
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + GITHUB_OBJECT_TTL))
        disposition = "attachment; filename=%s" % record["filename"]
        query = urllib.parse.urlencode(
            [
                ("sp", "r"),
                ("se", expires),
                ("sig", _object_signature(record["object"], expires)),
                ("filename", record["filename"]),
                ("response-content-disposition", disposition),
                ("response-content-type", "application/octet-stream"),
            ],
            quote_via=urllib.parse.quote,
        )
        location = "%s%s/%s?%s" % (self.base, GITHUB_OBJECTS, record["object"], query)
        return Response(302, b"", "text/html; charset=utf-8", {"Location": location, "Cache-Control": "no-cache"})

    def github_object(self, key: str, query: dict) -> Response:
        record = self.cat.objects.get(key)
        if record is None:
            return _blob_error(404, "BlobNotFound", "The specified blob does not exist.")
        expires = (query.get("se") or [""])[0]
        signature = (query.get("sig") or [""])[0]
        if not expires or signature != _object_signature(key, expires):
            return _blob_error(403, "AuthenticationFailed", "Server failed to authenticate the request. "
                               "Make sure the value of Authorization header is formed correctly including the signature.")
        if _epoch(expires) < time.time():
            return _blob_error(403, "AuthenticationFailed", "Server failed to authenticate the request. "
                               "Signed expiry time [%s] has passed." % expires)
        return Response(
            200,
            self.file_bytes(record),
            "application/octet-stream",
            {"Content-Disposition": "attachment; filename=%s" % record["filename"]},
        )

    # -- PyPI JSON --------------------------------------------------------------------------------
    def _pypi_file(self, record: dict) -> dict:
        return {
            "filename": record["filename"],
            "url": self.file_url(record),
            "packagetype": _packagetype(record["filename"]),
            "python_version": _python_version(record["filename"]),
            "requires_python": record["requires_python"],
            "size": record["size"],
            "upload_time": self.upload_time(record)[:-1] if record["upload_time"] else None,
            "upload_time_iso_8601": _iso(self.upload_time(record)) if record["upload_time"] else None,
            "digests": {
                "sha256": self.sha256(record),
                "md5": record["md5"],
                "blake2b_256": record["blake2b_256"],
            },
            "yanked": record["yanked_reason"] is not None,
            "yanked_reason": record["yanked_reason"],
        }

    def _pypi_info(self, release: dict) -> dict:
        row = release["row"]
        return {
            "name": row["project"],
            "version": release["version"],
            "summary": "Fake %s for the llmfleet.engines tests" % row["project"],
            "requires_dist": list(row.get("requires", ())) or None,
            "requires_python": catalog.REQUIRES_PYTHON[row["project"]],
            "yanked": release["yanked_reason"] is not None,
            "yanked_reason": release["yanked_reason"],
            "project_url": "%s/project/%s/" % (self.base, row["project"]),
            "package_url": "%s/project/%s/" % (self.base, row["project"]),
        }

    def pypi_json(self, parts: list[str], raw_query: str = "") -> Response:
        if len(parts) not in (2, 3) or parts[-1] != "json":
            return _not_found()
        releases = self.cat.pypi.get(normalize(parts[0]))
        if not releases:
            return _not_found()
        name = releases[0]["row"]["project"]
        if parts[0] != name:  # PyPI: 301 to the project's own name
            return _redirect(301, "/pypi/%s/json" % "/".join([name] + parts[1:-1]), raw_query)
        if len(parts) == 3:
            if self.state.switch("release_json_404"):
                return _not_found()
            match = [r for r in releases if r["version"] == parts[1]]
            if not match:
                return _not_found()
            release = match[0]
            return _json(
                {
                    "info": self._pypi_info(release),
                    "urls": [self._pypi_file(f) for f in release["files"]],
                    "last_serial": 1,
                    "vulnerabilities": [],
                }
            )
        latest = [r for r in releases if r["yanked_reason"] is None] or releases
        return _json(
            {
                "info": self._pypi_info(latest[-1]),
                "releases": {r["version"]: [self._pypi_file(f) for f in r["files"]] for r in releases},
                "urls": [self._pypi_file(f) for f in latest[-1]["files"]],
                "last_serial": 1,
                "vulnerabilities": [],
            }
        )

    # -- simple index (PEP 503 / 691 / 700) -------------------------------------------------------
    def simple(self, index: dict, parts: list[str], query: dict, accept: str, upload_times: str) -> Response:
        """PEP 503 HTML / PEP 691 JSON. ``upload_times``: ``all`` files dated (PEP 700), only the
        ``partial`` ones the catalogue marks as dated (PyTorch's index), or ``none``."""
        fmt = (query.get("format") or [""])[0] or accept
        want_json = SIMPLE_JSON in fmt
        if not parts:
            names = sorted(index)
            if want_json:
                return _json(
                    {"meta": {"api-version": "1.1", "_last-serial": 1}, "projects": [{"name": n} for n in names]},
                    content_type=SIMPLE_JSON,
                )
            links = "".join('<a href="%s/">%s</a>\n' % (n, n) for n in names)
            return Response(200, self._html("Simple index", links), SIMPLE_HTML if SIMPLE_HTML in fmt else "text/html")
        if len(parts) != 1 or normalize(parts[0]) not in index:
            return _not_found()
        name = normalize(parts[0])
        releases = index[name]
        files = [f for r in releases for f in r["files"]]
        if want_json:
            out = []
            for record in files:
                item = {
                    "filename": record["filename"],
                    "url": self.file_url(record),
                    "hashes": {"sha256": self.sha256(record)},
                    "requires-python": record["requires_python"],
                    "size": record["size"],
                    "yanked": record["yanked_reason"] if record["yanked_reason"] is not None else False,
                }
                # PEP 658 / 714: the wheel's METADATA at <url>.metadata, with its sha256
                meta = {"sha256": record["metadata_sha256"]} if record["metadata"] is not None else False
                item["core-metadata"] = meta
                item["data-dist-info-metadata"] = meta
                if _dated(record, upload_times):
                    item["upload-time"] = _iso(self.upload_time(record))
                out.append(item)
            return _json(
                {
                    "meta": {"api-version": "1.1", "_last-serial": 1},
                    "name": name,
                    "versions": [r["version"] for r in releases],
                    "files": out,
                },
                content_type=SIMPLE_JSON,
            )
        links = []
        for record in files:
            attrs = ' data-requires-python="%s"' % html.escape(record["requires_python"])
            if record["yanked_reason"] is not None:
                attrs += ' data-yanked="%s"' % html.escape(record["yanked_reason"])
            if record["metadata"] is not None:
                attrs += ' data-dist-info-metadata="sha256=%s" data-core-metadata="sha256=%s"' % (
                    record["metadata_sha256"],
                    record["metadata_sha256"],
                )
            links.append(
                '<a href="%s#sha256=%s"%s>%s</a><br/>\n'
                % (html.escape(self.file_url(record)), self.sha256(record), attrs, html.escape(record["filename"]))
            )
        return Response(
            200, self._html("Links for %s" % name, "".join(links)), SIMPLE_HTML if SIMPLE_HTML in fmt else "text/html"
        )

    @staticmethod
    def _html(title: str, body: str) -> bytes:
        return (
            '<!DOCTYPE html>\n<html>\n<head>\n<meta name="pypi:repository-version" content="1.1">\n'
            "<title>%s</title>\n</head>\n<body>\n<h1>%s</h1>\n%s</body>\n</html>\n" % (title, title, body)
        ).encode()

    # -- GitHub -----------------------------------------------------------------------------------
    def _asset(self, repo: str, release: dict, record: dict) -> dict:
        api = "%s/github/api/repos/%s" % (self.base, repo)
        stamp = record["upload_time"]
        digest = "sha256:" + self.sha256(record) if release["row"].get("digests") else None
        return {
            "url": "%s/releases/assets/%d" % (api, record["asset_id"]),
            "id": record["asset_id"],
            "node_id": "RA_fake%d" % record["asset_id"],
            "name": record["filename"],
            "label": "",
            "uploader": {"login": "github-actions[bot]", "type": "Bot"},
            "content_type": _content_type(record["filename"]),
            "state": "uploaded",
            "size": record["size"],
            "digest": digest,
            "download_count": 0,
            "created_at": stamp,
            "updated_at": stamp,
            "browser_download_url": self.file_url(record),
        }

    def _release(self, repo: str, tag: str, release: dict) -> dict:
        api = "%s/github/api/repos/%s" % (self.base, repo)
        stamp = release["files"][0]["upload_time"]
        return {
            "url": "%s/releases/%d" % (api, release["id"]),
            "assets_url": "%s/releases/%d/assets" % (api, release["id"]),
            "html_url": "%s/github/download/%s/releases/tag/%s" % (self.base, repo, tag),
            "id": release["id"],
            "node_id": "RE_fake%d" % release["id"],
            "tag_name": tag,
            "target_commitish": "main",
            "name": "vLLM %s" % tag,
            "draft": False,
            "prerelease": False,
            "immutable": False,
            "created_at": stamp,
            "published_at": stamp,
            "author": {"login": "github-actions[bot]", "type": "Bot"},
            "assets": [self._asset(repo, release, f) for f in release["files"]],
            "tarball_url": "%s/tarball/%s" % (api, tag),
            "zipball_url": "%s/zipball/%s" % (api, tag),
            "body": "Fake release %s for the llmfleet.engines tests." % tag,
        }

    def github_api(self, parts: list[str]) -> Response:
        gh404 = _json({"message": "Not Found", "documentation_url": GITHUB_404_DOC, "status": "404"}, 404)
        if len(parts) < 4 or parts[0] != "repos" or parts[3] != "releases":
            return gh404
        repo = "%s/%s" % (parts[1], parts[2])
        releases = self.cat.github.get(repo)
        if releases is None:
            return gh404
        rest = parts[4:]
        if len(rest) == 2 and rest[0] == "tags" and rest[1] in releases:
            return _json(self._release(repo, rest[1], releases[rest[1]]))
        if not rest:
            ordered = sorted(releases.items(), key=lambda kv: _version_key(kv[0][1:]), reverse=True)
            return _json([self._release(repo, tag, rel) for tag, rel in ordered])
        if rest == ["latest"]:
            tag, rel = max(releases.items(), key=lambda kv: _version_key(kv[0][1:]))
            return _json(self._release(repo, tag, rel))
        return gh404


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections end on their own after stop()
    server_version = "llmfleet-fake-upstream/1.0"
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        """Silent: the request log is at /_control/log."""

    def do_GET(self):  # noqa: N802
        self._handle(send_body=True)

    def do_HEAD(self):  # noqa: N802
        self._handle(send_body=False)

    def do_POST(self):  # noqa: N802
        self._handle(send_body=True)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, response: Response, send_body: bool, truncate: bool = False) -> None:
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(response.body)))
        if truncate:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if send_body:
            self.wfile.write(response.body[: len(response.body) // 2] if truncate else response.body)
        self.wfile.flush()

    def _handle(self, send_body: bool) -> None:
        owner = self.server.owner
        split = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(split.path)
        query = urllib.parse.parse_qs(split.query)
        body = self._read_body()
        if self.server.cdn and not path.startswith(hub.HUB_CDN_PREFIX + "/"):
            self._send(_blob_error(404, "NoSuchKey", "The specified key does not exist."), send_body)
            return
        if path.startswith("/_control/"):
            self._send(owner.control(self.command, path, body), send_body)
            return
        started = time.time()
        rules = owner.state.take(path, self.headers)
        truncate = False
        response = None
        for rule in rules:
            if rule["kind"] == "slow":
                time.sleep(float(rule["delay"]))
            elif rule["kind"] == "status":
                response = _json({"message": "Fake upstream fault: status %d" % rule["status"]}, rule["status"])
            elif rule["kind"] == "rate_limit":
                response = _json(
                    {"message": RATE_LIMIT_MESSAGE, "documentation_url": RATE_LIMIT_DOC},
                    403,
                    headers={
                        "X-RateLimit-Limit": "60",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset": str(int(time.time()) + 3600),
                        "X-RateLimit-Used": "60",
                        "X-RateLimit-Resource": "core",
                    },
                )
            elif rule["kind"] == "invalid_json":
                response = Response(200, INVALID_JSON_BODY, "application/json")
            elif rule["kind"] == "redirect":
                here = split.path + ("?" + split.query if split.query else "")
                location = rule["location"].replace("{path}", here).replace("{n}", str(rule["answered"]))
                response = Response(rule["status"], ("Redirecting to %s" % location).encode(),
                                    "text/plain; charset=utf-8", {"Location": location})
            elif rule["kind"] == "truncate":
                truncate = True
        if response is None:
            if self.command == "POST":
                response = _json({"message": "Method Not Allowed"}, 405)
            else:
                try:
                    if path.startswith((hub.HUB_PREFIX + "/", hub.HUB_CDN_PREFIX + "/")):
                        response = owner.hub.route(split.path, split.query, self.headers)
                    else:
                        response = owner.upstream.route(path, query, self.headers.get("Accept") or "", split.query)
                except Exception as exc:  # pylint: disable=broad-except
                    response = _json({"message": "fake upstream bug: %r" % exc}, 500)
        owner.state.record(
            {
                "method": self.command,
                "path": path,
                "raw_path": split.path,
                "query": split.query,
                "status": response.status,
                "headers": _logged_headers(path, self.headers),
                "time": started,
                "fault": rules[-1]["kind"] if rules else None,
            }
        )
        try:
            self._send(response, send_body, truncate=truncate)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "FakeUpstream"
    cdn = False  # the hub's CDN listener: serves /hub-cdn/ only


class FakeUpstream:
    """The fake upstream, started in a background thread (see docs/dev/CONTRACTS.md)."""

    def __init__(self, packages, host: str = "127.0.0.1", port: int = 0, hub_bench_size: int = hub.BENCH_SIZE):
        self.packages = pathlib.Path(packages)
        self.catalogue = Catalogue(self.packages)
        self.state = State()
        self.hub = hub.Hub(self.state, bench_size=hub_bench_size)
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._cdn: _Server | None = None
        self._threads: list[threading.Thread] = []
        self.upstream: Upstream | None = None

    # -- life cycle -------------------------------------------------------------------------------
    def start(self) -> "FakeUpstream":
        if self._server is not None:
            return self
        # The hub's CDN is another origin (as cdn-lfs.hf.co is): a second port, so that clients (the
        # real huggingface_hub too) treat its redirects as leaving the hub and send it no token.
        self._server = _Server((self._host, self._port), _Handler)
        self._cdn = _Server((self._host, 0), _Handler)
        self._cdn.cdn = True
        for name, server in (("fake-upstream", self._server), ("fake-hub-cdn", self._cdn)):
            server.owner = self
            self._threads.append(
                threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
            )
        self.upstream = Upstream(self.catalogue, self.state, self.url)
        self.hub.base, self.hub.cdn_base = self.url, self.hub_cdn_url
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        for server in (self._server, self._cdn):
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._server = self._cdn = None
        self._threads = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("fake upstream is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return "http://%s:%d" % (self._host, self.port)

    @property
    def hub_url(self) -> str:
        """The fake hub's endpoint (``HF_ENDPOINT``)."""
        return self.url + hub.HUB_PREFIX

    @property
    def hub_cdn_url(self) -> str:
        """The hub CDN's origin (another port of 127.0.0.1): its URLs are ``<this>/hub-cdn/...``."""
        if self._cdn is None:
            raise RuntimeError("fake upstream is not started")
        return "http://%s:%d" % (self._host, self._cdn.server_address[1])

    # -- control (the same as the /_control endpoints) --------------------------------------------
    def fault(self, kind: str, **kw) -> dict:
        return self.state.add_fault(dict(kw, kind=kind))

    def switch(self, **kw) -> dict:
        return self.state.set_switches(kw)

    def log(self) -> list[dict]:
        return self.state.log()

    def clear_log(self) -> None:
        self.state.clear_log()

    def reset(self) -> None:
        self.state.reset()
        self.hub.reset()

    def catalog(self) -> dict:
        return self.catalogue.as_json()

    def hub_commit(self, repo: str, files: dict, branch: str = "main", message: str | None = None,
                   tag: str | None = None) -> str:
        """Same as POST /_control/hub_commit; returns the new commit's id."""
        return self.hub.commit(repo, files, branch=branch, message=message, tag=tag)

    def hub_switch(self, **kw) -> dict:
        return self.hub.set_switches(kw)

    def hub_catalog(self) -> dict:
        return self.hub.catalog()

    def control(self, method: str, path: str, body: bytes) -> Response:
        """Answer a /_control/ request (never logged, never faulted)."""
        action = path[len("/_control/") :].strip("/")
        try:
            if method == "GET" and action == "log":
                return _json({"requests": self.log()})
            if method == "GET" and action == "catalog":
                return _json(self.catalog())
            if method == "GET" and action == "hub_catalog":
                return _json(self.hub_catalog())
            if method == "GET" and action == "state":
                with self.state.lock:
                    return _json({"faults": copy.deepcopy(self.state.faults), "switches": dict(self.state.switches)})
            if method == "POST" and action in ("fault", "switch", "hub_commit", "hub_switch"):
                try:
                    payload = json.loads(body.decode() or "{}")
                except ValueError as exc:
                    raise ControlError("body is not JSON: %s" % exc) from None
                if action == "fault":
                    return _json({"fault": self.state.add_fault(payload)})
                if action == "hub_switch":
                    return _json({"switches": self.hub.set_switches(payload)})
                if action == "hub_commit":
                    if not isinstance(payload, dict) or not isinstance(payload.get("repo"), str):
                        raise ControlError("hub_commit needs a repo")
                    unknown = set(payload) - {"repo", "files", "branch", "message", "tag"}
                    if unknown:
                        raise ControlError("hub_commit: unknown keys %s" % ", ".join(sorted(unknown)))
                    return _json({"commit": self.hub_commit(**payload)})
                return _json({"switches": self.state.set_switches(payload)})
            if method == "POST" and action == "clear_log":
                self.clear_log()
                return _json({"ok": True})
            if method == "POST" and action == "reset":
                self.reset()
                return _json({"ok": True})
        except (ControlError, hub.HubControlError) as exc:
            return _json({"message": str(exc)}, 400)
        return _json({"message": "no control endpoint %s %s" % (method, path)}, 404)


# -- another origin, for the hostile tests ------------------------------------------------------


class ForeignOrigin:
    """Another origin than the fake upstream's: a server on ``host`` (127.0.0.1 on a port of its
    own, or a loopback alias such as 127.0.0.2) that answers scripted routes and logs every
    request as it came, headers and body unmasked: the place where no credential may ever arrive.

    ``route(path, status=200, body=b"", headers=None, method=None)`` scripts an answer (``path``
    with its query, as the client asks it; ``method`` None: any); ``redirect(path, location,
    status=302)`` a redirect. Anything else: 404. ``tls=(certfile, keyfile)`` serves https.
    ``log()`` is the list of ``{"method", "path", "headers", "body"}``, ``text()`` all of it as one
    string (for a test that greps it for a planted token)."""

    def __init__(self, host: str = "127.0.0.1", tls=None):
        self.host = host
        self.tls = tls
        self.routes: dict = {}
        self._log: list[dict] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def route(self, path: str, status: int = 200, body=b"", headers=None, method=None,
              content_type="application/octet-stream") -> "ForeignOrigin":
        if isinstance(body, (dict, list)):
            body, content_type = json.dumps(body).encode(), "application/json"
        elif isinstance(body, str):
            body = body.encode()
        with self._lock:
            self.routes[(method, path)] = Response(status, body, content_type, headers)
        return self

    def redirect(self, path: str, location: str, status: int = 302, method=None) -> "ForeignOrigin":
        return self.route(path, status, ("Redirecting to %s" % location).encode(), {"Location": location},
                          method=method, content_type="text/plain")

    def _answer(self, method: str, path: str) -> Response:
        with self._lock:
            found = self.routes.get((method, path)) or self.routes.get((None, path))
        return found or Response(404, b'{"message": "Not Found"}', "application/json")

    def log(self) -> list[dict]:
        with self._lock:
            return copy.deepcopy(self._log)

    def text(self) -> str:
        """Every request logged, as one string: method, path, each header and the body."""
        parts = []
        for entry in self.log():
            parts.append("%s %s" % (entry["method"], entry["path"]))
            parts.extend("%s: %s" % item for item in entry["headers"].items())
            parts.append(entry["body"])
        return "\n".join(parts)

    def start(self) -> "ForeignOrigin":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def log_message(self, format, *args):  # noqa: A002 - signature of the base class
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length > 0 else b""
                with owner._lock:
                    owner._log.append({"method": self.command, "path": self.path,
                                       "headers": dict(self.headers.items()),
                                       "body": body.decode("utf-8", "replace")})
                response = owner._answer(self.command, self.path)
                self.send_response(response.status)
                for key, value in response.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(response.body)
                self.wfile.flush()

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815

        server = ThreadingHTTPServer((self.host, 0), Handler)
        server.daemon_threads = True
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="foreign-origin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("foreign origin is not started")
        return "%s://%s:%d" % ("https" if self.tls else "http", self.host, self._server.server_address[1])
