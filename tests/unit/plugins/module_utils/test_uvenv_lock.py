"""uv_engine_env's ``lock`` option (issue 12): a lock given as text is checked, written as the
environment's lock and installed with --require-hashes --no-deps --no-build; nothing is resolved."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _envdir
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _errors
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv import _uvlock
from tests.unit.plugins.module_utils.test_uvenv import PARAMS, flow, uv_bin  # noqa: F401  # pylint: disable=unused-import
from tests.unit.plugins.module_utils.uvenv_fakes import (
    INDEX, LOCK_0110, LOCK_0200_CU129, LOCK_0200_FALLBACK, WHEEL_SHA, WHEEL_URL, FakeUv)

H = "--hash=sha256:" + "a" * 64


def given(tmp_path, uv_bin, fake, lock=LOCK_0110, **params):  # noqa: F811 - the fixture's value
    params.setdefault("exclude_newer", None)
    return flow(tmp_path, uv_bin, fake, lock=lock, **params)


def env_dir(tmp_path):
    return tmp_path / "engines" / "vllm" / "0.11.0"


def test_a_given_lock_is_installed_without_resolving(tmp_path, uv_bin):  # noqa: F811
    fake = FakeUv(lock="the compile step must not run\n")
    result = given(tmp_path, uv_bin, fake).present()
    assert result["changed"] is True
    assert fake.kinds() == ["version", "find", "venv", "install", "verify"]
    assert "compile" not in fake.kinds()
    assert [s["name"] for s in result["steps"]] == [
        "check", "prepare", "venv", "lock", "install", "share", "verify", "gpu", "marker", "switch"]
    lock_file = env_dir(tmp_path) / _envdir.LOCK_FILE_NAME
    assert lock_file.read_text() == LOCK_0110
    _kind, argv, _data, _env, _timeout = fake.call("install")
    assert argv[1:3] == ["pip", "install"]
    for flag in ("--require-hashes", "--no-deps", "--no-build"):
        assert flag in argv
    assert argv[argv.index("-r") + 1] == str(env_dir(tmp_path) / "llmfleet-requirements.txt").replace(
        "0.11.0/", "0.11.0.partial/")
    assert argv[argv.index("--default-index") + 1] == INDEX
    sha = _uvlock.text_sha256(LOCK_0110)
    assert result["lock_sha256"] == sha == _envdir.file_sha256(str(lock_file))
    marker = json.loads((env_dir(tmp_path) / _envdir.MARKER_NAME).read_text())
    assert marker["spec"]["lock_sha256"] == sha and marker["lock"]["sha256"] == sha
    # what only a resolution reads is not the spec
    for key in ("requirements", "index_url", "extra_index_url", "index_strategy", "exclude_newer",
                "exclude_newer_package"):
        assert key not in marker["spec"]


def test_the_same_lock_is_up_to_date_whichever_mirror(tmp_path, uv_bin):  # noqa: F811
    given(tmp_path, uv_bin, FakeUv()).present()
    fake = FakeUv()
    result = given(tmp_path, uv_bin, fake, index_url="http://mirror.test/simple",
                   exclude_newer="2025-10-04T00:00:00Z").present()
    assert result["changed"] is False
    assert fake.kinds() == ["version"]
    assert result["lock_sha256"] == _uvlock.text_sha256(LOCK_0110)


def test_another_lock_builds_again(tmp_path, uv_bin):  # noqa: F811
    given(tmp_path, uv_bin, FakeUv()).present()
    other = LOCK_0110.replace("2222222222", "2222222223")
    fake = FakeUv()
    result = given(tmp_path, uv_bin, fake, lock=other).present()
    assert result["changed"] is True
    assert "compile" not in fake.kinds() and "install" in fake.kinds()
    assert result["reasons"] == ["the spec changed: lock_sha256: %s -> %s" % (
        _uvlock.text_sha256(LOCK_0110), _uvlock.text_sha256(other))]
    assert result["lock_sha256"] == _uvlock.text_sha256(other)
    assert (env_dir(tmp_path) / _envdir.LOCK_FILE_NAME).read_text() == other


def test_a_compiled_environment_is_rebuilt_from_a_given_lock(tmp_path, uv_bin):  # noqa: F811
    compiled = flow(tmp_path, uv_bin, FakeUv()).present()
    assert "lock_sha256" not in compiled["marker"]["spec"]
    assert compiled["lock_sha256"] == compiled["marker"]["lock"]["sha256"]
    fake = FakeUv()
    result = given(tmp_path, uv_bin, fake).present()
    assert result["changed"] is True and "compile" not in fake.kinds()
    assert "lock_sha256: null -> %s" % _uvlock.text_sha256(LOCK_0110) in result["reasons"][0]


def test_check_mode_with_a_lock(tmp_path, uv_bin):  # noqa: F811
    fake = FakeUv()
    result = given(tmp_path, uv_bin, fake, check_mode=True).present(diff=True)
    assert result["changed"] is True and fake.kinds() == ["version"]
    assert json.loads(result["diff"]["after"])["lock"]["sha256"] == _uvlock.text_sha256(LOCK_0110)
    assert result["lock_sha256"] is None
    assert not (tmp_path / "engines").exists()


BAD_LOCKS = [
    # (id, lock text, the message's piece)
    ("unpinned", LOCK_0110 + "numpy>=2\n", "line 15: numpy>=2: not pinned to one version with =="),
    ("unhashed", LOCK_0110 + "numpy==2.0.0\n", "line 15: numpy==2.0.0: no --hash=sha256: (every file must be "
                                               "pinned by its sha256)"),
    ("md5 only", "vllm==0.11.0 --hash=md5:" + "a" * 32 + "\n", "line 1: vllm==0.11.0: no --hash=sha256:"),
    ("editable", "-e ./vllm\n" + LOCK_0110, "line 1: -e ./vllm: an editable requirement (-e) is not a locked file"),
    ("file", LOCK_0110 + "x @ file:///tmp/x-1-py3-none-any.whl " + H + "\n",
     "line 15: x @ file:///tmp/x-1-py3-none-any.whl: a local file (file:) is not in every node's reach"),
    ("git", LOCK_0110 + "x @ git+https://example.test/x.git\n",
     "line 15: x @ git+https://example.test/x.git: a VCS requirement (git+https) is not a locked file"),
    ("option", "--index-url http://evil.test/simple\n" + LOCK_0110,
     "line 1: --index-url http://evil.test/simple: option lines (--index-url) are not accepted in a lock"),
    ("include", "-r more.txt\n" + LOCK_0110, "line 1: -r more.txt: option lines (-r) are not accepted"),
    ("credentials", LOCK_0110 + "x @ https://bob:s3cret@h.test/x-1-py3-none-any.whl " + H + "\n",
     "line 15: a URL with credentials in it"),
    ("empty", "# nothing\n", "it holds no requirement"),
]


@pytest.mark.parametrize("text, piece", [c[1:] for c in BAD_LOCKS], ids=[c[0] for c in BAD_LOCKS])
def test_a_bad_lock_is_refused_before_anything_runs(tmp_path, uv_bin, text, piece):  # noqa: F811
    fake = FakeUv()
    with pytest.raises(_errors.LockInvalid) as exc:
        given(tmp_path, uv_bin, fake, lock=text).present()
    assert exc.value.msg.startswith("the lock given for vllm 0.11.0 (cu128) cannot be installed from without "
                                    "resolving: ")
    assert piece in exc.value.msg
    assert "s3cret" not in exc.value.msg
    assert fake.kinds() == []
    assert not (tmp_path / "engines").exists()


def test_a_bad_lock_is_refused_in_check_mode_too(tmp_path, uv_bin):  # noqa: F811
    with pytest.raises(_errors.LockInvalid, match="not pinned"):
        given(tmp_path, uv_bin, FakeUv(), lock="vllm>=0.11\n", check_mode=True).present()


def test_the_engine_must_be_in_the_lock_at_its_version(tmp_path, uv_bin):  # noqa: F811
    fake = FakeUv()
    with pytest.raises(_errors.LockMismatch) as exc:
        given(tmp_path, uv_bin, fake, version="0.11.1").present()
    assert exc.value.msg == (
        "the lock given for vllm 0.11.1 (cu128) is not what was asked: resolved vllm 0.11.0 from "
        "http://idx.test/simple, not 0.11.1. Nothing was done.")
    assert fake.kinds() == []


def test_expect_applies_to_a_given_lock(tmp_path, uv_bin):  # noqa: F811
    fake = FakeUv(version="0.20.0+cu129")
    wheel = {"url": WHEEL_URL, "sha256": WHEEL_SHA}
    with pytest.raises(_errors.LockMismatch) as exc:
        given(tmp_path, uv_bin, fake, lock=LOCK_0200_FALLBACK, version="0.20.0", wheel=wheel,
              expect={"torch": "+cu129"}).present()
    assert ("resolved torch 2.11.0 from http://idx.test/simple (via vllm, llmfleet-extra), but expect wants the "
            "local label +cu129. Nothing was done.") in exc.value.msg
    assert "exclude_newer_package" not in exc.value.msg  # no cut-off at play: no hint about one
    assert fake.kinds() == []
    result = given(tmp_path, uv_bin, fake, lock=LOCK_0200_CU129, version="0.20.0", wheel=wheel,
                   expect={"torch": "+cu129"}).present()
    assert result["changed"] is True and "compile" not in fake.kinds()
    assert result["lock"]["packages"]["torch"] == "2.11.0+cu129"


def test_the_wheel_must_be_the_locked_one(tmp_path, uv_bin):  # noqa: F811
    other = {"url": WHEEL_URL, "sha256": "9" * 64}
    with pytest.raises(_errors.LockMismatch, match="published sha256 is " + "9" * 64):
        given(tmp_path, uv_bin, FakeUv(), lock=LOCK_0200_CU129, version="0.20.0", wheel=other).present()


def test_without_a_lock_the_spec_is_as_before():
    spec = _envdir.wanted_spec(PARAMS, "0.13.8")
    assert "lock_sha256" not in spec and spec["exclude_newer"] == PARAMS["exclude_newer"]
    assert sorted(spec) == ["build", "engine", "exclude_newer", "exclude_newer_package", "extra_index_url",
                            "index_strategy", "index_url", "python", "python_preference", "requirements",
                            "uv", "version", "wheel"]


def test_absent_returns_no_lock_sha256(tmp_path, uv_bin):  # noqa: F811
    given(tmp_path, uv_bin, FakeUv()).present()
    result = given(tmp_path, uv_bin, FakeUv()).absent()
    assert result["changed"] is True and result["lock_sha256"] is None
    assert not os.path.exists(str(env_dir(tmp_path)))
