"""Several models on one node, each on its own GPUs (issue 19), through the engine_service role against the fake
systemd: the node's GPUs come from gpu_probe (the captured nvidia-smi of an 8 x H100 node, or a node a test
makes), each unit gets CUDA_VISIBLE_DEVICES by UUID, its own VLLM_PORT and --tensor-parallel-size, which the
fake `vllm serve` logs at start (and, like vLLM, it does not start on fewer GPUs than it needs); an overlap, a
GPU the node lacks and a pinned model too large for its GPU are refused before anything stops."""

from __future__ import annotations

import re
import shutil

from tests.roles.conftest import REPO, http_json

OLD = "0.11.2-cu129"
CASES = REPO / "tests" / "fixtures" / "nvidia-smi"
FAKE_SMI = REPO / "tests" / "fixtures" / "bin" / "fake-nvidia-smi"
# the fake torch's GPUs (what `vllm serve` can see), as many as the captured node has
EIGHT = {"FAKE_TORCH_GPUS": ";".join(["NVIDIA H100 80GB HBM3=9.0"] * 8)}
STOPPING = ("stop", "restart", "try-restart", "reload-or-restart", "kill")


def uuids(case="8xh100-580"):
    return [line.split(", ")[2] for line in (CASES / case / "query-gpu.csv").read_text().splitlines() if line.strip()]


def nvidia_smi(node, case_dir, name="nvidia-smi"):
    """An nvidia-smi for engine_service_nvidia_smi that answers as the captured node in ``case_dir`` did."""
    path = node.base / name
    path.write_text("#!/bin/sh\nFAKE_NVIDIA_SMI_CASE=%s exec %s \"$@\"\n" % (case_dir, FAKE_SMI))
    path.chmod(0o755)
    return str(path)


def placed(node, smi, **extra):
    return dict({"engine_service_nvidia_smi": smi, "engine_service_environment": EIGHT,
                 "engine_service_shm_min_mib": 1}, **extra)


def unit_env(node, model, key):
    for line in (node.unit_dir / node.unit(model)).read_text().splitlines():
        match = re.fullmatch(r'Environment="%s=(.*)"' % key, line)
        if match:
            return match.group(1)
    return None


def test_two_models_on_their_own_gpus_serve_each_with_its_placement(node):
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    gpu = uuids()
    smi = nvidia_smi(node, CASES / "8xh100-580")
    one, two = node.model("a", gpus=[0]), node.model("b", gpus=[gpu[1].upper(), "2"])
    models = [one, two]

    check = node.play(models, extra_vars=placed(node, smi), check=True)
    assert check.rc == 0, check.explain()
    assert "write and start %s, %s" % (node.unit(one), node.unit(two)) in check.output, check.explain()
    assert check.verbs("start", "daemon-reload") == [] and not (node.unit_dir / node.unit(one)).exists()

    run = node.play(models, extra_vars=placed(node, smi))
    assert run.rc == 0, run.explain()
    ports = {}
    for model, visible, size in ((one, gpu[0], 1), (two, "%s,%s" % (gpu[1], gpu[2]), 2)):
        port = unit_env(node, model, "VLLM_PORT")
        assert unit_env(node, model, "CUDA_VISIBLE_DEVICES") == visible
        assert ("Placement: CUDA_VISIBLE_DEVICES=%s VLLM_PORT=%s tensor_parallel_size=%d "
                % (visible, port, size)) in node.journal(node.unit(model)), run.explain()
        assert http_json(model["port"], "/v1/models")[0] == 200
        ports[model["name"]] = int(port)
    # internal port ranges of 100 of their own, clear of the API ports
    low, high = sorted(ports.values())
    assert high - low >= 100 and 20000 <= low and high <= 29900
    assert not any(start <= m["port"] < start + 100 for start in ports.values() for m in models)
    assert "--tensor-parallel-size 2" in (node.unit_dir / node.unit(two)).read_text()

    again = node.play(models, extra_vars=placed(node, smi))
    assert again.rc == 0 and again.changed == {"node": 0}, again.changed_tasks()
    assert again.verbs(*STOPPING) == []


def tiny_node(node):
    """The captured 8 x H100 node's first two GPUs and a third with no memory to speak of."""
    case = node.base / "tiny-gpu-case"
    case.mkdir()
    shutil.copy(CASES / "8xh100-580" / "q-x.xml", case / "q-x.xml")
    rows = (CASES / "8xh100-580" / "query-gpu.csv").read_text().splitlines()[:2]
    rows.append("2, NVIDIA Tiny Test GPU, GPU-7e57e57e-0000-4000-8000-000000000002, 9.0, 0, 580.65.06")
    (case / "query-gpu.csv").write_text("\n".join(rows) + "\n")
    return case


def test_an_overlap_a_missing_gpu_and_a_model_too_large_are_refused_before_anything_stops(node, upstream, tmp_path):
    node.make_env(*OLD.split("-"))
    node.set_current(OLD)
    gpu = uuids()
    smi = nvidia_smi(node, CASES / "8xh100-580")
    one, two = node.model("a", gpus=[0]), node.model("b", gpus=[1])
    first = node.play([one, two], extra_vars=placed(node, smi))
    assert first.rc == 0, first.explain()
    pids = {m["name"]: node.main_pid(node.unit(m)) for m in (one, two)}

    def refused(models, says, **extra):
        run = node.play(models, extra_vars=placed(node, smi, **extra))
        assert run.rc != 0 and run.failures == {"node": 1}, run.explain()
        assert says in run.output, run.explain()
        assert re.search(r"Nothing was (fetched or )?stopped", run.output)
        assert run.verbs(*STOPPING) == [] and run.verbs("start") == [], run.calls
        assert {m["name"]: node.main_pid(node.unit(m)) for m in (one, two)} == pids
        return run

    # both on GPU 0, each with vLLM's default 0.9 of its memory
    refused([one, dict(two, gpus=[gpu[0]])],
            'GPU 0 (%s) is given to engine_service_models[0] ("%s", 0.9) and engine_service_models[1] ("%s", 0.9),'
            " whose --gpu-memory-utilization add up to 1.8; allowed: at most 0.95" % (gpu[0], one["name"], two["name"]))
    # a GPU the node does not have
    refused([one, dict(two, gpus=[1, 9], args=["-tp", "2"])],
            "variable engine_service_models[1].gpus names 9, which this node does not have; allowed: this node's GPUs"
            " are 0 %s (NVIDIA H100 80GB HBM3, 81559 MiB), 1 %s" % (gpu[0], gpu[1]))
    # a pinned model (llmfleet-test/tiny-chat, some 45 KiB) on a GPU without the memory for it
    big = node.model("c", model="llmfleet-test/tiny-chat", revision="v1", gpus=[2])
    run = refused([one, two, big], "variable engine_service_models[2] (llmfleet-test/tiny-chat at v1) has weights of",
                  engine_service_nvidia_smi=nvidia_smi(node, tiny_node(node), "tiny-nvidia-smi"),
                  engine_service_hf_endpoint=upstream.url + "/hub",
                  engine_service_model_lock_dir=str(tmp_path / "locks"))
    assert re.search(r"more than the GPU memory it gets: 0 B = --gpu-memory-utilization 0.9 x 0 MiB \(GPU 2\)",
                     run.output), run.explain()
    assert not (node.root / "models" / "models--llmfleet-test--tiny-chat" / "snapshots").exists()  # nothing fetched
    assert not (node.unit_dir / node.unit(big)).exists()
