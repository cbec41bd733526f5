"""The fake upstream for the llmfleet.engines tests: PyPI, GitHub releases and the PyTorch index.

``build_packages(dest)`` writes every fake wheel and sdist; ``FakeUpstream(dest)`` serves them on
127.0.0.1. See docs/dev/CONTRACTS.md, section "The fake upstream".
"""

from __future__ import annotations

from tests.upstream.builder import build_packages
from tests.upstream.catalog import RELEASES
from tests.upstream.server import FakeUpstream

__all__ = ["RELEASES", "FakeUpstream", "build_packages"]
