"""A hostile service user against the engine_service role (tests/roles, the fake systemd).

The service user owns ``<root>/serve`` (its home and the models' working directories) and the
caches under ``<root>/cache``; whatever it plants there, it must not steer what root does. Before
and after each hostile step, a stat inventory (type, owner, group, mode, and content hash for
files) of the root-owned trees beside it (the unit directory, the secrets directory, the engine
environments, ``<root>/cache`` itself) must be the same, and the run must fail naming what it
refused, or converge.
"""

from __future__ import annotations

import os
import stat
import subprocess

from tests.roles import engines
from tests.roles.conftest import stat_inventory

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"


def inventory(*tops):
    """The stat inventory (conftest.stat_inventory) of ``tops``; the role's own records beside the environments
    (``<root>/engines/vllm/*.json``: gate figures, a failed rollout's note), which a refused run writes as any
    failed run does, are left out."""
    return stat_inventory(*tops, leave_out=lambda folder, name: name.endswith(".json")
                          and folder.endswith("/engines/vllm"))


def root_owned(node):
    """The root-owned trees beside the service user's: what a planted link would aim at. The
    environments' cache directory (the fake node's uv cache) and <root>/cache as a directory."""
    cache = node.root / "cache"
    return [node.unit_dir, node.secrets_dir, node.root / "engines", cache / "uv"], cache


def as_user(node, *argv):
    uid = node.user_uid()
    subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"] + list(argv),
                   check=True, capture_output=True, timeout=30)


def test_a_link_planted_at_the_next_environments_cache_stops_the_upgrade_before_anything_stops(served):
    node = served.node
    model = node.models[0]
    unit = node.unit(model)
    pid = node.main_pid(unit)
    trees = root_owned(node)[0]
    before = inventory(*trees)

    # the next <version>-<build> name is easy to guess: the service user plants it in its vllm cache
    planted = node.root / "cache" / "vllm" / NEW
    as_user(node, "ln", "-s", str(node.secrets_dir), str(planted))
    run = node.play(pending=NEW, current=OLD, extra_vars=node.hook_vars())
    assert run.rc != 0, run.explain()
    assert "%s is a symbolic link, not a directory: refused" % planted in run.output, run.explain()
    assert inventory(*trees) == before
    assert node.alive(pid) and node.main_pid(unit) == pid, "the old server was stopped"
    assert node.current() == OLD
    # the node as the converge left it, for the next test that starts from it (conftest's Served)
    planted.unlink()


def test_a_link_planted_for_a_working_directory_is_refused_and_roots_trees_are_untouched(served):
    node = served.node
    model = node.models[0]
    unit = node.unit(model)
    pid = node.main_pid(unit)
    trees, cache = root_owned(node)
    before = inventory(*trees)
    cache_before = os.lstat(str(cache))

    # every rollout makes the working directory again: the service user swaps it for a link first
    work = node.root / "serve" / model["name"]
    assert os.lstat(str(work)).st_uid == node.user_uid()
    for target in (node.unit_dir, node.secrets_dir, node.root / "engines", "/etc"):
        as_user(node, "rm", "-rf", str(work))
        as_user(node, "ln", "-s", str(target), str(work))
        run = node.play(pending=NEW, current=OLD)
        assert run.rc != 0, "the role followed %s -> %s" % (work, target)
        assert "%s is a symbolic link, not a directory: refused" % work in run.output, run.explain()
        assert inventory(*trees) == before, "a root-owned tree changed through %s -> %s" % (work, target)
        assert node.main_pid(unit) == pid and node.current() == OLD, "something stopped or switched"
    after = os.lstat(str(cache))
    assert (after.st_uid, stat.S_IMODE(after.st_mode)) == (cache_before.st_uid, stat.S_IMODE(cache_before.st_mode))
    etc = os.lstat("/etc")
    assert (etc.st_uid, stat.S_IMODE(etc.st_mode)) == (0, 0o755)

    # the service user takes its link away: the upgrade goes through
    as_user(node, "rm", str(work))
    again = node.play(pending=NEW, current=OLD)
    assert again.rc == 0, again.explain()
    assert node.current() == NEW
    assert os.lstat(str(work)).st_uid == node.user_uid() and stat.S_ISDIR(os.lstat(str(work)).st_mode)


def test_a_link_planted_after_the_directories_were_made_stops_nothing_and_notes_no_failed_change(served, tmp_path):
    """The service user swaps the next environment's cache directory for a link while the rollout runs
    (here: in the drain, after the role made its directories and before anything stops). Root made the
    directories before the drain and does not walk them again: nothing follows the link, the rollout
    converges, and no failed change is noted. (When the directories were made after the stop, this was a
    refusal after the stop: a rollback, and a note that kept later runs from trying again.)"""
    node = served.node
    # the upgrade rewrites the units and `current`: the trees the link aims at, and root's uv cache
    trees = [node.secrets_dir, node.root / "cache" / "uv"]
    before = inventory(*trees)

    made = node.root / "cache" / "vllm" / NEW
    uid = node.user_uid()
    drain = tmp_path / "plant.yml"
    drain.write_text(
        "- name: The service user swaps its new cache directory for a link to the secrets directory\n"
        "  ansible.builtin.command:\n"
        "    argv: [setpriv, --reuid, '%d', --regid, '%d', --clear-groups, sh, -c, 'rm -rf %s && ln -s %s %s']\n"
        "  changed_when: true\n" % (uid, uid, made, node.secrets_dir, made))
    run = node.play(pending=NEW, current=OLD, extra_vars={"engine_service_drain_tasks": str(drain)})
    assert os.path.islink(str(made)), "the drain hook did not plant its link: " + run.explain()
    assert run.rc == 0, run.explain()
    assert node.current() == NEW
    assert inventory(*trees) == before, "a root-owned tree changed through the planted link"
    assert not list(engines.engines_dir(node.root).glob("*.rollout-failed.json")), "a failed change was noted"
