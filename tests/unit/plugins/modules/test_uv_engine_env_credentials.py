"""uv_engine_env through main(): what it prints holds no credential, and uv commands get a scrubbed
environment (issue 11). The runner is a scripted uv that sees the environment a real command
would: the module process's (after the scrub) with the flow's variables on top."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envdir
from ansible_collections.llmfleet.engines.plugins.modules import uv_engine_env
from tests.unit.plugins.module_utils.uvenv_fakes import INDEX, FakeUv

CUTOFF = "2025-10-03T20:10:00Z"
SECRET = "s3cret-Token-42"
MIRROR = INDEX.replace("http://", "http://alice:%s@" % SECRET)


class EnvRunner:
    """A runner factory and runner in one: each command sees os.environ plus its update, as
    ``_proc.Runner`` builds it."""

    def __init__(self, fake):
        self.fake = fake

    def __call__(self, *_args, **_kwargs):
        return self.run

    def run(self, argv, data=None, env=None, cwd=None, timeout=None):
        full = dict(os.environ)
        for name, value in (env or {}).items():
            if value is None:
                full.pop(name, None)
            else:
                full[name] = str(value)
        return self.fake(argv, data=data, env=full, cwd=cwd, timeout=timeout)


@pytest.fixture
def base(tmp_path):
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\nexit 3\n")
    uv.chmod(0o755)
    return {
        "path": str(tmp_path / "engines" / "vllm" / "0.11.0"),
        "engine": "vllm",
        "version": "0.11.0",
        "exclude_newer": CUTOFF,
        "index_url": MIRROR,
        # the fake index's name is no loopback: its credentials over plain http are allowed here (what is
        # tested is where they show; the refusal is test_uv_plain_http_index's)
        "allow_plain_http_password": True,
        "python": "3.11",
        "python_preference": "only-system",
        "uv": str(uv),
        "gpu_check": False,
    }


def run_module(monkeypatch, capsys, args, fake):
    monkeypatch.setattr(uv_engine_env, "Runner", EnvRunner(fake))
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            uv_engine_env.main()
    out = capsys.readouterr().out
    return exc.value.code, out, json.loads(out)


def test_no_credential_in_the_result_the_invocation_or_the_marker(monkeypatch, capsys, base):
    fake = FakeUv()
    code, out, result = run_module(monkeypatch, capsys, dict(base, _ansible_diff=True), fake)
    assert code == 0, result.get("msg")
    assert result["changed"] is True
    assert SECRET not in out
    # the module's arguments, as Ansible shows them, have the password masked (ansible-core 2.21
    # no longer echoes them at all)
    invocation = result.get("invocation")
    assert invocation is None or invocation["module_args"]["index_url"] == "http://alice:********@idx.test/simple"
    assert result["marker"]["spec"]["index_url"] == INDEX
    with open(os.path.join(base["path"], _envdir.MARKER_NAME)) as handle:
        assert SECRET not in handle.read()
    env = fake.call("compile")[3]
    assert env["UV_INDEX_LLMFLEET_DEFAULT_PASSWORD"] == SECRET
    assert all(SECRET not in " ".join(argv) for _k, argv, _d, _e, _t in fake.calls)

    # the token rotates: nothing to build
    again = FakeUv()
    code, out, result = run_module(monkeypatch, capsys, dict(base, index_url=MIRROR.replace(SECRET, "n3w-t0ken")),
                                   again)
    assert code == 0 and result["changed"] is False
    assert again.kinds() == ["version"]
    assert "n3w-t0ken" not in out


def test_a_failure_returns_no_credential(monkeypatch, capsys, base):
    echo = ("error: Failed to fetch: `%s/vllm/`\n"
            "  cause: HTTP status client error (401 Unauthorized) for url (%s/vllm/) %s\n" % (MIRROR, MIRROR, SECRET))
    code, out, result = run_module(monkeypatch, capsys, base, FakeUv(fail={"compile": (1, "", echo)}))
    assert code == 1 and result["failed"] is True
    assert SECRET not in out
    assert "http://idx.test/simple/vllm/" in result["uv_output"]
    assert "llmfleet-default=http://idx.test/simple" in result["cmd"]


def test_an_old_marker_with_credentials_is_rebuilt_and_not_shown(monkeypatch, capsys, base):
    """A marker written before credentials were stripped holds the old token: check mode's
    reasons, marker and diff must not show it."""
    code, _out, first = run_module(monkeypatch, capsys, dict(base, index_url=INDEX), FakeUv())
    assert code == 0
    marker_path = os.path.join(base["path"], _envdir.MARKER_NAME)
    with open(marker_path) as handle:
        marker = json.load(handle)
    marker["spec"]["index_url"] = "http://alice:old-token-1@idx.test/simple"
    with open(marker_path, "w") as handle:
        json.dump(marker, handle)
    code, out, result = run_module(monkeypatch, capsys, dict(base, _ansible_check_mode=True, _ansible_diff=True),
                                   FakeUv())
    assert code == 0 and result["changed"] is True
    assert "old-token-1" not in out and SECRET not in out
    assert result["reasons"] == ["the spec changed: index_url: http://idx.test/simple -> http://idx.test/simple"]


def test_every_uv_command_gets_a_scrubbed_environment(monkeypatch, capsys, base):
    inherited = {
        "UV_SKIP_WHEEL_FILENAME_CHECK": "1",
        "UV_INSECURE_NO_ZIP_VALIDATION": "1",
        "UV_NO_BUILD_ISOLATION": "1",
        "UV_LINK_MODE": "symlink",
        "UV_PYTHON_INSTALL_MIRROR": "https://elsewhere/python",
        "UV_INDEX_URL": "http://not-this-one/simple",
        "UV_HTTP_TIMEOUT": "120",
        "HTTPS_PROXY": "http://proxy.example:3128",
    }
    for name, value in inherited.items():
        monkeypatch.setenv(name, value)
    fake = FakeUv()
    code, _out, result = run_module(monkeypatch, capsys, base, fake)
    assert code == 0, result.get("msg")
    uv_calls = [c for c in fake.calls if c[0] in ("version", "venv", "compile", "install")]
    assert [c[0] for c in uv_calls] == ["version", "venv", "compile", "install"]
    for kind, _argv, _data, env, _timeout in uv_calls:
        for name in ("UV_SKIP_WHEEL_FILENAME_CHECK", "UV_INSECURE_NO_ZIP_VALIDATION", "UV_NO_BUILD_ISOLATION",
                     "UV_PYTHON_INSTALL_MIRROR", "UV_INDEX_URL"):
            assert name not in env, (kind, name)
        assert env["UV_LINK_MODE"] == "clone", kind
        assert env["UV_HTTP_TIMEOUT"] == "120" and env["HTTPS_PROXY"] == "http://proxy.example:3128", kind
        assert env["UV_NO_CONFIG"] == "1", kind
