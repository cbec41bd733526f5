"""Check that every plugin's documentation renders and that EXAMPLES use only real options.

For each module: `ansible-doc` must render it, and every option named by an EXAMPLES task that
calls the module (by FQCN) must exist in DOCUMENTATION (suboptions checked too). Filters and the
role's argument specs must render as well, and the pages generated from those specs
(docs/roles/<role>.md, tools/role_docs.py) must be current.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import yaml

import role_docs  # tools/role_docs.py, beside this file

REPO = pathlib.Path(__file__).resolve().parent.parent
NS = "llmfleet.engines"
TASK_KEYWORDS = {
    "name", "register", "when", "loop", "vars", "delegate_to", "run_once", "check_mode", "diff",
    "become", "environment", "changed_when", "failed_when", "until", "retries", "delay", "notify",
    "tags", "no_log", "loop_control", "async", "poll", "ignore_errors", "args",
}


def docstrings(path: pathlib.Path) -> dict:
    """DOCUMENTATION, EXAMPLES and RETURN of a plugin file, without importing it."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                found[target.id] = ast.literal_eval(node.value)
    return found


def check_options(used: dict, spec: dict, where: str) -> list[str]:
    problems = []
    names = {}
    for name, option in (spec or {}).items():
        names[name] = option
        for alias in option.get("aliases", []) or []:
            names[alias] = option
    for key, value in used.items():
        if key not in names:
            problems.append(f"{where}: option {key!r} does not exist (known: {', '.join(sorted(names))})")
            continue
        sub = names[key].get("suboptions")
        if sub and isinstance(value, dict):
            problems.extend(check_options(value, sub, f"{where}.{key}"))
        if sub and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    problems.extend(check_options(item, sub, f"{where}.{key}[]"))
    return problems


def tasks_in(examples) -> list[dict]:
    out = []
    for item in examples or []:
        if not isinstance(item, dict):
            continue
        for key in ("tasks", "block", "rescue", "always", "pre_tasks", "post_tasks"):
            out.extend(tasks_in(item.get(key)))
        out.append(item)
    return out


def _ansible_doc_run(kind: str, names: list[str]):
    """ansible-doc, as text then as JSON, for ``names`` in one process each: the JSON, or a list of problems."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=str(REPO / "build" / "collections"))
    binary = str(pathlib.Path(sys.executable).parent / "ansible-doc")
    problems = []
    for extra in ([], ["--json"]):
        result = subprocess.run([binary, "-t", kind, *extra, *names], capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0 or "[WARNING]" in result.stderr or not result.stdout.strip():
            problems.append(f"ansible-doc -t {kind} {' '.join(extra)} {' '.join(names)} failed (rc {result.returncode}):"
                            f" {result.stderr.strip()}")
    if problems:
        return problems
    return json.loads(result.stdout)


def ansible_docs(kind: str, names: list[str]) -> dict:
    """{name: its documentation as ansible-doc renders it (JSON), or a list of problems}. One ansible-doc for all
    the names (each start loads every plugin: about half a second); where that one fails, one per name, so that
    the problem names its plugin."""
    if not names:
        return {}
    together = _ansible_doc_run(kind, names)
    if isinstance(together, dict) and all(name in together for name in names):
        return {name: {name: together[name]} for name in names}
    return {name: _ansible_doc_run(kind, [name]) for name in names}


def main() -> int:
    problems: list[str] = []
    checked = 0
    modules = [path for path in sorted((REPO / "plugins" / "modules").glob("*.py")) if path.name != "__init__.py"]
    rendered_modules = ansible_docs("module", [f"{NS}.{path.stem}" for path in modules])
    for path in modules:
        module = path.stem
        fqcn = f"{NS}.{module}"
        docs = docstrings(path)
        for section in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            if not docs.get(section, "").strip():
                problems.append(f"{fqcn}: {section} is missing or empty")
        rendered = rendered_modules[fqcn]
        if isinstance(rendered, list):
            problems.extend(rendered)
            continue
        # Options as ansible-doc merges them, documentation fragments included.
        spec = rendered[fqcn]["doc"].get("options", {})
        try:
            examples = yaml.safe_load(docs.get("EXAMPLES") or "[]")
        except yaml.YAMLError as exc:
            problems.append(f"{fqcn}: EXAMPLES is not valid YAML: {exc}")
            continue
        calls = 0
        for task in tasks_in(examples):
            for key in (fqcn, module):
                if key in task:
                    if key == module:
                        problems.append(f"{fqcn}: an EXAMPLES task calls it without its FQCN")
                    args = task[key] or {}
                    if isinstance(args, dict):
                        problems.extend(check_options(args, spec, f"{fqcn} EXAMPLES task {task.get('name')!r}"))
                    calls += 1
        if not calls:
            problems.append(f"{fqcn}: EXAMPLES never call the module")
        checked += 1
    filters = [f"{NS}.{path.stem}" for path in sorted((REPO / "plugins" / "filter").glob("*.yml"))]
    roles = [f"{NS}.{role.parent.parent.name}" for role in sorted((REPO / "roles").glob("*/meta/argument_specs.yml"))]
    for kind, names in (("filter", filters), ("role", roles)):
        for rendered in ansible_docs(kind, names).values():
            problems.extend(rendered if isinstance(rendered, list) else [])
            checked += 1
    # The role pages are generated from the specs checked above: one that differs is stale.
    problems.extend(role_docs.problems(REPO))
    for problem in problems:
        print(f"ERROR: {problem}")
    print(f"docs: {checked} plugins and roles checked, {len(problems)} problems")
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
