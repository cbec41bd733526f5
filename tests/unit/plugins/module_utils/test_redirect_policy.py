"""The collection's one redirect policy (_http.redirect_target, _http.follow, HttpClient): only http
and https, a bounded number of redirects, credentials only to their origin and never after a
downgrade, plain-http credentials only to the loopback. The opener is scripted here (as open_url
with follow_redirects="none" answers: a 3xx raises HTTPError); test_hostile_hub.py runs the same
policy through the modules against real servers."""

from __future__ import annotations

import email.message
import io
import urllib.error

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.hub import _fetch
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    MAX_REDIRECTS,
    PlainHttpCredentialError,
    RedirectError,
    SchemeError,
    follow,
    origin,
    plain_http_credential_problem,
    redirect_target,
    split_credentials,
)

TOKEN = "hf_PLANTEDpolicyToken0123456789"
DEVPI = "cm9vdDpQTEFOVEVEZGV2cGlUb2tlbg=="  # base64("root:PLANTEDdevpiToken")
HUB = "https://hub.test"


# -- a scripted opener ------------------------------------------------------------------------

class _Resp(object):
    def __init__(self, url, status, headers, body):
        self.url, self.status, self.body = url, status, body
        self.headers = email.message.Message()
        for key, value in headers.items():
            self.headers[key] = value
        self.closed = False

    def getcode(self):
        return self.status

    def read(self, size=-1):
        size = len(self.body) if size is None or size < 0 else size
        body, self.body = self.body[:size], self.body[size:]
        return body

    def close(self):
        self.closed = True


class Opener(object):
    """``routes``: URL -> (status, headers, body); anything else 404. Every call recorded."""

    def __init__(self, routes=None):
        self.routes = dict(routes or {})
        self.calls = []

    def __call__(self, url, **kwargs):
        self.calls.append({"url": url, "headers": dict(kwargs.get("headers") or {}), "kwargs": kwargs})
        assert kwargs["follow_redirects"] == "none", kwargs  # the policy follows; open_url never does
        status, headers, body = self.routes.get(url, (404, {}, b"not found"))
        if status >= 300:
            hdrs = email.message.Message()
            for key, value in headers.items():
                hdrs[key] = value
            raise urllib.error.HTTPError(url, status, "Status %d" % status, hdrs, io.BytesIO(body))
        return _Resp(url, status, headers, body)

    def sent(self, name):
        """The value of header ``name`` on each call (None where it was not sent)."""
        return [dict((k.lower(), v) for k, v in c["headers"].items()).get(name.lower()) for c in self.calls]


def redirect(location, status=302):
    return (status, {"Location": location}, b"")


OK = (200, {"Content-Type": "text/plain"}, b"the bytes")


# -- schemes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("location, scheme", [
    ("file:///root/secret.env", "file"),
    ("FILE:///etc/shadow", "file"),
    ("ftp://mirror.test/pub/model.safetensors", "ftp"),
    ("data:text/plain;base64,aGk=", "data"),
    ("gopher://old.test/1", "gopher"),
    ("javascript:alert(1)", "javascript"),
])
def test_another_scheme_than_http_and_https_is_refused_naming_it_and_the_sender(location, scheme):
    with pytest.raises(RedirectError) as err:
        redirect_target("http://127.0.0.1:8090/hub/org/m/resolve/c/config.json", location, 0, True)
    assert "redirected to a %s" % scheme in err.value.msg
    assert "(http://127.0.0.1:8090)" in err.value.msg  # the origin that sent it
    assert err.value.sender == "http://127.0.0.1:8090"
    assert "only http and https redirects are followed" in err.value.msg


@pytest.mark.parametrize("location, expected", [
    ("/api/resolve-cache/x?etag=1", "https://hub.test/api/resolve-cache/x?etag=1"),
    ("https://cdn-lfs.hf.co/repos/x?Signature=s", "https://cdn-lfs.hf.co/repos/x?Signature=s"),
    ("http://mirror.test/x", "http://mirror.test/x"),
    ("//cas-bridge.xethub.hf.co/x", "https://cas-bridge.xethub.hf.co/x"),  # scheme-relative: https kept
    ("x", "https://hub.test/a/x"),
])
def test_http_and_https_redirects_are_followed(location, expected):
    target, _keep = redirect_target("https://hub.test/a/b", location, 0, False)
    assert target == expected


def test_the_first_url_must_be_http_or_https_too():
    opener = Opener()
    with pytest.raises(SchemeError, match="file:///etc/hostname is not an http:// or https:// URL"):
        follow("file:///etc/hostname", opener=opener)
    assert opener.calls == []


# -- origins and credentials ------------------------------------------------------------------

@pytest.mark.parametrize("current, location, same", [
    ("https://huggingface.co/org/m/resolve/c/f", "/api/resolve-cache/models/org/m/c/f", True),
    ("https://huggingface.co/a", "https://HuggingFace.co:443/b", True),  # default port, any case
    ("http://127.0.0.1:8090/a", "http://127.0.0.1:8090/b", True),
    ("http://127.0.0.1:8090/a", "http://127.0.0.1:8091/b", False),  # another port: another origin
    ("http://127.0.0.1:8090/a", "http://127.0.0.2:8090/b", False),  # another host
    ("http://127.0.0.1:8090/a", "http://localhost:8090/b", False),  # another name of the same host
    ("https://huggingface.co/a", "https://cdn-lfs.hf.co/b", False),
    ("https://huggingface.co/a", "https://cas-bridge.xethub.hf.co/b", False),
    ("http://hub.test/a", "https://hub.test/b", False),  # another scheme
])
def test_credentials_go_along_only_on_the_same_origin(current, location, same):
    _target, keep = redirect_target(current, location, 0, True)
    assert keep is same
    assert (origin(current) == origin(_target)) is same


def test_without_credentials_there_is_nothing_to_keep():
    assert redirect_target("https://hub.test/a", "/b", 0, False) == ("https://hub.test/b", False)


def test_userinfo_in_a_location_is_dropped():
    target, keep = redirect_target("https://hub.test/a", "https://evil:pw@hub.test/b", 0, True)
    assert target == "https://hub.test/b" and keep is True


@pytest.mark.parametrize("credentials, refused", [(True, True), (False, False)])
def test_a_downgrade_to_plain_http_is_refused_while_credentials_go(credentials, refused):
    if refused:
        with pytest.raises(RedirectError) as err:
            redirect_target("https://hub.test/a", "http://hub.test/a", 0, credentials)
        assert "from https to plain http" in err.value.msg and "(https://hub.test)" in err.value.msg
    else:
        assert redirect_target("https://hub.test/a", "http://hub.test/a", 0, credentials)[0] == "http://hub.test/a"


def test_an_upgrade_to_https_is_another_origin():
    target, keep = redirect_target("http://127.0.0.1:8090/a", "https://127.0.0.1:8443/a", 0, True)
    assert target == "https://127.0.0.1:8443/a" and keep is False


def test_split_credentials_knows_the_collections_credential_headers_in_any_case():
    plain, secret = split_credentials({"Authorization": "Bearer x", "x-devpi-auth": "y", "Cookie": "c",
                                       "Proxy-Authorization": "p", "X-Api-Key": "k", "Accept": "*/*"},
                                      names=("X-API-KEY",))
    assert plain == {"Accept": "*/*"}
    assert sorted(secret) == ["Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key", "x-devpi-auth"]


def test_follow_sends_credentials_to_their_origin_and_never_after_leaving_it():
    opener = Opener({
        HUB + "/org/m/resolve/c/model.safetensors": redirect("/org/m/resolve-moved/c/model.safetensors", 307),
        HUB + "/org/m/resolve-moved/c/model.safetensors": redirect("https://cdn.test/obj?Signature=s"),
        "https://cdn.test/obj?Signature=s": redirect(HUB + "/back-home"),  # back to the origin: still none
        HUB + "/back-home": OK,
    })
    answer = follow(HUB + "/org/m/resolve/c/model.safetensors",
                    headers={"Authorization": "Bearer " + TOKEN, "X-Devpi-Auth": DEVPI, "X-Api-Key": "k1",
                             "Accept": "*/*"},
                    credential_headers=("x-api-key",), opener=opener)
    assert answer.status == 200 and answer.read() == b"the bytes" and answer.url == HUB + "/back-home"
    assert [c["url"] for c in opener.calls] == [
        HUB + "/org/m/resolve/c/model.safetensors", HUB + "/org/m/resolve-moved/c/model.safetensors",
        "https://cdn.test/obj?Signature=s", HUB + "/back-home"]
    assert opener.sent("Authorization") == ["Bearer " + TOKEN, "Bearer " + TOKEN, None, None]
    assert opener.sent("X-Devpi-Auth") == [DEVPI, DEVPI, None, None]
    assert opener.sent("X-Api-Key") == ["k1", "k1", None, None]
    assert opener.sent("Accept") == ["*/*"] * 4  # the other headers go everywhere
    assert [hop[1] for hop in answer.hops] == [307, 302, 302]


def test_follow_keeps_the_urls_userinfo_on_its_origin_only():
    opener = Opener({
        "https://root:pw@devpi.test/a": redirect("/b"),
        "https://root:pw@devpi.test/b": redirect("https://other.test/c"),
        "https://other.test/c": OK,
    })
    answer = follow("https://root:pw@devpi.test/a", opener=opener)
    assert [c["url"] for c in opener.calls] == [
        "https://root:pw@devpi.test/a", "https://root:pw@devpi.test/b", "https://other.test/c"]
    assert answer.url == "https://other.test/c" and answer.hops[0][0] == "https://devpi.test/a"


def test_credentials_given_apart_from_the_headers_go_the_same_way():
    opener = Opener({HUB + "/a": redirect("https://cdn.test/a"), "https://cdn.test/a": OK})
    follow(HUB + "/a", headers={"Range": "bytes=5-"}, credentials={"Authorization": "Bearer " + TOKEN},
           opener=opener)
    assert opener.sent("Authorization") == ["Bearer " + TOKEN, None]
    assert opener.sent("Range") == ["bytes=5-", "bytes=5-"]


# -- the bound --------------------------------------------------------------------------------

def test_redirects_are_bounded():
    assert MAX_REDIRECTS == 10
    target, _keep = redirect_target("https://hub.test/a", "/a", MAX_REDIRECTS - 1, False)
    assert target == "https://hub.test/a"
    with pytest.raises(RedirectError, match="redirected more than 10 times"):
        redirect_target("https://hub.test/a", "/a", MAX_REDIRECTS, False)


def test_an_endless_loop_stops_after_the_bound():
    opener = Opener({HUB + "/loop": redirect("/loop")})
    with pytest.raises(RedirectError) as err:
        follow(HUB + "/loop", headers={"Authorization": "Bearer " + TOKEN}, opener=opener)
    assert len(opener.calls) == MAX_REDIRECTS + 1
    assert "redirected more than 10 times" in err.value.msg and TOKEN not in err.value.msg


def test_a_shorter_bound_can_be_asked():
    opener = Opener({HUB + "/a": redirect("/b"), HUB + "/b": redirect("/c"), HUB + "/c": OK})
    with pytest.raises(RedirectError, match="more than 1 times"):
        follow(HUB + "/a", opener=opener, max_redirects=1)
    assert follow(HUB + "/a", opener=opener, max_redirects=2).status == 200


# -- methods ----------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_only_get_and_head_are_redirected(method):
    opener = Opener({HUB + "/+login": redirect("https://elsewhere.test/+login", 307)})
    answer = follow(HUB + "/+login", method=method, data=b'{"password": "pw"}',
                    headers={"X-Devpi-Auth": DEVPI}, opener=opener)
    assert answer.status == 307 and answer.headers["location"] == "https://elsewhere.test/+login"
    assert [c["url"] for c in opener.calls] == [HUB + "/+login"]


def test_head_is_redirected_as_head():
    opener = Opener({HUB + "/a": redirect("https://cdn.test/a"), "https://cdn.test/a": OK})
    follow(HUB + "/a", method="HEAD", opener=opener)
    assert [c["kwargs"]["method"] for c in opener.calls] == ["HEAD", "HEAD"]


def test_a_redirect_without_location_is_the_answer():
    opener = Opener({HUB + "/a": (302, {}, b"")})
    assert follow(HUB + "/a", opener=opener).status == 302


# -- plain http and the loopback ---------------------------------------------------------------

@pytest.mark.parametrize("url, refused", [
    ("http://hub.example:8090/api", True),
    ("http://10.0.0.5/api", True),
    ("http://[fd00::5]:8090/api", True),
    ("http://127.0.0.1.nip.io/api", True),  # a name is remote, whatever it resolves to
    ("http://127.0.0.1:8090/api", False),
    ("http://127.0.0.2:8090/api", False),
    ("http://localhost/api", False),
    ("http://[::1]:8090/api", False),
    ("https://hub.example/api", False),
])
def test_plain_http_credentials_only_to_the_loopback(url, refused):
    problem = plain_http_credential_problem(url, "the token", "allow_plain_http_token")
    assert bool(problem) is refused
    if refused:
        assert problem.startswith("refusing to send the token to ")
        assert "set allow_plain_http_token=true" in problem


def test_plain_http_credentials_are_refused_before_anything_is_sent_unless_allowed():
    opener = Opener({"http://hub.example/a": OK})
    for kwargs in ({"headers": {"Authorization": "Bearer " + TOKEN}}, {"credentials": {"X-Devpi-Auth": DEVPI}}):
        with pytest.raises(PlainHttpCredentialError) as err:
            follow("http://hub.example/a", opener=opener, allow_option="allow_plain_http_token", **kwargs)
        assert TOKEN not in err.value.msg and DEVPI not in err.value.msg
        assert "set allow_plain_http_token=true" in err.value.msg
    with pytest.raises(PlainHttpCredentialError, match="the URL's userinfo"):
        follow("http://root:pw@hub.example/a", opener=opener)
    assert opener.calls == []
    assert follow("http://hub.example/a", opener=opener).status == 200  # no credential: fine
    assert follow("http://hub.example/a", headers={"Authorization": "Bearer " + TOKEN}, opener=opener,
                  allow_plain_http_credentials=True).status == 200


# -- the client -------------------------------------------------------------------------------

def test_the_client_refuses_a_bad_redirect_at_once_and_never_shows_the_token(monkeypatch):
    opener = Opener({HUB + "/api/models/org/m": redirect("file:///root/%s.env" % TOKEN)})
    monkeypatch.setattr(_http, "open_url", opener)
    client = _http.HttpClient(retries=3, secrets=[TOKEN])
    with pytest.raises(RedirectError) as err:
        client.get_json(HUB + "/api/models/org/m", headers={"Authorization": "Bearer " + TOKEN})
    assert len(opener.calls) == 1  # not tried again
    assert "redirected to a file:// URL" in err.value.msg and TOKEN not in err.value.msg


def test_the_client_refuses_plain_http_credentials_by_default(monkeypatch):
    opener = Opener()
    monkeypatch.setattr(_http, "open_url", opener)
    with pytest.raises(PlainHttpCredentialError):
        _http.HttpClient().get("http://hub.example/a", headers={"Authorization": "Bearer " + TOKEN})
    assert opener.calls == []


def test_the_client_names_a_redirect_it_does_not_follow(monkeypatch):
    opener = Opener({HUB + "/root/pypi": redirect("https://elsewhere.test/root/pypi?sig=1", 307)})
    monkeypatch.setattr(_http, "open_url", opener)
    with pytest.raises(_http.HttpStatusError) as err:
        _http.HttpClient(retries=0).request("PUT", HUB + "/root/pypi", {"X-Devpi-Auth": DEVPI}, b"{}")
    assert err.value.status == 307
    assert "a redirect to https://elsewhere.test/root/pypi, not followed" in err.value.msg
    assert DEVPI not in err.value.msg and len(opener.calls) == 1


def test_the_hub_downloads_use_the_same_policy():
    assert _fetch.MAX_REDIRECTS == MAX_REDIRECTS
    assert _fetch.origin is _http.origin
