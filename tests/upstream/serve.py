"""Run a started test server from the command line until SIGTERM or SIGINT (shared by CLIs)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import threading


def serve_until_signalled(server, announce: dict, ready_file: pathlib.Path | None = None) -> int:
    """Announce ``server`` as one JSON line, wait for SIGTERM/SIGINT, then stop it.

    The line (``announce`` plus this process's ``pid``) goes to stdout and, atomically, to
    ``ready_file`` when given, so a caller can wait for the file and read the URL from it.
    """
    stop = threading.Event()

    def _stop(_signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    line = json.dumps(dict(announce, pid=os.getpid()))
    if ready_file:
        tmp = ready_file.with_name(ready_file.name + ".tmp")
        tmp.write_text(line + "\n")
        tmp.replace(ready_file)
    print(line, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0
