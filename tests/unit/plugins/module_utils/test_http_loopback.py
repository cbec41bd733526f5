"""_http's loopback transport, on real sockets (servers on 127.0.0.1 and 127.0.0.2, ansible's real urls beside it).

The readiness gates' client (``HttpClient(direct_loopback=True)``: engine_service_survey, engine_ready) sends each
hop to this node's loopback over plain http straight through ``http.client``; every other hop (https, another host)
still goes through ``ansible.module_utils.urls.open_url``. The redirect policy is :func:`_http.follow`'s for both:
these tests send credentials over the direct transport and watch where they arrive."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http

from tests.upstream.server import ForeignOrigin

TOKEN = "sk-loopback-gate-key-4711"


def gate_client(**kwargs):
    return _http.HttpClient(retries=0, allow_plain_http_credentials=True, direct_loopback=True, **kwargs)


def test_the_gates_requests_arrive_as_sent_and_their_answers_as_answered(other):
    other.route("/health", body=b"").route("/v1/models", body={"data": [{"id": "m"}]})
    other.route("/v1/completions", body={"choices": [{"text": "x"}]}, method="POST")
    client = gate_client(user_agent="llmfleet-test-agent")
    assert client.get(other.url + "/health").status == 200
    data, resp = client.get_json(other.url + "/v1/models", {"Authorization": "Bearer " + TOKEN})
    assert data == {"data": [{"id": "m"}]} and resp.content_type == "application/json"
    data, _resp = client.post_json(other.url + "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 1},
                                   {"Authorization": "Bearer " + TOKEN})
    assert data == {"choices": [{"text": "x"}]}
    health, models, completion = other.log()
    assert (health["method"], health["path"], health["headers"]["User-Agent"]) == (
        "GET", "/health", "llmfleet-test-agent")
    assert health["headers"]["Host"] == other.url.split("//", 1)[1]
    assert models["headers"]["Authorization"] == "Bearer " + TOKEN and models["headers"]["Accept"] == "application/json"
    assert (completion["method"], completion["headers"]["Content-Type"]) == ("POST", "application/json")
    assert json.loads(completion["body"]) == {"model": "m", "prompt": "hi", "max_tokens": 1}


@pytest.mark.parametrize("status, error", [(404, _http.NotFoundError), (401, _http.HttpStatusError),
                                           (503, _http.UnreachableError)])
def test_an_error_answer_is_the_error_open_url_gives(other, status, error):
    other.route("/v1/models", status=status, body={"message": "said the server"})
    with pytest.raises(error) as err:
        gate_client().get_json(other.url + "/v1/models")
    assert "said the server" in err.value.msg
    if status != 503:
        assert err.value.status == status


def test_a_gzip_answer_is_read_decompressed_though_none_was_asked_for(other):
    """As open_url: the body is asked for as it is, and one sent gzipped is decompressed."""
    other.route("/v1/models", body=gzip.compress(b'{"data": []}'), headers={"Content-Encoding": "gzip"},
                content_type="application/json")
    data, _resp = gate_client().get_json(other.url + "/v1/models")
    assert data == {"data": []}
    assert other.log()[0]["headers"]["Accept-Encoding"] == "identity"


def test_nothing_listening_is_a_connection_that_failed():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(_http.UnreachableError) as err:
        gate_client().get("http://127.0.0.1:%d/health" % port)
    assert err.value.last_status is None and "connection failed" in err.value.reason


def test_a_server_that_never_answers_times_out():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # accepts (the kernel does), never answers
        with pytest.raises(_http.UnreachableError) as err:
            gate_client(timeout=0.5).get("http://127.0.0.1:%d/health" % sock.getsockname()[1])
    assert err.value.reason.startswith("timed out after 0.5 s")


def test_a_redirect_to_another_origin_drops_the_key_on_the_direct_transport(other):
    with ForeignOrigin("127.0.0.2") as foreign:
        foreign.route("/v1/models", body={"data": []})
        other.redirect("/v1/models", foreign.url + "/v1/models")
        data, resp = gate_client().get_json(other.url + "/v1/models", {"Authorization": "Bearer " + TOKEN})
        assert data == {"data": []} and resp.url == foreign.url + "/v1/models"
        assert other.log()[0]["headers"]["Authorization"] == "Bearer " + TOKEN
        assert TOKEN not in foreign.text()


def test_a_redirect_to_a_file_is_refused_on_the_direct_transport(other):
    other.redirect("/health", "file:///etc/shadow")
    with pytest.raises(_http.RedirectError) as err:
        gate_client().get(other.url + "/health")
    assert "redirected to a file:// URL" in err.value.msg


def test_a_hop_that_is_not_plain_http_to_the_loopback_goes_through_open_url(other, tls_origin):
    """https on 127.0.0.1 is not the direct transport's: urls makes its TLS connection (a certificate checked)."""
    tls_origin.route("/health", body=b"tls")
    other.redirect("/health", tls_origin.url + "/health")
    assert gate_client(validate_certs=False).get(other.url + "/health").body == b"tls"
    with pytest.raises(_http.CertificateError):
        gate_client().get(other.url + "/health")


def test_the_userinfo_of_a_loopback_url_is_sent_as_basic_authentication(other):
    other.route("/health", body=b"")
    gate_client().get(other.url.replace("http://", "http://gate:p%40ss@") + "/health")
    assert other.log()[0]["headers"]["Authorization"] == "Basic Z2F0ZTpwQHNz"  # gate:p@ss


@pytest.mark.parametrize("url", ["https://127.0.0.1:8443/health", "http://example.com/health",
                                 "http://127.0.0.1.example.com/health", "ftp://127.0.0.1/health"])
def test_the_direct_transport_refuses_any_other_url(url):
    with pytest.raises(ValueError, match="not plain http to this node's loopback"):
        _http.loopback_open(url)


@pytest.fixture
def proxy(monkeypatch):
    """A proxy in the environment (no no_proxy): a server that logs what it is asked (and answers 404)."""
    with ForeignOrigin() as server:
        for name in ("no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", server.url)
        monkeypatch.setenv("HTTP_PROXY", server.url)
        yield server


def test_a_loopback_hop_asks_no_proxy(other, proxy):
    """A proxy cannot reach this node's loopback: the gate asks its engine itself. open_url (the other clients)
    sends the same request to the proxy."""
    other.route("/health", body=b"")
    assert gate_client().get(other.url + "/health").status == 200
    assert proxy.log() == [] and len(other.log()) == 1
    with pytest.raises(_http.NotFoundError):  # the proxy's answer
        _http.HttpClient(retries=0).get(other.url + "/health")
    assert [e["path"] for e in proxy.log()] == [other.url + "/health"]
    assert len(other.log()) == 1


_NO_URLS = r'''
import json, sys
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
url = sys.argv[1]
gate = _http.HttpClient(retries=0, allow_plain_http_credentials=True, direct_loopback=True)
gate.get(url + "/health")
gate.get_json(url + "/v1/models", {"Authorization": "Bearer k"})
try:
    gate.get(url + "/missing")
except _http.NotFoundError:
    pass
before = "ansible.module_utils.urls" in sys.modules
_http.HttpClient(retries=0).get(url + "/health")
print(json.dumps([before, "ansible.module_utils.urls" in sys.modules]))
'''


def test_the_gates_client_does_not_import_urls(other):
    """What the direct transport saves each look of a settled node: ansible's urls (and the cryptography
    package it imports), about 35 ms of CPU. The other clients still import it at their first request."""
    other.route("/health", body=b"").route("/v1/models", body={"data": []})
    repo = pathlib.Path(__file__).resolve().parents[4]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "build" / "collections")]))
    done = subprocess.run([sys.executable, "-c", _NO_URLS, other.url], capture_output=True, text=True, check=False,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [False, True]
    assert len(other.log()) == 4


def test_threads_share_a_gate_client(other):
    other.route("/health", body=b"ok")
    client = gate_client()
    bodies = []

    def ask():
        bodies.append(client.get(other.url + "/health").body)

    threads = [threading.Thread(target=ask) for _n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert bodies == [b"ok"] * 8
