"""What keeps the uv flow's result independent of the node and its secrets out of sight (issue 11).

- no source builds: ``--no-build`` on compile and install, and a clear message when uv finds no
  wheel this node can take;
- credentials in index URLs: never on a command line, in the marker, the lock or anything
  returned; uv gets them from its environment; a rotated token does not rebuild;
- the inherited environment: every UV_* variable but a short allowlist is dropped.

The uv texts below are what uv 0.13.8 printed against the fake upstream (``--no-build``, a
platform without a fitting wheel).
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envdir
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _errors
from ansible_collections.llmfleet.engines.plugins.module_utils.node import _gpu
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _urls
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvcmd
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvenv
from tests.unit.plugins.module_utils.test_uvenv import PARAMS
from tests.unit.plugins.module_utils.uvenv_fakes import (
    INDEX, LOCK_0200_CU129, TORCH_INDEX, WHEEL_SHA, WHEEL_URL, FakeUv)

SECRET = "s3cret-Token-42"
MIRROR = "http://alice:%s@idx.test/simple" % SECRET
TORCH_MIRROR = "http://bob:%s@idx.test/torch/cu129" % SECRET

# uv 0.13.8, `uv pip compile --no-build` for a platform without a fitting wheel (old glibc)
UV_NO_PLATFORM_WHEEL = (
    "Resolved 3 packages in 139ms\n"
    "error: No solution found when resolving dependencies\n"
    "  cause: Because vllm==0.20.0 has no wheels with a matching platform tag (e.g., `manylinux_2_17_x86_64`) "
    "and you require vllm==0.20.0, we can conclude that your requirements are unsatisfiable.\n"
    "\n"
    "hint: Wheels are available for `vllm` (v0.20.0) on the following platforms: `manylinux_2_28_aarch64`, "
    "`manylinux_2_28_x86_64`\n")
# the same for an architecture with no wheel at all (only the sdist)
UV_NO_USABLE_WHEEL = (
    "error: No solution found when resolving dependencies\n"
    "  cause: Because vllm==0.11.0 has no usable wheels and you require vllm==0.11.0, we can conclude that your "
    "requirements are unsatisfiable.\n"
    "\n"
    "hint: Wheels are required for `vllm` because building from source is disabled for all packages (i.e., with "
    "`--no-build`)\n")
# `uv pip install --no-build` of a lock whose engine is an sdist
UV_INSTALL_SDIST = (
    "Using Python 3.11.2 environment at: v1\n"
    "Resolved 3 packages in 8ms\n"
    "error: Building source distributions is disabled, but attempted to build `vllm`\n")


@pytest.fixture
def uv_bin(tmp_path):
    path = tmp_path / "bin" / "uv"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 3\n")
    path.chmod(0o755)
    return str(path)


def make_flow(tmp_path, uv_bin, fake, **params):
    p = dict(PARAMS, path=str(tmp_path / "engines" / "vllm" / "0.11.0"), uv=uv_bin, **params)
    return _uvenv.EngineEnv(p, lambda *_a, **_k: fake, uv_bin,
                            gpu=lambda *a: {"skipped": True, "reason": "test"})


def files_under(root):
    """{path: text} of every file under root (the environments, locks, progress, cache)."""
    found = {}
    for directory, _dirs, names in os.walk(str(root)):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                found[path] = handle.read().decode("utf-8", "replace")
    return found


# --------------------------------------------------------------------------------------------
# no source builds


def test_compile_and_install_never_build_from_source(tmp_path, uv_bin):
    fake = FakeUv()
    make_flow(tmp_path, uv_bin, fake).present()
    assert "--no-build" in fake.call("compile")[1]
    assert "--no-build" in fake.call("install")[1]


@pytest.mark.parametrize("output, package, why", [
    (UV_NO_PLATFORM_WHEEL, "vllm==0.20.0", "wheels with a matching platform tag (e.g., `manylinux_2_17_x86_64`)"),
    (UV_NO_USABLE_WHEEL, "vllm==0.11.0", "usable wheels"),
    (UV_INSTALL_SDIST, "vllm", None),
    ("  cause: Because torch==2.9.0 has no wheels with a matching Python ABI tag (e.g., `cp314`) and vllm==0.11.2 "
     "depends on torch==2.9.0", "torch==2.9.0", "wheels with a matching Python ABI tag (e.g., `cp314`)"),
])
def test_no_wheel_reads_uv_refusals(output, package, why):
    assert _uvcmd.no_wheel(output) == (package, why)


@pytest.mark.parametrize("output", [
    "error: No solution found when resolving dependencies\n  cause: Because there is no version of vllm==9.9.9",
    "error: Failed to download\n  Hash mismatch for vllm\n",
    "",
])
def test_no_wheel_ignores_other_failures(output):
    assert _uvcmd.no_wheel(output) is None


@pytest.mark.parametrize("kind, output, error, package", [
    ("compile", UV_NO_PLATFORM_WHEEL, _errors.ResolveFailed, "vllm==0.20.0"),
    ("compile", UV_NO_USABLE_WHEEL, _errors.ResolveFailed, "vllm==0.11.0"),
    ("install", UV_INSTALL_SDIST, _errors.InstallFailed, "vllm"),
], ids=["old-glibc", "no-wheel-for-arch", "sdist-at-install"])
def test_no_wheel_failure_names_the_node_and_says_no_source_builds(tmp_path, uv_bin, monkeypatch, kind, output,
                                                                   error, package):
    monkeypatch.setattr(_gpu, "glibc_version", lambda: "2.17")
    monkeypatch.setattr(_gpu, "architecture", lambda: "x86_64")
    fake = FakeUv(fail={kind: (1, "", output)})
    with pytest.raises(error) as exc:
        make_flow(tmp_path, uv_bin, fake).present()
    msg = exc.value.msg
    assert "this node (x86_64, glibc 2.17) cannot take a wheel of %s" % package in msg
    assert "no source builds are done" in msg
    assert "--no-build" in msg
    assert "The environment at %s is unchanged" % (tmp_path / "engines" / "vllm" / "0.11.0") in msg
    assert exc.value.details["uv_output"] == _uvenv.last_lines(output)
    assert not (tmp_path / "engines" / "vllm" / "0.11.0.partial").exists()


# --------------------------------------------------------------------------------------------
# credentials in URLs


@pytest.mark.parametrize("url, clean, user, password", [
    ("https://alice:tok@mirror.example/simple", "https://mirror.example/simple", "alice", "tok"),
    ("https://al%40ice:p%3Aw%2F@mirror:8443/simple/", "https://mirror:8443/simple/", "al@ice", "p:w/"),
    ("https://TOKEN@mirror/simple", "https://mirror/simple", "TOKEN", None),
    ("https://user:@mirror/simple", "https://mirror/simple", "user", None),
    ("https://mirror/simple", "https://mirror/simple", None, None),
    ("http://idx.test/files/a@b.whl", "http://idx.test/files/a@b.whl", None, None),
    ("file:///srv/mirror", "file:///srv/mirror", None, None),
    ("/srv/local-index", "/srv/local-index", None, None),
    (None, None, None, None),
])
def test_split_userinfo(url, clean, user, password):
    assert _urls.split_userinfo(url) == (clean, user, password)
    assert _urls.strip_userinfo(url) == clean


def test_redact_takes_userinfo_and_secrets_out_of_any_text():
    text = ("error: Failed to fetch: `https://alice:%s@mirror/simple/vllm/` (https://TOKEN@other/x) "
            "and %s alone, or encoded %s" % (SECRET, SECRET, "p%3Aw"))
    out = _urls.redact({"msg": text, "cmd": ["uv", MIRROR], "n": 3, "ok": None}, {SECRET, "p:w"})
    assert out == {"msg": "error: Failed to fetch: `https://mirror/simple/vllm/` (https://other/x) "
                          "and ******** alone, or encoded ********",
                   "cmd": ["uv", "http://idx.test/simple"], "n": 3, "ok": None}
    # a short secret is left to the URL rule
    assert _urls.redact("a b c", {"b"}) == "a b c"


def test_url_secrets():
    assert _urls.url_secrets(MIRROR, "https://TOKEN@h/x", "https://h/y", None) == {SECRET, "TOKEN"}
    assert _uvcmd.param_secrets(dict(PARAMS, index_url=MIRROR, extra_index_url=["https://t0ken@h/x"],
                                     wheel={"url": "https://u:w-pass@h/w.whl", "sha256": WHEEL_SHA},
                                     python_install_mirror="https://m:m-pass@h/py")) == {
        SECRET, "t0ken", "w-pass", "m-pass"}


def test_credentialed_indexes_are_named_and_their_credentials_go_to_the_environment():
    args = _uvcmd.index_args(MIRROR, [TORCH_INDEX, "https://TOKEN@gpu.example/whl"], "unsafe-best-match")
    assert args == ["--default-index", "llmfleet-default=http://idx.test/simple",
                    "--index", TORCH_INDEX,
                    "--index", "llmfleet-extra-2=https://gpu.example/whl",
                    "--index-strategy", "unsafe-best-match"]
    assert _uvcmd.index_credentials(MIRROR, [TORCH_INDEX, "https://TOKEN@gpu.example/whl"]) == {
        "UV_INDEX_LLMFLEET_DEFAULT_USERNAME": "alice",
        "UV_INDEX_LLMFLEET_DEFAULT_PASSWORD": SECRET,
        "UV_INDEX_LLMFLEET_EXTRA_2_USERNAME": "TOKEN",
    }
    # an index without credentials keeps its plain form
    assert _uvcmd.index_args(INDEX) == ["--default-index", INDEX]
    assert _uvcmd.index_credentials(INDEX, [TORCH_INDEX]) == {}
    env = _uvcmd.uv_environ("/c", "/p", "only-system", None, _uvcmd.index_credentials(MIRROR))
    assert env["UV_INDEX_LLMFLEET_DEFAULT_PASSWORD"] == SECRET


def test_the_spec_has_no_credentials_and_a_rotated_token_is_the_same_spec():
    params = dict(PARAMS, index_url=MIRROR, extra_index_url=[TORCH_MIRROR],
                  wheel={"url": "http://alice:%s@idx.test/w/vllm-0.20.0-py3-none-any.whl" % SECRET,
                         "sha256": WHEEL_SHA})
    spec = _envdir.wanted_spec(params, "0.13.8")
    assert SECRET not in json.dumps(spec) and "alice" not in json.dumps(spec)
    assert spec["index_url"] == INDEX and spec["extra_index_url"] == [TORCH_INDEX]
    assert spec["wheel"]["url"] == "http://idx.test/w/vllm-0.20.0-py3-none-any.whl"
    rotated = dict(params, index_url=MIRROR.replace(SECRET, "new-token"),
                   extra_index_url=[TORCH_MIRROR.replace("bob:" + SECRET, "carol:other")])
    assert _envdir.wanted_spec(rotated, "0.13.8") == spec
    # the same URL without any credentials is the same spec too; another host is not
    assert _envdir.wanted_spec(dict(params, index_url=INDEX, extra_index_url=[TORCH_INDEX]), "0.13.8") == spec
    assert _envdir.wanted_spec(dict(params, index_url="http://alice:x@other/simple"), "0.13.8") != spec


def test_wheel_credentials_need_an_index_with_them_on_the_same_host():
    wheel = "https://alice:%s@mirror.example:443/gh/vllm-0.20.0-py3-none-any.whl" % SECRET
    _uvcmd.check_wheel_credentials(wheel, "https://alice:%s@mirror.example/simple" % SECRET)
    _uvcmd.check_wheel_credentials(WHEEL_URL, None)  # no credentials: nothing to check
    for index in ("https://mirror.example/simple", "https://alice:%s@other.example/simple" % SECRET,
                  "https://alice:older@mirror.example/simple", "http://alice:%s@mirror.example/simple" % SECRET):
        with pytest.raises(_errors.OptionError) as exc:
            _uvcmd.check_wheel_credentials(wheel, index)
        assert "no index_url or extra_index_url on https://mirror.example:443 carries the same" in exc.value.msg
        assert SECRET not in exc.value.msg


def test_credentials_reach_uv_only_through_its_environment(tmp_path, uv_bin):
    fake = FakeUv(lock=LOCK_0200_CU129, version="0.20.0+cu129")
    wheel_url = WHEEL_URL.replace("http://", "http://alice:%s@" % SECRET)
    # the wheel's host has an index with the same credentials (uv sends them for the wheel too)
    gh_index = "http://alice:%s@gh.test/simple" % SECRET
    # the fake indexes' names are no loopback: plain http with credentials allowed (the refusal is
    # test_uv_plain_http_index's)
    params = dict(index_url=MIRROR, extra_index_url=[TORCH_MIRROR, gh_index], index_strategy="unsafe-best-match",
                  version="0.20.0", wheel={"url": wheel_url, "sha256": WHEEL_SHA}, allow_plain_http_password=True)
    flow = make_flow(tmp_path, uv_bin, fake, **params)
    result = flow.present()
    assert result["changed"] is True
    for kind, argv, data, _env, _timeout in fake.calls:
        assert SECRET not in " ".join(argv) and "alice" not in " ".join(argv), kind
        assert SECRET not in (data or ""), kind
    for kind in ("compile", "install"):
        argv = fake.call(kind)[1]
        assert argv[argv.index("--default-index") + 1] == "llmfleet-default=http://idx.test/simple"
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--index"] == [
            "llmfleet-extra-1=http://idx.test/torch/cu129", "llmfleet-extra-2=http://gh.test/simple"]
        env = fake.call(kind)[3]
        assert env["UV_INDEX_LLMFLEET_DEFAULT_USERNAME"] == "alice"
        assert env["UV_INDEX_LLMFLEET_DEFAULT_PASSWORD"] == SECRET
        assert env["UV_INDEX_LLMFLEET_EXTRA_1_USERNAME"] == "bob"
        assert env["UV_INDEX_LLMFLEET_EXTRA_2_PASSWORD"] == SECRET
    assert fake.call("compile")[2] == "vllm @ %s#sha256=%s" % (WHEEL_URL, WHEEL_SHA)
    # nothing written beside or in the environment holds a credential
    written = files_under(tmp_path / "engines")
    assert os.path.join(flow.path, _envdir.MARKER_NAME) in written
    assert [path for path, text in written.items() if SECRET in text or "alice" in text] == []
    assert SECRET not in json.dumps(result) and "alice" not in json.dumps(result)
    marker = json.loads(written[os.path.join(flow.path, _envdir.MARKER_NAME)])
    assert marker["spec"]["index_url"] == INDEX
    assert marker["spec"]["wheel"]["url"] == WHEEL_URL
    # a rotated token: up to date, nothing runs but uv --version
    again = FakeUv()
    rotated = {k: (json.loads(json.dumps(v).replace(SECRET, "rotated-token")) if k != "version" else v)
               for k, v in params.items()}
    assert make_flow(tmp_path, uv_bin, again, **rotated).present()["changed"] is False
    assert again.kinds() == ["version"]


@pytest.mark.parametrize("kind, error", [("venv", _errors.VenvFailed), ("compile", _errors.ResolveFailed),
                                         ("install", _errors.InstallFailed)])
def test_a_failed_uv_command_reports_no_credentials(tmp_path, uv_bin, kind, error):
    echo = ("error: Failed to fetch: `http://alice:%s@idx.test/simple/vllm/`\n"
            "  cause: HTTP status client error (401 Unauthorized) for url (%s)\n" % (SECRET, MIRROR))
    fake = FakeUv(fail={kind: (1, "", echo)})
    with pytest.raises(error) as exc:
        make_flow(tmp_path, uv_bin, fake, index_url=MIRROR, allow_plain_http_password=True,
                  python_install_mirror="https://py:%s@mirror/python" % SECRET).present()
    reported = json.dumps({"msg": exc.value.msg, "details": exc.value.details})
    assert SECRET not in reported and "alice" not in reported
    assert "http://idx.test/simple/vllm/" in exc.value.details["uv_output"]
    if kind != "venv":
        assert "llmfleet-default=http://idx.test/simple" in exc.value.details["cmd"]


def test_a_wheel_with_credentials_no_index_carries_is_refused_before_anything_runs(tmp_path, uv_bin):
    fake = FakeUv()
    with pytest.raises(_errors.OptionError, match="uv would write them into the lock file"):
        make_flow(tmp_path, uv_bin, fake, version="0.20.0",
                  wheel={"url": "https://alice:%s@gh.example/vllm-0.20.0-py3-none-any.whl" % SECRET,
                         "sha256": WHEEL_SHA}).present()
    assert fake.kinds() == ["version"]
    assert not (tmp_path / "engines" / "vllm" / "0.11.0.partial").exists()


# --------------------------------------------------------------------------------------------
# the inherited environment


INHERITED = {
    "UV_SKIP_WHEEL_FILENAME_CHECK": "1",
    "UV_INSECURE_NO_ZIP_VALIDATION": "1",
    "UV_NO_BUILD_ISOLATION": "1",
    "UV_LINK_MODE": "symlink",
    "UV_PYTHON_INSTALL_MIRROR": "https://elsewhere/python",
    "UV_INDEX_URL": "http://not-this-one/simple",
    "UV_INDEX_LLMFLEET_DEFAULT_PASSWORD": "not-this-one",
    "UV_SOMETHING_UV_ADDS_NEXT_YEAR": "1",
    "UV_HTTP_TIMEOUT": "120",
    "UV_NATIVE_TLS": "1",
    "HTTPS_PROXY": "http://proxy.example:3128",
    "SSL_CERT_FILE": "/etc/ssl/site-ca.pem",
}


def test_scrub_drops_every_uv_variable_but_the_allowlist():
    environ = dict(INHERITED, PATH="/usr/bin")
    removed = _uvcmd.scrub_environ(environ)
    assert removed == sorted(k for k in INHERITED if k.startswith("UV_") and k not in (
        "UV_HTTP_TIMEOUT", "UV_NATIVE_TLS"))
    assert environ == {"UV_HTTP_TIMEOUT": "120", "UV_NATIVE_TLS": "1", "HTTPS_PROXY": "http://proxy.example:3128",
                       "SSL_CERT_FILE": "/etc/ssl/site-ca.pem", "PATH": "/usr/bin"}
    assert all(name.startswith("UV_") for name in _uvcmd.KEPT_UV_ENV)
