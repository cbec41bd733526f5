"""_http: retries with back-off, which failures are tried again, typed errors, no leaked secrets."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.error

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from tests.unit.plugins.lookup_fakes import Reply, install

URL = "https://index.test/pypi/x/json"


@pytest.fixture
def fake(monkeypatch):
    return install(monkeypatch)


def client(**kw):
    kw.setdefault("retries", 3)
    kw.setdefault("backoff", 0.5)
    return _http.HttpClient(**kw)


def test_json_answer_is_decoded_and_sent_with_accept(fake):
    server, sleeps = fake
    server.add(URL, Reply(200, {"a": 1}))
    data, resp = client().get_json(URL)
    assert data == {"a": 1}
    assert resp.status == 200
    assert server.calls[0]["headers"]["Accept"] == "application/json"
    assert server.calls[0]["kwargs"]["timeout"] == 30
    assert sleeps == []


@pytest.mark.parametrize(
    "failures",
    [
        pytest.param([Reply(503, {"message": "busy"}), Reply(502)], id="5xx"),
        pytest.param([socket.timeout("timed out"), socket.timeout("timed out")], id="timeout"),
        pytest.param([urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))] * 2,
                     id="refused"),
        pytest.param([urllib.error.URLError(socket.timeout("timed out"))] * 2, id="urlerror-timeout"),
        pytest.param([Reply(429, {"message": "slow down"})] * 2, id="429"),
        pytest.param([Reply(200, body=b'{"a"', headers={"Content-Length": "100"})] * 2, id="truncated"),
        pytest.param([Reply(200, read_error=http.client.IncompleteRead(b"{"))] * 2, id="incomplete-read"),
    ],
)
def test_transient_failures_are_retried_with_exponential_backoff(fake, failures):
    server, sleeps = fake
    server.add(URL, *failures, Reply(200, {"ok": True}))
    data, _resp = client(backoff=0.5).get_json(URL)
    assert data == {"ok": True}
    assert server.count(URL) == 3
    assert sleeps == [0.5, 1.0]


def test_5xx_every_time_gives_up_after_retries_and_says_so(fake):
    server, sleeps = fake
    server.add(URL, Reply(503, {"message": "maintenance"}))
    with pytest.raises(_http.UnreachableError) as exc:
        client(retries=3, backoff=1.0).get(URL)
    assert server.count(URL) == 4
    assert sleeps == [1.0, 2.0, 4.0]
    assert exc.value.attempts == 4
    assert exc.value.last_status == 503
    assert URL in exc.value.msg
    assert "4 attempts" in exc.value.msg
    assert "503" in exc.value.msg and "maintenance" in exc.value.msg


def test_timeout_every_time_names_the_timeout(fake):
    server, _sleeps = fake
    server.add(URL, socket.timeout("timed out"))
    with pytest.raises(_http.UnreachableError) as exc:
        client(retries=1, timeout=7).get(URL)
    assert server.count(URL) == 2
    assert "timed out after 7 s" in exc.value.msg


def test_zero_retries_means_one_attempt(fake):
    server, sleeps = fake
    server.add(URL, Reply(500))
    with pytest.raises(_http.UnreachableError) as exc:
        client(retries=0).get(URL)
    assert server.count(URL) == 1
    assert sleeps == []
    assert "1 attempt:" in exc.value.msg


def test_retry_after_is_honoured_and_capped(fake):
    server, sleeps = fake
    server.add(URL, Reply(429, headers={"Retry-After": "5"}), Reply(503, headers={"Retry-After": "9999"}),
               Reply(200, {}))
    client(backoff=0.1).get_json(URL)
    assert sleeps == [5.0, _http.MAX_RETRY_AFTER]


@pytest.mark.parametrize(
    "status, cls",
    [(404, _http.NotFoundError), (410, _http.NotFoundError), (400, _http.HttpStatusError),
     (401, _http.HttpStatusError), (403, _http.HttpStatusError)],
)
def test_other_4xx_are_not_retried(fake, status, cls):
    server, sleeps = fake
    server.add(URL, Reply(status, {"message": "nope"}), Reply(200, {}))
    with pytest.raises(cls) as exc:
        client().get(URL)
    assert exc.type is cls
    assert server.count(URL) == 1
    assert sleeps == []
    assert exc.value.status == status
    assert exc.value.server_message == "nope"
    assert str(status) in exc.value.msg and URL in exc.value.msg


def test_github_rate_limit_is_recognised_not_retried_and_says_when_it_resets(fake):
    server, sleeps = fake
    reset = int(time.time()) + 1800
    server.add(URL, Reply(403, {"message": "API rate limit exceeded for 127.0.0.1."}, headers={
        "X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset),
        "X-RateLimit-Resource": "core", "X-RateLimit-Used": "60"}))
    with pytest.raises(_http.RateLimitError) as exc:
        client().get(URL)
    err = exc.value
    assert server.count(URL) == 1 and sleeps == []
    assert (err.limit, err.remaining, err.reset, err.resource) == (60, 0, reset, "core")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset))
    assert stamp in err.msg
    assert "60 requests" in err.msg
    assert "in 29 min" in err.msg or "in 30 min" in err.msg


@pytest.mark.parametrize(
    "status, headers, message, limited",
    [
        (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2000000000"}, "Forbidden", True),
        (429, {"X-RateLimit-Remaining": "0"}, "Too many", True),
        (403, {"X-RateLimit-Remaining": "4999"}, "Resource not accessible by integration", False),
        (403, {}, "Must have admin rights", False),
    ],
)
def test_rate_limit_is_read_from_the_headers(fake, status, headers, message, limited):
    server, _sleeps = fake
    server.add(URL, Reply(status, {"message": message}, headers=headers))
    with pytest.raises(_http.HttpStatusError) as exc:
        client(retries=0).get(URL)
    assert isinstance(exc.value, _http.RateLimitError) is limited


def test_secondary_rate_limit_with_retry_after_is_a_rate_limit(fake):
    server, _sleeps = fake
    server.add(URL, Reply(403, {"message": "You have exceeded a secondary rate limit."},
                          headers={"Retry-After": "60"}))
    with pytest.raises(_http.RateLimitError) as exc:
        client().get(URL)
    assert exc.value.retry_after == 60.0
    assert "resets at" in exc.value.msg


def test_invalid_json_is_its_own_error_and_not_retried(fake):
    server, _sleeps = fake
    server.add(URL, Reply(200, body=b"<html>login</html>", content_type="text/html"), Reply(200, {}))
    with pytest.raises(_http.InvalidJsonError) as exc:
        client().get_json(URL)
    assert server.count(URL) == 1
    assert exc.value.content_type == "text/html"
    assert URL in exc.value.msg and "not valid JSON" in exc.value.msg


def test_certificate_failure_is_not_retried_and_points_at_validate_certs(fake):
    server, _sleeps = fake
    server.add(URL, urllib.error.URLError(ssl.SSLCertVerificationError(1, "certificate verify failed")))
    with pytest.raises(_http.CertificateError) as exc:
        client().get(URL)
    assert server.count(URL) == 1
    assert "validate_certs" in exc.value.msg


def test_secrets_never_reach_a_message(fake):
    server, _sleeps = fake
    token = "ghp_SECRETSECRETSECRET"
    # A server (or proxy) that echoes the credential back in its error.
    server.add(URL, Reply(401, {"message": "Bad credentials: Bearer %s" % token}))
    c = client(secrets=[token])
    with pytest.raises(_http.HttpStatusError) as exc:
        c.get(URL, headers={"Authorization": "Bearer %s" % token})
    assert server.calls[0]["headers"]["Authorization"] == "Bearer %s" % token
    assert token not in exc.value.msg
    assert token not in exc.value.server_message
    assert "********" in exc.value.msg


def test_connection_error_text_is_redacted_too(fake):
    server, _sleeps = fake
    token = "tok-123456789"
    server.add(URL, urllib.error.URLError("proxy said tok-123456789 is odd"))
    with pytest.raises(_http.UnreachableError) as exc:
        client(retries=0, secrets=[token]).get(URL)
    assert token not in exc.value.msg
    assert "proxy said" in exc.value.msg


def test_server_message_reads_json_and_short_text_but_not_html():
    assert _http.server_message(b'{"message": "Not Found"}') == "Not Found"
    assert _http.server_message(b"upstream   down\n") == "upstream down"
    assert _http.server_message(b"<html><body>Bad</body></html>") == ""
    assert _http.server_message(b"") == ""


GOOD_HTTP_PARAMS = {"timeout": 30, "retries": 3, "backoff": 1.0, "validate_certs": True}


@pytest.mark.parametrize(
    "change, problem",
    [
        ({}, None),
        ({"retries": 0, "backoff": 0.0}, None),
        ({"retries": -1}, "retries must not be negative (got -1)"),
        ({"backoff": -0.5}, "backoff must not be negative (got -0.5)"),
        ({"timeout": 0}, "timeout must be more than 0 seconds (got 0)"),
    ],
)
def test_http_option_problem(change, problem):
    assert _http.http_option_problem(dict(GOOD_HTTP_PARAMS, **change)) == problem


def test_client_from_params_and_spec_defaults_agree():
    spec = _http.http_argument_spec()
    params = {name: option["default"] for name, option in spec.items()}
    client = _http.client_from_params(dict(params, retries=2, validate_certs=False), secrets=["tok"])
    assert (client.timeout, client.retries, client.backoff, client.validate_certs) == (30, 2, 1.0, False)
    assert client.redact("a tok b") != "a tok b"
    assert params == GOOD_HTTP_PARAMS


def test_post_json_sends_the_body_and_decodes_the_answer(fake):
    server, sleeps = fake
    server.add(URL, Reply(503, {"message": "loading"}), Reply(200, {"choices": [{"text": "x"}]}))
    data, resp = client(backoff=0.5).post_json(URL, {"prompt": "ping"}, {"Authorization": "Bearer k"})
    assert (data, resp.status, sleeps) == ({"choices": [{"text": "x"}]}, 200, [0.5])
    call = server.calls[-1]
    assert (call["kwargs"]["method"], call["kwargs"]["data"]) == ("POST", b'{"prompt": "ping"}')
    assert call["headers"] == {"Accept": "application/json", "Content-Type": "application/json",
                               "Authorization": "Bearer k"}


def test_unreachable_error_keeps_the_last_reason_and_status(fake):
    server, _sleeps = fake
    server.add(URL, Reply(503, {"message": "loading"}))
    with pytest.raises(_http.UnreachableError) as exc:
        client(retries=0).get(URL)
    assert (exc.value.last_status, exc.value.reason) == (503, "answered 503 Service Unavailable: loading")
