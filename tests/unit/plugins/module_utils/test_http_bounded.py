"""_http reads every answer within bounds (issue 44, finding 17): a cap on the bytes of each request
(small for JSON, a request's own where it knows better) and a deadline for one attempt that a body sent a
byte at a time cannot stretch. Against a real server on 127.0.0.1 whose bodies never end: through
ansible's open_url (a name that is not the loopback's literal address goes there too), through the gates'
direct loopback transport, and through pypi_published, github_digest and hf_revision end to end."""

from __future__ import annotations

import time

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.modules import github_digest, hf_revision, pypi_published
from tests.unit.plugins.body_server import BodyServer
from tests.unit.plugins.lookup_fakes import run_module

MIB = 1024 * 1024
# an unbounded read would hang on these servers: fail instead
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def hostile():
    with BodyServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    monkeypatch.setattr(_http, "_sleep", lambda _seconds: None)


@pytest.mark.parametrize("loopback", [False, True], ids=["open_url", "direct-loopback"])
def test_an_endless_json_body_is_refused_at_the_cap_and_not_tried_again(hostile, loopback):
    hostile.endless("/pypi/vllm/json")
    client = _http.HttpClient(timeout=5, retries=2, direct_loopback=loopback)
    started = time.monotonic()
    with pytest.raises(_http.BodyTooLargeError) as err:
        client.get_json(hostile.url + "/pypi/vllm/json")
    assert time.monotonic() - started < 10
    assert hostile.paths() == ["/pypi/vllm/json"]  # the same URL would answer the same
    assert err.value.max_bytes == _http.MAX_JSON_BYTES == 32 * MIB
    assert err.value.msg.startswith("%s/pypi/vllm/json sent more than 33554432 bytes (32 MiB), more than the "
                                    "33554432 bytes (32 MiB) this request reads: refused" % hostile.url), err.value.msg
    assert "check the URL" in err.value.msg


def test_a_request_gives_its_own_cap(hostile):
    hostile.route("/small", body={"a": "x" * 900})
    hostile.route("/large", body={"a": "x" * 2000})
    client = _http.HttpClient(retries=0)
    assert client.get_json(hostile.url + "/small", max_bytes=1000)[0] == {"a": "x" * 900}
    with pytest.raises(_http.BodyTooLargeError, match="announces an answer of 2009 bytes .*, more than the "
                                                      "1000 bytes this request reads"):
        client.get_json(hostile.url + "/large", max_bytes=1000)
    # the client's own cap, for every request it makes
    with pytest.raises(_http.BodyTooLargeError, match="more than the 1000 bytes"):
        _http.HttpClient(retries=0, max_bytes=1000).get(hostile.url + "/large")


def test_a_content_length_that_lies_small_does_not_lift_the_cap(hostile):
    hostile.endless("/lying", length=10)
    # http.client stops at the announced length: what was announced is all that is read
    assert _http.HttpClient(retries=0, max_bytes=100).get(hostile.url + "/lying").body == b"x" * 10
    hostile.endless("/none")
    with pytest.raises(_http.BodyTooLargeError):
        _http.HttpClient(retries=0, max_bytes=100).get(hostile.url + "/none")


@pytest.mark.parametrize("loopback", [False, True], ids=["open_url", "direct-loopback"])
def test_a_body_sent_a_byte_at_a_time_ends_at_the_deadline(hostile, loopback):
    # every wait is far below the time-out: only a deadline for the whole answer stops it
    hostile.drip("/slow", every=0.05)
    client = _http.HttpClient(timeout=5, retries=1, deadline=1.0, direct_loopback=loopback)
    started = time.monotonic()
    with pytest.raises(_http.UnreachableError) as err:
        client.get(hostile.url + "/slow")
    took = time.monotonic() - started
    assert 2.0 <= took < 5.0, took  # two attempts of 1 s each (and one wait of the socket at most)
    assert hostile.paths() == ["/slow", "/slow"]  # a slow server may be slow for a while: tried again
    assert "the answer had not ended 1 s after the request" in err.value.msg
    assert "one attempt, the whole answer included, is given 4 times timeout" in err.value.msg
    assert "raise retries/timeout" in err.value.msg


def test_the_deadline_is_four_times_the_timeout_unless_given(hostile):
    assert _http.HttpClient(timeout=30).deadline == 120.0
    assert _http.HttpClient(timeout=30, deadline=7).deadline == 7.0
    hostile.drip("/slow", every=0.05)
    started = time.monotonic()
    with pytest.raises(_http.UnreachableError, match="had not ended 2 s after the request"):
        _http.HttpClient(timeout=0.5, retries=0).get(hostile.url + "/slow")
    assert 2.0 <= time.monotonic() - started < 4.0


@pytest.mark.parametrize("how", ["endless", "drip"])
def test_an_error_answers_body_is_read_only_so_far(hostile, how):
    # a 503 whose page never ends: the message needs its first bytes, no more
    if how == "endless":
        hostile.endless("/busy", status=503)
    else:
        hostile.drip("/busy", every=0.05, status=503)
    started = time.monotonic()
    with pytest.raises(_http.UnreachableError, match="answered 503"):
        _http.HttpClient(timeout=1, retries=0).get(hostile.url + "/busy")
    assert time.monotonic() - started < 4.0
    if how == "endless":
        assert hostile.sent("/busy") < 64 * MIB  # what the socket's buffers hold, not what the server can send


def test_the_message_names_the_url_without_its_credentials(hostile):
    hostile.endless("/simple/vllm/?token=q1")
    url = hostile.url.replace("//", "//alice:PW-s3cret@") + "/simple/vllm/?token=q1"
    with pytest.raises(_http.BodyTooLargeError) as err:
        _http.HttpClient(retries=0, max_bytes=1000, allow_plain_http_credentials=True).get(url)
    assert "PW-s3cret" not in err.value.msg and "alice" not in err.value.msg and "q1" not in err.value.msg
    assert err.value.msg.startswith(hostile.url + "/simple/vllm/ sent more than 1000 bytes")


# -- the modules that read JSON through the client ---------------------------------------------------

def test_pypi_published_stops_at_the_cap_of_an_endless_index(hostile, capsys):
    hostile.endless("/pypi/vllm/0.11.0/json")
    started = time.monotonic()
    code, result, _out = run_module(pypi_published.main, {"project": "vllm", "version": "0.11.0",
                                                          "index_url": hostile.url, "timeout": 5}, capsys)
    assert time.monotonic() - started < 15
    assert code == 1 and "sent more than 33554432 bytes (32 MiB)" in result["msg"], result
    assert hostile.paths() == ["/pypi/vllm/0.11.0/json"]


def test_github_digest_stops_at_the_cap_of_an_endless_api(hostile, capsys):
    hostile.endless("/repos/vllm-project/vllm/releases/tags/v0.11.0")
    code, result, _out = run_module(github_digest.main, {"repo": "vllm-project/vllm", "tag": "v0.11.0", "asset": "vllm.whl",
                                                         "api_url": hostile.url, "timeout": 5}, capsys)
    assert code == 1 and "sent more than 33554432 bytes (32 MiB)" in result["msg"], result


def test_hf_revision_stops_at_the_deadline_of_a_dripping_hub(hostile, capsys):
    hostile.drip("/api/models/org/m/revision/main?blobs=true", every=0.05)
    started = time.monotonic()
    code, result, _out = run_module(hf_revision.main, {"repo": "org/m", "endpoint": hostile.url, "timeout": 1,
                                                       "retries": 0}, capsys)
    assert time.monotonic() - started < 8
    assert code == 1 and "had not ended 4 s after the request" in result["msg"], result
