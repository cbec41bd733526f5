"""What a simulated node's root holds, read straight from disk (shared by the fleet tests)."""

from __future__ import annotations

import os
import pathlib

MARKER = ".llmfleet-engine.json"


def engines_dir(root: pathlib.Path) -> pathlib.Path:
    return root / "engines" / "vllm"


def env_names(root: pathlib.Path) -> list[str]:
    """Environment directories (with a marker) under a node's root."""
    base = engines_dir(root)
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / MARKER).is_file() and not p.is_symlink())


def current_env(root: pathlib.Path) -> str | None:
    """Where the node's `current` link points, or None without one."""
    link = engines_dir(root) / "current"
    return os.readlink(link) if link.is_symlink() else None
