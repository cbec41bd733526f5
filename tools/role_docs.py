"""Write docs/roles/<role>.md from each role's meta/argument_specs.yml and defaults/main.yml.

The argument specs are the one place a role's variables are documented (ansible-doc -t role reads
them too); these pages are generated from them, so that they cannot drift:

    .venv/bin/python tools/role_docs.py            # rewrite the pages
    .venv/bin/python tools/role_docs.py --check    # exit 1, naming each page that is not current

tools/check_docs.py (make docs) runs the check, and tests/unit/test_role_docs.py fails on a stale page.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
NS = "llmfleet.engines"
COMMAND = ".venv/bin/python tools/role_docs.py"

# Ansible's documentation markup (C(...), O(...), ...), rendered as Markdown. The argument of a
# macro ends at its matching parenthesis: C(20000 + (port % 100) * 100) stays one piece of code.
_MACRO = re.compile(r"\b([CIBUVOEMPL]|RV)\(")


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _closing(text: str, start: int) -> int:
    """Index of the parenthesis that closes the one just before `start`, or -1."""
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return -1


def markup(text: str) -> str:
    """One description paragraph with Ansible's markup turned into Markdown."""
    out, pos = [], 0
    while True:
        match = _MACRO.search(text, pos)
        if not match:
            out.append(text[pos:])
            break
        end = _closing(text, match.end())
        if end < 0:  # not a macro after all (an unbalanced parenthesis): keep the text
            out.append(text[pos:match.end()])
            pos = match.end()
            continue
        out.append(text[pos:match.start()])
        kind, arg = match.group(1), text[match.end():end]
        if kind in ("C", "V", "E", "RV"):
            out.append(_code(arg))
        elif kind == "O":
            out.append(_code(arg.split("#", 1)[0] + "." + arg.split(":", 1)[1] if "#" in arg else arg))
        elif kind in ("M", "P"):
            out.append(_code(arg.split("#", 1)[0]))
        elif kind == "I":
            out.append(f"*{arg}*")
        elif kind == "B":
            out.append(f"**{arg}**")
        elif kind == "U":
            out.append(f"<{arg}>")
        elif kind == "L":
            label, url = arg.rsplit(",", 1) if "," in arg else (arg, arg)
            out.append(f"[{label.strip()}]({url.strip()})")
        pos = end + 1
    return "".join(out)


def _paragraphs(description) -> list[str]:
    if description is None:
        return []
    items = description if isinstance(description, list) else [description]
    return [markup(" ".join(str(item).split())) for item in items]


def _value(value) -> str:
    """A default as one line of YAML (flow style), as it would be written in an inventory."""
    if isinstance(value, str):
        return '""' if value == "" else value
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip().removesuffix("...").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _type(option: dict) -> str:
    kind = option.get("type", "str")
    return f"{kind} of {option['elements']}" if option.get("elements") else kind


def _option_lines(name: str, option: dict, defaults: dict, heading: str) -> list[str]:
    lines = [f"{heading} `{name}`", ""]
    facts = [f"type: {_type(option)}"]
    if option.get("required"):
        facts.append("required")
    if "default" in option:
        facts.append("default: " + _code(_value(option["default"])))
    elif name in defaults:
        facts.append("default: " + _code(_value(defaults[name])) + " (defaults/main.yml)")
    if option.get("choices"):
        facts.append("choices: " + ", ".join(_code(_value(c)) for c in option["choices"]))
    if option.get("aliases"):
        facts.append("aliases: " + ", ".join(_code(a) for a in option["aliases"]))
    if option.get("no_log"):
        facts.append("secret (never shown: keep it in ansible-vault)")
    lines += ["; ".join(facts), ""]
    for paragraph in _paragraphs(option.get("description")):
        lines += [paragraph, ""]
    suboptions = option.get("options") or option.get("suboptions") or {}
    for sub in suboptions:
        lines += _option_lines(f"{name}[].{sub}" if option.get("type") == "list" else f"{name}.{sub}",
                               suboptions[sub], {}, heading + "#" if len(heading) < 6 else heading)
    return lines


def _summary(options: dict, defaults: dict) -> list[str]:
    lines = ["| variable | type | default |", "|---|---|---|"]
    for name in options:  # the spec's order: its author's grouping
        option = options[name]
        if "default" in option:
            default = _code(_value(option["default"]))
        elif name in defaults:
            default = _code(_value(defaults[name]))
        else:
            default = "required" if option.get("required") else "(none)"
        anchor = re.sub(r"[^a-z0-9_-]", "", name.lower())
        lines.append(f"| [`{name}`](#{anchor}) | {_type(option)} | {_cell(default)} |")
    return lines + [""]


def render(role_dir: pathlib.Path) -> str:
    """The page of one role, from its argument specs and defaults."""
    role = role_dir.name
    specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]
    defaults_file = role_dir / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text(encoding="utf-8")) if defaults_file.exists() else None) or {}
    main = specs.get("main", {})
    lines = [
        f"<!-- Generated by tools/role_docs.py from roles/{role}/meta/argument_specs.yml and defaults/main.yml:",
        f"     edit those, then run `{COMMAND}`. A unit test fails when this page is not current. -->",
        "",
        f"# Role `{NS}.{role}`",
        "",
    ]
    if main.get("short_description"):
        lines += [markup(" ".join(main["short_description"].split())) + ".", ""]
    for paragraph in _paragraphs(main.get("description")):
        lines += [paragraph, ""]
    lines += [f"`ansible-doc -t role {NS}.{role}` shows the same. Set the variables per host or per group; "
              "a bad value fails that host, naming the variable, the value and what is allowed.", ""]
    entry_points = ["main"] + sorted(name for name in specs if name != "main")
    if len(entry_points) > 1:
        links = ", ".join(f"[`{name}`](#entry-point-{name})" for name in entry_points)
        lines += [f"Entry points: {links}.", ""]
    for name in entry_points:
        spec = specs[name] or {}
        options = spec.get("options") or {}
        lines += [f"## Entry point `{name}`", ""]
        if name != "main":
            if spec.get("short_description"):
                lines += [markup(" ".join(spec["short_description"].split())) + ".", ""]
            for paragraph in _paragraphs(spec.get("description")):
                lines += [paragraph, ""]
        if not options:
            lines += ["No options of its own.", ""]
            continue
        entry_defaults = defaults if name == "main" else {}
        lines += _summary(options, entry_defaults)
        for option in options:
            lines += _option_lines(option, options[option], entry_defaults, "###")
    return "\n".join(lines).rstrip("\n") + "\n"


def roles(repo: pathlib.Path = REPO) -> list[pathlib.Path]:
    return sorted(path.parent.parent for path in (repo / "roles").glob("*/meta/argument_specs.yml"))


def undocumented(role_dir: pathlib.Path) -> list[str]:
    """Variables of defaults/main.yml that no entry point's argument spec declares (`__` names are private)."""
    specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]
    declared = {name for spec in specs.values() for name in ((spec or {}).get("options") or {})}
    defaults_file = role_dir / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text(encoding="utf-8")) if defaults_file.exists() else None) or {}
    return sorted(name for name in defaults if name not in declared and not name.startswith("__"))


def problems(repo: pathlib.Path = REPO) -> list[str]:
    """What is out of date under docs/roles/, and the variables no argument spec documents."""
    found = []
    pages = repo / "docs" / "roles"
    wanted = set()
    for role_dir in roles(repo):
        page = pages / f"{role_dir.name}.md"
        wanted.add(page.name)
        for name in undocumented(role_dir):
            found.append(f"roles/{role_dir.name}/defaults/main.yml: {name} has no entry in meta/argument_specs.yml")
        if not page.exists():
            found.append(f"docs/roles/{page.name} is missing: run {COMMAND}")
        elif page.read_text(encoding="utf-8") != render(role_dir):
            found.append(f"docs/roles/{page.name} is stale (roles/{role_dir.name}/meta/argument_specs.yml or "
                         f"defaults/main.yml changed): run {COMMAND}")
    for page in sorted(pages.glob("*.md")) if pages.is_dir() else []:
        if page.name not in wanted:
            found.append(f"docs/roles/{page.name} belongs to no role: remove it")
    return found


def write(repo: pathlib.Path = REPO) -> list[pathlib.Path]:
    pages = repo / "docs" / "roles"
    pages.mkdir(parents=True, exist_ok=True)
    written = []
    for role_dir in roles(repo):
        page = pages / f"{role_dir.name}.md"
        text = render(role_dir)
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            page.write_text(text, encoding="utf-8")
            written.append(page)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is not current")
    parser.add_argument("--repo", type=pathlib.Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check:
        found = problems(args.repo)
        for problem in found:
            print(f"ERROR: {problem}")
        print(f"role docs: {len(roles(args.repo))} roles checked, {len(found)} problems")
        return 1 if found else 0
    for page in write(args.repo):
        print(f"wrote {page.relative_to(args.repo)}")
    found = [p for p in problems(args.repo) if "has no entry" in p or "belongs to no role" in p]
    for problem in found:
        print(f"ERROR: {problem}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
