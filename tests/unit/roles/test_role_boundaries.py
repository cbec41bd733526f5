"""Roles do not reach into each other: what two roles share has its own declared interface.

Every task of every role (blocks, rescues, always and handlers included) is read. A task fails
this test when it

- includes another role's task, handler or vars file: ``include_role``/``import_role`` naming
  another role with ``tasks_from``/``handlers_from``/``vars_from``/``defaults_from`` (a role is
  used through its ``main`` entry point and its argument specs), or ``include_tasks``/
  ``import_tasks``/``include_vars`` with a path into another role (``roles/<other>/``,
  ``../<other>/`` or any ``..`` out of the role); or
- sets, passes, registers or reads another role's private ``__<role>_`` variable (``set_fact``,
  ``vars``, ``register``, ``loop_var``, or a template that names it).

The checker runs on the collection's roles and, so that it can be seen failing, on a synthetic
role tree that plants one of each reach-in.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
COLLECTION = "llmfleet.engines."
ROLE_INCLUDERS = {"include_role", "import_role"}
FILE_INCLUDERS = {"include_tasks", "import_tasks", "include_vars"}
FROM_KEYS = ("tasks_from", "handlers_from", "vars_from", "defaults_from")

# (role, task file) pairs still reaching into another role; empty when the roles keep to their own.
ALLOWED: set[tuple[str, str]] = set()


def _tasks(items):
    for task in items or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _tasks(task[key])
        yield task


def _short(module):
    return module.rsplit(".", 1)[-1] if module.startswith(("ansible.builtin.", "ansible.legacy.")) else module


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _task_problems(role, others, task):
    problems = []
    for key, value in task.items():
        module = _short(str(key))
        if module in ROLE_INCLUDERS and isinstance(value, dict):
            target = str(value.get("name", ""))
            target = target[len(COLLECTION):] if target.startswith(COLLECTION) else target
            used = [k for k in FROM_KEYS if k in value]
            if target != role and used:
                problems.append(f"{module} {target} {used[0]}: {value[used[0]]} (another role's private file)")
        elif module in FILE_INCLUDERS:
            path = str(value.get("file", "") if isinstance(value, dict) else value)
            if ".." in pathlib.PurePosixPath(path).parts or re.search(r"(^|/)roles/", path):
                problems.append(f"{module} {path} (a path out of the role)")
    pattern = re.compile(r"\b__(" + "|".join(map(re.escape, others)) + r")_\w+") if others else None
    if pattern:
        own = {k: v for k, v in task.items() if k not in ("block", "rescue", "always")}
        names = sorted({m.group(0) for text in _strings(own) for m in pattern.finditer(text)})
        if names:
            problems.append("uses another role's private variables: " + ", ".join(names))
    return problems


def boundary_problems(roles_dir):
    """[(role, file, task name, problem)] for every reach-in under roles_dir."""
    roles_dir = pathlib.Path(roles_dir)
    roles = sorted(p.name for p in roles_dir.iterdir() if (p / "tasks").is_dir() or (p / "handlers").is_dir())
    out = []
    for role in roles:
        others = [r for r in roles if r != role]
        for sub in ("tasks", "handlers"):
            for path in sorted((roles_dir / role / sub).glob("*.yml")):
                for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
                    for problem in _task_problems(role, others, task):
                        out.append((role, f"{sub}/{path.name}", task.get("name", "?"), problem))
    return out


def test_roles_keep_to_their_own_files_and_variables():
    problems = [p for p in boundary_problems(REPO / "roles") if (p[0], p[1]) not in ALLOWED]
    assert not problems, "roles reach into each other:\n" + "\n".join(
        f"roles/{role}/{where} ({name}): {problem}" for role, where, name, problem in problems)


def test_the_allow_list_names_only_what_still_reaches_in():
    reaching = {(p[0], p[1]) for p in boundary_problems(REPO / "roles")}
    assert ALLOWED <= reaching, f"allowed but clean now, take off ALLOWED: {sorted(ALLOWED - reaching)}"


def _write(path, tasks):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(tasks, sort_keys=False), encoding="utf-8")


@pytest.fixture
def planted(tmp_path):
    roles = tmp_path / "roles"
    _write(roles / "alpha/tasks/main.yml", [
        {"name": "Own file", "ansible.builtin.include_tasks": "own.yml"},
        {"name": "Own variable", "ansible.builtin.set_fact": {"__alpha_x": 1}},
        {"name": "Through beta's interface", "ansible.builtin.include_role": {"name": "llmfleet.engines.beta"},
         "vars": {"beta_public": 1}},
    ])
    _write(roles / "alpha/tasks/own.yml", [{"name": "Fine", "ansible.builtin.debug": {"msg": "{{ __alpha_x }}"}}])
    _write(roles / "beta/tasks/main.yml", [{"name": "Beta", "ansible.builtin.debug": {"msg": "hi"}}])
    _write(roles / "beta/tasks/private.yml", [{"name": "Private", "ansible.builtin.debug": {"msg": "hi"}}])
    return roles


def test_the_checker_passes_a_clean_tree(planted):
    assert boundary_problems(planted) == []


@pytest.mark.parametrize("task, expect", [
    ({"name": "Reach", "ansible.builtin.include_role": {"name": "llmfleet.engines.beta", "tasks_from": "private"}},
     "include_role beta tasks_from"),
    ({"name": "Reach", "import_role": {"name": "beta", "tasks_from": "private.yml"}}, "import_role beta tasks_from"),
    ({"name": "Reach", "ansible.builtin.include_tasks": "../../beta/tasks/private.yml"}, "a path out of the role"),
    ({"name": "Reach", "ansible.builtin.import_tasks": {"file": "{{ playbook_dir }}/roles/beta/tasks/private.yml"}},
     "a path out of the role"),
    ({"name": "Reach", "ansible.builtin.set_fact": {"__beta_target": "x"}}, "__beta_target"),
    ({"name": "Reach", "ansible.builtin.include_role": {"name": "beta"}, "vars": {"__beta_job": {"uv": "/x"}}},
     "__beta_job"),
    ({"name": "Reach", "ansible.builtin.debug": {"msg": "{{ x is match(__beta_regex) }}"}}, "__beta_regex"),
    ({"name": "Reach", "ansible.builtin.command": "true", "register": "__beta_out"}, "__beta_out"),
])
def test_the_checker_finds_a_planted_reach_in(planted, task, expect):
    _write(planted / "alpha/tasks/reach.yml", [{"name": "Wrapped", "block": [task]}])
    found = boundary_problems(planted)
    assert [(role, where) for role, where, _name, _problem in found] == [("alpha", "tasks/reach.yml")], found
    assert expect in found[0][3]
