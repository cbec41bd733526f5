"""Every program a role or playbook task runs with ansible.builtin.command / shell / raw is an absolute path
(issue #44, F): a bare name is looked up on the PATH of whoever runs the play, as root, and a directory
another user can write that comes first there decides what runs. The first word of each such task is read
from the task files themselves; a variable is allowed only when it is one of ``ALLOWED``, each an absolute
path that the role judges before it runs it, or the interpreter that runs the modules themselves."""

from __future__ import annotations

import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
RUNNERS = ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw", "ansible.builtin.script",
           "command", "shell", "raw", "script")
# variable -> why it may be the program
ALLOWED = {
    "engine_service_systemctl": "the role default /usr/bin/systemctl (a test's fake), judged in systemd.yml",
    "__engine_cache_venv": "under engine_cache_root, judged whole by engine_layout",
    "__engine_uv_python": "the interpreter that runs the role's modules on the node",
    "ansible_playbook_python": "the controller's own interpreter, which runs the play",
}
_VARIABLE = re.compile(r"\{\{-?\s*([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}")
_FIRST_OF_LIST = re.compile(r"\{\{-?\s*\[\s*('[^']*'|\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_]*)")


def _task_files():
    files = sorted(REPO.glob("roles/*/tasks/*.yml")) + sorted(REPO.glob("roles/*/handlers/*.yml"))
    files += sorted(REPO.glob("playbooks/*.yml"))
    assert len(files) > 40, "found too few task files: %d" % len(files)
    return files


def _tasks(data):
    if isinstance(data, list):
        for item in data:
            yield from _tasks(item)
    elif isinstance(data, dict):
        yield data
        for key in ("block", "rescue", "always", "tasks", "handlers", "pre_tasks", "post_tasks"):
            if key in data:
                yield from _tasks(data[key])


def first_word(args):
    """The program of a command task's arguments, as written: a literal, or ``{{ var }}...`` / ``var``."""
    if isinstance(args, dict):
        if "argv" in args:
            argv = args["argv"]
            if isinstance(argv, list):
                return str(argv[0])
            match = _FIRST_OF_LIST.match(argv.strip())
            assert match, "cannot read the program of argv %r" % argv
            word = match.group(1)
            return word[1:-1] if word[0] in "'\"" else "{{ %s }}" % word
        args = args.get("cmd") or args.get("_raw_params") or ""
    match = re.match(r"\{\{.*?\}\}\S*|\S+", str(args).strip())
    return match.group(0) if match else ""


def problem(program):
    """Why ``program`` may not be what a task runs, or None."""
    if program.startswith("/"):
        return None
    match = _VARIABLE.match(program)
    if match:
        if match.group(1) in ALLOWED:
            return None
        return "its program is the variable %s, which is not among the judged absolute paths allowed" % match.group(1)
    return "its program %r is a bare name, looked up on PATH when it runs: give its absolute path" % program


def command_tasks():
    out = []
    for path in _task_files():
        for task in _tasks(yaml.safe_load(path.read_text())):
            for runner in RUNNERS:
                if runner in task:
                    out.append((path.relative_to(REPO), task.get("name"), first_word(task[runner])))
    return out


def test_every_command_task_runs_an_absolute_path():
    found = command_tasks()
    assert len(found) >= 15, "found too few command tasks: %s" % found
    bad = ["%s: task %r: %s" % (path, name, problem(program)) for path, name, program in found if problem(program)]
    assert not bad, "\n".join(bad)


def test_the_allowed_variables_are_used_and_absolute_by_default():
    used = {m.group(1) for _p, _n, program in command_tasks() for m in [_VARIABLE.match(program)] if m}
    assert set(ALLOWED) == used, "allowed but unused: %s" % sorted(set(ALLOWED) - used)
    defaults = {}
    for path in REPO.glob("roles/*/defaults/main.yml"):
        defaults.update(yaml.safe_load(path.read_text()) or {})
    assert defaults["engine_service_systemctl"] == "/usr/bin/systemctl"


def test_the_check_reads_what_it_must_refuse():
    """The reader itself: a bare name, a bare name first in a templated list, and a variable not allowed are
    found; absolute paths and allowed variables pass."""
    assert problem(first_word({"argv": ["systemctl", "show"]}))
    assert problem(first_word({"argv": "{{ ['systemctl', 'show'] + units }}"}))
    assert problem(first_word({"argv": "{{ [some_program, 'show'] }}"}))
    assert problem(first_word({"cmd": "df -Pk /dev/shm"}))
    assert problem(first_word("getent ahosts x"))
    assert problem(first_word({"argv": ["{{ some_program }}", "x"]}))
    assert not problem(first_word({"argv": ["/usr/bin/df", "-Pk"]}))
    assert not problem(first_word({"argv": "{{ [engine_service_systemctl, 'show'] + units }}"}))
    assert not problem(first_word({"argv": ["{{ __engine_cache_venv }}/bin/python", "-c"]}))
