"""Shared pytest set-up: the collection on the import path, and the fake upstream."""

from __future__ import annotations

import importlib
import os
import pathlib
import sys
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
COLLECTIONS = REPO / "build" / "collections"
_LINK = COLLECTIONS / "ansible_collections" / "llmfleet" / "engines"


def _ensure_collection_link() -> None:
    """Make ansible_collections/llmfleet/engines point at this checkout."""
    if _LINK.is_symlink() and _LINK.resolve() == REPO:
        return
    _LINK.parent.mkdir(parents=True, exist_ok=True)
    if _LINK.is_symlink() or _LINK.exists():
        _LINK.unlink()
    _LINK.symlink_to(REPO, target_is_directory=True)


_ensure_collection_link()
# pytest put build/collections on sys.path (pytest.ini) before the link above existed in a fresh
# clone: forget what the import system cached about that directory.
sys.path_importer_cache.pop(str(COLLECTIONS), None)
importlib.invalidate_caches()
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(COLLECTIONS))


@pytest.fixture(autouse=True)
def _default_urllib_opener():
    """Put urllib's default opener back after each test. ansible's ``open_url`` installs its own
    opener for the whole process (``urllib.request.install_opener``); the modules that run in-process
    in the unit tests (``follow_redirects='none'``: model_snapshot, hf_warm) would leave one that does
    not follow redirects, and later tests' ``urlopen`` would get the 302s."""
    yield
    urllib.request.install_opener(None)


@pytest.fixture(scope="session")
def upstream_packages(tmp_path_factory):
    """Every fake package the upstream serves, built once per test session."""
    from tests.upstream import build_packages

    dest = tmp_path_factory.mktemp("upstream-packages")
    build_packages(dest)
    return dest


@pytest.fixture
def upstream(upstream_packages):
    """A started fake upstream on 127.0.0.1, stopped after the test."""
    from tests.upstream import FakeUpstream

    up = FakeUpstream(upstream_packages)
    up.start()
    try:
        yield up
    finally:
        up.stop()
