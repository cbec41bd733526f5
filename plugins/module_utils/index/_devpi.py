# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small client of devpi-server's HTTP API (the fleet cache of llmfleet.engines.engine_cache).

Only what the collection needs: log in, read and set an index's configuration, list a project's
files on an index (the PEP 691 JSON simple page), and upload a wheel. Private to the collection.

devpi's API, as devpi-server 6 answers it:
- ``POST /+login`` with ``{"user", "password"}`` gives ``result.password``, a token sent back as
  ``X-Devpi-Auth: base64(user:token)``;
- ``GET /<user>/<index>`` (Accept JSON) gives ``result`` (the configuration), 404 when absent;
  ``PUT`` creates it, ``PATCH`` with the whole configuration changes it;
- ``GET /<user>/<index>/+simple/<project>/`` with the JSON simple Accept lists files with
  ``hashes.sha256`` and a URL relative to the page;
- ``POST /<user>/<index>/`` multipart ``:action=file_upload``, ``name``, ``version``, ``content``
  uploads a file; an identical file again is answered 200 on a non-volatile index.

A password (the ``password`` given, or one in the URL's userinfo) is only ever sent over
``https://`` or to this host's loopback (127.0.0.0/8, ``::1``, ``localhost``), unless the caller
allows plain HTTP (``allow_plain_http_password``): see ``Devpi.check_password_transport``.

Every request, the uploads and the file downloads included, goes through ``_http.follow``, the
collection's one redirect policy: http and https only (a listing or a redirect that points at
``file://`` is refused, never opened), the session token (``X-Devpi-Auth``) and the URL's
credentials only to the server's own origin, at most ``_http.MAX_REDIRECTS`` redirects, and none
followed for an upload.

A listing names files only on the cache's own origin (``Devpi.project_files`` refuses any other: a hostile
listing would have this host fetch what only it can reach), and devpi_warm follows no redirect of a listed
file to another origin. Every download is bounded (``file_limits``: the listed size, else ``MAX_FILE_BYTES``;
``DEADLINE_TIMEOUTS`` x timeout plus a second a MiB), and a digest that differs is not told: the message
names the file and the expected digest only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid

from ansible.module_utils.urls import open_url

from ansible_collections.llmfleet.engines.plugins.module_utils.node._builds import at_least, manylinux_glibc
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    DEADLINE_TIMEOUTS,
    MAX_ERROR_BYTES,
    HttpClient,
    HttpError,
    NotFoundError,
    follow,
    is_loopback,
    origin,
    origin_text,
    read_body,
    read_head,
    shown_url,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import split_userinfo, strip_userinfo

try:  # Python 3
    from urllib.parse import urljoin, urlsplit
except ImportError:  # pragma: no cover
    from urlparse import urljoin, urlsplit  # type: ignore

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
INDEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
# name-version(-build)?-python-abi-platform.whl (PEP 427)
WHEEL_NAME = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+\.whl")
CHUNK = 1024 * 1024
#: The most bytes a file download reads when the listing gives no size: PyPI's largest wheels are a
#: few GiB; a body that goes on past this is endless, not a wheel.
MAX_FILE_BYTES = 16 * 1024 * 1024 * 1024
#: The slowest a file download may be, on average, besides its DEADLINE_TIMEOUTS x timeout: bytes a second.
MIN_FILE_RATE = 1024 * 1024


class DevpiError(LlmfleetError):
    """What went wrong talking to the devpi-server, in words for the operator."""


class PlainHttpPasswordError(DevpiError):
    """A password would go over plain HTTP to a host that is not this one's loopback."""


def plain_http_password_problem(url, user, allow_plain_http_password=False):
    """None, or why a password must not be sent to ``url``: a plain ``http://`` (any scheme but
    https) URL whose host is not this host's loopback, unless ``allow_plain_http_password``."""
    if allow_plain_http_password:
        return None
    try:
        parts = urlsplit(url or "")
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:  # an unbalanced [IPv6]: not a URL a password may go to
        scheme, host = "", None
    if scheme == "https" or is_loopback(host):
        return None
    return ("refusing to send the password of devpi user %s to %s over plain HTTP (%s): anyone on the network"
            " between could read it. Put TLS in front of devpi-server (a reverse proxy such as nginx or caddy"
            " with a certificate) and use its https:// URL, or reach it on the loopback (127.0.0.1); to send"
            " it in the clear anyway, set allow_plain_http_password=true (the roles engine_cache and engine_node:"
            " engine_cache_allow_plain_http_password=true)" % (user, host or "(no host)", strip_userinfo(url)))


def wheel_project(filename):
    """``(project, version)`` of a wheel's file name, or a DevpiError."""
    match = WHEEL_NAME.fullmatch(filename or "")
    if not match:
        raise DevpiError("%r is not a wheel's file name (name-version-python-abi-platform.whl)" % (filename,))
    return match.group("name").replace("_", "-").lower(), match.group("version")


def check_index_name(name):
    """None, or why ``name`` is not ``user/index``."""
    if not isinstance(name, str) or not INDEX_NAME.fullmatch(name):
        return "%r is not an index name of the form user/index (letters, digits, '.', '_', '-')" % (name,)
    return None


class Devpi(object):
    """One devpi-server at ``url`` (its base, e.g. ``http://cache:3141``)."""

    def __init__(self, url, user="root", password="", timeout=60, retries=3, validate_certs=True,
                 allow_plain_http_password=False):
        self.url = url.rstrip("/")
        self.shown = strip_userinfo(self.url)
        self.user = user
        self.password = password
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.allow_plain_http_password = allow_plain_http_password
        url_password = split_userinfo(self.url)[2]
        self.http = HttpClient(timeout=timeout, retries=retries, validate_certs=validate_certs,
                               secrets=[s for s in (password, url_password) if s],
                               allow_plain_http_credentials=allow_plain_http_password,
                               allow_option="allow_plain_http_password")
        self._auth = None

    # -- session --------------------------------------------------------------------------------
    def check_password_transport(self):
        """Raise a PlainHttpPasswordError when a password (``password``, or one in the URL) would
        go to a host that is not this host's loopback over plain HTTP, and the caller did not allow
        it. Called before anything is sent: by ``login``, and by the modules when they start."""
        _url, url_user, url_password = split_userinfo(self.url)
        if not (self.password or url_password):
            return
        user = self.user if self.password else (url_user or self.user)
        problem = plain_http_password_problem(self.url, user, self.allow_plain_http_password)
        if problem:
            raise PlainHttpPasswordError(problem)

    def login(self):
        """Log in as ``user`` once; the token is kept for the later requests."""
        if self._auth is not None:
            return
        self.check_password_transport()
        try:
            data = self.http.post_json(self.url + "/+login", {"user": self.user, "password": self.password})[0]
        except NotFoundError:
            raise DevpiError("%s answers 404 at /+login: it is not a devpi-server" % self.shown)
        except LlmfleetError as exc:
            status = getattr(exc, "status", None)
            if status in (401, 403):
                raise DevpiError("%s refused the login of user %s: the password is not the one the server was"
                                 " set up with (engine_cache_password)" % (self.shown, self.user))
            raise DevpiError("logging in to %s as %s failed: %s" % (self.shown, self.user, self.http.redact(exc)))
        token = (data.get("result") or {}).get("password") if isinstance(data, dict) else None
        if not token:
            raise DevpiError("%s answered the login without a token: %s" % (self.shown, _short(data)))
        self._auth = base64.b64encode(("%s:%s" % (self.user, token)).encode("utf-8")).decode("ascii")
        self.http.secrets.append(token)
        self.http.secrets.append(self._auth)

    def _headers(self, auth=True):
        headers = {"Accept": "application/json"}
        if auth and self._auth:
            headers["X-Devpi-Auth"] = self._auth
        return headers

    # -- indexes -------------------------------------------------------------------------------
    def index_config(self, name):
        """The configuration of index ``name``, or None when the server has no such index."""
        try:
            data = self.http.get_json("%s/%s" % (self.url, name), headers=self._headers())[0]
        except NotFoundError:
            return None
        except LlmfleetError as exc:
            raise DevpiError("reading index %s of %s failed: %s" % (name, self.shown, self.http.redact(exc)))
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, dict):
            raise DevpiError("%s/%s answered no index configuration: %s" % (self.shown, name, _short(data)))
        return result

    def set_index(self, name, config, create):
        """Create (``create``) or change index ``name`` to ``config``; the configuration it has then."""
        self.login()
        method = "PUT" if create else "PATCH"
        body = json.dumps(config).encode("utf-8")
        headers = self._headers()
        headers["Content-Type"] = "application/json"
        try:
            resp = self.http.request(method, "%s/%s" % (self.url, name), headers, body)
        except LlmfleetError as exc:
            raise DevpiError("%s of index %s on %s failed: %s" % (
                "creating" if create else "changing", name, self.shown, self.http.redact(exc)))
        try:
            return json.loads(resp.body.decode("utf-8")).get("result") or {}
        except (ValueError, AttributeError):
            return {}

    # -- files ---------------------------------------------------------------------------------
    def project_files(self, index, project):
        """``[{filename, url, sha256, size}]`` of ``project`` on ``index`` (absolute URLs, without
        credentials; ``size`` the listing's, or None); [] when the index has none. A file listed on another
        origin than the cache's own is refused: the cache serves its files itself, and a listing that sends
        this host elsewhere (another server, a service on this host's loopback) is hostile."""
        page = "%s/%s/+simple/%s/" % (self.url, index, project)
        try:
            data = self.http.get_json(page, accept=SIMPLE_JSON)[0]
        except NotFoundError:
            return []
        except LlmfleetError as exc:
            raise DevpiError("listing %s on %s/%s failed: %s" % (project, self.shown, index, self.http.redact(exc)))
        files = []
        for entry in (data.get("files") or []) if isinstance(data, dict) else []:
            if not isinstance(entry, dict) or not entry.get("filename"):
                continue
            url = strip_userinfo(urljoin(page, entry.get("url") or "")).split("#", 1)[0]
            scheme = urlsplit(url).scheme.lower()
            if scheme not in ("http", "https"):
                # a listing that points at file:// (or ftp://) would have this host read its own files
                raise DevpiError("%s/%s lists %s of %s at a %s:// URL (%s): refused, only http and https"
                                 " files are fetched; the index (or what answers in its place) is broken or"
                                 " hostile" % (self.shown, index, entry["filename"], project, scheme or "(no scheme)",
                                               shown_url(url)))
            if origin(url) != origin(page):
                raise DevpiError("%s/%s lists %s of %s on another origin (%s) than the cache's own (%s): refused, "
                                 "only files the cache serves itself are fetched; the index (or what answers in its "
                                 "place) is broken or hostile" % (self.shown, index, entry["filename"], project,
                                                                  origin_text(url), origin_text(page)))
            size = entry.get("size")
            files.append({
                "filename": entry["filename"],
                "url": url,
                "sha256": ((entry.get("hashes") or {}).get("sha256") or "").lower(),
                "size": size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
            })
        return files

    def upload(self, index, path, filename, project, version):
        """Upload the file at ``path`` as ``filename`` of ``project`` ``version`` to ``index``."""
        self.login()
        boundary = "llmfleet-%s" % uuid.uuid4().hex
        head = b""
        for key, value in ((":action", "file_upload"), ("name", project), ("version", version)):
            head += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, key, value)).encode("utf-8")
        head += ("--%s\r\nContent-Disposition: form-data; name=\"content\"; filename=\"%s\"\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n" % (boundary, filename)).encode("utf-8")
        tail = ("\r\n--%s--\r\n" % boundary).encode("utf-8")
        headers = self._headers()
        headers["Content-Type"] = "multipart/form-data; boundary=%s" % boundary
        headers["Content-Length"] = str(len(head) + os.path.getsize(path) + len(tail))
        with tempfile.TemporaryFile() as body:
            body.write(head)
            with open(path, "rb") as src:
                shutil.copyfileobj(src, body, CHUNK)
            body.write(tail)
            body.seek(0)
            try:
                # no redirect is followed for an upload: a 3xx is its answer, and a failure
                answer = follow("%s/%s/" % (self.url, index), method="POST", data=body, headers=headers,
                                timeout=self.timeout, validate_certs=self.validate_certs,
                                allow_plain_http_credentials=self.allow_plain_http_password,
                                allow_option="allow_plain_http_password", opener=open_url)
                try:
                    # only a message is read from it: the first bytes, for so long
                    text = read_head(answer, MAX_ERROR_BYTES, time.monotonic() + self.timeout)
                finally:
                    answer.close()
            except HttpError as exc:
                raise DevpiError("uploading %s to %s/%s failed: %s" % (filename, self.shown, index, self.http.redact(exc.msg)))
            except Exception as exc:  # pylint: disable=broad-except
                raise DevpiError("uploading %s to %s/%s failed: %s" % (filename, self.shown, index, self.http.redact(exc)))
            if answer.status >= 300:
                text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text or "")
                if answer.headers.get("location") and answer.status < 400:
                    text = "(a redirect to %s, not followed for an upload)" % shown_url(
                        urljoin(answer.url, answer.headers["location"]))
                raise DevpiError("uploading %s to %s/%s failed: %s %s %s" % (
                    filename, self.shown, index, answer.status, answer.reason, self.http.redact(_short(text))))


class _Status(Exception):
    """A download answered with a status that is not 2xx."""

    def __init__(self, status, reason):
        super().__init__("%s %s" % (status, reason))
        self.status = status
        self.reason = reason


def file_limits(timeout, size=None):
    """``(max_bytes, seconds)`` of a file download: the listed ``size`` (when one is given, up to
    :data:`MAX_FILE_BYTES`) or :data:`MAX_FILE_BYTES`, and ``DEADLINE_TIMEOUTS`` times ``timeout`` plus a
    second for each :data:`MIN_FILE_RATE` bytes of the listed size."""
    if isinstance(size, int) and 0 <= size <= MAX_FILE_BYTES:
        return size, DEADLINE_TIMEOUTS * timeout + size / float(MIN_FILE_RATE)
    return MAX_FILE_BYTES, DEADLINE_TIMEOUTS * timeout


def _read_hashed(url, out, timeout, validate_certs, size=None, stay_on_origin=False):
    """GET ``url`` to the end (redirects followed under the policy of ``_http.follow``: http and
    https only, bounded; with ``stay_on_origin`` only on ``url``'s origin), writing each chunk to ``out``
    when given: ``(sha256 hex, size)``. Bounded by :func:`file_limits` (``size`` the listed one): a
    longer body, or one that has not ended by the deadline, is an ``HttpError``. A status that is not 2xx
    is raised as ``_Status``; any other error as it came. Credentials in the URL's userinfo go only over
    https or to the loopback."""
    max_bytes, seconds = file_limits(timeout, size)
    deadline = time.monotonic() + seconds
    digest = hashlib.sha256()

    def take(chunk):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)

    resp = follow(url, timeout=timeout, validate_certs=validate_certs, opener=open_url, stay_on_origin=stay_on_origin)
    try:
        if resp.status >= 300:
            raise _Status(resp.status, resp.reason)
        got = read_body(resp, url, max_bytes, deadline, sink=take, allowed=seconds,
                        hint="the listing says %s" % ("it has %d bytes" % size if max_bytes == size else
                                                      "nothing of its size, and no wheel is this large"))
    finally:
        resp.close()
    return digest.hexdigest(), got


def _failed(what, shown, exc):
    if isinstance(exc, _Status):
        return DevpiError("%s %s failed: %s %s" % (what, shown, exc.status, exc.reason))
    if isinstance(exc, HttpError):
        return DevpiError("%s %s failed: %s" % (what, shown, exc.msg))
    return DevpiError("%s %s failed: %s" % (what, shown, exc))


def download_checked(url, sha256, dest_dir, timeout=60, validate_certs=True):
    """Download ``url`` into a new file under ``dest_dir``, checked against ``sha256``: its path.
    The file is removed and a DevpiError raised when the digest differs."""
    shown = strip_userinfo(url)
    fd, path = tempfile.mkstemp(prefix=".llmfleet-download-", dir=dest_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            got, size = _read_hashed(url, out, timeout, validate_certs)
    except Exception as exc:  # pylint: disable=broad-except
        os.unlink(path)
        raise _failed("downloading", shown, exc)
    if got != sha256.lower():
        os.unlink(path)
        # the digest of what came is not told: a message must not tell what a URL's bytes hash to
        raise DevpiError("%s does not have the publisher's sha256 %s: what it served was removed, nothing was "
                         "uploaded" % (shown, sha256.lower()))
    return path


def _short(value, limit=300):
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def wheel_fits(filename, python_version, python_platform):
    """Whether a wheel could be installed on a node of ``python_version`` ("3.12") and
    ``python_platform`` ("x86_64-manylinux_2_35"), by its file name's tags (PEP 425)."""
    if not filename.endswith(".whl"):
        return False
    parts = filename[:-4].split("-")
    if len(parts) < 5:
        return False
    pythons, abis, platforms = parts[-3].split("."), parts[-2].split("."), parts[-1].split(".")
    minor = int(python_version.split(".")[1])
    arch, level = (python_platform.split("-", 1) + [""])[:2]
    glibc = manylinux_glibc(level) or "2.17"

    def python_ok(tag):
        if tag in ("py3", "py2.py3") or tag.startswith("py3"):
            return True
        found = re.fullmatch(r"cp3([0-9]+)", tag)
        if not found:
            return False
        # an abi3 wheel fits every later Python; others only their own
        return int(found.group(1)) == minor or ("abi3" in abis and int(found.group(1)) <= minor)

    def platform_ok(tag):
        if tag == "any":
            return True
        if not tag.endswith("_" + arch):
            return False
        needs = manylinux_glibc(tag[: -len(arch) - 1])
        return needs is not None and at_least(glibc, needs)

    return any(python_ok(t) for t in pythons) and any(platform_ok(t) for t in platforms)


def fetch_checked(url, sha256, timeout=600, validate_certs=True, size=None, stay_on_origin=False):
    """GET ``url`` to the end, hashing it: its size, or a DevpiError when the sha256 differs. ``size``:
    the listed one, the most read (see :func:`file_limits`); ``stay_on_origin``: no redirect to another
    origin (a cache's own file)."""
    shown = strip_userinfo(url)
    try:
        got, read = _read_hashed(url, None, timeout, validate_certs, size, stay_on_origin)
    except Exception as exc:  # pylint: disable=broad-except
        raise _failed("fetching", shown, exc)
    if got != sha256:
        # the digest of what came is not told: the listing chose the URL, and no message may tell what
        # a URL's bytes hash to
        raise DevpiError("%s serves %s with another sha256 than the lock's %s" % (
            shown.split("/+f/", 1)[0], shown.rsplit("/", 1)[-1], sha256))
    return read
