"""A scripted stand-in for ``open_url``, shared by the look-up modules' unit tests.

Each URL gets a queue of answers, used in order (the last one repeats). An answer is a
``Reply`` or an exception instance to raise (``socket.timeout()``, ``URLError(...)``).
Every call is recorded with its headers, so tests can check what was sent.
"""

from __future__ import annotations

import email.message
import io
import json
import urllib.error


class Reply:
    def __init__(self, status=200, json_body=None, body=None, headers=None, content_type=None,
                 read_error=None):
        self.status = status
        self.read_error = read_error
        if body is None:
            body = b"" if json_body is None else json.dumps(json_body).encode()
        self.body = body
        self.headers = dict(headers or {})
        if content_type is None:
            content_type = "application/json" if json_body is not None else "text/plain"
        self.headers.setdefault("Content-Type", content_type)


class _Resp:
    def __init__(self, url, reply):
        self._url = url
        self.status = reply.status
        self.headers = email.message.Message()
        for key, value in reply.headers.items():
            self.headers[key] = value
        self._body = io.BytesIO(reply.body)
        self._read_error = reply.read_error

    def getcode(self):
        return self.status

    def geturl(self):
        return self._url

    def read(self, size=-1):
        # as http.client's answer reads: at most ``size`` bytes, b"" at the end
        if self._read_error is not None:
            raise self._read_error
        return self._body.read(size)

    def close(self):
        pass


class FakeHttp:
    def __init__(self):
        self.routes = {}
        self.calls = []

    def add(self, url, *answers):
        self.routes.setdefault(url, []).extend(answers)
        return self

    def count(self, url):
        return sum(1 for call in self.calls if call["url"] == url)

    def open_url(self, url, **kwargs):
        self.calls.append({"url": url, "headers": dict(kwargs.get("headers") or {}), "kwargs": kwargs})
        queue = self.routes.get(url)
        if not queue:
            reply = Reply(404, {"message": "Not Found"})
        else:
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply, BaseException):
            raise reply
        if reply.status >= 400:
            hdrs = email.message.Message()
            for key, value in reply.headers.items():
                hdrs[key] = value
            raise urllib.error.HTTPError(url, reply.status, _REASONS.get(reply.status, "Error"), hdrs,
                                         io.BytesIO(reply.body))
        return _Resp(url, reply)


_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def install(monkeypatch):
    """Patch ``_http.open_url`` and ``_http._sleep``: the fake server and the list of waits."""
    from ansible_collections.llmfleet.engines.plugins.module_utils.common import _http

    fake = FakeHttp()
    sleeps = []
    monkeypatch.setattr(_http, "open_url", fake.open_url)
    monkeypatch.setattr(_http, "_sleep", sleeps.append)
    return fake, sleeps


def run_module(main, args, capsys):
    """Run a module's ``main()`` with ``args``; its exit code and the JSON it printed."""
    import pytest
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    out = capsys.readouterr().out
    return exc.value.code, json.loads(out), out


def warnings_text(result):
    """The module's warnings as strings (ansible-core 2.19 sends them as structured summaries)."""
    out = []
    for item in result.get("warnings") or []:
        if isinstance(item, dict):
            item = (item.get("event") or {}).get("msg") or item.get("msg") or str(item)
        out.append(item)
    return out
