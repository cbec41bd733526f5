"""The machine image's CPU build of PyTorch, for the tests that run the real vLLM engine.

The image keeps one wheel of torch 2.13.0+cpu for CPython 3.11 on disk, in a ``find-links``
directory of pip's configuration (``../shared/FACTS.md``, 2026-12-03); uv does not look there, so
the tests serve it on 127.0.0.1 as PyTorch's ``cpu`` index would be.

    python -m tests.cpu_torch         prints the wheel's path (exit 1, saying why, when there is none)
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

TORCH_WHEEL_RE = re.compile(r"^torch-(?P<version>[0-9.]+\+cpu)-cp311-cp311-manylinux[^/]*_x86_64\.whl$")


class NoTorchWheel(LookupError):
    """pip's configuration names no directory holding the CPU torch wheel."""


def torch_wheel() -> pathlib.Path:
    """The image's CPU torch wheel, in a find-links directory of pip's configuration."""
    out = subprocess.run(["/usr/bin/python3", "-m", "pip", "config", "list"], capture_output=True, text=True,
                         timeout=60, check=False).stdout
    folders = []
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        if key.strip().endswith("find-links"):
            folders += [f for f in value.strip().strip("'\"").split() if f.startswith("/")]
    for folder in folders:
        for path in sorted(pathlib.Path(folder).glob("torch-*.whl")):
            if TORCH_WHEEL_RE.match(path.name):
                return path
    raise NoTorchWheel("no CPU torch wheel for CPython 3.11 in pip's find-links (%s): the machine image keeps one"
                       " there (FACTS.md, 2026-12-03)" % (", ".join(folders) or "none configured"))


def main() -> int:
    try:
        print(torch_wheel())
    except NoTorchWheel as exc:
        print("tests.cpu_torch: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
