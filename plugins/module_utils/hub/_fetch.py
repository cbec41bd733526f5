# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The streaming download of the hub's files: ``Fetcher.fetch`` streams one URL into a sink (a file of
the cache, ``_snapshot.FileSink``, or a hash that keeps nothing, ``HashSink``, for warming a mirror),
1 MiB at a time, from a byte offset (``Range``) to resume.

Each attempt is one ``_http.HttpClient.open``: the collection's one redirect policy (http and https
only, at most ``_http.MAX_REDIRECTS`` redirects, the token only to the endpoint's own origin, which the
hub's CDN never is, never after a downgrade to plain http, over plain http only to the loopback unless
allowed), its user agent, its redaction, its certificate and connection messages and its errors; the
answer's status is judged by ``HttpClient.raise_for_status``, with what it means on the hub. Connection
errors, time-outs, cut-off bodies, 429 and 5xx are tried again with the client's back-off, resuming from
what arrived (an attempt that got further starts the count again); 401, 403, 404 and the redirects the
policy refuses are not. No message ever holds a request header.

``run_parallel`` runs the downloads of a lock on a bounded number of threads; the first failure sets a
``Cancel``, which shuts the sockets of the answers the others are reading, so that they stop at once and
the failure is raised once every thread has ended.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import MAX_REDIRECTS, origin  # pylint: disable=unused-import
from ansible_collections.llmfleet.engines.plugins.module_utils.hub._cache import CHUNK_SIZE, CacheError, Digest

#: Files downloaded at once by default (model_snapshot, hf_warm), and the most allowed.
DEFAULT_PARALLEL = 8
MAX_PARALLEL = 32

_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")

# The hub's downloads follow the collection's one policy: ``origin`` and ``MAX_REDIRECTS`` above are
# ``_http``'s own (the client below is given them), not copies.


# -- errors: the _http family, with what an answer means on the hub -------------------------------

class AccessDenied(_http.HttpStatusError):
    """401 or 403: the repo is gated or private, and the token is missing or has no access."""


class Refused(_http.HttpError):
    """An answer or a redirect that trying again will not change: a 4xx other than 401, 403, 404 and
    410, a redirect the policy refuses (to another scheme than http/https, a downgrade with the token,
    too many), a server that serves neither the range asked nor the file from its first byte.
    ``status``: the answer's (None for a redirect refused)."""

    def __init__(self, url, msg, status=None):
        super().__init__(url, msg)
        self.status = status


class Oversize(_http.HttpError):
    """The server sent more bytes than the file has."""


class Cancelled(CacheError):
    """Another download of the same run failed: this one stopped at its next chunk."""


class _RangeIgnored(Exception):
    """416, or a 206 for another range: start again from the first byte."""


# -- sinks and results ---------------------------------------------------------------------------

class HashSink(object):
    """Keeps nothing, hashes everything (for warming a mirror)."""

    def __init__(self, entry):
        self.digest = Digest(entry)

    def write(self, data):
        self.digest.update(data)

    def restart(self):
        self.digest.reset()


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


# -- fetch -------------------------------------------------------------------------------------

class Fetcher(object):
    """GETs of files, streamed, through one ``_http.HttpClient`` (its retries, back-off, time-out,
    certificate check, user agent, redaction and redirect policy). ``token`` goes (as ``Authorization:
    Bearer``) only to the origin (scheme, host, port) of the URL each fetch starts from, and over
    plain http only to the loopback unless ``allow_plain_http_token``."""

    def __init__(self, token=None, timeout=30, retries=3, backoff=1.0, validate_certs=True,
                 chunk_size=CHUNK_SIZE, user_agent=_http.USER_AGENT, allow_plain_http_token=False):
        self.token = token or None
        self.chunk_size = chunk_size
        self.client = _http.HttpClient(
            timeout=timeout, retries=retries, backoff=backoff, validate_certs=validate_certs,
            secrets=[self.token] if self.token else None, user_agent=user_agent,
            allow_plain_http_credentials=allow_plain_http_token, allow_option="allow_plain_http_token",
            max_redirects=MAX_REDIRECTS)

    def _open(self, url, offset):
        """The answer to GET ``url`` from byte ``offset`` (one attempt of the client): (answer, final
        url, the last ``X-Cache-Status`` any hop answered)."""
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        credentials = {"Authorization": "Bearer %s" % self.token} if self.token else None
        try:
            resp = self.client.open(url, headers, credentials=credentials, decompress=False)
        except (_http.SchemeError, _http.RedirectError, _http.PlainHttpCredentialError) as exc:
            raise Refused(url, exc.msg)
        cache_status = None
        for _hop_url, _status, hop_headers in resp.hops:
            cache_status = hop_headers.get("x-cache-status", cache_status)
        cache_status = resp.headers.get("x-cache-status", cache_status)
        if resp.status >= 300:  # an error, or a redirect that was not followed (no Location)
            if resp.status == 416:
                _http.close_quietly(resp)
                raise _RangeIgnored()
            self._raise_status(url, resp)
        return resp, resp.url, cache_status

    def _raise_status(self, url, resp):
        """The client's judgement of an error answer, with what it means on the hub."""
        where = url if resp.url == _http.without_userinfo(url) else "%s (redirected to %s)" % (url, _http.shown_url(resp.url))
        try:
            self.client.raise_for_status(url, resp, where)
        except _http.NotFoundError as exc:
            exc.msg = "%s: no such repo, commit or file there" % exc.msg
            exc.args = (exc.msg,)
            raise
        except _http.RateLimitError:
            raise
        except _http.HttpStatusError as exc:
            if exc.status in (401, 403):
                raise AccessDenied(
                    url, "%s: the repo is gated or private, and %s; accept its terms on the hub and give a token "
                    "(option token) of an account that has access"
                    % (exc.msg, "the token given has no access to it" if self.token else "no token was given"),
                    exc.status, exc.reason, exc.server_message, exc.headers)
            raise Refused(url, exc.msg, exc.status)

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
                hdrs = resp.headers
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
                        raise _http.TryAgain("%s sent nothing for %s s" % (_http.origin_text(final), self.client.timeout))
                    except (http.client.HTTPException, ConnectionError, OSError) as exc:
                        raise _http.TryAgain("the answer of %s was cut off: %s" % (
                            _http.origin_text(final), self.client.redact(exc or exc.__class__.__name__)))
                    if not data:
                        break
                    _check_cancel(cancel, url)
                    if limit is not None and pos + len(data) > limit:
                        raise Oversize(url, "%s sent more than the file's %d bytes" % (url, limit))
                    sink.write(data)
                    pos += len(data)
                    received += len(data)
                    if progress is not None:
                        progress(pos, total)
                if total is not None and pos < total:
                    raise _http.TryAgain("the answer of %s was cut off at %d of %d bytes" % (
                        _http.origin_text(final), pos, total))
                return FetchResult(final, status, hdrs, received, pos,
                                   cache_status.upper() if cache_status else None)
            except _RangeIgnored:
                if whole:
                    raise Refused(url, "%s does not serve the file from its first byte either" % url)
                sink.restart()
                pos = 0
                whole = True
                continue
            except _http.TryAgain as exc:
                _check_cancel(cancel, url)  # cut because another download failed: not a retry
                if pos > at_start:
                    failures = 0  # it moved on: a connection that drops now and then still gets there
                failures += 1
                if failures > self.client.retries:
                    raise _http.UnreachableError(
                        url, "could not get %s after %d attempt%s: %s; check the network or proxy between "
                        "this host and the server, or raise retries/timeout"
                        % (url, failures, "" if failures == 1 else "s", exc.reason), failures, exc.status, exc.reason)
                self.client.pause(failures, exc.retry_after)
                _check_cancel(cancel, url)
            finally:
                if resp is not None:
                    if cancel is not None and hasattr(cancel, "unwatch"):
                        cancel.unwatch(resp)
                    _http.close_quietly(resp)


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
