# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Read-only HTTP GETs for the look-up modules (PyPI, GitHub), and the JSON POST of the
readiness gate (``_ready``: a one-token completion, a read in effect), over
``ansible.module_utils.urls.open_url`` so that managed nodes need nothing but Python.

Connection errors, time-outs, truncated bodies, 429 and 5xx answers are tried again with an
exponential back-off; other 4xx answers are not. Each way a request can fail has its own
exception class. No message ever contains a request header: a token sent in ``Authorization``
cannot leak through an error, and the values given in ``secrets`` are masked in anything the
server sends back.
"""

from __future__ import annotations

import datetime
import http.client
import json
import socket
import ssl
import time
import urllib.error

from ansible.module_utils.urls import (
    ConnectionError as UrlsConnectionError,
    SSLValidationError,
    open_url,
)
from ansible_collections.llmfleet.engines.plugins.module_utils._errors import LlmfleetError

USER_AGENT = "llmfleet.engines (ansible-module)"
MAX_RETRY_AFTER = 60.0
_MASK = "********"

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


class _Retryable(Exception):
    """Internal: this attempt failed in a way that deserves another try."""

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


def client_from_params(params, secrets=None):
    """An HttpClient configured by a module's HTTP options (see http_argument_spec)."""
    return HttpClient(timeout=params["timeout"], retries=params["retries"], backoff=params["backoff"],
                      validate_certs=params["validate_certs"], secrets=secrets)


class HttpClient(object):
    """GETs with retries and exponential back-off.

    ``retries`` is the number of further attempts after the first one; the wait before attempt
    ``n`` (1-based) is ``backoff * 2 ** (n - 1)`` seconds, or the server's ``Retry-After`` when
    that is longer (at most 60 s).
    """

    def __init__(self, timeout=30, retries=3, backoff=1.0, validate_certs=True, headers=None,
                 secrets=None, user_agent=USER_AGENT):
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.validate_certs = validate_certs
        self.headers = dict(headers or {})
        self.secrets = [s for s in (secrets or []) if s]
        self.user_agent = user_agent

    # -- helpers ---------------------------------------------------------------------------
    def redact(self, text):
        """``text`` with every secret replaced by a mask."""
        text = "" if text is None else str(text)
        for secret in self.secrets:
            text = text.replace(secret, _MASK)
        return text

    def _delay(self, attempt, retry_after):
        delay = self.backoff * (2 ** (attempt - 1))
        if retry_after is not None:
            delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER))
        return delay

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
    def _attempt(self, url, headers, method="GET", data=None):
        try:
            resp = open_url(
                url,
                method=method,
                data=data,
                headers=headers,
                timeout=self.timeout,
                validate_certs=self.validate_certs,
                http_agent=self.user_agent,
                follow_redirects="safe",
                use_netrc=False,
            )
        except urllib.error.HTTPError as exc:
            status = exc.code
            resp_headers = _lower_headers(exc.headers)
            try:
                body = exc.read()
            except Exception:  # pylint: disable=broad-except
                body = b""
            message = self.redact(server_message(body))
            reason = self.redact(exc.reason or "")
            limited = self._rate_limit(url, status, reason, resp_headers, message)
            if limited is not None:
                raise limited
            if status == 429 or status >= 500:
                raise _Retryable(
                    "answered %d %s%s" % (status, reason, ": " + message if message else ""),
                    status=status,
                    retry_after=_float_or_none(resp_headers.get("retry-after")),
                )
            cls = NotFoundError if status in (404, 410) else HttpStatusError
            raise cls(
                url,
                "%s answered %d %s%s" % (url, status, reason, ": " + message if message else ""),
                status, reason, message, resp_headers,
            )
        except SSLValidationError as exc:
            raise CertificateError(
                url,
                "the TLS certificate of %s was not accepted (%s); give the node the CA that signed "
                "it, or set validate_certs to false for a server you trust" % (url, self.redact(exc)),
            )
        except ssl.SSLCertVerificationError as exc:
            raise CertificateError(
                url,
                "the TLS certificate of %s was not accepted (%s); give the node the CA that signed "
                "it, or set validate_certs to false for a server you trust" % (url, self.redact(exc)),
            )
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise CertificateError(
                    url,
                    "the TLS certificate of %s was not accepted (%s); give the node the CA that "
                    "signed it, or set validate_certs to false for a server you trust"
                    % (url, self.redact(reason)),
                )
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise _Retryable("timed out after %s s" % self.timeout)
            raise _Retryable("connection failed: %s" % self.redact(reason))
        except (socket.timeout, TimeoutError):
            raise _Retryable("timed out after %s s" % self.timeout)
        except (UrlsConnectionError, http.client.HTTPException, ConnectionError, OSError) as exc:
            raise _Retryable("connection failed: %s" % self.redact(exc or exc.__class__.__name__))

        try:
            status = resp.getcode() if hasattr(resp, "getcode") else getattr(resp, "status", 200)
            resp_headers = _lower_headers(getattr(resp, "headers", None))
            body = resp.read()
        except (socket.timeout, TimeoutError):
            raise _Retryable("timed out reading the answer after %s s" % self.timeout)
        except (http.client.HTTPException, ConnectionError, OSError) as exc:
            raise _Retryable("the answer was cut off: %s" % self.redact(exc or exc.__class__.__name__))
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
            raise _Retryable("the answer was cut off: %d of %d bytes" % (len(body), expected))
        final_url = resp.geturl() if hasattr(resp, "geturl") else url
        return Response(final_url or url, status or 200, resp_headers, body)

    # -- public ------------------------------------------------------------------------------
    def get(self, url, headers=None):
        """GET ``url``: a :class:`Response` with status 2xx, or one of this module's errors."""
        return self.request("GET", url, headers)

    def request(self, method, url, headers=None, data=None):
        """``method`` on ``url`` with the body ``data`` (bytes or None), tried again like a GET:
        a :class:`Response` with status 2xx, or one of this module's errors."""
        merged = dict(self.headers)
        merged.update(headers or {})
        attempts = self.retries + 1
        last = None
        for attempt in range(1, attempts + 1):
            try:
                resp = self._attempt(url, merged, method, data)
                return resp
            except _Retryable as exc:
                last = exc
                if attempt < attempts:
                    _sleep(self._delay(attempt, exc.retry_after))
        raise UnreachableError(
            url,
            "could not get %s after %d attempt%s: %s; check the URL and the network or proxy "
            "between this host and the server, or raise retries/timeout"
            % (url, attempts, "" if attempts == 1 else "s", last.reason),
            attempts,
            last.status,
            last.reason,
        )

    def get_json(self, url, headers=None, accept="application/json"):
        """GET and decode JSON: ``(data, response)``."""
        merged = {"Accept": accept}
        merged.update(headers or {})
        return self._decode(url, self.get(url, merged))

    def post_json(self, url, payload, headers=None):
        """POST ``payload`` as JSON and decode the JSON answer: ``(data, response)``."""
        merged = {"Accept": "application/json", "Content-Type": "application/json"}
        merged.update(headers or {})
        body = json.dumps(payload).encode("utf-8")
        return self._decode(url, self.request("POST", url, merged, body))

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
