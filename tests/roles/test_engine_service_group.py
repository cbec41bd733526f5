"""A model group through the engine_service role, run for real against the fake systemd (tests/roles): two fake
nodes in one play, each its own root, units and systemd state (the play's environment per host), one pinned model
(the fake hub's tiny-chat at its v1 commit) served by both as a tensor-parallel group over the loopback (the leader
127.0.0.1, the follower 127.0.0.2: Linux answers for the whole of 127.0.0.0/8 on lo). The fake vLLM's multi-node
mode behaves as the real engine's (tests/upstream/pkgsrc/vllm/fake_group.py): the leader waits for its follower
before it serves, and dies with it.

- converge: the follower's unit runs headless (no API), the leader's serves the model, once the follower joined;
- an upgrade whose new version fails on the leader: both members roll back together to the old version, which
  serves again, and both hosts fail naming what did not serve."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from tests.roles.conftest import ANSIBLE_PLAYBOOK, COLLECTIONS, PYTHON, Node, free_port, http_json

OLD, NEW = "0.11.2-cu129", "0.15.1-cu129"
REPO = "llmfleet-test/tiny-chat"
NEW_FAILS = {"FAKE_VLLM_SERVE_FAIL": "start", "FAKE_VLLM_SERVE_FAIL_VERSIONS": "0.15.1"}


@pytest.fixture
def pair(tmp_path, service_user):
    made = [Node(tmp_path / "a", service_user), Node(tmp_path / "b", service_user)]
    try:
        yield made
    finally:
        for node in made:
            node.close()


def commit_of(hub, revision):
    import urllib.request  # pylint: disable=import-outside-toplevel
    with urllib.request.urlopen(hub.url + "/hub/api/models/%s/revision/%s" % (REPO, revision), timeout=10) as resp:
        return json.loads(resp.read())["sha"]


class Group:
    """The two nodes as one inventory (hosts a and b), the group's model and ports."""

    def __init__(self, pair, hub, tmp_path):
        self.nodes = dict(zip("ab", pair))
        self.hub, self.tmp = hub, tmp_path
        self.commit = commit_of(hub, "v1")
        self.name = "g" + pair[0].tag
        self.ports = {"a": free_port(), "b": free_port()}
        self.master = free_port()
        self.runs = 0

    def model(self, host):
        return {"name": self.name, "model": REPO, "revision": self.commit, "port": self.ports[host]}

    def play(self, pending=None, current=None, environment=None):
        self.runs += 1
        folder = self.tmp / ("group-run-%02d" % self.runs)
        folder.mkdir(parents=True)
        hosts = {}
        for host, node in self.nodes.items():
            hosts[host] = {
                "ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                "engine_node_root": str(node.root), "engine_node_keep": 1,
                "engine_service_models": [self.model(host)],
                "engine_service_unit_dir": str(node.unit_dir),
                "engine_service_systemctl": str(pathlib.Path(__file__).parent / "fakebin" / "systemctl"),
                "engine_service_secrets_dir": str(node.secrets_dir), "engine_service_user": node.user,
                "engine_service_ready_timeout": 20, "engine_service_shutdown_timeout": 1,
                "engine_service_environment": dict(node.environment, **(environment or {})),
                "engine_service_group_address": "127.0.0.%d" % (1 + "ab".index(host)),
                "engine_service_group_interface": "lo",
                # this host's fake systemd
                "llmfleet_test_env": {"FAKE_SYSTEMD_STATE": str(node.state), "FAKE_SYSTEMD_UNIT_DIR": str(node.unit_dir)},
                "llmfleet_test_engine_node": node._engine_node_facts(False, pending, current)  # pylint: disable=protected-access
                if (pending or current) else {},
            }
        inventory = {"all": {"hosts": hosts, "vars": {
            "engine_service_model_groups": [{"name": self.name, "members": ["a", "b"], "parallel": "tensor",
                                             "network": "127.0.0.0/8", "master_port": self.master}],
            "engine_service_hf_endpoint": self.hub.url + "/hub",
            "engine_service_model_lock_dir": str(self.tmp / "locks")}}}
        (folder / "inventory.json").write_text(json.dumps(inventory, indent=1))
        play = {"name": "a model group", "hosts": "all", "gather_facts": False,
                "environment": "{{ llmfleet_test_env }}",
                "pre_tasks": [{"name": "Leave what engine_node would leave",
                               "ansible.builtin.set_fact": {
                                   key: "{{ llmfleet_test_engine_node['%s'] }}" % key
                                   for key in ("engine_node_result", "__engine_node_dir", "__engine_node_was",
                                               "__engine_node_on_disk")},
                               "when": "llmfleet_test_engine_node | length > 0"}],
                "roles": [{"role": "llmfleet.engines.engine_service"}]}
        (folder / "site.yml").write_text(json.dumps([play], indent=1))
        env = self.nodes["a"].env(
            ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_GATHERING="explicit", ANSIBLE_PIPELINING="1",
            ANSIBLE_LOCAL_TEMP=str(folder / "ansible-local"), ANSIBLE_REMOTE_TEMP=str(folder / "ansible-remote"),
            ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_STDOUT_CALLBACK="default",
            # one host at a time within each task: the two "nodes" share this machine's service user, which the
            # role makes (two useradd at once would race); the members still go through the tasks together
            ANSIBLE_FORKS="1")
        proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(folder / "inventory.json"), str(folder / "site.yml")],
                              env=env, cwd=str(folder), capture_output=True, text=True, timeout=600, check=False)
        (folder / "output.log").write_text(proc.stdout + proc.stderr)
        return proc

    def unit_text(self, host):
        node = self.nodes[host]
        return (node.unit_dir / ("llmfleet-vllm-%s.service" % self.name)).read_text()


def exec_start(text):
    return next(line for line in text.splitlines() if line.startswith("ExecStart="))


def test_a_group_is_served_and_an_upgrade_that_fails_on_the_leader_rolls_both_back(pair, upstream, tmp_path):
    group = Group(pair, upstream, tmp_path)
    for node in pair:
        node.make_env(*OLD.split("-"))
        node.make_env(*NEW.split("-"))
        node.set_current(OLD)

    proc = group.play()
    assert proc.returncode == 0, proc.stdout[-6000:]
    leader, follower = exec_start(group.unit_text("a")), exec_start(group.unit_text("b"))
    assert "--host 127.0.0.1 --port %d" % group.ports["a"] in leader
    assert leader.endswith("--tensor-parallel-size 2 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1"
                           " --master-port %d" % group.master)
    assert follower.endswith("--node-rank 1 --master-addr 127.0.0.1 --master-port %d --headless" % group.master)
    assert "--port" not in follower
    assert 'Environment="VLLM_HOST_IP=127.0.0.2"' in group.unit_text("b")
    status, body = http_json(group.ports["a"], "/v1/models")
    assert status == 200 and body["data"][0]["id"] == group.name
    status, body = http_json(group.ports["a"], "/version")
    assert body["version"] == "0.11.2"

    # the new version fails on the leader: both members go back to the old one, which serves again
    proc = group.play(pending=NEW, current=OLD, environment=NEW_FAILS)
    assert proc.returncode != 0
    assert [node.current() for node in pair] == [OLD, OLD], proc.stdout[-6000:]
    status, body = http_json(group.ports["a"], "/version")
    assert status == 200 and body["version"] == "0.11.2", proc.stdout[-6000:]
    assert "leader a did not serve the change" in proc.stdout, proc.stdout[-6000:]
