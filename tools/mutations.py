"""Remove each of the collection's core protections once and name the fast test that fails.

Each mutation below takes one protection out (a one-line change in the module_utils that own it), in a
clone of this checkout's last commit under a temporary directory (the checkout itself is never touched), and runs the
unit test file that guards it: the line says which test failed. A mutation whose tests all pass is a
protection no fast test guards, and this exits 1.

    .venv/bin/python tools/mutations.py

Not part of make test (it re-runs the same tests with the code broken on purpose); run it after changing
one of these files. The rollout's protections (the drain, the rollback, the prune) are the role tests'
(tests/roles) and the rollout filter's (tests/unit/plugins/filter/test_rollout_state_filter.py).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]

# (protection taken out, file, the code that makes it, what stands instead, the test file that guards it)
MUTATIONS = [
    ("redirect policy: credentials kept across origins", "plugins/module_utils/common/_http.py",
     "return target, bool(credentials) and origin(target) == origin(current)", "return target, bool(credentials)",
     "tests/unit/plugins/module_utils/test_redirect_policy.py"),
    ("privilege line: any owner trusted", "plugins/module_utils/common/_trust.py",
     "    if st.st_uid in uids:\n        return None", "    if True:\n        return None",
     "tests/unit/plugins/module_utils/test_trust.py"),
    ("safe directory maker: follows links", "plugins/module_utils/common/_servicedirs.py",
     "_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |", "_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY |",
     "tests/unit/plugins/module_utils/test_servicedirs.py"),
    ("the gate: any holder of the connection is the unit", "plugins/module_utils/serve/_ready.py",
     "        if self._held_by_unit(inode, main):\n            return", "        if True:\n            return",
     "tests/unit/plugins/module_utils/test_ready.py"),
    ("the gate: the kernel's listener taken for the far end", "plugins/module_utils/serve/_ready.py",
     "    if state == _TCP_LISTEN or (src, sport) != local or (dst, dport) != remote:\n        return None\n", "",
     "tests/unit/plugins/module_utils/test_ready.py"),
    ("hub pins: a file's hash not compared", "plugins/module_utils/hub/_cache.py",
     "        if got != self.expected:\n", "        if False:\n",
     "tests/unit/plugins/modules/test_model_snapshot.py"),
    ("model groups: a network that is not private let through", "plugins/plugin_utils/_service_groups.py",
     "    return network.is_private and", "    return True or network.is_private and",
     "tests/unit/plugins/plugin_utils/test_service_groups.py"),
    ("model groups: a member with two ranks", "plugins/plugin_utils/_service_groups.py",
     "                if member in members[:rank]:", "                if False:",
     "tests/unit/plugins/plugin_utils/test_service_groups.py"),
    ("model groups: members on different commits", "plugins/plugin_utils/_service_groups.py",
     "                if entry.get(key) != leader[1].get(key):", "                if False:",
     "tests/unit/plugins/plugin_utils/test_service_groups.py"),
    ("cut-off: the last upload dates the release", "plugins/module_utils/index/_pypi.py",
     "        published = min(f[\"_stamp\"] for f in files)", "        published = max(f[\"_stamp\"] for f in files)",
     "tests/unit/plugins/module_utils/test_pypi.py"),
]


def main() -> int:
    unguarded = []
    with tempfile.TemporaryDirectory(prefix="llmfleet-mutations-") as tmp:
        clone = pathlib.Path(tmp) / "engines"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        # the collection path the tests import it by (pytest.ini's pythonpath), as make's link target gives it
        link = clone / "build" / "collections" / "ansible_collections" / "llmfleet" / "engines"
        link.parent.mkdir(parents=True)
        link.symlink_to(clone)
        for what, path, old, new, test in MUTATIONS:
            target = clone / path
            text = target.read_text()
            if text.count(old) != 1:
                print("%s: the code of the protection is not found once in %s: update this tool" % (what, path))
                return 2
            target.write_text(text.replace(old, new))
            try:
                run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
                                     cwd=clone, capture_output=True, text=True, check=False)
            finally:
                target.write_text(text)
            failed = [line[len("FAILED "):].split(" - ")[0] for line in run.stdout.splitlines()
                      if line.startswith("FAILED ")]
            if run.returncode == 0:
                unguarded.append(what)
                print("%s: NOT CAUGHT (%s passes without it)" % (what, test))
            else:
                print("%s: caught by %s" % (what, failed[0] if failed else "%s (rc %d)" % (test, run.returncode)))
    return 1 if unguarded else 0


if __name__ == "__main__":
    sys.exit(main())
