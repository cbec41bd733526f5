"""tests/wheelhouse.py, the simple index the molecule scenarios install from: its pages where they
are asked to be (PyPI's /simple, PyTorch's /whl/cpu), HEAD answered as uv asks it, 404 elsewhere."""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request

import pytest

from tests.wheelhouse import Wheelhouse

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@pytest.fixture
def house(tmp_path):
    (tmp_path / WHEEL).write_bytes(b"not really a wheel")
    served = Wheelhouse(tmp_path, index_path="whl/cpu").start()
    yield served
    served.stop()


def get(url, method="GET"):
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as answer:
        return answer.status, dict(answer.headers), answer.read()


def test_the_pages_are_under_the_index_path(house):
    status, _headers, body = get(house.url + "/whl/cpu/torch/")
    digest = hashlib.sha256(b"not really a wheel").hexdigest()
    assert status == 200 and ("/files/%s#sha256=%s" % (WHEEL.replace("+", "%2B"), digest)).encode() in body
    assert b'href="/whl/cpu/torch/"' in get(house.url + "/whl/cpu/")[2]
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(house.url + "/simple/torch/")
    assert missing.value.code == 404


def test_head_answers_the_length_without_the_body_and_is_not_counted(house):
    url = house.url + "/files/" + WHEEL.replace("+", "%2B")
    status, headers, body = get(url, "HEAD")
    assert (status, headers["Content-Length"], body) == (200, "18", b"")
    assert house.requests == {}
    assert get(url)[2] == b"not really a wheel" and house.requests == {WHEEL: 1}
