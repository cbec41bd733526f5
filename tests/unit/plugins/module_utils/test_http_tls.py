"""_http's TLS contexts, on real sockets (ansible's open_url, servers on 127.0.0.1): a client builds
one context for all its https requests and none for plain http, each hop of a redirect gets the
context of its own scheme, and the shared context still checks certificates."""

from __future__ import annotations

import ssl
import threading

import pytest
from ansible.module_utils import urls

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _fetch


@pytest.fixture
def built(monkeypatch):
    """Every TLS context ansible's urls builds, counted (``open_url`` builds one per call)."""
    made = []
    real = urls.make_context

    def make_context(*args, **kwargs):
        made.append(kwargs.get("validate_certs", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(urls, "make_context", make_context)
    return made


def test_plain_http_requests_build_no_tls_context(other, built):
    """The readiness gate asks a loopback server four times per look: none of it reads the CAs."""
    other.route("/health", body=b"").route("/v1/models", body={"data": [{"id": "m"}]})
    client = _http.HttpClient(retries=0)
    for _attempt in range(3):
        assert client.get(other.url + "/health").status == 200
    data, _resp = client.get_json(other.url + "/v1/models")
    assert data == {"data": [{"id": "m"}]}
    assert built == []
    assert len(other.log()) == 4


def test_one_context_serves_every_https_request_of_a_client(tls_origin, built):
    tls_origin.route("/a", body=b"first").route("/b", body=b"second")
    client = _http.HttpClient(retries=0, validate_certs=False)
    assert client.get(tls_origin.url + "/a").body == b"first"
    assert client.get(tls_origin.url + "/b").body == b"second"
    assert client.get(tls_origin.url + "/a").body == b"first"
    assert built == [False]  # one, with the client's validate_certs
    second = _http.HttpClient(retries=0, validate_certs=False)
    assert second.get(tls_origin.url + "/b").body == b"second"
    assert built == [False, False]  # a client of its own, a context of its own


def test_a_redirect_from_http_to_https_gets_a_context_for_its_https_hop(other, tls_origin, built):
    tls_origin.route("/file", body=b"bytes")
    other.redirect("/file", tls_origin.url + "/file")
    resp = _http.HttpClient(retries=0, validate_certs=False).get(other.url + "/file")
    assert resp.body == b"bytes"
    assert resp.url == tls_origin.url + "/file"
    assert [e["path"] for e in other.log()] == ["/file"]
    assert built == [False]


def test_the_shared_context_still_refuses_a_certificate_it_does_not_trust(tls_origin, built):
    """validate_certs true (the default): the test's self-signed certificate is refused, every time."""
    tls_origin.route("/a", body=b"first")
    client = _http.HttpClient(retries=0)
    for _attempt in range(2):
        with pytest.raises(_http.CertificateError) as err:
            client.get(tls_origin.url + "/a")
        assert "validate_certs" in err.value.msg
    assert built == [True]
    assert tls_origin.log() == []  # no request got through


def test_the_hubs_parallel_downloads_share_their_clients_one_context(tls_origin, built):
    """The hub's Fetcher downloads files in threads through one client: one context among them."""
    for n in range(6):
        tls_origin.route("/f%d" % n, body=b"%d" % n * 1000)
    fetcher = _fetch.Fetcher(validate_certs=False, retries=0)
    got = {}

    def fetch(n):
        resp, _url, _cache = fetcher._open(tls_origin.url + "/f%d" % n, 0)  # pylint: disable=protected-access
        got[n] = resp.read()

    threads = [threading.Thread(target=fetch, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert got == {n: b"%d" % n * 1000 for n in range(6)}
    assert built == [False]


def test_the_context_for_plain_http_trusts_nothing():
    """Never used (urllib opens no TLS connection for http, and follow asks each hop with its own
    context), and were it used it would refuse every server."""
    context = _http.HttpClient().context_for("http://127.0.0.1:1/x")
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert context.get_ca_certs() == []
