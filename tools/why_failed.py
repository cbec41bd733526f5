"""Print a short excerpt of why a test piece failed, from its log (tools/test_all.sh).

CI shows only the last lines of `make test`: this excerpt comes last, so a failure can be read
there without the whole log. It picks: for molecule, each scenario action
that failed and its last failed task (the TASK line and the failure's first lines) or its
idempotence report; pytest's FAILED/ERROR summary lines; ansible-test's ERROR lines. Colours and molecule's box prefixes are removed,
long lines cut.

    python3 tools/why_failed.py LOG [--lines N]
"""

import argparse
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# molecule prefixes ansible-playbook's lines with a box border ("  │ "), tools/test_all.sh
# prefixes lane 2's lines with "molecule| "
PREFIX = re.compile(r"^(molecule\| )?\s*(│\s?)?")
WIDTH = 240


def clean(line):
    line = ANSI.sub("", line.rstrip("\n"))
    line = PREFIX.sub("", line, count=1)
    return line if len(line) <= WIDTH else line[:WIDTH - 3] + "..."


def _failed_task(lines, start, end):
    """The last failure of an Ansible run in lines[start:end] (one not ignored): its TASK line and the
    failure's first lines; [] when there is none."""
    task_at = fatal_at = None
    for i in range(start, end):
        line = lines[i]
        if line.startswith("TASK ["):
            task_at = i
        elif re.match(r"^(fatal|failed): \[", line) and "...ignoring" not in " ".join(lines[i + 1:i + 12]):
            fatal_at = (task_at, i)
    if fatal_at is None:
        return []
    task, fatal = fatal_at
    out = [lines[task]] if task is not None else []
    # ansible-core's own sentence of the failure, above the result (a long message is cut there)
    said = [j for j in range(task if task is not None else start, fatal) if lines[j].startswith("[ERROR]: Task failed")]
    if said:
        out += lines[said[0]:min(said[0] + 6, fatal)]
    return out + lines[fatal:min(fatal + 6, end)]


def excerpt(lines, limit):
    """What to show of a failed piece's log (``lines`` cleaned, blank ones dropped), at most ``limit`` lines."""
    out = []
    # molecule: each failed action of a scenario, and its last failed task
    for i, line in enumerate(lines):
        failed = re.match(r"^ERROR\s+(\S+) ➜ (\S+): Executed: Failed", line)
        if not failed:
            continue
        begin = max((j for j in range(i) if re.match(r"^INFO\s+%s ➜ %s: Executing" % (
            re.escape(failed.group(1)), re.escape(failed.group(2))), lines[j])), default=0)
        out.append("%s: %s failed" % (failed.group(1), failed.group(2)))
        found = _failed_task(lines, begin, i)
        idempotence = [j for j in range(begin, i) if "Idempotence test failed" in lines[j]]
        if idempotence:
            found = lines[idempotence[0]:min(idempotence[0] + 8, i)]
        out.extend(found or lines[max(begin, i - 6):i])
    # pytest's summary, ansible-test's errors
    out.extend(line for line in lines
               if re.match(r"^(FAILED|ERROR) (tests|bench|tools)/\S", line) or line.startswith("ERROR: "))
    if not out:
        # an Ansible run of its own (make run)
        out = _failed_task(lines, 0, len(lines))
    return out[:limit]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--lines", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as handle:
            lines = [clean(line) for line in handle]
    except OSError as exc:
        print(f"(no log: {exc})")
        return 0
    found = excerpt([line for line in lines if line.strip()], args.lines)
    if not found:
        found = [line for line in lines if line.strip()][-min(args.lines, 6):]
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
