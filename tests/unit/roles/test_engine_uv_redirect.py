"""engine_uv fetches the uv wheel only from the URL it checked (issue 44, finding 18): a redirect is not
followed, so a hostile or misconfigured index cannot send the download to another host (a second server on
127.0.0.1 stands for it) and have get_url name the digest of what that host served. The role runs through
ansible-playbook on this machine, against a real index on 127.0.0.1 and a wheel whose uv is a script."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.unit.plugins.body_server import BodyServer

VERSION = "0.9.0"
ARCH = "x86_64"
WHEEL = "uv-%s-py3-none-manylinux_2_17_%s.whl" % (VERSION, ARCH)
SECRET = b"what only this host may read, served on its loopback"

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Install uv through engine_uv
      ansible.builtin.include_role:
        name: llmfleet.engines.engine_uv
      vars:
        engine_uv_version: "%(version)s"
        engine_uv_index_url: %(index)s
        engine_uv_files_url: %(index)s
        engine_uv_release: %(release)s
        engine_uv_arch: %(arch)s
        engine_uv_dest: %(dest)s
        engine_uv_named_by: engine_cache_uv
"""


def fake_wheel():
    """A wheel whose uv is a script that answers its version as uv does."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        member = zipfile.ZipInfo("uv-%s.data/scripts/uv" % VERSION, date_time=(2025, 11, 1, 0, 0, 0))
        archive.writestr(member, "#!/bin/sh\necho 'uv %s (fake)'\n" % VERSION)  # the same bytes each time
    return out.getvalue()


def play(tmp_path, index, sha256, dest):
    release = {"files": [{"filename": WHEEL, "url": index.url + "/files/" + WHEEL, "packagetype": "bdist_wheel",
                          "yanked": False, "sha256": sha256}]}
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY % {"version": VERSION, "index": json.dumps(index.url), "release": json.dumps(release),
                                "arch": ARCH, "dest": json.dumps(str(dest))})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
               ANSIBLE_NOCOLOR="1", no_proxy="127.0.0.1", NO_PROXY="127.0.0.1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, proc.stdout + proc.stderr


@pytest.fixture
def index():
    with BodyServer() as server:
        yield server


@pytest.fixture
def elsewhere():
    with BodyServer() as server:
        server.route("/secret", body=SECRET)
        yield server


def test_the_wheel_at_the_checked_url_is_installed(tmp_path, index):
    data = fake_wheel()
    index.route("/files/" + WHEEL, body=data)
    dest = tmp_path / "uv" / VERSION / "uv"
    proc, text = play(tmp_path, index, hashlib.sha256(data).hexdigest(), dest)
    assert proc.returncode == 0, text[-3000:]
    assert subprocess.run([str(dest), "--version"], capture_output=True, text=True, check=True).stdout.startswith(
        "uv %s" % VERSION)


def test_a_redirect_to_another_host_is_not_followed_and_no_digest_is_told(tmp_path, index, elsewhere):
    index.route("/files/" + WHEEL, status=302, headers={"Location": elsewhere.url + "/secret"})
    dest = tmp_path / "uv" / VERSION / "uv"
    proc, text = play(tmp_path, index, hashlib.sha256(fake_wheel()).hexdigest(), dest)
    assert proc.returncode != 0, text[-3000:]
    assert elsewhere.log() == []  # nothing was asked of the other host
    assert hashlib.sha256(SECRET).hexdigest() not in text
    flat = " ".join(text.split())
    assert ("localhost: the uv wheel %s did not come from %s/files/%s (it answered a redirect 302, which is not "
            "followed: the wheel is fetched only from the URL the index lists, on its own origin or %s; have the "
            "index list the files where they are, and name that host engine_cache_uv_files_url). Nothing was "
            "installed." % (WHEEL, index.url, WHEEL, index.url)) in flat, text[-3000:]
    assert not dest.exists()


def test_a_wheel_that_is_not_the_listed_one_is_refused_without_its_digest(tmp_path, index):
    index.route("/files/" + WHEEL, body=SECRET)
    dest = tmp_path / "uv" / VERSION / "uv"
    proc, text = play(tmp_path, index, hashlib.sha256(fake_wheel()).hexdigest(), dest)
    assert proc.returncode != 0
    assert ("%s does not have the index's sha256 %s: removed, nothing was installed"
            % (dest.parent / WHEEL, hashlib.sha256(fake_wheel()).hexdigest())) in text, text[-3000:]
    assert hashlib.sha256(SECRET).hexdigest() not in text
    assert not dest.exists() and not (dest.parent / WHEEL).exists()
