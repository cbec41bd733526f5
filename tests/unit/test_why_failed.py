"""tools/why_failed.py: the excerpt `make test` ends with, the only part of a failed run CI shows."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "why_failed.py"

MOLECULE = """\
\x1b[36mINFO    \x1b[0m \x1b[32mcu129\x1b[0m \u279c \x1b[33mconverge\x1b[0m: \x1b[36mExecuting\x1b[0m
  \x1b[2m\u2502\x1b[0m TASK [llmfleet.engines.engine_node : Ask whether this build has ended]
  \u2502 FAILED - RETRYING: [localhost]: Wait for instance(s) creation to complete
  \u2502 fatal: [llmfleet-node]: FAILED! =>
  \u2502     classification: no_kernel_image
  \u2502 ...ignoring
\x1b[36mINFO    \x1b[0m \x1b[32mcu129\x1b[0m \u279c \x1b[33mconverge\x1b[0m: \x1b[32mExecuted: Successful\x1b[0m
\x1b[36mINFO    \x1b[0m \x1b[32mserve\x1b[0m \u279c \x1b[33mverify\x1b[0m: \x1b[36mExecuting\x1b[0m
  \u2502 TASK [The upgrade went through and no request failed]
  \u2502 fatal: [llmfleet-serve-1]: FAILED! =>
  \u2502     msg: 3 requests failed
  \u2502 TASK [Show the journal]
  \u2502 ok: [llmfleet-serve-1]
\x1b[31mERROR   \x1b[0m \x1b[32mserve\x1b[0m \u279c \x1b[33mverify\x1b[0m: \x1b[31mExecuted: Failed\x1b[0m
"""


def excerpt(tmp_path, text):
    log = tmp_path / "piece.log"
    log.write_text(text, encoding="utf-8")
    run = subprocess.run([sys.executable, str(TOOL), str(log)], capture_output=True, text=True, check=True)
    return run.stdout.splitlines()


def test_a_failed_scenario_shows_its_action_and_last_failed_task_not_the_ignored_ones(tmp_path):
    assert excerpt(tmp_path, MOLECULE) == [
        "serve: verify failed",
        "TASK [The upgrade went through and no request failed]",
        "fatal: [llmfleet-serve-1]: FAILED! =>",
        "    msg: 3 requests failed",
        "TASK [Show the journal]",
        "ok: [llmfleet-serve-1]",
    ]


def test_pytest_and_ansible_test_failures_are_listed(tmp_path):
    text = ("collected 3 items\nFAILED - RETRYING: [localhost]: x (3 retries left)\n"
            "FAILED tests/unit/test_a.py::test_b - AssertionError: 1 != 2\n"
            "ERROR: tools/x.py:1:1: unexpected non-module shebang\n== 1 failed ==\n")
    assert excerpt(tmp_path, text) == ["FAILED tests/unit/test_a.py::test_b - AssertionError: 1 != 2",
                                       "ERROR: tools/x.py:1:1: unexpected non-module shebang"]


def test_an_idempotence_failure_is_quoted(tmp_path):
    text = ("INFO    serve \u279c idempotence: Executing\n"
            "CRITICAL Idempotence test failed because of the following tasks:\n"
            "CRITICAL * [llmfleet-serve-1] => llmfleet.engines.engine_service : Start the services\n"
            "ERROR    serve \u279c idempotence: Executed: Failed\n")
    assert excerpt(tmp_path, text) == [
        "serve: idempotence failed",
        "CRITICAL Idempotence test failed because of the following tasks:",
        "CRITICAL * [llmfleet-serve-1] => llmfleet.engines.engine_service : Start the services",
    ]
