"""Unit-test isolation for modules run in-process."""

from __future__ import annotations

import pytest
from ansible.module_utils.common import warnings as module_warnings


@pytest.fixture(autouse=True)
def _fresh_module_warnings():
    """Each test starts with no warnings or deprecations left by an earlier module run.

    ansible-core keeps them in process-wide dicts and de-duplicates by text, so a warning a
    previous test emitted would otherwise be missing from the next module result.
    """
    module_warnings._global_warnings.clear()  # pylint: disable=protected-access
    module_warnings._global_deprecations.clear()  # pylint: disable=protected-access
    yield
