"""Several models on one node, placed on its GPUs (plugins/module_utils/serve/_placement.py): the ``gpus`` and
``internal_port`` of a model as engine_service_problems checks them, the units engine_service_units renders
(CUDA_VISIBLE_DEVICES by UUID, --tensor-parallel-size, VLLM_PORT), and every refusal of the preflight filter
engine_service_placement_problems, each message pinned with its figures."""

from __future__ import annotations

import pathlib

import pytest

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_node_report_filter import AnsibleFilterError
from tests.unit.plugins.filter.test_service_filter import F as SERVICE

REPO = pathlib.Path(__file__).resolve().parents[4]


P = filter_plugin("engine_service_placement").FilterModule().filters()
ENV = "0.20.0-cu13"


def _node(case):
    """gpu_probe's gpus of a captured node (tests/fixtures/nvidia-smi/<case>/query-gpu.csv)."""
    gpus = []
    for line in (REPO / "tests" / "fixtures" / "nvidia-smi" / case / "query-gpu.csv").read_text().splitlines():
        index, name, uuid, cap, memory, _driver = [v.strip() for v in line.split(",")]
        gpus.append({"index": int(index), "name": name, "uuid": uuid, "compute_capability": cap,
                     "memory_mib": int(memory)})
    return gpus


NODE = _node("8xh100-580")
U = [g["uuid"] for g in NODE]
MIXED = _node("mixed-h100-t4-580")


def model(name, port, **extra):
    return dict({"name": name, "model": "org/" + name, "port": port}, **extra)


def units(models, **kw):
    return SERVICE["engine_service_units"](models, "/opt/llmfleet", ENV, **kw)


def env_of(unit):
    return dict(word.strip('"').split("=", 1) for word in unit["environment"])


# --- engine_service_problems: gpus and internal_port, without the node -----------------------------

GPU_ALLOWED = ("an index (0, 1, ...) or a UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) as gpu_probe reports the"
               " node's GPUs")
GPUS_ALLOWED = ("a list of the node's GPUs, each once: %s; leave gpus out for a model that sees every GPU" % GPU_ALLOWED)


@pytest.mark.parametrize("gpus, expected", [
    ([0], []), (["1", U[2].upper()], []), ([7, U[0]], []),
    ([], ['variable engine_service_models[0].gpus is [], allowed: %s' % GPUS_ALLOWED]),
    ("0,1", ['variable engine_service_models[0].gpus is "0,1", allowed: %s' % GPUS_ALLOWED]),
    ([True], ['variable engine_service_models[0].gpus[0] is true, allowed: %s' % GPU_ALLOWED]),
    ([-1], ['variable engine_service_models[0].gpus[0] is -1, allowed: %s' % GPU_ALLOWED]),
    ([0.5], ['variable engine_service_models[0].gpus[0] is 0.5, allowed: %s' % GPU_ALLOWED]),
    (["GPU-1"], ['variable engine_service_models[0].gpus[0] is "GPU-1", allowed: %s' % GPU_ALLOWED]),
    (["MIG-" + U[0][4:]], ['variable engine_service_models[0].gpus[0] is "MIG-%s", allowed: %s' % (U[0][4:], GPU_ALLOWED)]),
    (["0\n"], ['variable engine_service_models[0].gpus[0] is "0\\n", allowed: %s' % GPU_ALLOWED]),
    ([U[0] + "\nExecStartPre=/bin/sh"],
     ['variable engine_service_models[0].gpus[0] is "%s\\nExecStartPre=/bin/sh", allowed: %s' % (U[0], GPU_ALLOWED)]),
    ([" 0"], ['variable engine_service_models[0].gpus[0] is " 0", allowed: %s' % GPU_ALLOWED]),
    ([0, "0"], ['variable engine_service_models[0].gpus names "0" twice (gpus[0] and gpus[1]), allowed: %s'
                % GPUS_ALLOWED]),
    ([U[1], U[1].upper()], ['variable engine_service_models[0].gpus names "%s" twice (gpus[0] and gpus[1]), allowed: %s'
                            % (U[1].upper(), GPUS_ALLOWED)]),
])
def test_gpus_is_checked_without_the_node(gpus, expected):
    assert SERVICE["engine_service_problems"]([model("a", 8000, gpus=gpus)]) == expected


def test_a_model_without_gpus_beside_models_with_is_refused():
    models = [model("a", 8000, gpus=[0]), model("b", 8001), model("c", 8002, gpus=[1])]
    assert SERVICE["engine_service_problems"](models) == [
        'variable engine_service_models[1] ("b") gives no gpus while engine_service_models[0] ("a") does: a model'
        " without gpus sees every GPU of the node, which the preflight cannot check against the others; allowed: gpus"
        " on every model of the host, or on none"]
    assert SERVICE["engine_service_problems"]([model("a", 8000), model("b", 8001)]) == []


def test_cuda_visible_devices_and_vllm_port_set_by_hand_are_refused():
    models = [model("a", 8000, gpus=[0], environment={"CUDA_VISIBLE_DEVICES": "0", "VLLM_PORT": "30000"}),
              model("b", 8001, gpus=[1])]
    assert SERVICE["engine_service_problems"](models, environment={"CUDA_VISIBLE_DEVICES": "1", "VLLM_PORT": 1}) == [
        "variable engine_service_models[0].environment sets CUDA_VISIBLE_DEVICES, which the role sets from its gpus"
        " (by UUID): leave it out",
        "variable engine_service_models[0].environment sets VLLM_PORT, which the role sets for each unit (internal ports"
        " of its own): use its internal_port",
        "variable engine_service_environment sets VLLM_PORT, which the role sets for each unit (internal ports of its"
        " own; one value for every unit would make them clash): use internal_port of a model",
        "variable engine_service_environment sets CUDA_VISIBLE_DEVICES, which the role sets for each unit from its"
        " gpus: leave it out"]
    # without gpus CUDA_VISIBLE_DEVICES is the user's own business, as before
    assert SERVICE["engine_service_problems"]([model("a", 8000, environment={"CUDA_VISIBLE_DEVICES": "1"})],
                                              environment={"CUDA_VISIBLE_DEVICES": "0"}) == []


@pytest.mark.parametrize("value", [1023, 65437, "x", True, None, 30000.5])
def test_internal_port_must_be_a_port_with_room_above(value):
    assert SERVICE["engine_service_problems"]([model("a", 8000, internal_port=value)]) == [
        "variable engine_service_models[0].internal_port is %s, allowed: a whole number from 1024 to 65436 (vLLM's"
        " VLLM_PORT: the unit takes it and the 99 ports above it for vLLM's own processes)"
        % {True: "true", None: "null", "x": '"x"'}.get(value, value)]


def test_internal_port_clashes_name_both():
    models = [model("a", 8000, internal_port=30000), model("b", 8001, internal_port="30050"),
              model("c", 30099), model("d", 8002, internal_port=40000)]
    assert SERVICE["engine_service_problems"](models) == [
        'variable engine_service_models[0].internal_port is 30000 (its internal ports 30000-30099), which clash with the'
        ' internal ports 30050-30149 of engine_service_models[1] ("b"); allowed: internal ports 100 apart',
        'variable engine_service_models[0].internal_port is 30000 (its internal ports 30000-30099), which hold the port'
        ' 30099 of engine_service_models[2] ("c"); allowed: internal ports that hold no model\'s port',
        'variable engine_service_models[1].internal_port is 30050 (its internal ports 30050-30149), which hold the port'
        ' 30099 of engine_service_models[2] ("c"); allowed: internal ports that hold no model\'s port']
    # a range holding the model's own port clashes too
    assert len(SERVICE["engine_service_problems"]([model("a", 30010, internal_port=30000)])) == 1


# --- internal ports: derived from the API port, stable, distinct ------------------------------------


def test_internal_ports_follow_the_api_port_and_do_not_move_when_the_models_are_reordered():
    models = [model("a", 8000), model("b", 8001), model("c", 8080), model("d", 9000), model("e", 20150)]
    ports = {u["name"]: u["vllm_port"] for u in units(models)}
    # 8001's range 20100-20199 would hold e's port 20150: b takes the next free one; 9000 shares 8000's slot and
    # comes after 8001: the next free one after that
    assert ports == {"a": 20000, "b": 20200, "c": 28000, "d": 20300, "e": 25000}
    assert {u["name"]: u["vllm_port"] for u in units(list(reversed(models)))} == ports
    assert {u["name"]: env_of(u)["VLLM_PORT"] for u in units(models)} == {k: str(v) for k, v in ports.items()}
    assert units(models) == units(models)  # a re-run renders the same units
    spans = sorted(ports.values())
    assert all(b - a >= 100 for a, b in zip(spans, spans[1:]))
    assert not any(start <= m["port"] < start + 100 for start in spans for m in models)


def test_an_explicit_internal_port_is_taken_and_the_others_keep_clear_of_it():
    models = [model("a", 8000, internal_port=20050), model("b", 8100), model("c", 8001)]
    # 20000 and 20100 overlap 20050-20149; c (port 8001) comes before b (8100)
    assert {u["name"]: u["vllm_port"] for u in units(models)} == {"a": 20050, "b": 20300, "c": 20200}


# --- engine_service_units: CUDA_VISIBLE_DEVICES by UUID, tensor parallelism ----------------------------


def test_units_of_models_on_gpus():
    models = [model("a", 8000, gpus=[0]),
              model("b", 8001, gpus=[U[3].upper(), "2"], args=["--max-model-len", "4096"]),
              model("c", 8002, gpus=[4, 5, 6, 7], args=["--pipeline-parallel-size", "2"]),
              model("d", 8003, gpus=[1], args=["--tensor-parallel-size=1", "--gpu-memory-utilization", "0.5"])]
    a, b, c, d = units(models, gpus=NODE)
    assert (a["gpus"], env_of(a)["CUDA_VISIBLE_DEVICES"], a["tensor_parallel_size"]) == ([U[0]], U[0], 1)
    assert a["argv"][-2:] == ["--tensor-parallel-size", "1"]
    # UUIDs in the order given, as gpu_probe spells them
    assert env_of(b)["CUDA_VISIBLE_DEVICES"] == "%s,%s" % (U[3], U[2])
    assert b["argv"][-4:] == ["--tensor-parallel-size", "2", "--max-model-len", "4096"]
    assert ('Environment="CUDA_VISIBLE_DEVICES=%s,%s"' % (U[3], U[2])) in b["text"].splitlines()
    assert "--tensor-parallel-size 2 --max-model-len 4096" in b["exec_start"]
    # four GPUs, two pipeline stages: tensor parallel size 2
    assert c["argv"][-4:] == ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]
    assert env_of(c)["CUDA_VISIBLE_DEVICES"] == ",".join(U[4:])
    # the args set it: not twice
    assert d["argv"].count("--tensor-parallel-size") == 0 and "--tensor-parallel-size=1" in d["argv"]
    # gpu_probe's whole result does as well as its gpus
    assert units(models, gpus={"gpus": NODE, "driver_version": "580.65.06"}) == [a, b, c, d]


def test_a_model_without_gpus_is_unchanged():
    (unit,) = units([model("a", 8000, args=["--tensor-parallel-size", "2"])], gpus=NODE)
    assert "CUDA_VISIBLE_DEVICES" not in env_of(unit) and unit["gpus"] is None
    assert unit["argv"].count("--tensor-parallel-size") == 1 and unit["tensor_parallel_size"] == 2
    (same,) = units([model("a", 8000, args=["--tensor-parallel-size", "2"])])
    assert same == unit


def test_units_of_models_on_gpus_need_the_node_and_its_gpus():
    with pytest.raises(AnsibleFilterError, match=r'the model "a" gives gpus: the node\'s GPUs \(gpu_probe\'s gpus'):
        units([model("a", 8000, gpus=[0])])
    with pytest.raises(AnsibleFilterError, match=r'the model "a": gpus \[0, 9\]: \[9\] not on the node'):
        units([model("a", 8000, gpus=[0, 9])], gpus=NODE)
    with pytest.raises(AnsibleFilterError, match=r"must be gpu_probe's gpus"):
        units([model("a", 8000, gpus=[0])], gpus="0,1")


# --- engine_service_placement_problems: the preflight ----------------------------------------------


_NODE = object()  # the default: the captured node's GPUs (None is a value the tests give)


def problems(models, gpus=_NODE, **kw):
    return P["engine_service_placement_problems"](models, NODE if gpus is _NODE else gpus, **kw)


def test_models_that_fit_have_no_problem():
    models = [model("a", 8000, gpus=[0, 1]), model("b", 8001, gpus=[U[2]], args=["--gpu-memory-utilization", "0.45"]),
              model("c", 8002, gpus=[2], args=["--gpu-memory-utilization=0.5"]),
              model("d", 8003, gpus=[4, 5, 6, 7], args=["-tp", "2", "-pp", "2"])]
    assert problems(models, shm_mib=65536, limit_nofile=65536) == []
    # no model placed and none on several GPUs: nothing needs the node
    assert problems([model("a", 8000)], gpus=None, shm_mib=1, limit_nofile=1024) == []


def test_a_gpu_the_node_does_not_have_is_refused_naming_what_it_has():
    assert problems([model("a", 8000, gpus=[1, "GPU-00000000-0000-0000-0000-000000000000"])], gpus=MIXED) == [
        'variable engine_service_models[0].gpus names "GPU-00000000-0000-0000-0000-000000000000", which this node does'
        " not have; allowed: this node's GPUs are 0 GPU-6644e91f-6594-57b7-b58a-88c876ee97d8 (NVIDIA H100 80GB HBM3,"
        " 81559 MiB), 1 GPU-d16ebcb9-40b8-5733-9cac-620fb2d8ebd5 (Tesla T4, 15360 MiB)"]
    assert problems([model("a", 8000, gpus=[0])], gpus=[]) == [
        "variable engine_service_models[0].gpus names 0, which this node does not have; allowed: this node has no GPU"
        " (gpu_probe found none)"]


def test_a_gpu_named_twice_by_index_and_uuid_is_refused():
    assert problems([model("a", 8000, gpus=[0, U[0]], args=["-tp", "2"])]) == [
        'variable engine_service_models[0].gpus is [0, "%s"], which names GPU 0 (%s) twice; allowed: each GPU once'
        % (U[0], U[0])]


def test_a_shared_gpu_over_committed_is_refused_with_the_sum():
    models = [model("a", 8000, gpus=[0, 1]), model("b", 8001, gpus=[1], args=["--gpu-memory-utilization", "0.06"]),
              model("c", 8002, gpus=[U[2]]), model("d", 8003, gpus=[2])]
    assert problems(models) == [
        'variable engine_service_models: GPU 1 (%s) is given to engine_service_models[0] ("a", 0.9) and'
        ' engine_service_models[1] ("b", 0.06), whose --gpu-memory-utilization add up to 0.96; allowed: at most 0.95'
        " together on a shared GPU (lower their --gpu-memory-utilization, 0.9 unless their args give it, or give them"
        " GPUs of their own)" % U[1],
        'variable engine_service_models: GPU 2 (%s) is given to engine_service_models[2] ("c", 0.9) and'
        ' engine_service_models[3] ("d", 0.9), whose --gpu-memory-utilization add up to 1.8; allowed: at most 0.95'
        " together on a shared GPU (lower their --gpu-memory-utilization, 0.9 unless their args give it, or give them"
        " GPUs of their own)" % U[2]]
    # 0.45 + 0.5 = 0.95: allowed
    fit = [model("a", 8000, gpus=[1], args=["--gpu-memory-utilization", "0.45"]),
           model("b", 8001, gpus=[1], args=["--gpu-memory-utilization", "0.5"])]
    assert problems(fit) == []


@pytest.mark.parametrize("value", ["0", "1.5", "most", None])
def test_a_utilization_that_is_not_a_fraction_is_refused(value):
    args = ["--gpu-memory-utilization"] + ([value] if value is not None else [])
    assert problems([model("a", 8000, gpus=[0], args=args)]) == [
        "variable engine_service_models[0].args give --gpu-memory-utilization %s, allowed: a number above 0 and at most 1"
        % ('"%s"' % value if value is not None else "null")]


@pytest.mark.parametrize("gpus, args, world, sizes", [
    ([0, 1], ["--tensor-parallel-size", "4"], 4, (4, 1, 1)),
    ([0, 1, 2], ["-pp", "2"], 6, (3, 2, 1)),
    ([0, 1], ["-tp", "1"], 1, (1, 1, 1)),
    ([0, 1, 2, 3], ["-tp", "2", "-dp", "4"], 8, (2, 1, 4)),
])
def test_parallel_sizes_that_do_not_fit_the_gpus_are_refused(gpus, args, world, sizes):
    assert problems([model("a", 8000, gpus=gpus, args=args)], shm_mib=65536) == [
        "variable engine_service_models[0] runs on %d GPUs at once (--tensor-parallel-size %d x --pipeline-parallel-size"
        " %d x --data-parallel-size %d) and its gpus give %d (%s); allowed: sizes whose product is the number of its"
        " gpus (leave --tensor-parallel-size out: the role sets it to fit)"
        % ((world,) + sizes + (len(gpus), "[" + ", ".join(str(g) for g in gpus) + "]"))]


def test_a_parallel_size_that_is_not_a_number_is_refused():
    assert problems([model("a", 8000, gpus=[0, 1], args=["-tp", "two", "--pipeline-parallel-size=0"])]) == [
        'variable engine_service_models[0].args give --tensor-parallel-size "two", allowed: a whole number, 1 or more',
        'variable engine_service_models[0].args give --pipeline-parallel-size "0", allowed: a whole number, 1 or more']


def pinned(name, port, gpus, **extra):
    return dict(model(name, port, gpus=gpus, revision="v1"), model="org/big", **extra)


def test_a_pinned_model_whose_weights_exceed_its_gpu_memory_is_refused_naming_the_figures():
    locks = {"org/big@v1": {"commit": "c" * 40, "size": 140 * 2 ** 30}}
    assert problems([pinned("a", 8000, [0])], locks=locks) == [
        "variable engine_service_models[0] (org/big at v1) has weights of 140.0 GiB (the files of its lock), more than"
        " the GPU memory it gets: 71.7 GiB = --gpu-memory-utilization 0.9 x 81559 MiB (GPU 0); allowed: gpus whose"
        " memory, times the utilization, holds the weights (more GPUs, larger ones or a higher utilization), or a"
        " smaller model"]
    # two H100s hold it (2 x 0.9 x 79.6 GiB = 143.4 GiB), a T4 and an H100 do not
    assert problems([pinned("a", 8000, [0, 1])], locks=locks) == []
    (mixed,) = problems([pinned("a", 8000, [0, 1])], gpus=MIXED, locks=locks)
    assert "85.2 GiB = --gpu-memory-utilization 0.9 x 96919 MiB (GPU 0, 1)" in mixed
    # a tiny model on a tiny GPU: figures in the unit that shows them
    tiny = {"org/big@v1": {"size": 46000}}
    (small,) = problems([pinned("a", 8000, [0])], gpus=[dict(NODE[0], memory_mib=0)], locks=tiny)
    assert "has weights of 44.9 KiB (the files of its lock), more than the GPU memory it gets: 0 B =" in small


def test_weights_are_not_checked_without_a_lock_or_a_known_memory():
    locks = {"org/big@v1": {"size": 10 ** 15}}
    assert problems([dict(model("a", 8000, gpus=[0]), model="org/big")], locks=locks) == []  # not pinned
    assert problems([pinned("a", 8000, [0])], locks={}) == []
    assert problems([pinned("a", 8000, [0])], gpus=[dict(NODE[0], memory_mib=None)], locks=locks) == []


def test_dev_shm_and_the_open_file_limit_for_a_model_on_several_gpus():
    models = [model("a", 8000, gpus=[0]), model("b", 8001, gpus=[1, 2])]
    assert problems(models, shm_mib=64, shm_min_mib=1024, limit_nofile=4096) == [
        '/dev/shm has 64 MiB and engine_service_models[1] ("b") runs on 2 GPUs at once (tensor parallelism), allowed:'
        " at least engine_service_shm_min_mib (1024 MiB) for NCCL; mount a larger /dev/shm (a container: --shm-size or"
        " --ipc=host)",
        'variable engine_service_limit_nofile is 4096 and engine_service_models[1] ("b") runs on 2 GPUs at once,'
        " allowed: at least 65535 (vLLM raises its open-file limit to 65535 at start, which LimitNOFILE caps; each of"
        " its workers holds shared memory, sockets and NCCL handles)"]
    assert problems(models, shm_mib=1024, shm_min_mib=1024, limit_nofile=65535) == []
    # on one GPU each: neither matters
    assert problems(models[:1], shm_mib=64, limit_nofile=4096) == []
    # tensor parallelism without gpus (the model sees every GPU) counts too
    assert len(problems([model("a", 8000, args=["-tp", "2"])], gpus=None, shm_mib=64, limit_nofile=4096)) == 2


def test_placed_models_need_the_node_gpus():
    with pytest.raises(AnsibleFilterError, match=r"engine_service_models\[0\].gpus: the node's GPUs"):
        problems([model("a", 8000, gpus=[0])], gpus=None)
    with pytest.raises(AnsibleFilterError, match="must be engine_service_models"):
        problems("a")


def test_what_engine_service_problems_refuses_is_not_repeated():
    assert problems([model("a", 8000, gpus=[]), model("b", 8001, gpus=["x"])]) == []


@pytest.mark.parametrize("entry, size", [
    ({}, 1), ({"gpus": [0, 1, 2, 3]}, 4), ({"gpus": [0, 1, 2, 3], "args": ["-pp", "2"]}, 4),
    ({"args": ["-tp", "2", "-pp", "2"]}, 4), ({"args": ["-tp", "x"]}, 0), ({"gpus": [0, 1], "args": ["-tp", "1"]}, 1),
])
def test_world_size(entry, size):
    assert P["engine_service_world_size"](dict(model("a", 8000), **entry)) == size
