"""devpi_index and devpi_wheel against a real devpi-server 6.20.3 on 127.0.0.1, mirroring the fake
upstream (issue 12: the fleet cache). devpi-server comes from the engine_cache role's lock
(hash-checked wheels, tools/devpi_wheelhouse.sh), installed with the real uv; it runs as a
subprocess of the test, stopped by its PID."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.system.test_uv_engine_env_credentials import COLLECTIONS
from tests.unit.roles.test_engine_cache_devpi_init import init_command
from tests.unit.plugins.vllm_fakes import free_port

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
UV = REPO / ".venv" / "bin" / "uv"
MODULES = REPO / "plugins" / "modules"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
WHEEL = "vllm-0.11.2+cu129-cp38-abi3-manylinux_2_31_x86_64.whl"


@pytest.fixture(scope="module")
def devpi_venv(tmp_path_factory):
    """A venv with devpi-server, built by uv from the wheelhouse with the role's lock."""
    wheelhouse = subprocess.run([str(REPO / "tools" / "devpi_wheelhouse.sh")], capture_output=True, text=True,
                                check=True).stdout.strip()
    venv = tmp_path_factory.mktemp("devpi") / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    subprocess.run([str(UV), "venv", "-q", "--no-config", "-p", "/usr/bin/python3", str(venv)], check=True, env=env)
    subprocess.run([str(UV), "pip", "install", "-q", "--no-config", "--offline", "--no-index", "--find-links", wheelhouse,
                    "-p", str(venv / "bin" / "python"), "--require-hashes", "--no-deps", "--no-build",
                    "-r", str(REPO / "roles" / "engine_cache" / "files" / "devpi-server.txt")], check=True, env=env)
    return venv


@pytest.fixture(scope="module")
def devpi_initialized(devpi_venv, tmp_path_factory):
    """A devpi-server directory initialized with a random root password, once for the module (devpi-init starts a
    Python that imports the whole server: seconds each, tens under a loaded suite): (serverdir, password)."""
    password = secrets.token_urlsafe(16)
    root = tmp_path_factory.mktemp("devpi-init")
    # initialized as the engine_cache role does it: its own task's argv, the password on stdin, the
    # hash in devpi-init's environment (the logins below prove devpi-init took it from there)
    _task, argv, stdin = init_command(devpi_venv, root, password)
    serverdir = root / "server"
    serverdir.mkdir()
    subprocess.run(argv, input=stdin, text=True, capture_output=True, check=True)
    return serverdir, password


@pytest.fixture()
def devpi(devpi_venv, devpi_initialized, tmp_path):
    """A fresh devpi-server (a copy of the initialized directory: no index, no upload yet): (url, password)."""
    template, password = devpi_initialized
    serverdir = tmp_path / "server"
    shutil.copytree(template, serverdir, symlinks=True)
    port = free_port()
    log = open(tmp_path / "devpi.log", "wb")
    proc = subprocess.Popen([str(devpi_venv / "bin" / "devpi-server"), "--serverdir", str(serverdir), "--host",
                             "127.0.0.1", "--port", str(port), "--restrict-modify", "root"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = "http://127.0.0.1:%d" % port
    try:
        for _attempt in range(300):
            try:
                urllib.request.urlopen(url + "/+api", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError("devpi-server exited: " + (tmp_path / "devpi.log").read_text())
                time.sleep(0.2)
        yield url, password
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run_module(name, tmp_path, args):
    args_file = tmp_path / ("%s-args.json" % name)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    proc = subprocess.run([sys.executable, str(MODULES / (name + ".py")), str(args_file)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout + proc.stderr
    except (ValueError, IndexError):
        raise AssertionError("the module printed no JSON result:\n" + proc.stdout + proc.stderr)


def _indexes(upstream):
    return [{"name": "root/pypi", "type": "mirror", "mirror_url": upstream.url + "/simple/"},
            {"name": "root/torch-cu129", "type": "mirror", "mirror_url": upstream.url + "/torch/cu129/"},
            {"name": "root/github", "type": "stage", "bases": [], "volatile": False}]


def _listing(url, index, project):
    req = urllib.request.Request("%s/%s/+simple/%s/" % (url, index, project), headers={"Accept": SIMPLE_JSON})
    try:
        return json.loads(urllib.request.urlopen(req, timeout=10).read())["files"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


def _asset(upstream):
    data = (upstream.packages / "github" / "vllm-project" / "vllm" / "v0.11.2" / WHEEL).read_bytes()
    src = "%s/github/download/vllm-project/vllm/releases/download/v0.11.2/%s" % (
        upstream.url, WHEEL.replace("+", "%2B"))
    return src, hashlib.sha256(data).hexdigest()


def test_indexes_are_made_once_and_a_run_with_nothing_to_do_makes_no_login(devpi, upstream, tmp_path):
    url, password = devpi
    result, out = run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": _indexes(upstream)})
    assert result.get("failed") is not True, out
    assert result["changed"] is True
    assert result["created"] == ["root/pypi", "root/torch-cu129", "root/github"]
    assert result["indexes"]["root/pypi"]["mirror_url"] == upstream.url + "/simple/"
    assert result["indexes"]["root/github"]["volatile"] is False
    assert password not in out

    # again, with a wrong password: nothing to change, so no login, and no failure
    again, out = run_module("devpi_index", tmp_path, {"url": url, "password": "wrong", "indexes": _indexes(upstream)})
    assert again.get("failed") is not True, out
    assert again["changed"] is False and again["created"] == [] and again["changed_indexes"] == {}

    # a moved upstream: the mirror follows, with the wrong password refused by name
    moved = _indexes(upstream)
    moved[0]["mirror_url"] = upstream.url + "/simple/../simple/"
    refused, out = run_module("devpi_index", tmp_path, {"url": url, "password": "wrong", "indexes": moved})
    assert refused["failed"] is True
    assert "refused the login of user root" in refused["msg"], refused["msg"]
    changed, out = run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": moved})
    assert changed["changed"] is True
    assert changed["changed_indexes"] == {"root/pypi": {"mirror_url": upstream.url + "/simple/../simple/"}}
    assert changed["diff"]["before"] == {"root/pypi": {"mirror_url": upstream.url + "/simple/"}}

    # a mirror asked to be a stage index: refused, the index left as it is
    wrong_type = [{"name": "root/pypi", "type": "stage"}]
    refused, out = run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": wrong_type})
    assert refused["failed"] is True and "is a mirror index, not a stage" in refused["msg"]


def test_check_mode_creates_nothing(devpi, upstream, tmp_path):
    url, password = devpi
    args = {"url": url, "password": password, "indexes": _indexes(upstream), "_ansible_check_mode": True}
    result, out = run_module("devpi_index", tmp_path, args)
    assert result["changed"] is True and result["created"] == ["root/pypi", "root/torch-cu129", "root/github"]
    req = urllib.request.Request(url + "/root/pypi", headers={"Accept": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 404


def test_a_github_wheel_is_downloaded_checked_and_uploaded_once(devpi, upstream, tmp_path):
    url, password = devpi
    result, out = run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": _indexes(upstream)})
    assert result.get("failed") is not True, out
    src, sha = _asset(upstream)
    upstream.clear_log()
    args = {"url": url, "password": password, "src": src, "sha256": sha}
    result, out = run_module("devpi_wheel", tmp_path, args)
    assert result.get("failed") is not True, out
    assert result["changed"] is True and result["uploaded"] is True
    assert result["filename"] == WHEEL
    assert result["url"].startswith(url + "/root/github/+f/")
    assert result["url"].endswith("/" + WHEEL)
    # the upstream's redirect was followed: one download of the release asset
    paths = [e["path"] for e in upstream.log()]
    assert [p for p in paths if p.startswith("/github/download/")] == [src[len(upstream.url):].replace("%2B", "+")]
    listed = _listing(url, "root/github", "vllm")
    assert [(f["filename"], f["hashes"]["sha256"]) for f in listed] == [(WHEEL, sha)]
    with urllib.request.urlopen(result["url"], timeout=10) as resp:
        assert hashlib.sha256(resp.read()).hexdigest() == sha

    # again: already there with that sha256, so nothing downloaded, nothing uploaded, no password needed
    upstream.clear_log()
    again, out = run_module("devpi_wheel", tmp_path, dict(args, password=""))
    assert again.get("failed") is not True, out
    assert again["changed"] is False and again["uploaded"] is False and again["url"] == result["url"]
    assert upstream.log() == []


def test_a_wheel_that_is_not_the_publishers_is_never_uploaded(devpi, upstream, tmp_path):
    url, password = devpi
    run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": _indexes(upstream)})
    src, sha = _asset(upstream)
    # the upstream serves altered bytes under the listed digest
    upstream.fault("tamper", filename=WHEEL)
    result, out = run_module("devpi_wheel", tmp_path, {"url": url, "password": password, "src": src, "sha256": sha})
    assert result["failed"] is True
    assert ("does not have the publisher's sha256 %s: what it served was removed, nothing was uploaded" % sha
            in result["msg"]), result["msg"]
    # the digest of what was served is not echoed (no hash oracle): the publisher's is the only one named
    assert __import__("re").findall(r"[0-9a-f]{64}", result["msg"]) == [sha], result["msg"]
    assert _listing(url, "root/github", "vllm") == []
    assert not list(tmp_path.glob(".llmfleet-download-*"))


def test_another_file_under_the_same_name_in_the_cache_is_refused(devpi, upstream, tmp_path):
    url, password = devpi
    run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": _indexes(upstream)})
    src, sha = _asset(upstream)
    # someone uploaded other bytes under the wheel's name
    other = tmp_path / WHEEL
    other.write_bytes(b"not the release's wheel")
    login = json.loads(urllib.request.urlopen(urllib.request.Request(
        url + "/+login", data=json.dumps({"user": "root", "password": password}).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"}), timeout=10).read())
    auth = base64.b64encode(("root:" + login["result"]["password"]).encode()).decode()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "-H", "X-Devpi-Auth: " + auth, "-F", ":action=file_upload",
                    "-F", "name=vllm", "-F", "version=0.11.2+cu129", "-F", "content=@%s" % other, url + "/root/github/"],
                   check=True)
    result, out = run_module("devpi_wheel", tmp_path, {"url": url, "password": password, "src": src, "sha256": sha})
    assert result["failed"] is True
    assert "already holds %s with sha256 %s, not the publisher's %s" % (
        WHEEL, hashlib.sha256(other.read_bytes()).hexdigest(), sha) in result["msg"], result["msg"]


def test_warming_fetches_each_file_from_the_upstream_once_and_the_nodes_then_nothing(devpi, upstream, tmp_path):
    """devpi_warm through root/pypi, then two nodes install the lock: the upstream saw each file
    once, during the warming, and nothing during the installs."""
    url, password = devpi
    run_module("devpi_index", tmp_path, {"url": url, "password": password, "indexes": _indexes(upstream)})
    wheel = "llmfleet_fakedep-1.1.0-py3-none-any.whl"
    sha = hashlib.sha256((upstream.packages / "pypi" / wheel).read_bytes()).hexdigest()
    lock = "llmfleet-fakedep==1.1.0 \\\n    --hash=sha256:%s\n" % sha
    upstream.clear_log()
    args = {"url": url, "lock": lock, "python_version": "3.11", "python_platform": "x86_64-manylinux_2_36"}
    result, out = run_module("devpi_warm", tmp_path, args)
    assert result.get("failed") is not True, out
    assert result["changed"] is False
    assert [(f["name"], f["sha256"]) for f in result["files"]] == [("llmfleet-fakedep", sha)]
    assert result["bytes"] == (upstream.packages / "pypi" / wheel).stat().st_size
    assert [e["path"] for e in upstream.log() if e["path"].startswith("/files/")] == ["/files/" + wheel]

    upstream.clear_log()
    (tmp_path / "lock.txt").write_text(lock)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    for n in (1, 2):
        venv = tmp_path / ("node-%d" % n)
        subprocess.run([str(UV), "venv", "-q", "--no-config", "-p", "/usr/bin/python3", str(venv)], check=True, env=env)
        subprocess.run([str(UV), "pip", "install", "-q", "--no-config", "--no-cache", "-p", str(venv / "bin" / "python"),
                        "--index-url", url + "/root/pypi/+simple/", "--require-hashes", "--no-deps", "--no-build",
                        "-r", str(tmp_path / "lock.txt")], check=True, env=env)
    assert [e["path"] for e in upstream.log() if e["path"].startswith("/files/")] == []

    # a lock whose hash is not what the index lists: nothing fits, and the message says so
    bad = dict(args, lock=lock.replace(sha, "0" * 64))
    result, out = run_module("devpi_warm", tmp_path, bad)
    assert result["failed"] is True
    assert result["msg"].startswith("llmfleet-fakedep 1.1.0: none of root/pypi on %s lists a wheel the lock pins" % url)
