"""Every task file of every role is at most 150 lines (docs/architecture.md: each step is "a task
file of the role that owns the step, at most 150 lines"), so that a reader sees one step at a time.
The checker also runs on a planted role tree, so that it can be seen failing."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[3]
LIMIT = 150

# (role, task file) pairs still over the limit; empty while every task file keeps to it.
ALLOWED: set[tuple[str, str]] = set()


def too_long(roles_dir, limit=LIMIT):
    """{(role, file): lines} for every roles/<role>/tasks/*.yml longer than ``limit`` lines."""
    out = {}
    for path in sorted(pathlib.Path(roles_dir).glob("*/tasks/*.yml")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out[(path.parent.parent.name, path.name)] = lines
    return out


def test_every_task_file_is_at_most_150_lines():
    over = {key: lines for key, lines in too_long(REPO / "roles").items() if key not in ALLOWED}
    assert not over, "task files over %d lines (split them by step): %s" % (
        LIMIT, ", ".join(f"roles/{role}/tasks/{name} ({lines})" for (role, name), lines in sorted(over.items())))


def test_the_allow_list_names_only_what_is_still_too_long():
    over = set(too_long(REPO / "roles"))
    assert ALLOWED <= over, f"allowed but short now, take off ALLOWED: {sorted(ALLOWED - over)}"


def test_the_checker_finds_a_planted_long_file(tmp_path):
    tasks = tmp_path / "roles/alpha/tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("---\n" + "# line\n" * (LIMIT - 1), encoding="utf-8")
    (tasks / "long.yml").write_text("---\n" + "# line\n" * LIMIT, encoding="utf-8")
    assert too_long(tmp_path / "roles") == {("alpha", "long.yml"): LIMIT + 1}
