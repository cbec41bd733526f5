"""Every shell block of README.md and of the guides in docs/*.md works as written from the
repository root, or says why not.

A shell block (```bash, or sh/shell/console) must have a mark on the line right before its fence:

- ``<!-- readme-test: run -->``: each command of the block runs here, from the repository root,
  with the environment a new user has (no ANSIBLE_COLLECTIONS_PATH, no ANSIBLE_CONFIG: the
  repository's ansible.cfg must do), and must exit 0. Only commands that are fast and change
  nothing belong there: ``make`` and an ``ansible-playbook`` run without ``--check`` or
  ``--syntax-check`` are refused in a run block.
- ``<!-- readme-test: skip: <reason> -->``: not runnable here (a GPU, systemd, downloads, hours).
  The block must still be valid bash, and what it names must exist: each ``ansible-playbook``
  command is run as ``--syntax-check`` with its own inventory, playbook and ``-e`` options (a file
  the block writes with ``cat > FILE <<EOF`` is written to a scratch directory and used in its
  place); each ``make`` target must exist, and an ``ansible-playbook`` in its recipe is
  syntax-checked the same way; a repository path a command names must exist.

An unmarked block, a skip without a reason and a mark with no block after it fail, naming the file
and the line.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
# The README and the operator guides beside it (docs/dev is the test tooling's, docs/roles is
# generated from the argument specs: neither has shell blocks for a user).
PAGES = [README] + sorted((REPO / "docs").glob("*.md"))
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")
MARK = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<kind>[\w-]+)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")
HEREDOC_FILE = re.compile(r"^cat\s+>\s*(?P<path>\S+)\s+<<-?\s*(?P<q>['\"]?)(?P<word>\w+)(?P=q)\s*$")
PLAYBOOK_OK_IN_RUN = ("--check", "-C", "--syntax-check", "--list-hosts", "--list-tasks", "--list-tags")
TIMEOUT = 180


@dataclasses.dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    body: list
    mark: str | None  # "run", "skip" or None
    reason: str = ""
    path: str = "README.md"  # the page, relative to the repository root


def parse(text, path="README.md"):
    """(shell blocks, problems): a page's shell blocks with their marks, and what is wrong
    with the marking (unmarked blocks, skips without a reason, unknown or orphan marks)."""
    lines = text.splitlines()
    blocks, problems, used_marks = [], [], set()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group("indent"), m.group("fence"), m.group("lang").lower()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:j]]
        if lang in SHELL_LANGS:
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            mark = MARK.match(lines[k]) if k >= 0 else None
            where = "%s line %d (```%s block)" % (path, i + 1, lang)
            if not mark:
                problems.append("%s has no mark: put <!-- readme-test: run --> or <!-- readme-test: skip: "
                                "<why it cannot run here> --> on the line before it" % where)
                blocks.append(Block(i + 1, lang, body, None, path=path))
            else:
                used_marks.add(k)
                kind, reason = mark.group("kind"), (mark.group("reason") or "").strip()
                if kind not in ("run", "skip"):
                    problems.append("%s: unknown mark %r (run or skip)" % (where, kind))
                elif kind == "skip" and not reason:
                    problems.append("%s: a skip needs its reason (<!-- readme-test: skip: needs a GPU -->)" % where)
                blocks.append(Block(i + 1, lang, body, kind if kind in ("run", "skip") else None, reason, path))
        i = j + 1
    for number, line in enumerate(lines):
        if MARK.match(line) and number not in used_marks:
            problems.append("%s line %d: a readme-test mark with no shell block right after it" % (path, number + 1))
    return blocks, problems


def _bash_complete(text):
    if text.rstrip().endswith("\\"):
        return False
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    return proc.returncode == 0 and not proc.stderr.strip()


def commands(body):
    """The block's commands, each as its text (continuations, heredocs and loops kept whole),
    with the README line offset of its first line; comments and blank lines dropped."""
    out, acc, start = [], [], 0
    for number, line in enumerate(body):
        if not acc:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        acc.append(line)
        if _bash_complete("\n".join(acc) + "\n"):
            out.append((start, "\n".join(acc)))
            acc = []
    if acc:
        out.append((start, "\n".join(acc)))
    return out


def user_env():
    """The environment of a new user at the repository root: nothing that points Ansible at the
    collection but ansible.cfg."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS", "ANSIBLE_CONFIG")}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return env


def _argv(text):
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError:
        return []


def _program(argv):
    words = list(argv)
    while words and re.match(r"^\w+=", words[0]):  # VAR=value prefixes only: `-e key=value` stays
        words.pop(0)
    return (os.path.basename(words[0]), words) if words else ("", [])


def _repo_paths(argv):
    """Words that name a path inside the repository (their first component is there). build/ is the
    scratch directory commands write into (ignored by git and the collection build): not checked,
    as it is not there at all in a fresh clone."""
    for word in argv:
        word = word.lstrip("@")
        if "/" not in word or word.startswith(("/", "-", "~", "$", "build/")) or "://" in word:
            continue
        if (REPO / word.split("/", 1)[0]).exists():
            yield word


def _run(argv_or_text, shell=False, **extra_env):
    proc = subprocess.run(argv_or_text if not shell else ["bash", "-c", argv_or_text], cwd=REPO,
                          env=dict(user_env(), **extra_env), capture_output=True, text=True, timeout=TIMEOUT, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()[-3000:]


def _syntax_check(argv):
    # An inventory Ansible cannot parse is only a warning by default: make it fail the check.
    rc, output = _run(list(argv) + ["--syntax-check"], ANSIBLE_INVENTORY_UNPARSED_FAILED="1")
    return None if rc == 0 else "`%s --syntax-check` exited %d:\n%s" % (shlex.join(argv), rc, output)


def _makefile_rules():
    """{target: [recipe lines]} of the Makefile, $(VAR) of its simple `VAR := value` lines expanded."""
    text = (REPO / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+)\s*:?=\s*([^$\n]*?)\s*$", text, re.M))
    rules, current = {}, None
    for line in text.splitlines():
        rule = re.match(r"^([\w./$()-]+(?:\s+[\w./$()-]+)*)\s*:(?!=)", line)
        if rule and not line.startswith("\t"):
            current = rule.group(1).split()
            for target in current:
                rules.setdefault(target, [])
        elif line.startswith("\t") and current:
            expanded = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), line[1:].lstrip("@-+"))
            for target in current:
                rules[target].append(expanded)
        elif line.strip() and not line.startswith("#"):
            current = None
    return rules


def check_block(block, tmp_path):
    """What does not work in one marked block: a list of messages (empty when all is well)."""
    where = "%s line %d" % (block.path, block.line)
    problems = []
    text = "\n".join(block.body) + "\n"
    syntax = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    if syntax.returncode != 0:
        return ["%s: not valid bash: %s" % (where, syntax.stderr.strip())]
    written = {}  # path a heredoc of this block writes -> the scratch file standing in for it
    rules = None
    for offset, command in commands(block.body):
        here = "%s (command at line %d)" % (where, block.line + 1 + offset)
        for path, stand_in in written.items():
            command = command.replace(path, str(stand_in))
        first, *rest = command.splitlines()
        heredoc = HEREDOC_FILE.match(first.strip())
        if heredoc and block.mark == "skip":
            body = rest[:-1] if rest and rest[-1].strip() == heredoc.group("word") else rest
            stand_in = tmp_path / ("block%d-%s" % (block.line, os.path.basename(heredoc.group("path"))))
            stand_in.write_text("\n".join(body) + "\n")
            written[heredoc.group("path")] = stand_in
            continue
        argv = _argv(command) if "\n" not in command.replace("\\\n", " ") else []
        program, words = _program(argv)
        for path in _repo_paths(words):
            if not (REPO / path).exists():
                problems.append("%s: names %s, which is not in the repository" % (here, path))
        if block.mark == "run":
            if program == "make" or (program == "ansible-playbook" and not set(PLAYBOOK_OK_IN_RUN) & set(words)):
                problems.append("%s: `%s` would change this machine: mark the block skip, with the reason"
                                % (here, command))
                continue
            rc, output = _run(command, shell=True)
            if rc != 0:
                problems.append("%s: `%s` exited %d:\n%s" % (here, command, rc, output))
        elif program == "ansible-playbook":
            error = _syntax_check(words)
            if error:
                problems.append("%s: %s" % (here, error))
        elif program == "make":
            rules = _makefile_rules() if rules is None else rules
            targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            for target in targets:
                if target not in rules:
                    problems.append("%s: `make %s`: the Makefile has no target %s" % (here, target, target))
                    continue
                for recipe in rules.get(target, []):
                    recipe_argv = _argv(recipe)
                    if _program(recipe_argv)[0] == "ansible-playbook" and not set(recipe_argv) & {"$(MAKE)", "${MAKE}"}:
                        error = _syntax_check(_program(recipe_argv)[1])
                        if error:
                            problems.append("%s: `make %s` runs %s" % (here, target, error))
    return problems


README_BLOCKS, README_PROBLEMS = parse(README.read_text())
BLOCKS, PROBLEMS = [], []
for _page in PAGES:
    _blocks_of_page, _problems_of_page = parse(_page.read_text(), str(_page.relative_to(REPO)))
    BLOCKS += _blocks_of_page
    PROBLEMS += _problems_of_page


def test_every_shell_block_is_marked():
    assert README_BLOCKS, "no shell block found in README.md: the parser or the README changed"
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_the_guides_commands_are_read():
    # The pages the README's commands moved to: a glob that stopped finding them would check nothing.
    pages = {b.path for b in BLOCKS}
    assert pages >= {"README.md", "docs/engine-service.md", "docs/air-gapped.md", "docs/awx.md"}, sorted(pages)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mark],
                         ids=lambda b: "%s:%d-%s" % (b.path, b.line, b.mark))
def test_readme_block_works_as_written(block, tmp_path):
    problems = check_block(block, tmp_path)
    assert not problems, "\n".join(problems)


# The checker itself: each way a README can drift must be caught (these must fail when it would not).

def _blocks(text):
    return parse(text)


def test_an_unmarked_block_is_named_by_its_line():
    blocks, problems = _blocks("# t\n\n```bash\nls\n```\n\n<!-- readme-test: skip -->\n```bash\nls\n```\n"
                               "<!-- readme-test: run -->\n\ntext\n")
    assert [b.line for b in blocks] == [3, 8]
    assert problems == [
        "README.md line 3 (```bash block) has no mark: put <!-- readme-test: run --> or <!-- readme-test: skip: "
        "<why it cannot run here> --> on the line before it",
        "README.md line 8 (```bash block): a skip needs its reason (<!-- readme-test: skip: needs a GPU -->)",
        "README.md line 11: a readme-test mark with no shell block right after it"]


def test_indented_blocks_and_other_languages():
    blocks, problems = _blocks("- item\n  <!-- readme-test: skip: a reason -->\n  ```bash\n  tag=v1\n  ```\n"
                               "```yaml\na: 1\n```\n```\nplain\n```\n")
    assert not problems
    assert [(b.line, b.mark, b.reason, b.body) for b in blocks] == [(3, "skip", "a reason", ["tag=v1"])]


def test_commands_keep_heredocs_loops_and_continuations_whole():
    body = ["# comment", "cat > /tmp/x.yml <<'YAML'", "a: 1", "# yaml comment", "YAML",
            "echo a \\", "  b", "ls |", "while read -r n; do", "  echo $n", "done", ""]
    assert commands(body) == [(1, "cat > /tmp/x.yml <<'YAML'\na: 1\n# yaml comment\nYAML"), (5, "echo a \\\n  b"),
                              (7, "ls |\nwhile read -r n; do\n  echo $n\ndone")]


@pytest.mark.parametrize("mark, lines, expected", [
    # a playbook the README names that is not there: the syntax check fails
    ("skip", [".venv/bin/ansible-playbook -i inventories/local playbooks/nope.yml"],
     "names playbooks/nope.yml, which is not in the repository"),
    ("skip", [".venv/bin/ansible-playbook -i inventories/local playbooks/site.yml -e @/tmp/missing-file.yml"],
     "--syntax-check` exited"),
    # an -e file the block writes is used from the scratch directory; bad YAML in it fails
    ("skip", ["cat > /tmp/x.yml <<'YAML'", "a: [", "YAML",
              ".venv/bin/ansible-playbook -i inventories/local playbooks/site.yml -e @/tmp/x.yml"],
     "--syntax-check` exited"),
    ("skip", ["make no-such-target"], "the Makefile has no target no-such-target"),
    # an inventory the block writes that Ansible cannot parse
    ("skip", ["cat > ~/fleet.yml <<'YAML'", "all: [", "YAML",
              ".venv/bin/ansible-playbook -i ~/fleet.yml playbooks/site.yml"], "--syntax-check` exited"),
    ("skip", ["X=1 .venv/bin/ansible-playbook -i inventories/local playbooks/site.yml -e @/tmp/missing-file.yml -e a=b"],
     "--syntax-check` exited"),
    ("skip", ["ansible-builder create -f meta/no-such-ee.yml -c build/ee"], "names meta/no-such-ee.yml"),
    ("skip", ["echo 'unterminated"], "not valid bash"),
    ("run", ["make run"], "would change this machine"),
    ("run", [".venv/bin/ansible-playbook -i inventories/local playbooks/site.yml"], "would change this machine"),
    ("run", ["false"], "`false` exited 1"),
])
def test_the_checker_catches_drift(mark, lines, expected, tmp_path):
    problems = check_block(Block(1, "bash", lines, mark, "reason"), tmp_path)
    assert any(expected in p for p in problems), problems


def test_the_checker_passes_a_good_skip_block(tmp_path):
    lines = ["cat > /tmp/x.yml <<'YAML'", "engine_service_models: []", "YAML",
             ".venv/bin/ansible-playbook -i inventories/local playbooks/site.yml -e @/tmp/x.yml", "make run",
             "ansible-builder create -f meta/execution-environment.yml -c build/ee",
             # a VAR=value prefix is not the program; `-e key=value` stays with the playbook
             "ANSIBLE_NOCOLOR=1 .venv/bin/ansible-playbook -i inventories/local playbooks/report.yml -e engine_report_dir=/tmp/r"]
    assert check_block(Block(1, "bash", lines, "skip", "reason"), tmp_path) == []
    assert (tmp_path / "block1-x.yml").read_text() == "engine_service_models: []\n"  # the -e file, stood in


# Links between the pages: the README points at the guides, the guides at each other and at the
# generated role pages. A renamed page or heading must not leave a link to nothing.

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def anchors(text):
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as -."""
    found = set()
    for line in text.splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading and not line.startswith("#!"):
            found.add(re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-"))
    return found


def broken_links(page, text):
    problems = []
    for match in LINK.finditer(text):
        target = match.group("target")
        if "://" in target or target.startswith("mailto:"):
            continue
        path, anchor = target.split("#", 1) if "#" in target else (target, "")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append("%s: a link to %s, which does not exist" % (page.relative_to(REPO), target))
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            problems.append("%s: a link to %s, whose page has no such heading" % (page.relative_to(REPO), target))
    return problems


def test_every_link_between_the_pages_resolves():
    pages = PAGES + sorted((REPO / "docs" / "roles").glob("*.md"))
    problems = [p for page in pages for p in broken_links(page, page.read_text())]
    assert not problems, "\n".join(problems)


def test_the_link_check_catches_a_missing_page_and_heading():
    text = "[a](docs/security.md#the-privilege-line) [b](docs/nope.md) [c](docs/security.md#no-such-heading) [d](#x)"
    assert broken_links(README, text) == [
        "README.md: a link to docs/nope.md, which does not exist",
        "README.md: a link to docs/security.md#no-such-heading, whose page has no such heading",
        "README.md: a link to #x, whose page has no such heading"]
