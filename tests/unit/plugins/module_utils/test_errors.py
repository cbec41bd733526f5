# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every error the module_utils raise on purpose shares one base, so a module can catch them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from ansible_collections.llmfleet.engines.plugins import module_utils
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError


def public_errors():
    found = []
    for info in pkgutil.walk_packages(module_utils.__path__, module_utils.__name__ + "."):
        if info.ispkg:
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
                    and not name.startswith("_")):
                found.append(obj)
    return found


def test_the_module_utils_define_errors():
    names = {cls.__name__ for cls in public_errors()}
    assert {"GpuError", "BuildTableError", "HttpError", "PypiError", "GithubError", "LockBusy"} <= names


@pytest.mark.parametrize("cls", public_errors(), ids=lambda cls: "%s.%s" % (cls.__module__.rsplit(".", 1)[-1], cls.__name__))
def test_every_error_derives_from_the_one_base(cls):
    assert issubclass(cls, LlmfleetError)


def test_the_base_carries_the_message_and_details():
    exc = LlmfleetError("node n1: cache_dir is not uv's", path="/x")
    assert (str(exc), exc.msg, exc.details) == ("node n1: cache_dir is not uv's", "node n1: cache_dir is not uv's", {"path": "/x"})
