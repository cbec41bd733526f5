"""requirements/system.txt is the one list of the Debian packages the suite needs.

``make test``, ``make run`` and ``tools/podman_setup.sh`` install from it (tools/system_packages.sh);
these tests keep it complete and true:

- every program a test, bench or tool script calls by name (``shutil.which("x")``, the first
  word of a ``subprocess`` argv list, an absolute ``/usr/(s)bin/x`` path, ``command -v x`` in a
  shell script) is provided by a package the file lists, by an essential package of every
  Debian machine, by the tool venv, or by this repository's own fakes;
- every program the file names is provided by its package (or a package it depends on), as dpkg
  records it on this machine.
"""
import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
LIST = REPO / "requirements" / "system.txt"
SCANNED = ("tests", "bench", "tools", "extensions")
# Programs only a GPU machine has (tools/device_check.sh and the tests of its output), and the
# engine itself, which the suite runs from environments it builds.
ELSEWHERE = {
    "nvidia-smi": "the NVIDIA driver of a GPU node",
    "nvcc": "the CUDA toolkit of a GPU node",
    "vllm": "an engine environment the suite builds",
}
SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call"}


def read_list():
    """{package: (groups, programs)} of requirements/system.txt."""
    out = {}
    for line in LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        assert len(words) >= 3, "requirements/system.txt: %r needs a package, its groups and its programs (or -)" % line
        programs = [] if words[2:] == ["-"] else words[2:]
        out[words[0]] = (words[1].split(","), programs)
    return out


def _programs_of_python(path: pathlib.Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            owner = getattr(func.value, "id", None) if isinstance(func, ast.Attribute) else None
            first = node.args[0] if node.args else None
            if name == "which" and owner == "shutil" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value, node.lineno
            elif (name in SUBPROCESS_CALLS and owner == "subprocess" and isinstance(first, ast.List) and first.elts
                  and isinstance(first.elts[0], ast.Constant) and isinstance(first.elts[0].value, str)):
                yield os.path.basename(first.elts[0].value), node.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = re.fullmatch(r"/usr/s?bin/([A-Za-z0-9_.+-]+)", node.value)
            if match:
                yield match.group(1), node.lineno


def _programs_of_shell(path: pathlib.Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in re.finditer(r"command -v ([A-Za-z0-9_.+-]+)", line):
            yield match.group(1), number


def called_programs():
    """{program: [where it is called]} over the scanned trees."""
    out = {}
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py":
                found = _programs_of_python(path)
            elif path.suffix == ".sh":
                found = _programs_of_shell(path)
            else:
                continue
            for program, line in found:
                out.setdefault(program, []).append("%s:%d" % (path.relative_to(REPO), line))
    return out


def _repo_fakes():
    """Programs this repository brings itself (fake systemctl, fake nvidia-smi, fake load balancer...)."""
    names = set()
    for folder in (REPO / "tests" / "roles" / "fakebin", REPO / "tests" / "fixtures" / "bin"):
        names.update(p.name for p in folder.iterdir() if p.is_file())
    names.update(p.name for p in (REPO / "tests" / "fixtures").iterdir() if p.is_file())
    return names


def _owner(program):
    """The Debian package that installed ``program`` found on PATH (None: not there, or not dpkg's)."""
    found = shutil.which(program, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    if not found:
        return None
    for candidate in (found, os.path.realpath(found), found.replace("/usr/", "/", 1)):
        done = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if not line.startswith("diversion by")]
        if done.returncode == 0 and lines:
            return lines[0].split(":", 1)[0].split(",")[0].strip()
    return None


def _essential(package):
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Essential} ${Priority}", package],
                          capture_output=True, text=True, check=False)
    return done.returncode == 0 and (done.stdout.startswith("yes") or done.stdout.split()[-1:] == ["required"])


def _depends(package):
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Depends},${Pre-Depends}", package],
                          capture_output=True, text=True, check=False)
    names = set()
    for item in done.stdout.split(","):
        for alternative in item.split("|"):
            word = alternative.strip().split(" ")[0].split(":")[0]
            if word:
                names.add(word)
    return names


def test_the_list_is_well_formed_and_every_group_is_known():
    packages = read_list()
    assert packages, "requirements/system.txt lists no package"
    for package, (groups, programs) in packages.items():
        assert re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", package), package
        assert set(groups) <= {"run", "test", "molecule"}, (package, groups)
    assert "python3-venv" in packages and "run" in packages["python3-venv"][0], "make run needs python3-venv for .venv"


def test_every_program_the_suite_calls_comes_from_the_list_the_venv_or_the_repo():
    packages = read_list()
    listed_programs = {program for _groups, programs in packages.values() for program in programs}
    venv_bin = pathlib.Path(sys.executable).parent  # the tool venv this suite runs in
    fakes = _repo_fakes()
    called = called_programs()
    assert {"nginx", "systemd-analyze", "setpriv"} <= set(called), "the scan found too little: %s" % sorted(called)
    unprovided = []
    for program, where in sorted(called.items()):
        if program in listed_programs or program in fakes or program in ELSEWHERE:
            continue
        if (venv_bin / program).exists() or program.startswith(("python", "ansible")):
            continue
        owner = _owner(program)
        if owner and (owner in packages or _essential(owner)):
            continue
        unprovided.append("%s (called at %s; %s)" % (
            program, ", ".join(where[:3]),
            "from Debian package %s, not in requirements/system.txt and not essential" % owner if owner
            else "not on this machine"))
    assert not unprovided, "programs the suite calls that requirements/system.txt does not install:\n" + "\n".join(unprovided)


def test_every_program_the_list_names_is_provided_by_its_package():
    wrong = []
    for package, (_groups, programs) in read_list().items():
        for program in programs:
            owner = _owner(program)
            if owner is None:
                wrong.append("%s: %s is not installed (run tools/system_packages.sh test)" % (package, program))
            elif owner != package and owner not in _depends(package):
                wrong.append("%s: %s comes from %s, which %s does not depend on" % (package, program, owner, package))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("group", ["run", "test", "molecule"])
def test_the_installer_reads_the_same_list(group):
    done = subprocess.run([str(REPO / "tools" / "system_packages.sh"), "--list", group],
                          capture_output=True, text=True, check=True)
    expected = [p for p, (groups, _programs) in read_list().items() if group in groups]
    assert done.stdout.split() == expected
