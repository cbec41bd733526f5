# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The progress file: a JSON object that says what a long run is doing, for whoever looks (an operator,
``_pathlock``'s report of a lock's holder, the roles' waits). One implementation for the uv build's
steps (``<path>.progress.json``, ``_uvenv``) and the model downloads (model_snapshot's
``progress_file``, ``hub._snapshot.DownloadProgress``).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

from ansible_collections.llmfleet.engines.plugins.module_utils.common._fs import unlink_quiet, write_json_atomic

#: Mode of the file: whoever looks may read it.
MODE = 0o644

# Patched by the unit tests, so that the interval between writes costs no time.
_clock = time.monotonic


def utc_now():
    """Now, as the progress file and the lock's record write it (RFC 3339, seconds, UTC)."""
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


class ProgressFile(object):
    """``path`` holds ``data`` as JSON, rewritten atomically (``_fs.write_json_atomic``) at each
    ``update``: at most once per ``interval`` seconds unless forced. Threads may update it at once.
    A failure to write never fails the run; ``remove`` takes the file away at the end.

    ``step`` records the step a run is at (``step``, ``step_started``, ``done``): the uv build's use."""

    def __init__(self, path, data, interval=0.0):
        self.path = path
        self.interval = interval
        self.began = _clock()
        self.last = None
        self.data = dict(data)
        self._guard = threading.Lock()

    def update(self, force=False, **values):
        """``values`` into the data; the file rewritten (``force``, or ``interval`` passed)."""
        with self._guard:
            self._write(force, **values)

    def step(self, name, done):
        """The run is now at step ``name``, after the steps ``done``: written at once."""
        self.update(True, step=name, step_started=utc_now(), done=list(done))

    def _refresh(self, elapsed):
        """Values computed at each write from the data and the seconds since the start (none here)."""

    def _write(self, force, **values):
        self.data.update(values)
        now = _clock()
        if not force and self.last is not None and now - self.last < self.interval:
            return
        self.last = now
        self._refresh(now - self.began)
        try:
            write_json_atomic(self.path, self.data, MODE)
        except OSError:
            pass  # progress is for whoever looks; it never fails the run

    def remove(self):
        try:
            unlink_quiet(self.path)
        except OSError:
            pass
