"""The fake upstream for the llmfleet.engines tests: PyPI, GitHub releases, the PyTorch index and
the Hugging Face hub.

``build_packages(dest)`` writes every fake wheel and sdist; ``FakeUpstream(dest)`` serves them on
127.0.0.1, and the hub's models (``tests.upstream.hub``) under ``/hub``. See docs/dev/CONTRACTS.md,
section "The fake upstream".
"""

from __future__ import annotations

from tests.upstream.builder import build_packages
from tests.upstream.catalog import RELEASES
from tests.upstream.hub import HUB_TOKEN
from tests.upstream.server import FakeUpstream

__all__ = ["HUB_TOKEN", "RELEASES", "FakeUpstream", "build_packages"]
