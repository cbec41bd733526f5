"""The playbooks use a role only through an entry point its meta/argument_specs.yml declares.

A role's task files are private; ``include_role``/``import_role`` with ``tasks_from`` may name only
an entry point the role declares (``main`` or another key of ``argument_specs``), so a reader sees
every way into a role in one file, and ansible-doc shows it. The checker is also run on a planted
playbook so that it can be seen failing.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
COLLECTION = "llmfleet.engines."


def entry_points(roles_dir):
    out = {}
    for spec in sorted(pathlib.Path(roles_dir).glob("*/meta/argument_specs.yml")):
        out[spec.parent.parent.name] = set(yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"])
    return out


def _tasks(items):
    for task in items or []:
        if isinstance(task, dict):
            for key in ("block", "rescue", "always", "pre_tasks", "tasks", "post_tasks", "handlers"):
                yield from _tasks(task.get(key))
            yield task


def undeclared(playbook_dirs, roles_dir):
    """[(file, role, tasks_from)] for every include of a role file that is not a declared entry point,
    and for every include of an entry point that declares no options without ``rolespec_validate:
    false`` (Ansible would validate nothing at the cost of one task per host, every hourly run):
    ``(file, role, "<entry> validated")``."""
    declared = entry_points(roles_dir)
    optionless = {}
    for spec in sorted(pathlib.Path(roles_dir).glob("*/meta/argument_specs.yml")):
        points = yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"]
        optionless[spec.parent.parent.name] = {name for name, point in points.items()
                                               if not (point or {}).get("options")}
    found = []
    for directory in playbook_dirs:
        for path in sorted(pathlib.Path(directory).rglob("*.yml")):
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                continue
            for task in _tasks(data):
                for key, value in task.items():
                    if str(key).rsplit(".", 1)[-1] not in ("include_role", "import_role") or not isinstance(value, dict):
                        continue
                    name = str(value.get("name", ""))
                    role = name[len(COLLECTION):] if name.startswith(COLLECTION) else name
                    entry = pathlib.PurePosixPath(str(value.get("tasks_from", "main"))).stem
                    if role in declared and entry not in declared[role]:
                        found.append((str(path), role, entry))
                    elif role in declared and entry in optionless[role] and value.get("rolespec_validate", True):
                        found.append((str(path), role, entry + " validated"))
    return found


def test_the_playbooks_use_only_declared_entry_points():
    assert undeclared([REPO / "playbooks"], REPO / "roles") == []


def test_every_declared_entry_point_has_its_task_file():
    for role, points in entry_points(REPO / "roles").items():
        for point in points:
            assert (REPO / "roles" / role / "tasks" / f"{point}.yml").is_file(), (role, point)


@pytest.mark.parametrize("include, bad", [
    ({"tasks_from": "state", "rolespec_validate": False}, None),
    ({"tasks_from": "state.yml", "rolespec_validate": False}, None),
    ({"tasks_from": "check"}, None),
    ({"tasks_from": "install", "rolespec_validate": False}, "install"),
    ({"tasks_from": "state"}, "state validated"),
])
def test_the_checker_finds_an_undeclared_or_needlessly_validated_entry_point(tmp_path, include, bad):
    spec = tmp_path / "roles/beta/meta/argument_specs.yml"
    spec.parent.mkdir(parents=True)
    spec.write_text(yaml.safe_dump({"argument_specs": {"main": {"options": {"x": {}}}, "state": {"options": {}},
                                                       "check": {"options": {"y": {}}}}}), encoding="utf-8")
    book = tmp_path / "playbooks/site.yml"
    book.parent.mkdir()
    book.write_text(yaml.safe_dump([{"hosts": "all", "tasks": [{"block": [
        {"ansible.builtin.include_role": dict(name="llmfleet.engines.beta", **include)}]}]}]),
        encoding="utf-8")
    found = undeclared([tmp_path / "playbooks"], tmp_path / "roles")
    assert found == ([(str(book), "beta", bad)] if bad else [])
