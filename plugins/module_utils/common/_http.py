# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Read-only HTTP GETs for the look-up modules (PyPI, GitHub), and the JSON POST of the
readiness gate (``_ready``: a one-token completion, a read in effect), over
``ansible.module_utils.urls.open_url`` so that managed nodes need nothing but Python.

Connection errors, time-outs, truncated bodies, 429 and 5xx answers are tried again with an
exponential back-off; other 4xx answers are not. One attempt (``HttpClient.open``) and the judgement
of an error answer (``HttpClient.raise_for_status``) are also what the hub's streaming downloads
(``hub._fetch.Fetcher``) use, with their own resume-from-what-arrived retry loop. Each way a request can fail has its own
exception class. No message ever contains a request header: a token sent in ``Authorization``
cannot leak through an error, and the values given in ``secrets`` are masked in anything the
server sends back.

The collection's one redirect policy lives here (:func:`follow`, used by ``HttpClient``, by the
hub downloads of ``hub._fetch`` and by the devpi downloads and uploads of ``_devpi``): redirects are
followed by hand, one ``open_url`` per hop with ``follow_redirects="none"``, and

* only to ``http`` and ``https`` (a ``Location`` with any other scheme, ``file``, ``ftp`` and
  ``data`` included, is refused, naming its scheme and the origin that sent it), for GET and HEAD
  only (another method gets the 3xx as its answer);
* at most :data:`MAX_REDIRECTS` of them (more is an error);
* credentials (``Authorization``, ``Proxy-Authorization``, ``X-Devpi-Auth``, ``Cookie``, any header
  the caller names, and the URL's userinfo) go only to the origin (scheme, host, port) they were
  given for: a redirect to another origin drops them, and they are not sent again on later hops,
  even back to their origin. A redirect from ``https`` to ``http`` while credentials would still be
  sent is refused (not dropped and followed): a downgrade is an attack or a broken mirror, and the
  operator is told; without credentials it is followed (what it serves is checked by hash);
* credentials never go over plain ``http`` to a host that is not this host's loopback
  (``localhost``, 127.0.0.0/8, ``::1``), unless the caller allows it (the modules' option
  ``allow_plain_http_token``, devpi's ``allow_plain_http_password``); refused before anything is
  sent.

One TLS context per client (:meth:`HttpClient.context_for`): built at the client's first ``https``
request, as ``open_url`` builds it, and used for every later one; none is built for a plain ``http``
request. ``open_url`` alone builds a context for every call, reading the system's CA certificates each
time (about 20 ms of CPU): four times in each readiness gate of a loopback server, which speaks no TLS.

A client made with ``direct_loopback`` (the readiness gates': their server is the node's own engine) sends
each hop to this node's loopback over plain ``http`` straight through ``http.client``
(:func:`loopback_open`), every other hop through ``open_url``. The redirect policy is the same for both (it
lives in :func:`follow`, hop by hop); such a hop asks no proxy (a proxy cannot reach this node's loopback,
and ``open_url`` would send it there where ``no_proxy`` does not name the loopback), and the gate does not
pay for importing ``ansible.module_utils.urls`` (about 35 ms of CPU, the cryptography package among it) in
each look of a settled node.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import json
import socket
import ssl
import sys
import threading
import time
import urllib.error
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

USER_AGENT = "llmfleet.engines (ansible-module)"
MAX_RETRY_AFTER = 60.0
_MASK = "********"
#: The schemes a request or a redirect may use.
SCHEMES = ("http", "https")
#: The answers followed as redirects (GET and HEAD only).
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
#: The most redirects one request follows; one more is an error.
MAX_REDIRECTS = 10
#: Headers that carry a credential (lower case): sent only to the origin they were given for.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "x-devpi-auth", "cookie")
#: The most bytes an answer read whole may have (:class:`HttpClient`'s default cap): JSON and index pages.
#: PyPI's largest project JSON and simple pages are a few MiB; a body that goes on past this is a wrong
#: URL or a hostile server, not an answer to wait for.
MAX_JSON_BYTES = 32 * 1024 * 1024
#: The most of an error answer's body read, for its message.
MAX_ERROR_BYTES = 64 * 1024
#: One attempt (the request, its redirects and the whole answer) must end within this many times the
#: client's ``timeout``: the time-out bounds each wait on the socket, and a body sent a byte at a time
#: never waits that long.
DEADLINE_TIMEOUTS = 4
#: The most read at once from an answer's body.
READ_CHUNK = 64 * 1024

# Patched by the unit tests so that back-off costs no time.
_sleep = time.sleep


class HttpError(LlmfleetError):
    """Base class: a GET that did not give a usable answer."""

    def __init__(self, url, msg):
        super().__init__(msg)
        self.url = url


class UnreachableError(HttpError):
    """No usable answer after every attempt (connection errors, time-outs, 429, 5xx).

    ``last_status`` is the last attempt's HTTP status (None: no answer at all) and ``reason``
    what went wrong with it, in a few words."""

    def __init__(self, url, msg, attempts, last_status=None, reason=None):
        super().__init__(url, msg)
        self.attempts = attempts
        self.last_status = last_status
        self.reason = reason


class CertificateError(HttpError):
    """The server's TLS certificate was not accepted (not tried again)."""


class HttpStatusError(HttpError):
    """An answer with a 4xx status that is not worth trying again."""

    def __init__(self, url, msg, status, reason="", server_message="", headers=None):
        super().__init__(url, msg)
        self.status = status
        self.reason = reason
        self.server_message = server_message
        self.headers = headers or {}


class NotFoundError(HttpStatusError):
    """404 or 410: the server has nothing at this URL."""


class RateLimitError(HttpStatusError):
    """GitHub's API rate limit (403 or 429 with ``X-RateLimit-Remaining: 0`` or ``Retry-After``)."""

    def __init__(self, url, msg, status, reason="", server_message="", headers=None,
                 limit=None, remaining=None, reset=None, resource=None, retry_after=None):
        super().__init__(url, msg, status, reason, server_message, headers)
        self.limit = limit
        self.remaining = remaining
        self.reset = reset
        self.resource = resource
        self.retry_after = retry_after

    def reset_text(self, now=None):
        """When the limit resets, in words: an RFC 3339 time and how long from now."""
        if self.reset is None and self.retry_after is None:
            return "at an unknown time"
        now = time.time() if now is None else now
        when = self.reset if self.reset is not None else now + self.retry_after
        stamp = datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc)
        wait = max(0, int(round(when - now)))
        return "at %s (in %d min %d s)" % (stamp.strftime("%Y-%m-%dT%H:%M:%SZ"), wait // 60, wait % 60)


class InvalidJsonError(HttpError):
    """A 200 answer whose body is not the JSON that was asked for."""

    def __init__(self, url, msg, content_type=""):
        super().__init__(url, msg)
        self.content_type = content_type


class SchemeError(HttpError):
    """A URL with another scheme than http or https (``file://``, ``ftp://``): never opened."""


class RedirectError(HttpError):
    """A redirect the policy does not follow: to another scheme than http/https, from https to
    http while credentials would be sent, or one more than :data:`MAX_REDIRECTS`. Not tried again.
    ``location`` is where it pointed (without userinfo or query), ``sender`` the origin that sent it."""

    def __init__(self, url, msg, location=None, sender=None, status=None):
        super().__init__(url, msg)
        self.location = location
        self.sender = sender
        self.status = status


class PlainHttpCredentialError(HttpError):
    """A credential would go over plain http to a host that is not this host's loopback."""


class BodyTooLargeError(HttpError):
    """An answer longer than its request's cap (``max_bytes``): not tried again (the same URL would
    answer the same)."""

    def __init__(self, url, msg, max_bytes):
        super().__init__(url, msg)
        self.max_bytes = max_bytes


class DeadlineError(HttpError):
    """An answer that had not ended by its request's deadline (a body sent slowly, or for ever)."""

    def __init__(self, url, msg, seconds, received):
        super().__init__(url, msg)
        self.seconds = seconds
        self.received = received


class Response(object):
    """A complete answer: status, headers (lower-cased names), body bytes, final URL."""

    def __init__(self, url, status, headers, body):
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def content_type(self):
        return self.headers.get("content-type", "").split(";")[0].strip().lower()


class TryAgain(LlmfleetError):
    """This attempt failed in a way that deserves another try (a connection error, a time-out, a cut-off
    body, 429, 5xx). Not an error a module sees: after the last attempt it becomes an
    :class:`UnreachableError` (``HttpClient.request``, the hub's streaming ``Fetcher``)."""

    def __init__(self, reason, status=None, retry_after=None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


def _lower_headers(headers):
    if headers is None:
        return {}
    try:
        items = headers.items()
    except AttributeError:
        return {}
    return dict((str(k).lower(), str(v)) for k, v in items)


def _int_or_none(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _float_or_none(value):
    try:
        return float(str(value).strip())
    except (TypeError, ValueError):
        return None


def server_message(body):
    """The ``message`` of a JSON error body (GitHub, the fake upstream), else a short text."""
    if not body:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("message", "detail", "error", "title"):
            if isinstance(data.get(key), str) and data[key].strip():
                return data[key].strip()
        return ""
    text = " ".join(body.split())
    if text.startswith("<"):
        return ""  # an HTML page says nothing useful in one line
    return text[:200]


# -- the redirect policy ----------------------------------------------------------------------

def origin(url):
    """``(scheme, host, port)`` of ``url``, lower case, with the scheme's default port filled in."""
    try:
        parts = urlsplit(url or "")
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:  # an unbalanced [IPv6] or a port that is not a number
        return ("", "", None)
    return (scheme, host, port or {"http": 80, "https": 443}.get(scheme))


def origin_text(url):
    """An origin for a message: ``https://huggingface.co``, ``http://127.0.0.1:8080``."""
    scheme, host, port = origin(url)
    shown_host = "[%s]" % host if ":" in host else (host or "(no host)")
    if port is None or port == {"http": 80, "https": 443}.get(scheme):
        return "%s://%s" % (scheme or "(no scheme)", shown_host)
    return "%s://%s:%d" % (scheme, shown_host, port)


def is_loopback(host):
    """Whether ``host`` (a URL's host: a name, an IPv4 or an IPv6 address) names this host's
    loopback: ``localhost``, 127.0.0.0/8 or ``::1``. Any other name counts as remote, whatever
    it resolves to."""
    host = (host or "").strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _userinfo(url):
    """The userinfo of ``url`` (``user:password``), or None."""
    try:
        netloc = urlsplit(url or "").netloc
    except ValueError:
        return None
    return netloc.rsplit("@", 1)[0] if "@" in netloc else None


def without_userinfo(url):
    """``url`` without its userinfo."""
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _with_userinfo(url, userinfo):
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc="%s@%s" % (userinfo, parts.netloc.rsplit("@", 1)[-1])))


def shown_url(url, limit=200):
    """``url`` for a message: no userinfo, no query or fragment (a signed URL's signature), at most
    ``limit`` characters."""
    try:
        parts = urlsplit(url or "")
        text = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], query="", fragment=""))
    except ValueError:
        text = str(url).split("?", 1)[0]
    return text if len(text) <= limit else text[:limit] + "..."


def plain_http_credential_problem(url, what="credentials", allow_option=None):
    """None, or why ``what`` must not be sent to ``url``: a plain ``http://`` (any scheme but https)
    URL whose host is not this host's loopback (see :func:`is_loopback`). ``allow_option`` names the
    option that allows it anyway, for the message."""
    try:
        parts = urlsplit(url or "")
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:
        scheme, host = "", None
    if scheme == "https" or is_loopback(host):
        return None
    return ("refusing to send %s to %s over plain HTTP (%s): anyone on the network between could read "
            "what is sent. Use the server's https:// URL, or reach it on this host's loopback (127.0.0.1)%s"
            % (what, host or "(no host)", shown_url(url),
               "; to send it in the clear anyway, set %s=true" % allow_option if allow_option else ""))


def redirect_target(current, location, followed, credentials, max_redirects=MAX_REDIRECTS):
    """The policy for one redirect: ``current`` answered a redirect to ``location`` after
    ``followed`` redirects were followed; ``credentials`` says whether its request carried any.

    Returns ``(url, keep)``: the absolute URL of the next hop, without the userinfo a ``Location``
    may carry, and whether the credentials go along (the same origin: scheme, host and port).
    Raises :class:`RedirectError` for another scheme than http/https, for a downgrade from https to
    http while credentials would still be sent, and for one redirect more than ``max_redirects``."""
    sender = origin_text(current)
    target = urljoin(current, (location or "").strip())
    try:
        parts = urlsplit(target)
        scheme = parts.scheme.lower()
        host = parts.hostname
    except ValueError:
        raise RedirectError(current, "%s (%s) redirected to %r, which is not a URL: refused"
                            % (shown_url(current), sender, shown_url(location)), sender=sender)
    shown = shown_url(target)
    if followed >= max_redirects:
        raise RedirectError(
            current, "%s redirected more than %d times (the last one, from %s, to %s): refused; is the "
            "server redirecting in a loop?" % (shown_url(current), max_redirects, sender, shown),
            location=shown, sender=sender)
    if scheme not in SCHEMES:
        named = "%s://" % scheme if target.lower().startswith(scheme + "://") else "%s:" % scheme
        raise RedirectError(
            current, "%s (%s) redirected to a %s URL (%s): refused, only http and https redirects are "
            "followed; a server that sends a client to a %s URL is broken or hostile"
            % (shown_url(current), sender, named, shown, named), location=shown, sender=sender)
    if not host:
        raise RedirectError(current, "%s (%s) redirected to %s, a URL without a host: refused"
                            % (shown_url(current), sender, shown), location=shown, sender=sender)
    if credentials and origin(current)[0] == "https" and scheme == "http":
        raise RedirectError(
            current, "%s (%s) redirected from https to plain http (%s) while sending credentials: refused "
            "(they would go in the clear, and the answer could be anyone's); check the server or the "
            "mirror: a downgrade is a misconfiguration or an attack" % (shown_url(current), sender, shown),
            location=shown, sender=sender)
    target = without_userinfo(target)
    return target, bool(credentials) and origin(target) == origin(current)


def _where(url, asked=()):
    """``url``, and where it was redirected to when the last URL asked (``follow``'s trace) is another."""
    last = asked[-1] if asked else url
    return url if last == without_userinfo(url) else "%s (redirected to %s)" % (url, shown_url(last))


def _elsewhere(url, asked=()):
    """`` to ORIGIN`` when the last URL asked is on another origin than ``url`` (a redirect's target
    failed, a CDN's), else nothing."""
    last = asked[-1] if asked else url
    return "" if origin(last) == origin(url) else " to %s" % origin_text(last)


def split_credentials(headers, names=()):
    """``(plain, credentials)``: ``headers`` split into those that carry no credential and those
    that do (:data:`CREDENTIAL_HEADERS`, and ``names``; any case)."""
    marked = set(CREDENTIAL_HEADERS) | set(str(n).lower() for n in names or ())
    plain, secret = {}, {}
    for key, value in (headers or {}).items():
        (secret if str(key).lower() in marked else plain)[key] = value
    return plain, secret


def close_quietly(obj):
    """Close a response (or an HTTP error answer), whatever it raises."""
    close = getattr(obj, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # pylint: disable=broad-except
            pass


def size_text(count):
    """``count`` bytes in words: ``33554432 bytes (32 MiB)``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return "%d bytes (%s %s)" % (count, ("%.1f" % (count / float(size))).rstrip("0").rstrip("."), unit)
    return "%d bytes" % count


def _reader(resp):
    """A function that reads at most ``n`` bytes of ``resp``'s body, returning what one read of the socket
    gave (``read1``, where there is one) rather than waiting for all ``n``: a deadline is checked between
    reads, and a body that comes a byte at a time must not hold one read for ever."""
    read1 = getattr(resp, "read1", None)
    return read1 if callable(read1) else resp.read


def read_body(resp, url, max_bytes, deadline=None, sink=None, hint=None, allowed=None):
    """``resp``'s body, read to its end within bounds: at most ``max_bytes`` bytes (more raises
    :class:`BodyTooLargeError`, at once when the ``Content-Length`` already says so) and, when ``deadline``
    (a ``time.monotonic()`` value) is given, by then (else :class:`DeadlineError`; each read waits at most the
    connection's time-out, so the answer is given up at most that long after the deadline). ``sink``, a
    callable, gets each piece as it comes and the count is returned; without it, the bytes are. ``hint``:
    what the operator can do about a refusal, for the message; ``allowed``: the seconds the whole request
    was given, for the message (else those left when the reading began). The message names ``url`` without
    its userinfo, query or fragment."""
    shown = shown_url(url)
    headers = _lower_headers(getattr(resp, "headers", None))
    announced = _int_or_none(headers.get("content-length"))
    started = time.monotonic()

    def too_large(what):
        return BodyTooLargeError(url, "%s %s, more than the %s this request reads: refused, not read further%s"
                                 % (shown, what, size_text(max_bytes),
                                    "; " + hint if hint else "; check the URL (a proxy or a login page in "
                                    "the way?): a server that answers more is broken or hostile"), max_bytes)

    if announced is not None and announced > max_bytes and "content-encoding" not in headers:
        raise too_large("announces an answer of %s" % size_text(announced))
    read = _reader(resp)
    parts = []
    total = 0
    while True:
        if deadline is not None and time.monotonic() > deadline:
            waited = allowed if allowed is not None else deadline - started
            raise DeadlineError(url, "%s had sent %s of its answer, which had not ended %s s later: given up; is "
                                "the server (or a proxy) overloaded, or sending slowly on purpose?"
                                % (shown, size_text(total), _seconds(waited)), waited, total)
        piece = read(min(READ_CHUNK, max_bytes - total + 1))
        if not piece:
            break
        total += len(piece)
        if total > max_bytes:
            raise too_large("sent more than %s" % size_text(max_bytes))
        if sink is None:
            parts.append(piece)
        else:
            sink(piece)
    return b"".join(parts) if sink is None else total


def read_head(resp, limit=MAX_ERROR_BYTES, deadline=None):
    """At most ``limit`` bytes of ``resp``'s body (an error answer's, for its message): what came by
    ``deadline`` (``time.monotonic()``), the rest left unread. Never raises."""
    read = _reader(resp)
    parts = []
    total = 0
    try:
        while total < limit and (deadline is None or time.monotonic() <= deadline):
            piece = read(min(READ_CHUNK, limit - total))
            if not piece:
                break
            parts.append(piece)
            total += len(piece)
    except Exception:  # pylint: disable=broad-except
        pass
    return b"".join(parts)


class Answer(object):
    """The answer :func:`follow` stopped at: ``url`` (without userinfo), ``status``, ``reason``,
    ``headers`` (lower-case names), ``hops`` (``(url, status, headers)`` of each redirect followed);
    ``read([size])`` and ``close()`` for its body. Any status: 2xx, 4xx, 5xx, or a 3xx that was not
    followed (no ``Location``, or a method other than GET and HEAD)."""

    def __init__(self, url, status, reason, headers, raw, hops):
        self.url = url
        self.status = status
        self.reason = reason
        self.headers = headers
        self.hops = hops
        self._raw = raw

    def getcode(self):
        return self.status

    def geturl(self):
        return self.url

    def read(self, *args):
        if self._raw is None:
            return b""
        data = self._raw.read(*args)
        return b"" if data is None else data

    def read1(self, size=-1):
        """At most ``size`` bytes of the body, from one read of the connection where the answer can
        (``read1``): what a deadline between reads needs."""
        if self._raw is None:
            return b""
        read1 = getattr(self._raw, "read1", None)
        data = read1(size) if callable(read1) else self._raw.read(size)
        return b"" if data is None else data

    def readinto(self, buffer):
        """Read the next bytes of the body into ``buffer`` (writable, bytes-like): how many (0 at the
        end). No new bytes object per read, for a download that streams gigabytes."""
        if self._raw is None:
            return 0
        readinto = getattr(self._raw, "readinto", None)
        if readinto is None:
            data = self.read(len(buffer))
            buffer[:len(data)] = data
            return len(data)
        return readinto(buffer) or 0

    def close(self):
        close_quietly(self._raw)


def open_url(url, context=None, **kwargs):
    """``ansible.module_utils.urls.open_url``, imported at the first request. That import (urllib,
    http.cookiejar, email, the cryptography package, about 60 ms) is then paid only by what sends a
    request: the controller's filters and actions that read this module's names (through ``_ready``)
    run once per host and task, and do not need it.

    ``context``: the TLS context to use (``urls.Request.open``'s); without it, one is built for this
    call, as ``open_url`` builds it."""
    # pylint: disable-next=import-outside-toplevel
    from ansible.module_utils.urls import Request, open_url as urls_open_url

    if context is None:
        return urls_open_url(url, **kwargs)
    method = kwargs.pop("method", None) or ("POST" if kwargs.get("data") else "GET")
    return Request().open(method, url, context=context, **kwargs)


def _no_tls_context():
    """A TLS context that trusts no certificate, for a plain ``http`` request: urllib makes no TLS
    connection for it (and ``open_url`` follows no redirect: :func:`follow` does, hop by hop), so it is
    never used; were it used, it would refuse every server rather than trust one."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names, knows no CA


def _urls_errors():
    """``(ConnectionError, SSLValidationError)`` of ``ansible.module_utils.urls`` (see :func:`open_url`), each a
    tuple: empty while nothing imported that module (no request went through it, so none of its errors can
    have been raised), which spares a client whose every request went to the loopback its import."""
    urls = sys.modules.get("ansible.module_utils.urls")
    if urls is None:
        return (), ()
    return (urls.ConnectionError,), (urls.SSLValidationError,)


def is_loopback_http(url):
    """Whether ``url`` is plain ``http`` to this node's loopback (:func:`is_loopback`)."""
    scheme, host, _port = origin(url)
    return scheme == "http" and is_loopback(host)


class _LoopbackAnswer(object):
    """What :func:`direct_open` answers: ``status``, ``reason``, ``headers``, the body read from the
    connection, which :meth:`close` closes with it."""

    def __init__(self, connection, response, body):
        self.status = response.status
        self.reason = response.reason
        self.headers = response.headers
        self._connection = connection
        self._response = response
        self._body = body

    def getcode(self):
        return self.status

    def read(self, *args):
        return self._body.read(*args)

    def read1(self, size=-1):
        return self._body.read1(size)

    def readinto(self, buffer):
        return self._body.readinto(buffer)

    def close(self):
        close_quietly(self._body)
        close_quietly(self._response)
        close_quietly(self._connection)


def loopback_open(url, method="GET", data=None, headers=None, timeout=30, http_agent=USER_AGENT, decompress=True,
                  **_options):
    """One request (one hop: redirects are :func:`follow`'s) to this node's loopback over plain ``http``,
    called as :func:`open_url` is, straight through ``http.client`` (:func:`direct_open`): no proxy, no TLS, no
    urllib. Refuses (ValueError) any other URL: a caller's mistake."""
    if not is_loopback_http(url):
        raise ValueError("loopback_open: %s is not plain http to this node's loopback" % shown_url(url))
    return direct_open(url, method=method, data=data, headers=headers, timeout=timeout, http_agent=http_agent,
                       decompress=decompress)


def direct_open(url, method="GET", data=None, headers=None, timeout=30, http_agent=USER_AGENT, decompress=True,
                connect=None, context=None, **_options):
    """One request (one hop: redirects are :func:`follow`'s), called as :func:`open_url` is, straight through
    ``http.client`` over the socket that ``connect(host, port, timeout)`` gives (``socket.create_connection``
    by default): no proxy, no urllib. ``connect`` may look at the connected socket before anything is sent on it
    (the readiness gate checks which process accepted it); the request goes over that very socket. ``https``
    wraps it in ``context`` (an ``ssl.SSLContext``: required for https). Any status is an answer (``open_url``
    raises one of 400 or more as ``HTTPError``, which :func:`follow` reads as an answer too). Asks for the body as
    it is (``identity``, as urllib asks) and decompresses one sent gzipped all the same, as ``open_url`` does. The
    URL's userinfo, which :func:`follow` leaves in it only while credentials go (to the origin they were given
    for), is sent as basic authentication with the request (``open_url`` sends it when the server asks)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or not parts.hostname or (scheme == "https" and context is None):
        raise ValueError("direct_open: %s is not an http URL, or an https URL with a TLS context" % shown_url(url))
    send = {"User-Agent": http_agent, "Accept-Encoding": "identity"}
    if parts.username is not None:
        pair = "%s:%s" % (unquote(parts.username), unquote(parts.password or ""))
        send["Authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    send.update(headers or {})
    path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    port = parts.port or (443 if scheme == "https" else 80)
    connection = http.client.HTTPConnection(parts.hostname, port, timeout=timeout)
    try:
        if connect is None:
            connection.sock = socket.create_connection((parts.hostname, port), timeout)
        else:
            connection.sock = connect(parts.hostname, port, timeout)
        if scheme == "https":
            connection.sock = context.wrap_socket(connection.sock, server_hostname=parts.hostname)
        # http.client sends on the socket it holds and does not connect again
        connection.request(method, path, body=data, headers=send)
        response = connection.getresponse()
    except BaseException:
        connection.close()
        raise
    body = response
    if decompress and (response.headers.get("Content-Encoding") or "").strip().lower() == "gzip":
        import gzip  # pylint: disable=import-outside-toplevel

        body = gzip.GzipFile(fileobj=response, mode="rb")
    return _LoopbackAnswer(connection, response, body)


def follow(url, method="GET", data=None, headers=None, credentials=None, credential_headers=(),
           timeout=30, validate_certs=True, http_agent=USER_AGENT, decompress=True,
           allow_plain_http_credentials=False, allow_option=None, max_redirects=MAX_REDIRECTS,
           opener=None, trace=None, tls=None, loopback=None, stay_on_origin=False):
    """``method`` on ``url``, redirects followed by hand under the collection's one policy (see this
    file's docstring): one call of ``opener`` (``open_url`` by default, called as ``open_url`` is)
    per hop, with ``follow_redirects="none"``. Returns the :class:`Answer` of the first answer that
    is not a redirect followed.

    ``headers`` go on every hop. ``credentials`` (headers), those of ``headers`` named in
    :data:`CREDENTIAL_HEADERS` or ``credential_headers``, and the userinfo of ``url`` go only while
    every hop so far stayed on ``url``'s origin; over plain http only to the loopback unless
    ``allow_plain_http_credentials`` (``allow_option`` names that option in the message).

    Raises :class:`SchemeError`, :class:`RedirectError` or :class:`PlainHttpCredentialError`, none
    of which holds a credential; whatever ``opener`` raises besides an HTTP error answer (connection
    errors, time-outs, TLS) comes as it came. ``trace``, a list, gets each URL asked (without
    userinfo), so that a caller can name the host that failed. ``tls``, a callable, gives the TLS context
    of each hop's URL (``opener`` gets it as ``context``; :meth:`HttpClient.context_for`). ``loopback``, an opener
    called as ``opener`` is, sends each hop that is plain http to this node's loopback instead
    (:func:`loopback_open`; :class:`HttpClient`'s ``direct_loopback``). ``stay_on_origin``: a redirect to
    another origin than ``url``'s is refused (:class:`RedirectError`), for what a server serves as its own
    (a cache's files)."""
    opener = opener or open_url
    plain, secret = split_credentials(headers, credential_headers)
    secret.update(credentials or {})
    userinfo = _userinfo(url)
    carrying = bool(secret) or bool(userinfo)
    method = (method or "GET").upper()
    current = url
    hops = []
    followed = 0
    while True:
        scheme = origin(current)[0]
        if scheme not in SCHEMES:
            raise SchemeError(current, "%s is not an http:// or https:// URL: refused, only those are "
                                       "fetched" % shown_url(current))
        if carrying and not allow_plain_http_credentials:
            names = sorted(secret) + (["the URL's userinfo"] if userinfo else [])
            problem = plain_http_credential_problem(current, "credentials (%s)" % ", ".join(names), allow_option)
            if problem:
                raise PlainHttpCredentialError(current, problem)
        send = dict(plain)
        if carrying:
            send.update(secret)
            target = current if _userinfo(current) or not userinfo else _with_userinfo(current, userinfo)
        else:
            target = without_userinfo(current)
        if trace is not None:
            trace.append(without_userinfo(current))
        hop_opener = opener
        extra = {}
        if loopback is not None and is_loopback_http(current):
            hop_opener = loopback
        elif tls is not None:
            extra["context"] = tls(current)
        try:
            raw = hop_opener(target, method=method, data=data, headers=send, timeout=timeout,
                             validate_certs=validate_certs, http_agent=http_agent, follow_redirects="none",
                             use_netrc=False, decompress=decompress, **extra)
            status = raw.getcode() if hasattr(raw, "getcode") else getattr(raw, "status", 200)
        except urllib.error.HTTPError as exc:
            raw = exc
            status = exc.code
        status = status or 200
        resp_headers = _lower_headers(getattr(raw, "headers", None))
        location = resp_headers.get("location")
        if status in REDIRECT_STATUSES and location and method in ("GET", "HEAD"):
            close_quietly(raw)
            hops.append((without_userinfo(current), status, resp_headers))
            nxt, keep = redirect_target(current, location, followed, carrying, max_redirects)
            if stay_on_origin and origin(nxt) != origin(url):
                raise RedirectError(
                    current, "%s (%s) redirected to %s, another origin: refused, only what %s serves itself is "
                    "fetched here; the server (or what answers in its place) is misconfigured or hostile"
                    % (shown_url(current), origin_text(current), shown_url(nxt), origin_text(url)),
                    location=shown_url(nxt), sender=origin_text(current), status=status)
            current = nxt
            followed += 1
            carrying = carrying and keep
            continue
        reason = getattr(raw, "reason", "") or ""
        return Answer(without_userinfo(current), status, str(reason), resp_headers, raw, hops)


def _seconds(value):
    """``value`` seconds for a message: ``120``, ``2.5``."""
    return ("%.1f" % value).rstrip("0").rstrip(".")


def http_argument_spec():
    """The HTTP options of the look-up modules (documented by the llmfleet.engines.http fragment)."""
    return dict(
        timeout=dict(type="int", default=30),
        retries=dict(type="int", default=3),
        backoff=dict(type="float", default=1.0),
        validate_certs=dict(type="bool", default=True),
    )


def http_option_problem(params):
    """What is wrong with the HTTP options in a module's params, or None."""
    for name in ("retries", "backoff"):
        if params[name] < 0:
            return "%s must not be negative (got %s)" % (name, params[name])
    if params["timeout"] <= 0:
        return "timeout must be more than 0 seconds (got %s)" % params["timeout"]
    return None


def http_token_argument_spec():
    """The option of the modules that send a token (documented by the llmfleet.engines.http.token
    fragment): whether it may go over plain http to a host that is not this host's loopback."""
    return dict(allow_plain_http_token=dict(type="bool", default=False))


def token_transport_problem(url, token, params, what="the token"):
    """None, or why ``token`` must not be sent to ``url`` under a module's params (see
    :func:`http_token_argument_spec`): checked before anything is sent, in check mode too."""
    if not token or params.get("allow_plain_http_token"):
        return None
    return plain_http_credential_problem(url, what, "allow_plain_http_token")


def client_from_params(params, secrets=None):
    """An HttpClient configured by a module's HTTP options (see http_argument_spec and
    http_token_argument_spec)."""
    has_option = "allow_plain_http_token" in params
    return HttpClient(timeout=params["timeout"], retries=params["retries"], backoff=params["backoff"],
                      validate_certs=params["validate_certs"], secrets=secrets,
                      allow_plain_http_credentials=bool(params.get("allow_plain_http_token")),
                      allow_option="allow_plain_http_token" if has_option else None)


class HttpClient(object):
    """GETs with retries and exponential back-off.

    ``retries`` is the number of further attempts after the first one; the wait before attempt
    ``n`` (1-based) is ``backoff * 2 ** (n - 1)`` seconds, or the server's ``Retry-After`` when
    that is longer (at most 60 s).

    Every answer read whole is bounded: at most ``max_bytes`` (:data:`MAX_JSON_BYTES` by default; a
    request may give its own), and one attempt, from the request to the answer's last byte, ends within
    ``deadline`` seconds (:data:`DEADLINE_TIMEOUTS` times ``timeout`` by default), which a body sent a
    byte at a time cannot stretch: ``timeout`` alone bounds only each wait on the socket. A longer
    answer is refused (:class:`BodyTooLargeError`, not tried again); one past the deadline is tried
    again like a time-out. The body of an error answer is read to at most :data:`MAX_ERROR_BYTES`.
    """

    def __init__(self, timeout=30, retries=3, backoff=1.0, validate_certs=True, headers=None,
                 secrets=None, user_agent=USER_AGENT, allow_plain_http_credentials=False,
                 allow_option=None, credential_headers=(), max_redirects=MAX_REDIRECTS, direct_loopback=False,
                 max_bytes=MAX_JSON_BYTES, deadline=None):
        self.timeout = timeout
        self.max_bytes = int(max_bytes)
        self.deadline = float(deadline) if deadline is not None else DEADLINE_TIMEOUTS * float(timeout)
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.validate_certs = validate_certs
        self.headers = dict(headers or {})
        self.secrets = [s for s in (secrets or []) if s]
        self.user_agent = user_agent
        # the redirect policy (see follow): credentials only to their origin, over plain http only
        # to the loopback unless allowed (allow_option names the module's option in the message)
        self.allow_plain_http_credentials = allow_plain_http_credentials
        self.allow_option = allow_option
        self.credential_headers = tuple(credential_headers or ())
        self.max_redirects = max_redirects
        # each hop to this node's loopback over plain http through http.client (loopback_open), not open_url
        self.direct_loopback = direct_loopback
        self._tls = None
        self._tls_guard = threading.Lock()  # the hub's downloads share a client between threads

    # -- helpers ---------------------------------------------------------------------------
    def context_for(self, url):
        """The TLS context of a request to ``url``: this client's one for ``https`` (built at the
        first, with ``urls.make_context`` and this client's ``validate_certs``, as ``open_url`` builds
        one per call), one that is never used for plain ``http`` (:func:`_no_tls_context`)."""
        if origin(url)[0] != "https":
            return _no_tls_context()
        with self._tls_guard:
            if self._tls is None:
                from ansible.module_utils.urls import make_context  # pylint: disable=import-outside-toplevel

                self._tls = make_context(validate_certs=self.validate_certs)
            return self._tls

    def redact(self, text):
        """``text`` with every secret replaced by a mask."""
        text = "" if text is None else str(text)
        for secret in self.secrets:
            text = text.replace(secret, _MASK)
        return text

    def delay(self, attempt, retry_after=None):
        """Seconds to wait after failed attempt ``attempt`` (1-based): ``backoff * 2 ** (attempt - 1)``,
        or the server's ``Retry-After`` when that is longer (at most :data:`MAX_RETRY_AFTER`)."""
        delay = self.backoff * (2 ** (attempt - 1))
        if retry_after is not None:
            delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER))
        return delay

    def pause(self, attempt, retry_after=None):
        """Wait :meth:`delay` seconds."""
        _sleep(self.delay(attempt, retry_after))

    def certificate_error(self, url, exc, asked=()):
        """The :class:`CertificateError` for ``exc``, naming the server whose certificate it was."""
        return CertificateError(
            url,
            "the TLS certificate of %s was not accepted (%s); give the node the CA that signed it, or set "
            "validate_certs to false for a server you trust" % (_where(url, asked), self.redact(exc)),
        )

    def _rate_limit(self, url, status, reason, headers, message):
        remaining = _int_or_none(headers.get("x-ratelimit-remaining"))
        retry_after = _float_or_none(headers.get("retry-after"))
        text = (message or "").lower()
        if status not in (403, 429):
            return None
        if remaining != 0 and not (status == 403 and (retry_after is not None or "rate limit" in text)):
            return None
        err = RateLimitError(
            url, "", status, reason, message, headers,
            limit=_int_or_none(headers.get("x-ratelimit-limit")),
            remaining=remaining,
            reset=_int_or_none(headers.get("x-ratelimit-reset")),
            resource=headers.get("x-ratelimit-resource"),
            retry_after=retry_after,
        )
        limit = "%s requests" % err.limit if err.limit is not None else "its request limit"
        err.msg = "%s answered %d: rate limit reached (%s%s used); it resets %s" % (
            url, status, limit,
            " of the '%s' resource" % err.resource if err.resource else "",
            err.reset_text())
        err.args = (err.msg,)
        return err

    # -- one attempt -----------------------------------------------------------------------
    def open(self, url, headers=None, method="GET", data=None, credentials=None, decompress=True, opener=None):
        """One attempt of ``method`` on ``url`` under the redirect policy (:func:`follow`, with this
        client's options; ``credentials`` and ``opener`` as there): the :class:`Answer`, any status, its
        body unread. Raises :class:`CertificateError`, :class:`TryAgain` (connection errors, time-outs;
        a failure on a redirect's hop on another origin names it), or the policy's refusals
        (:class:`SchemeError`, :class:`RedirectError`, :class:`PlainHttpCredentialError`); secrets masked."""
        asked = []
        try:
            return follow(
                url,
                method=method,
                data=data,
                headers=headers,
                credentials=credentials,
                credential_headers=self.credential_headers,
                timeout=self.timeout,
                validate_certs=self.validate_certs,
                http_agent=self.user_agent,
                decompress=decompress,
                allow_plain_http_credentials=self.allow_plain_http_credentials,
                allow_option=self.allow_option,
                max_redirects=self.max_redirects,
                opener=opener,
                trace=asked,
                # an opener of the caller's own builds its own contexts (devpi's is ansible's open_url)
                tls=self.context_for if opener is None else None,
                loopback=loopback_open if self.direct_loopback and opener is None else None,
            )
        except (SchemeError, RedirectError, PlainHttpCredentialError) as exc:
            exc.msg = self.redact(exc.msg)
            exc.args = (exc.msg,)
            raise
        # the errors of ansible.module_utils.urls, where a request went through it (read as an error is matched)
        except _urls_errors()[1] + (ssl.SSLCertVerificationError,) as exc:
            raise self.certificate_error(url, exc, asked)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise self.certificate_error(url, reason, asked)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise TryAgain("timed out after %s s%s" % (self.timeout, _elsewhere(url, asked)))
            raise TryAgain("connection failed%s: %s" % (_elsewhere(url, asked), self.redact(reason)))
        except (socket.timeout, TimeoutError):
            raise TryAgain("timed out after %s s%s" % (self.timeout, _elsewhere(url, asked)))
        except _urls_errors()[0] + (http.client.HTTPException, ConnectionError, OSError) as exc:
            raise TryAgain("connection failed%s: %s" % (
                _elsewhere(url, asked), self.redact(exc or exc.__class__.__name__)))

    def raise_for_status(self, url, resp, where=None):
        """For an answer of :meth:`open` with a status of 300 or more (an error, or a redirect that was
        not followed): read and close its body and raise :class:`RateLimitError`, :class:`TryAgain`
        (429, 5xx), :class:`NotFoundError` (404, 410) or :class:`HttpStatusError`, the message naming
        ``where`` (``url`` by default) and what the server said."""
        where = where or url
        status = resp.status
        resp_headers = resp.headers
        try:
            # only what a message needs, and only for so long: an error page can be endless too
            body = read_head(resp, MAX_ERROR_BYTES, time.monotonic() + self.timeout)
        finally:
            resp.close()
        message = self.redact(server_message(body))
        reason = self.redact(resp.reason or "")
        limited = self._rate_limit(url, status, reason, resp_headers, message)
        if limited is not None:
            raise limited
        if status == 429 or status >= 500:
            raise TryAgain(
                "answered %d %s%s" % (status, reason, ": " + message if message else ""),
                status=status,
                retry_after=_float_or_none(resp_headers.get("retry-after")),
            )
        if status in REDIRECT_STATUSES and resp_headers.get("location"):
            message = "a redirect to %s, not followed: only GET and HEAD are redirected" % (
                self.redact(shown_url(urljoin(resp.url, resp_headers["location"]))))
        cls = NotFoundError if status in (404, 410) else HttpStatusError
        raise cls(
            url,
            "%s answered %d %s%s" % (where, status, reason, ": " + message if message else ""),
            status, reason, message, resp_headers,
        )

    def _attempt(self, url, headers, method="GET", data=None, opener=None, max_bytes=None):
        deadline = time.monotonic() + self.deadline
        resp = self.open(url, headers, method, data, opener=opener)
        if resp.status >= 300:
            self.raise_for_status(url, resp)
        try:
            status = resp.getcode() if hasattr(resp, "getcode") else getattr(resp, "status", 200)
            resp_headers = _lower_headers(getattr(resp, "headers", None))
            body = read_body(resp, url, self.max_bytes if max_bytes is None else max_bytes, deadline)
        except BodyTooLargeError as exc:
            exc.msg = self.redact(exc.msg)
            exc.args = (exc.msg,)
            raise
        except DeadlineError as exc:
            raise TryAgain("the answer had not ended %s s after the request (%s of it had come; one attempt, "
                           "the whole answer included, is given %d times timeout)"
                           % (_seconds(self.deadline), size_text(exc.received), DEADLINE_TIMEOUTS))
        except (socket.timeout, TimeoutError):
            raise TryAgain("timed out reading the answer after %s s" % self.timeout)
        except (http.client.HTTPException, ConnectionError, OSError) as exc:
            raise TryAgain("the answer was cut off: %s" % self.redact(exc or exc.__class__.__name__))
        finally:
            close = getattr(resp, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # pylint: disable=broad-except
                    pass
        if body is None:
            body = b""
        expected = _int_or_none(resp_headers.get("content-length"))
        if expected is not None and "content-encoding" not in resp_headers and len(body) < expected:
            raise TryAgain("the answer was cut off: %d of %d bytes" % (len(body), expected))
        final_url = resp.geturl() if hasattr(resp, "geturl") else url
        return Response(final_url or url, status or 200, resp_headers, body)

    # -- public ------------------------------------------------------------------------------
    def get(self, url, headers=None, opener=None, max_bytes=None):
        """GET ``url``: a :class:`Response` with status 2xx, or one of this module's errors."""
        return self.request("GET", url, headers, opener=opener, max_bytes=max_bytes)

    def request(self, method, url, headers=None, data=None, opener=None, max_bytes=None):
        """``method`` on ``url`` with the body ``data`` (bytes or None), tried again like a GET:
        a :class:`Response` with status 2xx, or one of this module's errors. ``opener`` as :meth:`open`'s
        (each hop through it: the readiness gate's checks the process its connection reached); ``max_bytes``:
        the most the answer may have (the client's ``max_bytes`` by default)."""
        merged = dict(self.headers)
        merged.update(headers or {})
        attempts = self.retries + 1
        last = None
        for attempt in range(1, attempts + 1):
            try:
                resp = self._attempt(url, merged, method, data, opener=opener, max_bytes=max_bytes)
                return resp
            except TryAgain as exc:
                last = exc
                if attempt < attempts:
                    self.pause(attempt, exc.retry_after)
        raise UnreachableError(
            url,
            "could not get %s after %d attempt%s: %s; check the URL and the network or proxy "
            "between this host and the server, or raise retries/timeout"
            % (url, attempts, "" if attempts == 1 else "s", last.reason),
            attempts,
            last.status,
            last.reason,
        )

    def get_json(self, url, headers=None, accept="application/json", opener=None, max_bytes=None):
        """GET and decode JSON: ``(data, response)``."""
        merged = {"Accept": accept}
        merged.update(headers or {})
        return self._decode(url, self.get(url, merged, opener=opener, max_bytes=max_bytes))

    def post_json(self, url, payload, headers=None, opener=None, max_bytes=None):
        """POST ``payload`` as JSON and decode the JSON answer: ``(data, response)``."""
        merged = {"Accept": "application/json", "Content-Type": "application/json"}
        merged.update(headers or {})
        body = json.dumps(payload).encode("utf-8")
        return self._decode(url, self.request("POST", url, merged, body, opener=opener, max_bytes=max_bytes))

    def _decode(self, url, resp):
        try:
            text = resp.body.decode("utf-8")
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidJsonError(
                url,
                "%s answered %d with a body that is not valid JSON (%s, Content-Type %r, %d bytes): "
                "is this the right URL, or is a proxy or login page in the way?"
                % (url, resp.status, self.redact(exc), resp.content_type or "none", len(resp.body)),
                resp.content_type,
            )
        return data, resp
