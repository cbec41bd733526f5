# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The collection's one error base; the failures shared by several flows (a busy path lock, too little
free space: the uv environments' and the model snapshots' alike); and the failures of the uv
environment flow (raised by ``_uvcmd``, ``_uvlock``, ``_envdir`` and ``_uvenv``). Each other concern
keeps its failures beside its code (``_http``, ``hub``, ``index``, ``node``, ``serve``), all derived
from ``LlmfleetError``. A module turns any of them into ``fail_json(msg=exc.msg, **exc.details)``.
"""

from __future__ import annotations


class LlmfleetError(Exception):
    """Base of every error the collection's module_utils raise on purpose.

    ``msg`` is the sentence for the user; ``details`` are extra keys for the module's result.
    """

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.msg = msg
        self.details = details


# -- shared by several flows ------------------------------------------------------------------

class LockBusy(LlmfleetError):
    """Another run holds a path lock (``_pathlock.PathLock``: an environment's, uv's cache's, a model
    repo's in the hub cache) longer than lock_timeout. ``details['holder']``: who holds it."""


class NotEnoughSpace(LlmfleetError):
    """Less free space on a filesystem than a run needs: an environment's build (``free_gb``), a
    model's download (its missing bytes and ``free_space_margin_mib``)."""


# -- the uv environment flow ------------------------------------------------------------------

class UvEnvError(LlmfleetError):
    """Base of every failure of the uv environment flow."""


class OptionError(UvEnvError):
    """An option's value cannot be used."""


class UvUnusable(UvEnvError):
    """The uv binary is missing or does not answer ``--version``."""


class InstallTimeout(UvEnvError):
    """The whole install ran past ``timeout``."""


class UvCommandFailed(UvEnvError):
    """A uv command exited non-zero."""


class VenvFailed(UvCommandFailed):
    """``uv venv`` failed (often: the Python asked for is not available)."""


class ResolveFailed(UvCommandFailed):
    """``uv pip compile`` found no resolution."""


class InstallFailed(UvCommandFailed):
    """``uv pip install`` failed (download, hash mismatch, ...)."""


class LockMismatch(UvEnvError):
    """The lock resolved, but not to what ``expect`` (or the engine's version) asks."""


class LockInvalid(UvEnvError):
    """A lock given as text has a line that is not a file pinned by its sha256 (unpinned, unhashed,
    editable, VCS, local file, an option line)."""


class VerifyFailed(UvEnvError):
    """The engine does not import, has the wrong version, or verify_command failed."""


class GpuCheckFailed(UvEnvError):
    """The new environment cannot compute on this node's GPU."""


class SwitchFailed(UvEnvError):
    """Renaming the new environment into place failed (the old one is put back)."""


class NotAnEnvironment(UvEnvError):
    """Something other than a Python environment is at path: it is never replaced or removed."""


class CleanupFailed(UvEnvError):
    """A leftover of an earlier run could not be removed, so the build cannot use its name."""
