"""Print a short excerpt of why a test piece failed, from its log (tools/test_all.sh).

CI shows only the last lines of `make test`: this excerpt comes last, so a failure can be read
there without the whole log. It picks, in order of appearance: pytest's FAILED/ERROR summary
lines, Ansible's failed tasks (the TASK line and the failure's first lines), molecule's
idempotence report and its CRITICAL lines. Colours and molecule's box prefixes are removed,
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


def excerpt(lines, limit):
    out = []
    task = None
    i = 0
    while i < len(lines) and len(out) < limit:
        line = lines[i]
        if line.startswith("TASK [") or line.startswith("PLAY ["):
            task = line
        elif re.match(r"^(FAILED|ERROR) \S", line):
            out.append(line)
        elif re.match(r"^(fatal|failed): \[", line) and "...ignoring" not in "".join(lines[i + 1:i + 3]):
            if task:
                out.append(task)
                task = None
            out.extend(lines[i:i + 4])
            i += 3
        elif "Idempotence test failed" in line:
            out.extend(lines[i:i + 8])
            i += 7
        elif "CRITICAL" in line and "default/molecule.yml" not in line:
            out.append(line)
        i += 1
    return out[:limit]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--lines", type=int, default=14)
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
