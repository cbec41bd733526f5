"""Each step of engine_service runs once per site run (issue 26, finding 4). playbooks/site.yml checks
systemd (entry point systemd) before engine_node builds and stages the pinned weights (entry point stage)
after it, in its engine play; its rollout play runs the entry point rollout, which neither asks systemd
again nor stages again (no flag between the plays: the entry point has no such step). Run on its own (a
user's playbook, molecule), the role's main does both, and does them again when a later play of the same
playbook runs it again.

The site-shaped playbook is made of site.yml's own engine_service tasks (its engine play's tasks that
include the role's steps, less the looks, then the rollout play's tasks), without engine_node: the
node's engine is laid out by the fake of tests/roles/engines.py, the weights come from the fake hub."""

from __future__ import annotations

import json
import pathlib

import yaml

from tests.roles.conftest import REPO

ENV = "0.11.2-cu129"
HUB_REPO = "llmfleet-test/tiny-chat"
ROLE = "llmfleet.engines.engine_service"
# a task of each step that only the step runs
SYSTEMD_ASKED = "Ask systemd for its version"
WEIGHTS_LOOKED_AT = "Look at the staged weights of each pinned model"


def _role_step(task):
    """The include_role or import_role of a task of site.yml (empty for any other task)."""
    return task.get("ansible.builtin.include_role") or task.get("ansible.builtin.import_role") or {}


def _engine_service_includes(tasks):
    return [t for t in tasks or [] if _role_step(t).get("name") == ROLE]


def site_shaped():
    """site.yml's engine play (its tasks that include engine_service's steps only) and its rollout play, on ``node``."""
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    engine = next(p for p in plays if p["name"] == "Converge the vLLM engines of the fleet")
    rollout = next(p for p in plays if p["name"] == "Roll the served vLLM models onto the new engines")
    steps = _engine_service_includes(engine["tasks"])
    assert [_role_step(t)["tasks_from"] for t in steps] == ["look_node", "systemd", "stage"]
    # the look goes with engine_node's plan (it reads the node for it): a node that engine_node changes is not
    # settled, and takes every step below (test_engine_service_look.py has the look)
    steps = steps[1:]
    assert [_role_step(t)["tasks_from"] for t in _engine_service_includes(rollout["tasks"])] == ["rollout"]
    return [{"name": "engine play", "hosts": "node", "gather_facts": False, "tasks": steps},
            {"name": "rollout play", "hosts": "node", "gather_facts": False, "tasks": rollout["tasks"]}]


def ran(run, name):
    """How many times the task ``name`` ran (not skipped) on the node."""
    return len([t for t in run.task(name) if t["host"] == "node" and t["status"] != "skipped"])


def _playbook(tmp_path, plays, tag):
    path = pathlib.Path(tmp_path) / ("%s.yml" % tag)
    path.write_text(json.dumps(plays, indent=1))
    return str(path)


def _setup(node, hub, tmp_path):
    node.make_env(*ENV.split("-"))
    node.set_current(ENV)
    models = [node.model(model=HUB_REPO, revision="v1")]
    extra = {"engine_service_hf_endpoint": hub.url + "/hub", "engine_service_model_lock_dir": str(tmp_path / "locks")}
    return models, extra


def test_a_site_run_checks_systemd_and_stages_once(node, upstream, tmp_path):
    models, extra = _setup(node, upstream, tmp_path)
    run = node.play(models, extra_vars=extra, playbook=_playbook(tmp_path, site_shaped(), "site"))
    assert run.rc == 0, run.explain()
    assert ran(run, SYSTEMD_ASKED) == 1, run.explain()
    assert ran(run, WEIGHTS_LOOKED_AT) == 1, run.explain()
    # the role served from what the engine play staged
    assert run.result and run.result["units"] == [node.unit(models[0])] and run.result["error"] is None, run.explain()
    assert node.show(node.unit(models[0]), "ActiveState")["ActiveState"] == "active"


def test_the_role_alone_checks_and_stages_in_each_run(node, upstream, tmp_path):
    models, extra = _setup(node, upstream, tmp_path)
    role_play = {"hosts": "node", "gather_facts": False, "roles": [{"role": ROLE}]}
    run = node.play(models, extra_vars=extra,
                    playbook=_playbook(tmp_path, [dict(role_play, name="first"), dict(role_play, name="second")], "twice"))
    assert run.rc == 0, run.explain()
    assert ran(run, SYSTEMD_ASKED) == 2, run.explain()
    assert ran(run, WEIGHTS_LOOKED_AT) == 2, run.explain()


def test_the_rollout_entry_point_checks_the_main_argument_specs(node, upstream, tmp_path):
    """The rollout play runs the entry point `rollout`, not the role whole: Ansible's own check of the main
    entry point's argument specs (a type, a choice) is asked for there, so a value of the wrong type is
    refused before anything of the rollout runs, as when the role runs whole."""
    models, extra = _setup(node, upstream, tmp_path)
    extra = dict(extra, engine_service_gateway_drain_last="sometimes")
    run = node.play(models, extra_vars=extra, playbook=_playbook(tmp_path, site_shaped(), "site"))
    assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
    assert "engine_service_gateway_drain_last" in run.output and "bool" in run.output, run.explain()
    assert run.verbs("start", "stop", "restart") == [], run.calls
