"""No ``${NAME}`` reaches uv in a requirement or lock line (security review, install side, finding 1).

uv expands ``${NAME}`` in requirement lines from its environment, where the indexes' credentials are
(``UV_INDEX_<NAME>_PASSWORD``) and whatever else the controller or the node holds (``GITHUB_TOKEN``). A
fleet cache that lists the right wheel (right sha256) at ``http://elsewhere/${GITHUB_TOKEN}/vllm-...whl``
had uv_fleet_lock send the token there, and every node's install its own. Both modules refuse such a value
before uv runs at all (the fake uv records no call), naming the option and the value."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _proc
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _urls
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvcmd, _uvlock
from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, LOCK_0110, FakeUv, module_runner
from tests.unit.plugins.modules import test_uv_engine_env as engine_env
from tests.unit.plugins.modules import test_uv_fleet_lock as fleet_lock

WHEEL = "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl"
SHA = "a" * 64
HOSTILE_URLS = [
    "http://127.0.0.2:9/${GITHUB_TOKEN}/" + WHEEL,
    "http://127.0.0.2:9/${UV_INDEX_LLMFLEET_DEFAULT_PASSWORD}/" + WHEEL,
    "http://127.0.0.2:9/$GITHUB_TOKEN/" + WHEEL,
    "http://127.0.0.2:9/%24%7BGITHUB_TOKEN%7D/" + WHEEL,
    "http://127.0.0.2:9/%2524%257BGITHUB_TOKEN%257D/" + WHEEL,
    "http://127.0.0.2:9/x/" + WHEEL + "\n--index-url http://127.0.0.2:9/",
    "http://127.0.0.2:9/x%0a/" + WHEEL,
    "http://127.0.0.2:9/x y/" + WHEEL,
]
IDS = ["braces", "index-password", "bare", "escaped", "double-escaped", "newline", "escaped-newline", "space"]


def _uv(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    return str(uv)


def fleet_base(tmp_path):
    return {"dest": str(tmp_path / "locks" / "vllm-0.11.0-x86_64.txt"), "engine": "vllm", "version": "0.11.0",
            "exclude_newer": fleet_lock.CUTOFF, "index_url": INDEX, "python_version": "3.12",
            "python_platform": "x86_64-manylinux_2_28", "uv": _uv(tmp_path)}


def env_base(tmp_path):
    return {"path": str(tmp_path / "engines" / "vllm" / "0.11.0"), "engine": "vllm", "version": "0.11.0",
            "exclude_newer": engine_env.CUTOFF, "index_url": INDEX, "python": "3.11",
            "python_preference": "only-system", "uv": _uv(tmp_path), "gpu_check": False}


@pytest.fixture
def uv(monkeypatch):
    fake = FakeUv()
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(fake))
    return fake


@pytest.mark.parametrize("url", HOSTILE_URLS, ids=IDS)
def test_uv_fleet_lock_refuses_the_wheel_url(uv, capsys, tmp_path, url):
    base = fleet_base(tmp_path)
    code, result = fleet_lock.run_module(dict(base, wheel={"url": url, "sha256": SHA}), capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("wheel.url %r cannot become a requirement line: it holds " % url)
    assert "fleet cache's listing (devpi_wheel)" in result["msg"] and "nothing was done" in result["msg"]
    assert result["option"] == "wheel.url"
    assert uv.kinds() == []
    assert not (tmp_path / "locks").exists()


@pytest.mark.parametrize("url", HOSTILE_URLS, ids=IDS)
def test_uv_engine_env_refuses_the_wheel_url(uv, capsys, tmp_path, url):
    base = env_base(tmp_path)
    code, result = engine_env.run_module(dict(base, wheel={"url": url, "sha256": SHA}), capsys)
    assert code == 1 and result["failed"] is True
    assert result["msg"].startswith("wheel.url %r cannot become a requirement line: it holds " % url)
    assert uv.kinds() == []
    assert not (tmp_path / "engines").exists()


@pytest.mark.parametrize("module", ["fleet_lock", "engine_env"])
@pytest.mark.parametrize("line", ["torch @ https://download.test/${GITHUB_TOKEN}/torch-2.8.0.whl", "x==${V}",
                                  "x==1\n-r http://127.0.0.2/more.txt"])
def test_both_refuse_a_requirement_line_with_a_dollar_or_a_line_break(uv, capsys, tmp_path, module, line):
    test = fleet_lock if module == "fleet_lock" else engine_env
    base = (fleet_base if module == "fleet_lock" else env_base)(tmp_path)
    code, result = test.run_module(dict(base, requirements=["numpy==2.0.0", line]), capsys)
    assert code == 1 and result["msg"].startswith("requirements[1] %r cannot become a requirement line" % line)
    assert uv.kinds() == []


def test_uv_engine_env_refuses_a_lock_with_a_dollar_before_uv_runs(uv, capsys, tmp_path):
    hostile = "http://127.0.0.2:9/${GITHUB_TOKEN}/" + WHEEL
    lock = LOCK_0110.replace("vllm==0.11.0 \\", "vllm @ %s \\" % hostile)
    assert hostile in lock
    args = dict(env_base(tmp_path), lock=lock)
    del args["exclude_newer"]
    code, result = engine_env.run_module(args, capsys)
    assert code == 1 and result["failed"] is True
    assert "a '$' (or a %-escape of one) in a lock: uv expands ${NAME}" in result["msg"]
    assert uv.kinds() == []


def test_uv_fleet_lock_refuses_a_compiled_lock_with_a_dollar(monkeypatch, capsys, tmp_path):
    """What uv itself wrote is checked too (a hostile index's page can give any file URL)."""
    lock = LOCK_0110.replace("# via vllm", "# via vllm\n    # from http://127.0.0.2/%24%7BGITHUB_TOKEN%7D/")
    fake = fleet_lock.FleetUv(lock=lock)
    monkeypatch.setattr(_proc.Runner, "__call__", module_runner(fake))
    code, result = fleet_lock.run_module(fleet_base(tmp_path), capsys)
    assert code == 1 and "a '$' (or a %-escape of one) in a lock" in result["msg"]
    assert "pylock" not in fake.kinds()
    assert not (tmp_path / "locks" / "vllm-0.11.0-x86_64.txt").exists()


LOCK_LINES = [
    ("vllm @ https://h/${GITHUB_TOKEN}/%s --hash=sha256:%s" % (WHEEL, SHA), "a '$' (or a %-escape of one)"),
    ("vllm @ https://h/%%24%%7BX%%7D/%s --hash=sha256:%s" % (WHEEL, SHA), "a '$' (or a %-escape of one)"),
    ("vllm==0.11.0 --hash=sha256:%s  # ${GITHUB_TOKEN}" % SHA, "a '$' (or a %-escape of one)"),
    ("vllm==0.11.0\x0c--hash=sha256:%s" % SHA, "a control character ('\\x0c')"),
    ("vllm==0.11.0\r--index-url=http://h/ --hash=sha256:%s" % SHA, "a control character ('\\r')"),
    ("vllm @ https://h/x%%0a/%s --hash=sha256:%s" % (WHEEL, SHA), "decodes to a control character"),
]


@pytest.mark.parametrize("line, piece", LOCK_LINES)
def test_lock_text_problems_name_the_line(line, piece):
    problems = _uvlock.lock_text_problems(line + "\n")
    assert len(problems) == 1 and problems[0].startswith("line 1") and piece in problems[0], problems


@pytest.mark.parametrize("url", [
    "https://github.com/vllm-project/vllm/releases/download/v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl",
    "http://cache.test:3141/root/github/+f/3ab/c0ffee/vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl",
    "https://alice:pa$$word@cache.test/root/github/" + WHEEL,  # a '$' in the userinfo never reaches the line
])
def test_ordinary_urls_pass(url):
    assert _urls.url_text_problem(url) is None
    _uvcmd.check_requirement_inputs("vllm", "0.20.0", ["torch==2.8.0; python_version >= '3.10'"], {"url": url})
    assert _uvlock.lock_text_problems("vllm @ %s --hash=sha256:%s\n" % (_urls.strip_userinfo(url), SHA)) == []
