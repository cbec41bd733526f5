# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The Hugging Face hub cache, written from a model lock (docs/dev/MODELS.md) so that the real
``huggingface_hub`` reads it offline, and the streaming download that fills it.

``fetch`` streams one URL into a sink, 1 MiB at a time, over ``_http.follow`` (``open_url``:
managed nodes need nothing but Python), the collection's one redirect policy: http and https only
(a hub that redirects to ``file://`` gets an error, and no local file is read), at most
``_http.MAX_REDIRECTS`` redirects, the token only to the endpoint's own origin (the hub sends LFS
files to a CDN host, which never gets it), never after a downgrade to plain http, and over plain
http only to the loopback unless allowed. ``Range`` to resume; retries with back-off on connection
errors, time-outs, cut-off bodies, 429 and 5xx (resuming from what arrived). 401, 403, 404 and the
redirects the policy refuses are not tried again. No message ever holds a request header.

``Snapshot`` is one lock in one cache directory: ``survey`` reads what is there (no writes),
``apply`` downloads the missing blobs to ``blobs/<name>.incomplete`` (resumed next time), checks
size and hash, renames them into place, then links ``snapshots/<commit>/<path>`` and writes
``refs/<revision>``; ``prune_plan``/``prune`` remove older snapshots and the blobs only they used.
``run_parallel`` runs the downloads of a lock (``Snapshot.download``, or hf_warm's hashing) on a bounded
number of threads; the first failure sets a ``Cancel``, which shuts the sockets of the answers the others
are reading, so that they stop at once and the failure is raised once every thread has ended.
An ``.incomplete`` file is private (0600, made with ``O_EXCL|O_NOFOLLOW``) until its bytes are
checked; only then is it made 0644 and renamed. Files in place are 0644 and directories 0755, owned
by whoever runs this: the service user reads the weights and cannot change them.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import stat
import threading
import time
import urllib.error

from ansible.module_utils.six.moves.urllib.parse import urlsplit
from ansible.module_utils.urls import (
    ConnectionError as UrlsConnectionError,
    Request,
    SSLValidationError,
    make_context,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._hfhub import blob_name, validate_lock

CHUNK_SIZE = 1024 * 1024
MAX_REDIRECTS = _http.MAX_REDIRECTS
USER_AGENT = "llmfleet.engines (ansible-module)"
#: The lock file that keeps two runs from writing the same repo directory at once.
LOCK_NAME = ".llmfleet-snapshot.lock"
MIB = 1024 * 1024
DIR_MODE = 0o755
FILE_MODE = 0o644
#: Files downloaded at once by default (model_snapshot, hf_warm), and the most allowed.
DEFAULT_PARALLEL = 4
MAX_PARALLEL = 32
#: An .incomplete file's mode until its bytes are checked: what arrives is nobody else's to read.
PARTIAL_MODE = 0o600
_MASK = "********"

# Patched by the unit tests so that back-off costs no time.
_sleep = time.sleep
_clock = time.monotonic

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")


# -- errors ------------------------------------------------------------------------------------

class CacheError(LlmfleetError):
    """Base of every failure of the hub cache and its downloads."""


class FetchError(CacheError):
    """A GET that did not give the file. ``url`` is the URL asked (no credentials in it)."""

    def __init__(self, msg, url=None, status=None):
        super().__init__(msg)
        self.url = url
        self.status = status


class AccessDenied(FetchError):
    """401 or 403: the repo is gated or private, and the token is missing or has no access."""


class NotFound(FetchError):
    """404 or 410: no such repo, commit or file there."""


class Refused(FetchError):
    """Another answer that trying again will not change (other 4xx, a redirect the policy refuses:
    to another scheme than http/https, a downgrade with the token, too many)."""


class Unreachable(FetchError):
    """No complete answer after every attempt (connection errors, time-outs, cut-off bodies, 429, 5xx).
    ``received`` is where the last attempt stopped, in bytes of the file."""

    def __init__(self, msg, url=None, status=None, received=0):
        super().__init__(msg, url, status)
        self.received = received


class BadCertificate(FetchError):
    """The server's TLS certificate was not accepted (not tried again)."""


class Oversize(FetchError):
    """The server sent more bytes than the file has."""


class Cancelled(CacheError):
    """Another download of the same run failed: this one stopped at its next chunk."""


class IntegrityError(CacheError):
    """Downloaded (or found) bytes that are not the lock's: wrong size or wrong hash."""


class NotEnoughSpace(CacheError):
    """The missing bytes and the margin do not fit on the cache's filesystem."""


class InTheWay(CacheError):
    """Something that is not what the cache layout puts there (a directory for a file, a link for a
    directory) sits where this run must write: it is never removed."""


# -- the lock ----------------------------------------------------------------------------------

def cache_lock_problems(lock):
    """What keeps ``lock`` from being laid out: the lock's own problems (``_hfhub.validate_lock``),
    and a revision that cannot be a file under ``refs/`` (the real client writes
    ``refs/<revision>``, so ``refs/pr/1`` is fine, ``../x`` is not)."""
    problems = validate_lock(lock)
    if isinstance(lock, dict) and lock.get("revision") != lock.get("commit"):
        revision = lock.get("revision")
        if isinstance(revision, str) and revision:
            why = None
            if revision.startswith("/") or any(ord(ch) < 32 or ord(ch) == 127 for ch in revision):
                why = "is absolute or has control characters"
            elif any(part in ("", ".", "..") for part in revision.split("/")):
                why = "has an empty, '.' or '..' component"
            if why:
                problems.append("revision %r %s: it cannot name a file under refs/" % (revision, why))
    return problems


def repo_folder(repo):
    """``models--<org>--<name>``, the repo's directory in the hub cache."""
    return "models--" + repo.replace("/", "--")


def link_target(path, blob):
    """The relative target of ``snapshots/<commit>/<path>``: ``../../blobs/<blob>``, one more
    ``../`` per directory of ``path`` (what ``os.path.relpath`` gives huggingface_hub)."""
    return "../" * (path.count("/") + 2) + "blobs/" + blob


# -- hashing -----------------------------------------------------------------------------------

class Digest(object):
    """The check of one file of the lock, fed as the bytes stream by: sha256 for an LFS file, the
    git blob id (``sha1(b"blob <size>\\0" + content)``) for a git file, and the byte count."""

    def __init__(self, entry):
        self.entry = entry
        self.kind = "sha256" if entry.get("sha256") else "git_oid"
        self.expected = entry[self.kind]
        self.reset()

    def reset(self):
        if self.kind == "sha256":
            self._hash = hashlib.sha256()
        else:
            self._hash = hashlib.sha1()  # nosec: git's blob id, checked as git computes it
            self._hash.update(b"blob %d\0" % self.entry["size"])
        self.size = 0

    def update(self, data):
        self._hash.update(data)
        self.size += len(data)

    def hexdigest(self):
        return self._hash.hexdigest()

    def problem(self):
        """What is wrong with the bytes seen (a sentence), or None when they are the lock's."""
        if self.size != self.entry["size"]:
            return "%d bytes, not the lock's %d" % (self.size, self.entry["size"])
        got = self.hexdigest()
        if got != self.expected:
            return "%s %s, not the lock's %s" % (self.kind, got, self.expected)
        return None


def file_problem(path, entry, chunk_size=CHUNK_SIZE):
    """What is wrong with the file at ``path`` against ``entry`` (its size, then its hash)."""
    digest = Digest(entry)
    with open(path, "rb") as handle:
        while True:
            data = handle.read(chunk_size)
            if not data:
                break
            digest.update(data)
    return digest.problem()


# -- sinks -------------------------------------------------------------------------------------

class HashSink(object):
    """Keeps nothing, hashes everything (for warming a mirror)."""

    def __init__(self, entry):
        self.digest = Digest(entry)

    def write(self, data):
        self.digest.update(data)

    def restart(self):
        self.digest.reset()


class FileSink(object):
    """``<blob>.incomplete``: what is there already is hashed first, then what arrives is appended
    and hashed. ``restart`` empties it (the server sent the whole file, not the rest)."""

    def __init__(self, path, entry):
        self.path = path
        self.digest = Digest(entry)
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            # a new one is ours alone from its first byte (0600 whatever the umask), never a link
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PARTIAL_MODE)
        except FileExistsError:
            fd = os.open(path, flags)  # an earlier run's, resumed (O_NOFOLLOW: not through a link)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InTheWay("%s is not a regular file: it is never written to" % path)
            os.fchmod(fd, PARTIAL_MODE)  # an earlier run's 0644 file is made private too
            self.handle = os.fdopen(fd, "r+b")
        except BaseException:
            os.close(fd)
            raise
        if st.st_size > entry["size"]:
            self.restart()  # longer than the file: not a beginning of it
        else:
            while True:
                data = self.handle.read(CHUNK_SIZE)
                if not data:
                    break
                self.digest.update(data)
        self.handle.seek(0, os.SEEK_END)

    @property
    def size(self):
        return self.digest.size

    def write(self, data):
        self.handle.write(data)
        self.digest.update(data)

    def restart(self):
        self.handle.seek(0)
        self.handle.truncate(0)
        self.digest.reset()

    def close(self):
        if self.handle is not None:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            self.handle = None


# -- fetch -------------------------------------------------------------------------------------

class FetchResult(object):
    """How a fetch went: the final ``url``, its ``status``, its ``headers`` (lower-case names),
    ``received`` (bytes this call wrote), ``size`` (the sink's size at the end) and
    ``cache_status`` (the last ``X-Cache-Status`` any hop answered, upper-case, or None)."""

    def __init__(self, url, status, headers, received, size, cache_status):
        self.url = url
        self.status = status
        self.headers = headers
        self.received = received
        self.size = size
        self.cache_status = cache_status


class _Retryable(Exception):
    def __init__(self, reason, status=None):
        super().__init__(reason)
        self.reason = reason
        self.status = status


class _RangeIgnored(Exception):
    """416, or a 206 for another range: start again from the first byte."""


origin = _http.origin


def _headers_of(obj):
    headers = getattr(obj, "headers", None)
    try:
        return dict((str(k).lower(), str(v)) for k, v in headers.items()) if headers is not None else {}
    except AttributeError:
        return {}


_close = _http.close_quietly


def _server_text(body, redact):
    if not body:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("error", "message", "detail"):
            if isinstance(data.get(key), str) and data[key].strip():
                return redact(data[key].strip())[:200]
        return ""
    text = " ".join(text.split())
    return "" if text.startswith("<") else redact(text)[:200]


class Fetcher(object):
    """GETs of files, streamed, under ``_http.follow``'s policy. ``token`` goes (as ``Authorization:
    Bearer``) only to the origin (scheme, host, port) of the URL each fetch starts from, and over
    plain http only to the loopback unless ``allow_plain_http_token``."""

    def __init__(self, token=None, timeout=30, retries=3, backoff=1.0, validate_certs=True,
                 chunk_size=CHUNK_SIZE, user_agent=USER_AGENT, allow_plain_http_token=False):
        self.token = token or None
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.validate_certs = validate_certs
        self.chunk_size = chunk_size
        self.user_agent = user_agent
        self.allow_plain_http_token = allow_plain_http_token
        self._context = None
        self._context_guard = threading.Lock()

    def _opener(self):
        """``open_url`` as ``_http.follow`` calls it, with one TLS context for every hop of every
        download of this fetcher (``open_url`` builds one per call, reading the system's CA
        certificates each time: about 50 ms of CPU, under the GIL, per hop)."""
        with self._context_guard:
            if self._context is None:
                self._context = make_context(validate_certs=self.validate_certs)
            context = self._context

        def opener(url, method=None, data=None, **kwargs):
            return Request().open(method or ("POST" if data else "GET"), url, data=data, context=context, **kwargs)
        return opener

    def redact(self, text):
        text = "" if text is None else str(text)
        return text.replace(self.token, _MASK) if self.token else text

    def _open(self, url, offset):
        """The answer to GET ``url`` from byte ``offset``, redirects followed under the policy of
        ``_http.follow``: (answer, final url, cache status seen on the way)."""
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        credentials = {"Authorization": "Bearer %s" % self.token} if self.token else None
        asked = []
        try:
            resp = _http.follow(url, headers=headers, credentials=credentials, timeout=self.timeout,
                                validate_certs=self.validate_certs, http_agent=self.user_agent,
                                decompress=False, allow_plain_http_credentials=self.allow_plain_http_token,
                                allow_option="allow_plain_http_token", trace=asked, opener=self._opener())
        except (_http.SchemeError, _http.RedirectError, _http.PlainHttpCredentialError) as exc:
            raise Refused(self.redact(exc.msg), url)
        except (SSLValidationError, ssl.SSLCertVerificationError) as exc:
            raise BadCertificate(
                "the TLS certificate of %s was not accepted (%s); give this host the CA that "
                "signed it, or set validate_certs to false for a server you trust"
                % (_host(_last(asked, url)), self.redact(exc)), url)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise BadCertificate(
                    "the TLS certificate of %s was not accepted (%s); give this host the CA "
                    "that signed it, or set validate_certs to false for a server you trust"
                    % (_host(_last(asked, url)), self.redact(reason)), url)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise _Retryable("no answer from %s within %s s" % (_host(_last(asked, url)), self.timeout))
            raise _Retryable("connection to %s failed: %s" % (_host(_last(asked, url)), self.redact(reason)))
        except (socket.timeout, TimeoutError):
            raise _Retryable("no answer from %s within %s s" % (_host(_last(asked, url)), self.timeout))
        except (UrlsConnectionError, http.client.HTTPException, ConnectionError, OSError) as exc:
            raise _Retryable("connection to %s failed: %s" % (
                _host(_last(asked, url)), self.redact(exc or exc.__class__.__name__)))
        cache_status = None
        for _hop_url, _status, hop_headers in resp.hops:
            cache_status = hop_headers.get("x-cache-status", cache_status)
        cache_status = resp.headers.get("x-cache-status", cache_status)
        if resp.status >= 300:  # an error, or a redirect that was not followed (no Location)
            try:
                body = resp.read()
            except Exception:  # pylint: disable=broad-except
                body = b""
            _close(resp)
            self._raise_status(url, resp.url, resp.status, resp.reason, body)
        return resp, resp.url, cache_status

    def _raise_status(self, url, current, status, reason, body):
        where = url if current == url else "%s (redirected to %s)" % (url, current)
        message = _server_text(body, self.redact)
        said = "%d %s%s" % (status, self.redact(reason or ""), ": " + message if message else "")
        if status == 416:
            raise _RangeIgnored()
        if status == 429 or status >= 500:
            raise _Retryable("%s answered %s" % (_host(current), said), status)
        if status in (401, 403):
            raise AccessDenied(
                "%s answered %s: the repo is gated or private, and %s; accept its terms on the hub "
                "and give a token (option token) of an account that has access"
                % (where, said, "the token given has no access to it" if self.token else "no token was given"),
                url, status)
        if status in (404, 410):
            raise NotFound("%s answered %s: no such repo, commit or file there" % (where, said), url, status)
        raise Refused("%s answered %s" % (where, said), url, status)

    def fetch(self, url, sink, offset=0, limit=None, progress=None, cancel=None):
        """Stream ``url`` into ``sink`` (``write(bytes)``, ``restart()``), which holds ``offset``
        bytes of the file already. ``limit``: the file's size; more is refused (Oversize).
        ``progress(bytes_in_sink, total_or_None)`` is called after each chunk. ``cancel``: an
        event that, once set (another download of the run failed), stops this one at its next
        chunk or back-off (Cancelled)."""
        pos = offset
        received = 0
        failures = 0
        whole = False  # ask for the whole file (the server does not do ranges right)
        buffer = bytearray(self.chunk_size)
        view = memoryview(buffer)
        while True:
            at_start = pos
            resp = None
            try:
                _check_cancel(cancel, url)
                if limit is not None and pos == limit and pos and not whole:
                    # what is there is already as long as the file: nothing to ask for
                    return FetchResult(url, 206, {}, received, pos, None)
                resp, final, cache_status = self._open(url, 0 if whole else pos)
                if not hasattr(resp, "readinto"):
                    view = None
                if cancel is not None and hasattr(cancel, "watch"):
                    cancel.watch(resp)  # cut at once when another download fails
                status = resp.getcode() if hasattr(resp, "getcode") else getattr(resp, "status", 200)
                hdrs = _headers_of(resp)
                total = None
                if status == 206:
                    match = _CONTENT_RANGE.match(hdrs.get("content-range", "").strip())
                    if not match or int(match.group(1)) != pos:
                        raise _RangeIgnored()
                    if match.group(3) != "*":
                        total = int(match.group(3))
                else:
                    if pos:
                        sink.restart()  # 200: the whole file, from its first byte
                        pos = 0
                    length = hdrs.get("content-length")
                    total = int(length) if length and length.strip().isdigit() else None
                while True:
                    try:
                        # into one buffer per fetch (the sinks hash and write it before the next read)
                        count = resp.readinto(view) if view is not None else None
                        data = view[:count] if count is not None else resp.read(self.chunk_size)
                    except (socket.timeout, TimeoutError):
                        raise _Retryable("%s sent nothing for %s s" % (_host(final), self.timeout))
                    except (http.client.HTTPException, ConnectionError, OSError) as exc:
                        raise _Retryable("the answer of %s was cut off: %s" % (
                            _host(final), self.redact(exc or exc.__class__.__name__)))
                    if not data:
                        break
                    _check_cancel(cancel, url)
                    if limit is not None and pos + len(data) > limit:
                        raise Oversize("%s sent more than the file's %d bytes" % (url, limit), url, status)
                    sink.write(data)
                    pos += len(data)
                    received += len(data)
                    if progress is not None:
                        progress(pos, total)
                if total is not None and pos < total:
                    raise _Retryable("the answer of %s was cut off at %d of %d bytes" % (_host(final), pos, total))
                return FetchResult(final, status, hdrs, received, pos,
                                   cache_status.upper() if cache_status else None)
            except _RangeIgnored:
                if whole:
                    raise Refused("%s does not serve the file from its first byte either" % url, url)
                sink.restart()
                pos = 0
                whole = True
                continue
            except _Retryable as exc:
                _check_cancel(cancel, url)  # cut because another download failed: not a retry
                if pos > at_start:
                    failures = 0  # it moved on: a connection that drops now and then still gets there
                failures += 1
                if failures > self.retries:
                    raise Unreachable(
                        "could not get %s after %d attempt%s: %s; check the network or proxy between "
                        "this host and the server, or raise retries/timeout"
                        % (url, failures, "" if failures == 1 else "s", exc.reason), url, exc.status, pos)
                _sleep(self.backoff * (2 ** (failures - 1)))
                _check_cancel(cancel, url)
            finally:
                if resp is not None:
                    if cancel is not None and hasattr(cancel, "unwatch"):
                        cancel.unwatch(resp)
                    _close(resp)


class Cancel(object):
    """Set by the first download of a run that fails: each answer another download is reading
    (``watch``) has its socket shut at once, so that a read blocked on it returns now rather than
    at the next chunk; every ``Fetcher.fetch`` given it then raises ``Cancelled``. A download still
    waiting for a server's first answer stops when that comes, or at ``timeout``."""

    def __init__(self):
        self._event = threading.Event()
        self._guard = threading.Lock()
        self._open = set()

    def is_set(self):
        return self._event.is_set()

    def wait(self, timeout=None):
        return self._event.wait(timeout)

    def set(self):
        with self._guard:
            self._event.set()
            answers = list(self._open)
        for resp in answers:
            _cut(resp)

    def watch(self, resp):
        with self._guard:
            self._open.add(resp)
            cut = self._event.is_set()
        if cut:
            _cut(resp)

    def unwatch(self, resp):
        with self._guard:
            self._open.discard(resp)


def _cut(resp):
    """Shut the socket under ``resp`` (an ``_http.Answer`` over urllib's response), both ways."""
    obj = resp
    for _depth in range(8):
        if isinstance(obj, socket.socket):
            try:
                socket.socket.shutdown(obj, socket.SHUT_RDWR)
            except OSError:
                pass
            return
        obj = next((getattr(obj, name) for name in ("_raw", "fp", "raw", "_sock")
                    if getattr(obj, name, None) is not None), None)
        if obj is None:
            return


def _check_cancel(cancel, url):
    if cancel is not None and cancel.is_set():
        raise Cancelled("the download of %s stopped: another download of this run failed" % url, url=url)


def run_parallel(items, work, workers, cancel=None):
    """``work(item, cancel)`` for each of ``items`` on at most ``workers`` threads at once; the results
    in the order of ``items``. The first failure sets ``cancel`` (a ``Fetcher.fetch`` given it stops
    at its next chunk), no other item starts, and once every thread has ended that failure is
    raised (not a ``Cancelled`` of the others)."""
    items = list(items)
    cancel = cancel if cancel is not None else Cancel()
    results = [None] * len(items)
    errors = []
    guard = threading.Lock()
    queue = iter(range(len(items)))

    def worker():
        while not cancel.is_set():
            with guard:
                index = next(queue, None)
            if index is None:
                return
            try:
                results[index] = work(items[index], cancel)
            except BaseException as exc:  # pylint: disable=broad-except
                with guard:
                    errors.append(exc)
                cancel.set()
                return

    count = max(1, min(int(workers), len(items)))
    if count == 1:
        worker()
    else:
        threads = [threading.Thread(target=worker, name="llmfleet-download-%d" % n, daemon=True)
                   for n in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        first = [exc for exc in errors if not isinstance(exc, Cancelled)] or errors
        raise first[0]
    return results


def _last(asked, url):
    """The last URL a fetch asked (a redirect's target), else the one it started from."""
    return asked[-1] if asked else url


def _host(url):
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1] or url


# -- progress ----------------------------------------------------------------------------------

class ProgressFile(object):
    """A JSON file that says how the downloads go, rewritten about once a second::

        {"file", "bytes_done", "bytes_total", "rate_bps", "started", "files_done", "files_total", "files"}

    ``bytes_done`` sums what every worker received; ``files`` are those in flight, ``file`` the last
    one that moved. Workers call ``file_bytes``/``file_finished`` from their threads."""

    def __init__(self, path, bytes_total, files_total, interval=1.0):
        self.path = path
        self.interval = interval
        self.began = _clock()
        self.last = None
        self.data = {"file": None, "bytes_done": 0, "bytes_total": bytes_total, "rate_bps": 0,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "files_done": 0, "files_total": files_total, "files": []}
        self._guard = threading.Lock()
        self._done = {}  # file -> bytes of it received by this run (every worker's, summed)
        self._active = []

    def file_started(self, name):
        with self._guard:
            self._done.setdefault(name, 0)
            if name not in self._active:
                self._active.append(name)
            self._write(True, file=name, files=list(self._active))

    def file_bytes(self, name, count):
        """A worker's file ``name`` has ``count`` bytes of this run: the line sums every worker's."""
        with self._guard:
            self._done[name] = count
            if name not in self._active:
                self._active.append(name)
            self._write(False, file=name, bytes_done=sum(self._done.values()), files=list(self._active))

    def file_finished(self, name):
        with self._guard:
            if name in self._active:
                self._active.remove(name)
            self._write(True, files_done=self.data["files_done"] + 1, files=list(self._active))

    def update(self, force=False, **values):
        with self._guard:
            self._write(force, **values)

    def _write(self, force, **values):
        self.data.update(values)
        now = _clock()
        if not force and self.last is not None and now - self.last < self.interval:
            return
        self.last = now
        elapsed = now - self.began
        self.data["rate_bps"] = int(self.data["bytes_done"] / elapsed) if elapsed > 0 else 0
        tmp = "%s.tmp.%d" % (self.path, os.getpid())
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(self.data, handle, sort_keys=True)
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, self.path)
        except OSError:
            pass  # progress is for whoever looks; it never fails the run

    def remove(self):
        for path in (self.path, "%s.tmp.%d" % (self.path, os.getpid())):
            try:
                os.unlink(path)
            except OSError:
                pass


# -- the cache ---------------------------------------------------------------------------------

def _lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def free_bytes(path):
    """Free bytes (for an unprivileged user) on the filesystem of ``path`` or its nearest existing
    parent, and that directory."""
    place = os.path.abspath(path)
    while not os.path.exists(place):
        place = os.path.dirname(place)
    st = os.statvfs(place)
    return st.f_bavail * st.f_frsize, place


class Snapshot(object):
    """One lock in one hub cache directory."""

    def __init__(self, lock, cache_dir):
        self.lock = lock
        self.cache_dir = cache_dir
        self.repo = lock["repo"]
        self.commit = lock["commit"]
        self.revision = lock["revision"]
        self.repo_dir = os.path.join(cache_dir, repo_folder(self.repo))
        self.blobs_dir = os.path.join(self.repo_dir, "blobs")
        self.snapshots_dir = os.path.join(self.repo_dir, "snapshots")
        self.snapshot_dir = os.path.join(self.snapshots_dir, self.commit)
        self.refs_dir = os.path.join(self.repo_dir, "refs")
        self.ref_path = os.path.join(self.refs_dir, self.revision) if self.revision != self.commit else None
        self.lock_path = os.path.join(self.repo_dir, LOCK_NAME)
        self.files = lock["files"]

    # -- reading ---------------------------------------------------------------------------
    def blob_path(self, name):
        return os.path.join(self.blobs_dir, name)

    def link_path(self, path):
        return os.path.join(self.snapshot_dir, *path.split("/"))

    def _dir_in_the_way(self, path):
        """A component of ``path`` below the repo dir that exists and is not a real directory."""
        rel = os.path.relpath(path, self.repo_dir)
        current = self.repo_dir
        st = _lstat(current)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            return current
        if rel == ".":
            return None
        for part in rel.split(os.sep):
            current = os.path.join(current, part)
            st = _lstat(current)
            if st is None:
                return None
            if not stat.S_ISDIR(st.st_mode):
                return current
        return None

    def survey(self, verify="size"):
        """What is there, read only: a dict with ``files`` (per file of the lock: ``path``,
        ``size``, ``blob``, ``blob_state`` ok|missing|wrong_size|wrong_hash, ``problem``,
        ``partial`` (bytes in its .incomplete), ``link_state`` ok|missing|wrong), ``ref_state``
        (ok|missing|wrong|none), ``in_the_way`` (paths this run would have to write over) and
        ``snapshots`` (the commits of the snapshots there)."""
        blobs = {}
        in_the_way = []
        for place in (self.blobs_dir, self.snapshot_dir, self.refs_dir):
            bad = self._dir_in_the_way(place)
            if bad and bad not in in_the_way:
                in_the_way.append(bad)
        out = []
        for entry in self.files:
            name = blob_name(entry)
            if name not in blobs:
                blobs[name] = self._blob_state(entry, verify, in_the_way)
            state, problem, partial = blobs[name]
            link = self.link_path(entry["path"])
            link_state = "missing"
            bad = self._dir_in_the_way(os.path.dirname(link))
            if bad:
                if bad not in in_the_way:
                    in_the_way.append(bad)
            else:
                st = _lstat(link)
                if st is not None:
                    if stat.S_ISDIR(st.st_mode):
                        in_the_way.append(link)
                        link_state = "wrong"
                    elif stat.S_ISLNK(st.st_mode) and os.readlink(link) == link_target(entry["path"], name):
                        link_state = "ok"
                    else:
                        link_state = "wrong"
            out.append({"path": entry["path"], "size": entry["size"], "blob": name, "blob_state": state,
                        "problem": problem, "partial": partial, "link_state": link_state})
        ref_state = "none"
        if self.ref_path is not None:
            st = _lstat(self.ref_path)
            if st is None:
                ref_state = "missing"
            elif stat.S_ISDIR(st.st_mode):
                ref_state = "wrong"
                in_the_way.append(self.ref_path)
            else:
                try:
                    with open(self.ref_path, encoding="utf-8") as handle:
                        ref_state = "ok" if handle.read() == self.commit else "wrong"
                except (OSError, ValueError):
                    ref_state = "wrong"
        snapshots = []
        if os.path.isdir(self.snapshots_dir):
            snapshots = sorted(name for name in os.listdir(self.snapshots_dir)
                               if os.path.isdir(os.path.join(self.snapshots_dir, name)))
        return {"files": out, "ref_state": ref_state, "in_the_way": in_the_way, "snapshots": snapshots}

    def _blob_state(self, entry, verify, in_the_way):
        name = blob_name(entry)
        path = self.blob_path(name)
        partial = 0
        st_partial = _lstat(path + ".incomplete")
        if st_partial is not None:
            if stat.S_ISREG(st_partial.st_mode):
                partial = min(st_partial.st_size, entry["size"]) if st_partial.st_size <= entry["size"] else 0
            else:
                in_the_way.append(path + ".incomplete")
        try:
            st = os.stat(path)  # a blob may be a link into huggingface_hub's shared store
        except (FileNotFoundError, NotADirectoryError):
            if os.path.islink(path):
                return "wrong_size", "a link to nothing", partial
            return "missing", None, partial
        if not stat.S_ISREG(st.st_mode):
            in_the_way.append(path)
            return "wrong_size", "not a regular file", partial
        if st.st_size != entry["size"]:
            return "wrong_size", "%d bytes, not the lock's %d" % (st.st_size, entry["size"]), partial
        if verify == "full":
            problem = file_problem(path, entry)
            if problem:
                return "wrong_hash", problem, partial
        return "ok", None, partial

    @staticmethod
    def work(survey):
        """What a survey leaves to do: blobs to download (one entry per blob: the first file that
        uses it), links to make, and whether the ref needs writing."""
        seen = set()
        fetch = []
        for item in survey["files"]:
            if item["blob_state"] != "ok" and item["blob"] not in seen:
                seen.add(item["blob"])
                fetch.append(item)
        links = [item for item in survey["files"] if item["link_state"] != "ok"]
        return {"fetch": fetch, "links": links, "ref": survey["ref_state"] in ("missing", "wrong")}

    def space_needed(self, fetch):
        """Bytes still to download for ``fetch`` (what the .incomplete files hold already counted)."""
        return sum(item["size"] - item["partial"] for item in fetch)

    def check_space(self, fetch, margin_mib):
        need = self.space_needed(fetch)
        if not fetch:
            return
        free, place = free_bytes(self.blobs_dir)
        margin = margin_mib * MIB
        if need + margin > free:
            raise NotEnoughSpace(
                "not enough free space for %s@%s in %s: %d files to download need %s (%d bytes) plus "
                "the margin of %d MiB (free_space_margin_mib), and the filesystem of %s has %s (%d bytes) "
                "free. Free some space, or choose another cache_dir."
                % (self.repo, self.commit, self.cache_dir, len(fetch), _mib(need), need, margin_mib, place,
                   _mib(free), free),
                needed_bytes=need, free_bytes=free, margin_mib=margin_mib)

    # -- writing ---------------------------------------------------------------------------
    def _mkdirs(self, path):
        """Make ``path`` and its missing parents up to the cache dir, 0755; refuse a non-directory
        (a link included) on the way below the repo dir."""
        bad = self._dir_in_the_way(path) if path.startswith(self.repo_dir) else None
        if bad:
            raise InTheWay("%s is in the way: the hub cache needs a directory there, and it is not "
                           "one (a link or a file); it is never removed. Move it away." % bad, path=bad)
        missing = []
        current = path
        while not os.path.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for place in reversed(missing):
            try:
                os.mkdir(place, DIR_MODE)
            except FileExistsError:
                if not os.path.isdir(place):
                    raise InTheWay("%s is in the way: it should be a directory" % place, path=place)
                continue
            os.chmod(place, DIR_MODE)  # whatever the umask: the service user reads the weights

    def prepare_repo(self):
        """The repo's directory (where the lock file goes)."""
        self._mkdirs(self.repo_dir)

    def prepare(self):
        self._mkdirs(self.blobs_dir)
        self._mkdirs(self.snapshots_dir)

    def download(self, item, entry, fetcher, url, progress=None, cancel=None):
        """Download the blob of ``item`` to ``<blob>.incomplete``, resuming, check it, rename it into
        place. Returns the bytes received. A file that is not the lock's is removed and refused."""
        blob = self.blob_path(item["blob"])
        partial = blob + ".incomplete"
        sink = FileSink(partial, entry)
        try:
            have = sink.size
            received = 0
            try:
                result = fetcher.fetch(url, sink, offset=have, limit=entry["size"], progress=progress,
                                       cancel=cancel)
                received += result.received
                if have and sink.digest.problem():
                    # the bytes kept from an earlier run may be what is wrong: once more, from the start
                    sink.restart()
                    result = fetcher.fetch(url, sink, offset=0, limit=entry["size"], progress=progress,
                                           cancel=cancel)
                    received += result.received
            except Oversize:
                sink.close()
                _unlink(partial)
                raise IntegrityError(
                    "%s of %s@%s: %s sent more than the lock's %d bytes; removed what arrived. The "
                    "server holds another file than the lock's: check the endpoint (a mirror with "
                    "bad bytes?) and the lock." % (entry["path"], self.repo, self.commit, url, entry["size"]),
                    file=entry["path"], expected_size=entry["size"])
            sink.close()
            problem = sink.digest.problem()
            if problem:
                got_size = sink.digest.size
                got = sink.digest.hexdigest()
                _unlink(partial)
                raise IntegrityError(
                    "%s of %s@%s from %s is not the lock's file: got %d bytes with %s %s, expected %d "
                    "bytes with %s %s. Removed it, nothing was linked under snapshots/. The server (or a "
                    "mirror on the way) serves other bytes than the lock pins: check the endpoint and "
                    "the lock." % (entry["path"], self.repo, self.commit, url, got_size, sink.digest.kind,
                                   got, entry["size"], sink.digest.kind, sink.digest.expected),
                    file=entry["path"], expected_size=entry["size"], got_size=got_size,
                    expected_hash=sink.digest.expected, got_hash=got)
            os.chmod(partial, FILE_MODE)
            os.replace(partial, blob)
            return received
        finally:
            if sink.handle is not None:
                sink.handle.close()

    def _link(self, item):
        link = self.link_path(item["path"])
        self._mkdirs(os.path.dirname(link))
        target = link_target(item["path"], item["blob"])
        st = _lstat(link)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise InTheWay("%s is a directory where the snapshot's file %s must be linked; it is never "
                           "removed. Move it away." % (link, item["path"]), path=link)
        tmp = "%s.llmfleet-tmp.%d" % (link, os.getpid())
        _unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)

    def link_all(self, items):
        for item in items:
            self._link(item)

    def write_ref(self):
        self._mkdirs(os.path.dirname(self.ref_path))
        tmp = "%s.llmfleet-tmp.%d" % (self.ref_path, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(self.commit)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, self.ref_path)

    # -- pruning ---------------------------------------------------------------------------
    def prune_plan(self, keep, in_use=()):
        """What pruning removes, read only: ``snapshots`` (commits, beyond the ``keep`` newest by
        mtime, the lock's commit counting as one; ``in_use`` are kept on top), ``blobs`` (names no
        kept snapshot links to and the lock does not use), ``partials`` (.incomplete files of such
        blobs: a download this lock no longer needs, left by a run that failed), ``refs`` (names
        pointing at a commit that is not kept) and ``unknown`` (entries left alone)."""
        keep_set = set([self.commit]) | set(in_use or ())
        return repo_prune_plan(self.repo_dir, keep_set, max(0, keep - 1),
                               set(blob_name(entry) for entry in self.files))

    def prune(self, plan):
        """Remove what ``plan`` names (``repo_prune``)."""
        repo_prune(self.repo_dir, plan)


def repo_prune_plan(repo_dir, keep_set, room, used):
    """The prune plan of the repo directory ``repo_dir`` (see ``Snapshot.prune_plan``): the snapshots
    in ``keep_set`` stay, and the ``room`` newest others; blobs in ``used`` (the lock's) stay, and
    those linked by a kept snapshot; everything else of the cache's layout goes, .incomplete files
    included, whether or not a snapshot goes (a failed download of another revision does not stay)."""
    plan = {"snapshots": [], "blobs": [], "partials": [], "refs": [], "unknown": [], "kept": []}
    if os.path.islink(repo_dir) or not os.path.isdir(repo_dir):
        return plan
    snapshots_dir = os.path.join(repo_dir, "snapshots")
    blobs_dir = os.path.join(repo_dir, "blobs")
    refs_dir = os.path.join(repo_dir, "refs")
    others = []
    kept = []
    if os.path.isdir(snapshots_dir) and not os.path.islink(snapshots_dir):
        for name in sorted(os.listdir(snapshots_dir)):
            path = os.path.join(snapshots_dir, name)
            st = _lstat(path)
            if st is None:
                continue
            if not stat.S_ISDIR(st.st_mode):
                plan["unknown"].append(path)
                continue
            if name in keep_set:
                kept.append(name)
            else:
                others.append((st.st_mtime, name))
    others.sort(reverse=True)
    kept.extend(name for _mtime, name in others[:room])
    plan["snapshots"] = sorted(name for _mtime, name in others[room:])
    plan["kept"] = sorted(kept)
    used = set(used)
    for name in kept:
        used |= _linked_blobs(blobs_dir, os.path.join(snapshots_dir, name))
    if os.path.isdir(blobs_dir) and not os.path.islink(blobs_dir):
        for name in sorted(os.listdir(blobs_dir)):
            path = os.path.join(blobs_dir, name)
            st = _lstat(path)
            base = name[:-len(".incomplete")] if name.endswith(".incomplete") else name
            if st is None:
                continue
            if not (_HEX40.match(base) or _HEX64.match(base)) or not (
                    stat.S_ISREG(st.st_mode) or (stat.S_ISLNK(st.st_mode) and base == name)):
                plan["unknown"].append(path)
                continue
            if base in used:
                continue
            plan["partials" if base != name else "blobs"].append(name)
    kept_set = set(kept) | set(keep_set)
    if os.path.isdir(refs_dir) and not os.path.islink(refs_dir):
        for top, dirs, files in os.walk(refs_dir):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(top, name)
                if os.path.islink(path):
                    plan["unknown"].append(path)
                    continue
                try:
                    with open(path, encoding="utf-8") as handle:
                        target = handle.read(100)
                except (OSError, ValueError):
                    continue
                if target not in kept_set:
                    plan["refs"].append(os.path.relpath(path, refs_dir).replace(os.sep, "/"))
    return plan


def _linked_blobs(blobs_dir, snapshot):
    names = set()
    for top, _dirs, files in os.walk(snapshot):
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                continue
            target = os.path.normpath(os.path.join(top, os.readlink(path)))
            if os.path.dirname(target) == os.path.normpath(blobs_dir):
                names.add(os.path.basename(target))
    return names


def repo_prune(repo_dir, plan):
    """Remove what ``plan`` names; entries of a snapshot that are not links, files or directories
    are left (and reported in the plan's ``unknown``)."""
    snapshots_dir = os.path.join(repo_dir, "snapshots")
    blobs_dir = os.path.join(repo_dir, "blobs")
    refs_dir = os.path.join(repo_dir, "refs")
    for commit in plan["snapshots"]:
        top_dir = os.path.join(snapshots_dir, commit)
        for top, dirs, files in os.walk(top_dir, topdown=False):
            for name in files + dirs:
                path = os.path.join(top, name)
                st = _lstat(path)
                if st is None:
                    continue
                if stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode):
                    os.unlink(path)
                elif stat.S_ISDIR(st.st_mode):
                    _rmdir_quiet(path)
                else:
                    plan["unknown"].append(path)
        _rmdir_quiet(top_dir)
    for ref in plan["refs"]:
        path = os.path.join(refs_dir, *ref.split("/"))
        _unlink(path)
        parent = os.path.dirname(path)
        while parent != refs_dir and parent.startswith(refs_dir):
            if not _rmdir_quiet(parent):
                break
            parent = os.path.dirname(parent)
    for name in plan["blobs"] + plan["partials"]:
        _unlink(os.path.join(blobs_dir, name))


def unlisted_repos(cache_dir, listed):
    """The repo directories (``models--<org>--<name>``, real directories) of ``cache_dir`` whose repo
    is not in ``listed``, sorted. Other entries (datasets, spaces, a link, huggingface_hub's
    ``.locks``) are not the models' and are never returned."""
    if os.path.islink(cache_dir) or not os.path.isdir(cache_dir):
        return []
    wanted = set(repo_folder(repo) for repo in listed)
    out = []
    for name in sorted(os.listdir(cache_dir)):
        if not name.startswith("models--") or name in wanted:
            continue
        st = _lstat(os.path.join(cache_dir, name))
        if st is not None and stat.S_ISDIR(st.st_mode):
            out.append(name)
    return out


def remove_empty_repo(repo_dir):
    """Remove the repo directory's empty ``snapshots``, ``blobs`` and ``refs`` trees, its lock file
    and itself, when nothing else is in it; True when it is gone."""
    for sub in ("refs", "snapshots", "blobs"):
        top_dir = os.path.join(repo_dir, sub)
        if os.path.islink(top_dir) or not os.path.isdir(top_dir):
            continue
        for top, dirs, _files in os.walk(top_dir, topdown=False):
            for name in dirs:
                _rmdir_quiet(os.path.join(top, name))
        _rmdir_quiet(top_dir)
    lock_path = os.path.join(repo_dir, LOCK_NAME)
    rest = [name for name in os.listdir(repo_dir) if name != LOCK_NAME]
    if rest:
        return False
    _unlink(lock_path)
    return _rmdir_quiet(repo_dir)


def _rmdir_quiet(path):
    try:
        os.rmdir(path)
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            return False
        raise


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _mib(count):
    return "%.1f MiB" % (count / float(MIB))
